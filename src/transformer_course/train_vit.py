"""Chapter 7: the recipe that trains a ViT on the digits, with the course's loop.

* :func:`random_shifts`, the data augmentation: each image moved by a pixel or two;
* :func:`digit_batches`, ``get_batch(split, step)`` over the digits for
  :func:`~transformer_course.train.fit`;
* :class:`DigitsRun` and :data:`DIGITS`, a named run (the model's and the loop's
  settings, shifts, label smoothing) and the course's;
* :func:`fit_on_digits` (any classifier: the ViT and the CNN baseline) and
  :func:`train_on_digits` (a fresh :class:`~transformer_course.vit.ViT`).

Used by chapter 7 and ``benchmarks/vit_digits.py``, ``benchmarks/vit_ablations.py``.
The model itself is :mod:`~transformer_course.vit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .data import Digits
from .shapes import expect_int, expect_shape
from .train import History, TrainConfig, cross_entropy_loss, fit, tensor_batches
from .vit import ViT, ViTConfig

__all__ = [
    "DIGITS",
    "DigitsRun",
    "digit_batches",
    "fit_on_digits",
    "random_shifts",
    "train_on_digits",
]


def random_shifts(
    images: torch.Tensor, max_shift: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Chapter 7: each image moved by up to ``max_shift`` pixels each way: (B, C, H, W).

    A shift (dy, dx), each drawn uniformly from −max_shift … max_shift, per
    image; pixels moved in from outside are 0 (the digits' background). The
    data augmentation of chapter 7: a digit moved by a pixel is the same digit,
    which a CNN's convolutions know from their structure and a ViT must learn.
    """
    dims = expect_shape(images, "B C H W", "images")
    expect_int(max_shift, "max_shift", least=0)
    if max_shift == 0:
        return images
    B, C, H, W, s = dims["B"], dims["C"], dims["H"], dims["W"], max_shift
    padded = F.pad(images, (s, s, s, s))  # (B, C, H + 2s, W + 2s), zeros around
    shifts = torch.randint(0, 2 * s + 1, (2, B), generator=generator)  # (2, B)
    dy, dx = shifts.to(images.device)  # (B,) each: the crop's top-left corner
    arange = partial(torch.arange, device=images.device)
    rows = (dy[:, None] + arange(H))[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + arange(W))[:, None, None, :]  # (B, 1, 1, W)
    batch, channel = arange(B)[:, None, None, None], arange(C)[None, :, None, None]
    return padded[batch, channel, rows, cols]  # (B, C, H, W)


def digit_batches(digits: Digits, batch_size: int, max_shift: int = 1, seed: int = 0):
    """Chapter 7: ``get_batch(split, step)`` over the digits, for :func:`~transformer_course.train.fit`.

    ``"train"``: ``batch_size`` training images drawn without replacement,
    each moved by :func:`random_shifts`; ``"val"``: the whole test split,
    unshifted, in order, for the curves (one batch: ``eval_batches=1``). The
    test images only watch training: no choice is made from them. A batch
    depends on (seed, split, step) alone, so a resumed run sees the same data.
    """
    train = tensor_batches(
        {"train": (digits.x_train, digits.y_train)}, batch_size, seed
    )
    test = (digits.x_test, digits.y_test)

    def get_batch(split: str, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if split == "val":
            return test
        images, labels = train(split, step)  # (b, 1, 8, 8), (b,)
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return random_shifts(images, max_shift, generator), labels

    return get_batch


@dataclass(frozen=True)
class DigitsRun:
    """Chapter 7: a named ViT training run on the digits: the model and the loop."""

    model: dict[str, Any]  # ViTConfig fields
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig fields
    max_shift: int = 0  # random_shifts of the training images, in pixels
    label_smoothing: float = 0.1  # ε of the training loss (cross_entropy_loss)


#: The course's ViT for the digits (chapter 7, benchmarks/vit_digits.py): small,
#: because 1,437 training images are few. Without label smoothing it reached
#: about 97 % on the test split; wider (D = 64) or deeper models, dropout, more
#: steps and mean pooling did no better, and random shifts of a pixel made it
#: far worse (a shifted digit cuts into different 2×2 patches).
DIGITS = DigitsRun(
    model={"patch_size": 2, "d_model": 32, "n_layers": 2, "n_heads": 4, "pool": "cls"},
    train={
        "steps": 1500,
        "batch_size": 128,
        "lr": 1e-3,
        "warmup_steps": 100,
        "weight_decay": 0.05,
        "eval_every": 100,
        "eval_batches": 1,
    },
)


def fit_on_digits(
    model: nn.Module,
    digits: Digits,
    run: DigitsRun = DIGITS,
    seed: int = 0,
    device: torch.device | str | None = "cpu",
    progress: bool = False,
) -> History:
    """Chapter 7: train any classifier of the digits as ``run.train`` says, with
    the course's loop and ``run``'s shifts and label smoothing: the ViT and the
    CNN baseline (:class:`~transformer_course.baselines.SmallCNN`) alike."""
    config = TrainConfig(**{**run.train, "seed": seed, "device": device})
    batches = digit_batches(digits, config.batch_size, run.max_shift, seed)
    loss = partial(cross_entropy_loss, label_smoothing=run.label_smoothing)
    history = fit(model, batches, loss, config, progress=progress)
    model.eval()
    return history


def train_on_digits(
    digits: Digits,
    run: DigitsRun = DIGITS,
    seed: int = 0,
    device: torch.device | str | None = "cpu",
    progress: bool = False,
    **model_changes: Any,
) -> tuple[ViT, History]:
    """Chapter 7: train a :class:`ViT` on the digits with the course's loop; (model, history).

    ``model_changes`` override fields of ``run.model`` (the chapter's
    ablations: ``pool``, ``patch_size``, ``positions``). The history's
    validation losses are those of the test split (see :func:`digit_batches`),
    with the run's label smoothing.
    """
    torch.manual_seed(seed)
    model = ViT(ViTConfig(**{**run.model, **model_changes}))
    history = fit_on_digits(model, digits, run, seed, device, progress)
    return model, history
