"""Seeding, device choice, thread settings and figure style: the first cell.

``device = tc.setup(seed=0)`` makes a notebook deterministic, gives its figures
the course's style and picks where it runs. See the chapter template
(book/template.ipynb), which also says when a chapter uses ``device``.
"""

from __future__ import annotations

import inspect
import os
import random
import re
import sys
from typing import Any

import numpy as np
import torch

from .plotting import use_course_style

__all__ = ["on_colab", "pick_device", "seed_everything", "setup", "show_source"]

DEVICE_ENV = "TRANSFORMER_COURSE_DEVICE"
THREADS_ENV = "TRANSFORMER_COURSE_THREADS"


def on_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA) with ``seed``.

    Returns a fresh ``torch.Generator`` seeded the same way, for code that
    wants its own random stream.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


def pick_device(prefer: str | None = None) -> torch.device:
    """The device to compute on: CUDA when there is a GPU, else the CPU.

    Args:
        prefer: ``"cpu"``, ``"cuda"`` or ``"mps"`` to force one; when ``None``,
            the environment variable ``TRANSFORMER_COURSE_DEVICE`` decides if set.
            Apple's ``mps`` is only used when asked for: a few operations the
            course uses are not yet supported there.
    """
    choice = prefer or os.environ.get(DEVICE_ENV) or None
    if choice is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    kind = choice.split(":")[0]
    if kind not in available:
        raise ValueError(f"device: expected one of {sorted(available)}, got {choice!r}")
    if not available[kind]:
        raise RuntimeError(f"device {choice!r} was asked for but is not available")
    return torch.device(choice)


def setup(seed: int = 0, device: str | None = None, style: bool = True) -> torch.device:
    """Seed everything, set thread count and figure style; return the device to use.

    Threads: PyTorch uses every core by default. ``TRANSFORMER_COURSE_THREADS``
    (or ``OMP_NUM_THREADS``) lowers that: on 2 shared cores, two processes with
    two threads each slow each other down ten-fold, so the test suite runs its
    workers with one thread each.

    Figures: with ``style=True``, :func:`~transformer_course.plotting.use_course_style`
    sets the course's figure size, resolution, fonts and constrained layout.

    Device: the returned device is CUDA when there is a GPU (see
    :func:`pick_device`). Chapters that train or compute at scale move their
    models and batches to it; the rest compute on the CPU and may ignore it.
    """
    threads = os.environ.get(THREADS_ENV)
    if threads:
        torch.set_num_threads(int(threads))
    seed_everything(seed)
    if style:
        use_course_style()
    return pick_device(device)


#: Sphinx's cross-reference roles in docstrings: ":func:`~.attention.softmax`".
_SPHINX_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`(~?)([^`]*)`")


def _readable_role(match: re.Match) -> str:
    shortened, target = match.group(1), match.group(2)
    target = re.sub(r"\s*<[^>]*>$", "", target)  # "text <target>": the text
    if shortened:  # "~a.b.c" reads as "c"
        target = target.rsplit(".", 1)[-1]
    return f"`{target.lstrip('.')}`"


def readable_source(source: str) -> str:
    """``source`` as a reader of the book should see it: Sphinx's roles and
    double backticks in docstrings become plain `name` (the code is unchanged:
    they only occur in docstrings and comments)."""
    source = _SPHINX_ROLE.sub(_readable_role, source)
    return re.sub(r"``([^`]+)``", r"`\1`", source)


def show_source(obj: Any) -> Any:
    """Show the source of a course function or class, highlighted in a notebook.

    Chapters use this when the implementation itself is the lesson, so that the
    book always shows the code that actually runs (never a pasted copy); its
    docstrings' Sphinx markup is shown as plain text (:func:`readable_source`).
    """
    source = readable_source(inspect.getsource(obj))
    try:
        from IPython.display import Code
    except ImportError:  # plain Python: print it
        print(source)
        return None
    return Code(source, language="python")
