"""Chapters 4, 6 and 7, Training: the course's one training loop.

:func:`fit` trains any model that a loss function can score: a language model
(chapter 6) and a vision transformer (chapter 7) call the same loop. It takes

* ``get_batch(split, step) -> batch``: the batch for a training step
  (``split="train"``) or the k-th validation batch (``split="val"``). A batch
  that depends on the step alone (see :func:`tensor_batches`) is what makes a
  resumed run equal an uninterrupted one;
* ``loss_fn(model, batch) -> loss``: a scalar tensor, e.g.
  :func:`cross_entropy_loss`;
* a :class:`TrainConfig`,

and returns a :class:`History`. Each step: set the learning rate (warm-up then
cosine decay, :func:`learning_rate`), compute the loss, stop with a clear error
if it is not finite, backpropagate, clip the global gradient norm, take an
AdamW step (weight decay on matrices only, :func:`parameter_groups`). Every
``eval_every`` steps the model is scored on the same validation batches, and
checkpoints (model, optimiser, step, history, random states) are written
atomically, so that ``fit(..., resume=True)`` continues to the same result.

Data-parallel training (chapter 6): when a process runs under ``torchrun``
and has joined a process group (``torch.distributed.init_process_group``),
:func:`fit` wraps the model in ``DistributedDataParallel``, which averages the
gradients of all processes (ranks) in ``backward``; ``get_batch`` then gives
each rank its own share of the global batch (e.g. ``window_batches(...,
rank=, world_size=)``). The recorded losses are means over all ranks, so the
history equals a one-process run's on the same global batches up to the order
of floating-point additions; only rank 0 shows progress, reports records and
writes checkpoints, and every rank can resume from them.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from .runtime import pick_device, seed_everything

__all__ = [
    "History",
    "TrainConfig",
    "cross_entropy_loss",
    "evaluate",
    "fit",
    "learning_rate",
    "load_checkpoint",
    "parameter_groups",
    "save_checkpoint",
    "tensor_batches",
    "to_device",
]

GetBatch = Callable[[str, int], Any]  # (split, step) -> batch, e.g. (inputs, targets)
LossFn = Callable[[nn.Module, Any], torch.Tensor]  # (model, batch) -> scalar loss
OnRecord = Callable[[dict[str, float]], None]  # sees each record as it is made


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(ok: bool, name: str, expected: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{name}: expected {expected}, got {value!r}")


@dataclass
class TrainConfig:
    """Chapters 4, 6, 7: everything that defines a training run, in one place."""

    steps: int = 1000  # optimiser updates in all
    lr: float = 1e-3  # the peak learning rate, reached at the end of warm-up
    weight_decay: float = 0.1  # AdamW's decoupled decay, on matrices only
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW's averaging of g and g²
    warmup_steps: int = 100  # linear warm-up, then cosine decay
    min_lr_ratio: float = 0.1  # the decay ends at lr · min_lr_ratio
    grad_clip: float | None = 1.0  # largest global gradient norm; None: no clipping
    eval_every: int | None = 100  # and after the last step; None: no validation
    eval_batches: int = 10  # validation loss: the mean over get_batch("val", k)
    batch_size: int | None = None  # for tensor_batches; None: a whole split
    seed: int = 0  # seeds Python, NumPy and torch as a new run starts
    device: str | None = None  # where to train; None: tc.pick_device(), CUDA if any
    checkpoint_path: str | Path | None = None  # None: no checkpoints
    checkpoint_every: int | None = None  # None: at each validation; always at the end
    # speed on a GPU, the same loop: the forward pass and the loss in bfloat16
    # where torch.autocast allows (matrix products; softmax and the loss stay
    # float32), and the model compiled by torch.compile for the training steps
    autocast: str | None = None  # None or "bfloat16"
    compile: bool = False

    def __post_init__(self):
        def positive(value):
            return _is_int(value) and value >= 1

        def optional(value):
            return value is None or positive(value)

        checks = [
            ("steps", positive(self.steps), "a positive int"),
            ("lr", self.lr > 0, "a positive float"),
            ("weight_decay", self.weight_decay >= 0, "a float ≥ 0"),
            (
                "betas",
                len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
                "two floats in [0, 1)",
            ),
            (
                "warmup_steps",
                _is_int(self.warmup_steps) and 0 <= self.warmup_steps < self.steps,
                f"an int in [0, steps) = [0, {self.steps})",
            ),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "a float in [0, 1]"),
            (
                "grad_clip",
                self.grad_clip is None or self.grad_clip > 0,
                "None or a positive float",
            ),
            ("eval_every", optional(self.eval_every), "None or a positive int"),
            ("eval_batches", positive(self.eval_batches), "a positive int"),
            ("batch_size", optional(self.batch_size), "None or a positive int"),
            ("seed", _is_int(self.seed) and self.seed >= 0, "an int ≥ 0"),
            (
                "checkpoint_every",
                optional(self.checkpoint_every),
                "None or a positive int",
            ),
            ("autocast", self.autocast in (None, "bfloat16"), 'None or "bfloat16"'),
            ("compile", isinstance(self.compile, bool), "True or False"),
        ]
        for name, ok, expected in checks:
            _require(ok, name, expected, getattr(self, name))


@dataclass
class History:
    """Chapters 4, 6, 7: what :func:`fit` records, one entry per step or per validation."""

    # one entry per step
    steps: list[int] = field(default_factory=list)  # 0 … S − 1
    train_losses: list[float] = field(default_factory=list)  # before the update
    learning_rates: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)  # before clipping
    # one entry per validation
    val_steps: list[int] = field(default_factory=list)  # the step it followed
    val_losses: list[float] = field(default_factory=list)  # mean of eval_batches

    def records(self) -> list[dict[str, float]]:
        """Chapters 4, 6: the history as records, in the order :func:`fit` made them.

        ``{"step", "train_loss", "lr", "grad_norm"}`` for every step, each
        followed by ``{"step", "val_loss"}`` when a validation followed it: the
        records ``fit(..., on_record=)`` reports, e.g. one JSON line each.
        """
        validations = dict(zip(self.val_steps, self.val_losses, strict=True))
        records = []
        for step, loss, lr, norm in zip(
            self.steps,
            self.train_losses,
            self.learning_rates,
            self.grad_norms,
            strict=True,
        ):
            records.append(
                {"step": step, "train_loss": loss, "lr": lr, "grad_norm": norm}
            )
            if step in validations:
                records.append({"step": step, "val_loss": validations[step]})
        return records


def learning_rate(step: int, config: TrainConfig) -> float:
    """Chapter 4, §4.2 (the schedule): linear warm-up to ``lr``, then cosine decay.

    With η = lr, η_min = lr · min_lr_ratio, W = warmup_steps and S = steps:

        s < W:  η · (s + 1) / (W + 1)                      (never 0)
        s ≥ W:  η_min + (η − η_min) · ½ (1 + cos π p),    p = (s − W) / (S − 1 − W)

    so the rate is η at s = W, halfway between η and η_min at p = ½, and η_min
    at the last step, S − 1 (and after it). Warm-up keeps the first updates
    small while AdamW's running averages of g² are still poor estimates.
    """
    _require(_is_int(step) and step >= 0, "step", "an int ≥ 0", step)
    peak, warmup = config.lr, config.warmup_steps
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    lowest = peak * config.min_lr_ratio
    progress = min(1.0, (step - warmup) / max(1, config.steps - 1 - warmup))
    return lowest + (peak - lowest) * 0.5 * (1 + math.cos(math.pi * progress))


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Chapter 4: AdamW's two groups, decay on matrices, none on vectors.

    Weight decay pulls every weight towards 0 a little at each step. That
    regularises the matrices of the linear layers and the embeddings (ndim ≥ 2).
    For a bias, or a normalisation's gain γ and shift β (ndim 1), 0 is no
    special value (γ = 0 switches a feature off), so they get no decay.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


def to_device(batch: Any, device: torch.device | str) -> Any:
    """Chapter 4: move the tensors of a batch (nested tuples, lists, dicts) to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple
        return type(batch)(*(to_device(value, device) for value in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(value, device) for value in batch)
    return batch


def cross_entropy_loss(
    model: nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    label_smoothing: float = 0.0,
):
    """Chapters 6, 7: mean cross-entropy of ``model(inputs)`` against integer targets.

    Logits (..., V) against targets (...): (B, N, V) and (B, N) for next-token
    prediction, (B, V) and (B,) for V classes. With ``label_smoothing`` ε the
    target is 1 − ε on the right class plus ε spread evenly over all V
    (Szegedy et al. 2016; chapter 7): the model is not pushed to ever larger
    logits for examples it already gets right. Pass it with
    ``functools.partial(cross_entropy_loss, label_smoothing=0.1)``.
    """
    inputs, targets = batch
    logits = model(inputs)  # (..., V)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),  # (B·N, V) or (B, V)
        targets.reshape(-1),
        label_smoothing=label_smoothing,
    )


