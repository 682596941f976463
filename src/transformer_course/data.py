"""Data the course runs on: a text corpus and a small image set, both shipped.

* :func:`load_text` returns tiny Shakespeare (the ``input.txt`` of Karpathy's
  char-rnn: 1,115,394 characters of Shakespeare's plays) as one string. The
  package ships it xz-compressed in ``transformer_course/corpus/``; every load
  decompresses it and checks the SHA-256 of the text, so a damaged or altered
  copy raises :class:`ChecksumError` instead of quietly teaching from another
  text. Nothing is downloaded and nothing is written to disk.
* :func:`load_digits` returns scikit-learn's bundled 8×8 digits as image tensors
  with a fixed, stratified train/test split.

For language models (chapter 6), :func:`split_ids` cuts a tokenised corpus
into a fixed training and validation part, and :func:`window_batches` draws
random windows from them as (input, target) batches, the target shifted by one.

Used from chapter 1 (tokens) on; chapter 6 trains on the text, chapter 7 on the
digits.
"""

from __future__ import annotations

import functools
import hashlib
import lzma
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import NamedTuple

import torch

from .shapes import expect_positive_int

__all__ = [
    "TEXTS",
    "TINYSHAKESPEARE",
    "ChecksumError",
    "DataError",
    "Digits",
    "ShippedText",
    "load_digits",
    "load_text",
    "read_shipped_text",
    "shifted_windows",
    "split_ids",
    "window_batches",
]


class DataError(RuntimeError):
    """A dataset could not be loaded."""


class ChecksumError(DataError):
    """A shipped text did not match the SHA-256 the package pins for it."""


@dataclass(frozen=True)
class ShippedText:
    """A text corpus shipped in the package, and the checksum that identifies it."""

    name: str
    filename: str  # xz-compressed, in transformer_course/corpus/
    sha256: str  # of the decompressed UTF-8 bytes
    size: int  # decompressed, in bytes
    source: str  # where the text was first published


TINYSHAKESPEARE = ShippedText(
    name="tinyshakespeare",
    filename="tinyshakespeare.txt.xz",
    sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    size=1_115_394,
    source="https://github.com/karpathy/char-rnn/blob/master/data/tinyshakespeare/input.txt",
)

#: Corpora :func:`load_text` knows, by name.
TEXTS: dict[str, ShippedText] = {TINYSHAKESPEARE.name: TINYSHAKESPEARE}

#: The folder the compressed corpora are read from (a test may point it elsewhere).
CORPUS_DIR: Traversable = resources.files(__package__).joinpath("corpus")


def read_shipped_text(path: Traversable, spec: ShippedText) -> str:
    """Decompress the xz file at ``path`` and check it is the text ``spec`` pins.

    Raises:
        DataError: the file is missing or is not a valid xz stream.
        ChecksumError: the decompressed bytes do not have ``spec.sha256``; the
            message names the expected and the actual digest.
    """
    try:
        data = lzma.decompress(path.read_bytes(), format=lzma.FORMAT_XZ)
    except (OSError, lzma.LZMAError) as err:
        raise DataError(
            f"{spec.name}: cannot read the shipped file {path} ({err}). The "
            f"installation is damaged: reinstall transformer-course."
        ) from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise ChecksumError(
            f"{spec.name}: expected sha256 {spec.sha256} ({spec.size:,} bytes), "
            f"got {digest} ({len(data):,} bytes) from {path}. The shipped text "
            f"is damaged or was altered: reinstall transformer-course."
        )
    return data.decode("utf-8")


@functools.cache
def _load(name: str) -> str:
    spec = TEXTS[name]
    return read_shipped_text(CORPUS_DIR.joinpath(spec.filename), spec)


def load_text(name: str = "tinyshakespeare") -> str:
    """A text corpus as one string, the same on every machine, online or not.

    Args:
        name: ``"tinyshakespeare"``, the only corpus so far.

    Returns:
        The text (1,115,394 characters, starting ``"First Citizen:"``). It is
        decompressed and verified on the first call, then kept in memory.

    Raises:
        ValueError: unknown ``name``.
        ChecksumError, DataError: the shipped copy is damaged.
    """
    if name not in TEXTS:
        raise ValueError(f"name: expected one of {sorted(TEXTS)}, got {name!r}")
    return _load(name)


