"""Measuring time and memory, for the cost sections of the book and benchmarks/.

* :func:`time_call`: the median wall time of repeated calls.
* :func:`peak_memory`: the peak of live tensor memory during a call, on any
  device. It watches every tensor PyTorch creates (a ``TorchDispatchMode``),
  adds each new storage's size, and subtracts it when the storage is freed.
  On the CPU, where PyTorch has no allocator statistics, this is how the course
  measures the N×N memory of attention (chapter 2).
"""

from __future__ import annotations

import statistics
import time
import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["peak_memory", "time_call"]


class _LiveTensorMemory(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: set[int] = set()

    def _freed(self, key: int, size: int) -> None:
        self.current -= size
        self._live.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or key in self._live:  # a view of a storage already counted
                continue
            self._live.add(key)
            self.current += size
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._freed, key, size)
        return out


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes of tensors alive at once while ``fn()`` runs (its result included).

    Counts only tensors created during the call, not its inputs.
    """
    with _LiveTensorMemory() as meter:
        result = fn()
        del result
    return meter.peak


def time_call(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median seconds of ``repeat`` calls of ``fn()``, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