def tensor_batches(
    splits: Mapping[str, Sequence[torch.Tensor]],
    batch_size: int | None,
    seed: int = 0,
) -> GetBatch:
    """Chapters 4, 7: a ``get_batch(split, step)`` over tensors held in memory.

    Args:
        splits: e.g. ``{"train": (x_train, y_train), "val": (x_val, y_val)}``;
            the tensors of a split share their first dimension, the examples.
        batch_size: examples per batch, drawn without replacement (all of a
            smaller split); None: the whole split, in order (then one
            validation batch is enough: ``eval_batches=1``).
        seed: with the split and the step, seeds the draw.

    The batch depends on (seed, split, step) alone, not on any global random
    state: the same step always gets the same batch, so a resumed run sees
    exactly what an uninterrupted one would.
    """
    for name, tensors in splits.items():
        sizes = {len(t) for t in tensors}
        _require(len(sizes) == 1, f"splits[{name!r}]", "tensors of one length", sizes)

    def get_batch(split: str, step: int) -> tuple[torch.Tensor, ...]:
        _require(split in splits, "split", f"one of {sorted(splits)}", split)
        tensors = tuple(splits[split])
        if batch_size is None:
            return tensors
        entropy = [seed, zlib.crc32(split.encode()), step]
        state = int(np.random.SeedSequence(entropy).generate_state(1)[0])
        generator = torch.Generator().manual_seed(state)
        index = torch.randperm(len(tensors[0]), generator=generator)[:batch_size]
        return tuple(t[index] for t in tensors)

    return get_batch