class Digits(NamedTuple):
    """scikit-learn's 8×8 digits, split 80/20, stratified by class."""

    x_train: torch.Tensor  # (N_train, 1, 8, 8) float32 in [0, 1]
    y_train: torch.Tensor  # (N_train,) int64 labels 0-9
    x_test: torch.Tensor  # (N_test, 1, 8, 8)
    y_test: torch.Tensor  # (N_test,)


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """The bundled digits as image tensors with a fixed, stratified split.

    Args:
        test_fraction: share of images held out for testing, in (0, 1), and such
            that both splits get at least one image of each of the 10 classes
            (between 10 and 1,787 test images).
        seed: the split's random state, an integer in [0, 2**32 - 1] (the
            default split is the course's).

    Returns:
        :class:`Digits` with ``x_*`` of shape (N, 1, 8, 8), float32, pixel
        intensities scaled from 0-16 to [0, 1], and ``y_*`` of shape (N,), int64.
        1,797 images in all: 1,437 for training and 360 for testing by default.

    Raises:
        TypeError: ``test_fraction`` is not a number or ``seed`` not an integer.
        ValueError: either is out of range; the message says what was expected.
    """
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real):
        raise TypeError(
            f"test_fraction: expected a number in (0, 1), got {test_fraction!r}"
        )
    if not 0.0 < test_fraction < 1.0:  # also rejects NaN
        raise ValueError(
            f"test_fraction: expected a number in (0, 1), got {test_fraction!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed: expected an integer in [0, 2**32 - 1], got {seed!r}")
    if not 0 <= seed < 2**32:  # numpy's (and scikit-learn's) range for a seed
        raise ValueError(f"seed: expected an integer in [0, 2**32 - 1], got {seed!r}")
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    bunch = sklearn_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32) / 16.0  # (1797, 8, 8)
    labels = torch.tensor(bunch.target, dtype=torch.int64)  # (1797,)
    total, classes = len(labels), int(labels.max()) + 1
    # scikit-learn's rounding; a stratified split needs every class on both sides
    n_test = math.ceil(test_fraction * total)
    n_train = math.floor((1.0 - test_fraction) * total)
    if min(n_test, n_train) < classes:
        raise ValueError(
            f"test_fraction: expected a share that leaves at least {classes} of the "
            f"{total:,} images (one per class) in each split; got {test_fraction!r}, "
            f"which holds out {n_test:,} for testing and keeps {n_train:,} for "
            f"training"
        )
    train_idx, test_idx = train_test_split(
        range(total),
        test_size=test_fraction,
        stratify=labels.numpy(),
        random_state=int(seed),
    )
    train_idx, test_idx = torch.tensor(train_idx), torch.tensor(test_idx)
    images = images.unsqueeze(1)  # (1797, 1, 8, 8): one channel
    return Digits(
        images[train_idx], labels[train_idx], images[test_idx], labels[test_idx]
    )


def split_ids(ids: torch.Tensor, val_fraction: float = 0.1) -> dict[str, torch.Tensor]:
    """Chapter 6: the first (1 − val_fraction) of a token sequence for training, the rest for validation.

    A fixed split by position, as nanoGPT's: no window of the validation part
    was ever seen in training (only its boundary's neighbourhood overlaps).

    Args:
        ids: (T,) integer token ids of the whole corpus.
        val_fraction: in (0, 1).

    Returns:
        ``{"train": ids[:cut], "val": ids[cut:]}`` with ``cut = int((1 −
        val_fraction)·T)``; views, not copies.
    """
    if ids.ndim != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(
            f"ids: expected a 1-D tensor of integer token ids, got shape "
            f"{tuple(ids.shape)} and dtype {ids.dtype}"
        )
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(
            f"val_fraction: expected a number in (0, 1), got {val_fraction!r}"
        )
    # rounded first: in floats (1 − 0.9)·10 is 0.99999…98, which int() cuts to 0
    cut = int(round((1.0 - val_fraction) * len(ids), 6))
    return {"train": ids[:cut], "val": ids[cut:]}


def window_batches(
    splits: Mapping[str, torch.Tensor],
    batch_size: int,
    block_size: int,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> Callable[[str, int], tuple[torch.Tensor, torch.Tensor]]:
    """Chapter 6: a ``get_batch(split, step)`` of random windows for next-token prediction.

    Each batch is ``batch_size`` windows of ``block_size + 1`` consecutive
    tokens at random starts: inputs are the first ``block_size`` tokens,
    targets the last ``block_size`` (the same window shifted by one), so
    target n is the token after input n.

    The starts depend on (seed, split, step) only, not on global random
    state, so a resumed run sees the same batches. With ``world_size`` > 1
    (data-parallel training, one process per rank), ``batch_size`` is the
    global batch: every rank draws the same starts and keeps its own
    contiguous share of ``batch_size / world_size`` windows.

    Returns:
        ``get_batch(split, step) -> (inputs, targets)``, each (B, block_size)
        int64, with B = batch_size / world_size.
    """
    for name, value in (("batch_size", batch_size), ("block_size", block_size)):
        expect_positive_int(value, name)
    if not (
        isinstance(rank, int) and isinstance(world_size, int) and 0 <= rank < world_size
    ):
        raise ValueError(
            f"rank, world_size: expected 0 ≤ rank < world_size, got {rank}, {world_size}"
        )
    if batch_size % world_size:
        raise ValueError(
            f"batch_size: expected a multiple of world_size = {world_size}, got {batch_size}"
        )
    for name, ids in splits.items():
        if len(ids) < block_size + 1:
            raise ValueError(
                f"splits[{name!r}]: expected at least block_size + 1 = "
                f"{block_size + 1} tokens, got {len(ids)}"
            )
    share = batch_size // world_size

    def get_batch(split: str, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if split not in splits:
            raise ValueError(f"split: expected one of {sorted(splits)}, got {split!r}")
        ids = splits[split]
        key = hashlib.sha256(f"{seed}/{split}/{step}".encode()).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
        starts = torch.randint(
            len(ids) - block_size, (batch_size,), generator=generator
        )
        starts = starts[rank * share : (rank + 1) * share]  # this rank's windows
        return shifted_windows(ids, starts, block_size)

    return get_batch


def shifted_windows(
    ids: torch.Tensor, starts: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chapter 6, §6.1: the windows of ``block_size + 1`` tokens of ``ids`` (L,)
    that begin at ``starts`` (B,), as (inputs, targets), each (B, block_size)
    int64: the targets are the inputs shifted by one token, so target n is the
    token after input n. The heart of :func:`window_batches`."""
    offsets = torch.arange(block_size + 1)  # (block_size + 1,)
    windows = ids[starts[:, None] + offsets].long()  # (B, block_size + 1)
    return windows[:, :-1], windows[:, 1:]  # inputs, targets shifted by one