@torch.no_grad()
def evaluate(
    model: nn.Module,
    get_batch: GetBatch,
    loss_fn: LossFn,
    n_batches: int,
    split: str = "val",
    device: torch.device | str | None = None,
    autocast: str | None = None,
) -> float:
    """Chapter 4: mean loss over ``get_batch(split, k)``, k = 0 … n_batches − 1.

    In eval mode (no dropout) and without gradients; the model's mode is
    restored afterwards. ``device``: where to move the batches (None: leave them).
    ``autocast``: "bfloat16" to evaluate as :func:`fit` trains with it.
    """
    was_training = model.training
    model.eval()
    try:
        losses = []
        for k in range(n_batches):
            batch = get_batch(split, k)
            batch = batch if device is None else to_device(batch, device)
            with _autocast(autocast, device):
                losses.append(loss_fn(model, batch).item())
    finally:
        model.train(was_training)
    return sum(losses) / len(losses)


def _autocast(dtype: str | None, device: torch.device | str | None):
    """``torch.autocast`` to ``dtype`` on ``device``'s kind, or a context that
    changes nothing (``dtype`` None)."""
    if dtype is None:
        return contextlib.nullcontext()
    kind = torch.device(device).type if device is not None else "cpu"
    return torch.autocast(kind, dtype=getattr(torch, dtype))


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Chapter 4: ``torch.save(state)`` to ``path``, atomically.

    The state is written to a temporary file in the same folder, flushed to
    disk, and then renamed over ``path`` with ``os.replace``, which is atomic:
    a crash while writing leaves the previous checkpoint whole, never half a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Chapter 4: a checkpoint written by :func:`save_checkpoint`, onto the CPU.

    Loaded with ``weights_only=True``: tensors and plain Python values only, so
    a checkpoint cannot run code.
    """
    return torch.load(path, map_location="cpu", weights_only=True)


def _random_states(device: torch.device) -> dict[str, Any]:
    numpy_state = np.random.get_state()  # (name, keys (624,), pos, has_gauss, x)
    # the training GPU's generator only: asking for every GPU's would open a
    # CUDA context on each of them, from every process of a multi-GPU run
    cuda = [torch.cuda.get_rng_state(device)] if device.type == "cuda" else []
    return {  # lists, tuples, numbers and tensors: loadable with weights_only
        "python": random.getstate(),
        "numpy": (numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]),
        "torch": torch.get_rng_state(),
        "cuda": cuda,
    }


def _set_random_states(states: dict[str, Any], device: torch.device) -> None:
    random.setstate(states["python"])
    name, keys, *rest = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(states["torch"])
    if states["cuda"] and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"][0], device)


def _rank_and_world_size() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _mean_over_ranks(value: torch.Tensor, world_size: int) -> torch.Tensor:
    """The mean of a scalar over all ranks (itself when there is one process).

    Every rank's batch is an equal share of the global batch, so the mean of
    the ranks' mean losses is the mean loss of the global batch.
    """
    if world_size == 1:
        return value
    total = value.detach().clone()
    dist.all_reduce(total)  # a sum, in place, the same on every rank
    return total / world_size


def _expect_scalar(value: torch.Tensor, what: str, step: int) -> None:
    if not isinstance(value, torch.Tensor) or value.ndim != 0:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else value
        raise TypeError(f"step {step}: the {what} must be a scalar tensor, got {shape}")


def _expect_finite(value: torch.Tensor, what: str, step: int) -> None:
    _expect_scalar(value, what, step)
    if not torch.isfinite(value):
        raise FloatingPointError(
            f"step {step}: the {what} is {value.item()}, so training stopped. Try a "
            f"lower lr or grad_clip, and check the batch and the loss function."
        )


def _resume(
    config: TrainConfig, model: nn.Module, optimizer, device: torch.device
) -> tuple[int, History]:
    """Load the checkpoint into model and optimiser; return (next step, history).

    Every rank of a data-parallel run loads the same file, onto the CPU first
    (so that a checkpoint written on one GPU loads on any device), and takes
    its own random states when the run had as many ranks.
    """
    path = config.checkpoint_path
    _require(path is not None, "checkpoint_path", "a checkpoint to resume from", path)
    if not Path(path).exists():
        raise FileNotFoundError(f"resume: no checkpoint at {path}")
    state = load_checkpoint(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])  # moves its state to the device
    rank, world_size = _rank_and_world_size()
    per_rank = state.get("rank_random_states", [])
    random_states = (
        per_rank[rank] if len(per_rank) == world_size else state["random_states"]
    )
    _set_random_states(random_states, device)
    return state["step"], History(**state["history"])


def fit(
    model: nn.Module,
    get_batch: GetBatch,
    loss_fn: LossFn,
    config: TrainConfig | None = None,
    *,
    progress: bool = True,
    resume: bool = False,
    on_record: OnRecord | None = None,
) -> History:
    """Chapters 4, 6, 7: train ``model`` in place; return the :class:`History`.

    Args:
        model: moved to ``config.device``.
        get_batch: ``(split, step) -> batch``; see the module. Its batches are
            moved to the device (tensors in nested tuples, lists and dicts).
        loss_fn: ``(model, batch) -> loss``, a scalar tensor.
        config: a :class:`TrainConfig`; None: the defaults.
        progress: show a tqdm progress bar; it is also hidden when the
            environment sets ``TQDM_DISABLE`` (to anything but 0), as the tests do.
        resume: continue from ``config.checkpoint_path``, which must exist
            (model, optimiser, step, history and random states): with the same
            config, get_batch and loss_fn, the result equals that of a run that
            was never interrupted. Otherwise a new run starts, seeded with
            ``config.seed`` (``config.seed + rank`` on the other ranks of a
            data-parallel run, so that their dropout differs).
        on_record: called with each record as soon as it is made, e.g. to
            append it to a log file: ``{"step", "train_loss", "lr",
            "grad_norm"}`` after every step and ``{"step", "val_loss"}`` after
            each validation (see :meth:`History.records`); on rank 0 only.

    In a data-parallel run (a process group is initialised, with more than one
    rank; see the module) the model is wrapped in ``DistributedDataParallel``
    for the training steps, and ``loss_fn`` receives the wrapper: call it, do
    not reach into it. Every rank must call :func:`fit` with the same config.

    Raises:
        FloatingPointError: the loss or the gradient norm is NaN or infinite;
            the message names the step.
    """
    config = TrainConfig() if config is None else config
    device = torch.device(config.device) if config.device else pick_device()
    rank, world_size = _rank_and_world_size()
    model.to(device)
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay), lr=config.lr, betas=config.betas
    )
    if resume:
        start, history = _resume(config, model, optimizer, device)
    else:
        start, history = 0, History()
        seed_everything(config.seed + rank)
    train_model = model  # what loss_fn calls in training steps
    if world_size > 1:  # copies rank 0's parameters to every rank, then
        # averages the gradients over the ranks during backward
        index = device.index if device.index is not None else 0
        train_model = DistributedDataParallel(
            model, device_ids=[index] if device.type == "cuda" else None
        )
    if config.compile:  # the same parameters, run by generated kernels
        train_model = torch.compile(train_model)
    checkpoint_every = config.checkpoint_every or config.eval_every
    max_norm = math.inf if config.grad_clip is None else config.grad_clip
    quiet = (
        not progress
        or rank != 0
        or os.environ.get("TQDM_DISABLE", "0") not in ("", "0")
    )
    report = on_record if on_record is not None and rank == 0 else lambda _: None

    model.train()
    bar = tqdm(
        range(start, config.steps), initial=start, total=config.steps, disable=quiet
    )
    for step in bar:
        lr = learning_rate(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with _autocast(config.autocast, device):
            loss = loss_fn(train_model, to_device(get_batch("train", step), device))
        _expect_scalar(loss, "training loss", step)
        # the global batch's loss: every rank sees the same, so all stop together
        mean_loss = _mean_over_ranks(loss.detach(), world_size)
        _expect_finite(mean_loss, "training loss", step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # with several ranks: the gradients' mean over them
        # the norm of all gradients as one vector, before clipping; inf: no clipping
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        _expect_finite(grad_norm, "gradient norm", step)
        optimizer.step()

        history.steps.append(step)
        history.train_losses.append(mean_loss.item())
        history.learning_rates.append(lr)
        history.grad_norms.append(grad_norm.item())
        report(
            {
                "step": step,
                "train_loss": history.train_losses[-1],
                "lr": lr,
                "grad_norm": history.grad_norms[-1],
            }
        )
        bar.set_postfix(loss=f"{history.train_losses[-1]:.4f}", refresh=False)
        last = step == config.steps - 1
        if config.eval_every and ((step + 1) % config.eval_every == 0 or last):
            val_loss = evaluate(
                model,
                get_batch,
                loss_fn,
                config.eval_batches,
                device=device,
                autocast=config.autocast,
            )  # on this rank's share of each validation batch
            val_loss = _mean_over_ranks(
                torch.tensor(val_loss, device=device), world_size
            ).item()
            history.val_steps.append(step)
            history.val_losses.append(val_loss)
            report({"step": step, "val_loss": val_loss})
            bar.set_postfix(
                loss=f"{history.train_losses[-1]:.4f}",
                val=f"{val_loss:.4f}",
                refresh=False,
            )
        if config.checkpoint_path is not None and (
            last or (checkpoint_every and (step + 1) % checkpoint_every == 0)
        ):
            _checkpoint(config.checkpoint_path, model, optimizer, step, history, device)
    bar.close()
    return history


def _checkpoint(path, model, optimizer, step, history, device) -> None:
    """Write the checkpoint after ``step``: rank 0 writes, every rank takes part.

    With several ranks, each one's random states are gathered into it, so that
    each rank resumes with its own (their dropout masks differ).
    """
    rank, world_size = _rank_and_world_size()
    random_states = _random_states(device)
    per_rank = [None] * world_size
    if world_size > 1:
        dist.all_gather_object(per_rank, random_states)
    if rank != 0:
        return
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step + 1,  # the next step to take
        "history": asdict(history),
        "random_states": random_states,
    }
    if world_size > 1:
        state["rank_random_states"] = per_rank
    save_checkpoint(path, state)
