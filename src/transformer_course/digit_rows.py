"""Chapter 4: a digit classifier that reads each image as 8 tokens, one per row.

The chapter's experiments on the block (residual connections, post-norm and
pre-norm, learning-rate warm-up) train this small model on the digits, and
``benchmarks/warmup_digits.py`` repeats the warm-up experiment over seeds:

* :func:`rows_as_tokens`: images (B, 1, 8, 8) -> tokens (B, 8, 16), each row's
  8 pixels and its one-hot row number;
* :class:`RowClassifier`: embed, M blocks (:class:`~transformer_course.block.BlockStack`),
  average over the tokens, map to 10 class scores;
* :func:`train_rows`: a fresh classifier trained with the course's loop;
  :func:`row_accuracy`: its accuracy on the test split; :func:`rise_after`:
  how far its validation loss climbs again after a given step.

The test split only watches training (the validation curve): no setting is
chosen from it.
"""

from __future__ import annotations

import torch
from torch import nn

from .block import BlockConfig, BlockStack
from .data import Digits
from .shapes import expect_int, expect_shape
from .train import History, TrainConfig, cross_entropy_loss, fit, tensor_batches

__all__ = [
    "RowClassifier",
    "rise_after",
    "row_accuracy",
    "rows_as_tokens",
    "train_rows",
]


def rows_as_tokens(images: torch.Tensor) -> torch.Tensor:
    """Chapter 4: images (B, 1, 8, 8) -> tokens (B, 8, 16): token n is row n's
    8 pixels, then the one-hot row number n (the tokens' positions)."""
    dims = expect_shape(images, "B 1 8 8", "images")
    rows = images[:, 0]  # (B, 8, 8): token n is row n
    row_number = torch.eye(8, dtype=images.dtype, device=images.device)
    row_number = row_number.expand(dims["B"], 8, 8)  # (B, 8, 8): one-hot
    return torch.cat([rows, row_number], dim=-1)  # (B, N, 16) with N = 8


class RowClassifier(nn.Module):
    """Chapter 4: tokens (B, 8, 16) -> class scores (B, 10): embed, M blocks,
    average over the tokens, map."""

    def __init__(self, config: BlockConfig, n_blocks: int):
        super().__init__()
        self.embed = nn.Linear(16, config.d_model)  # (B, N, 16) -> (B, N, D)
        self.blocks = BlockStack(config, n_blocks)  # M blocks, then a final norm
        self.head = nn.Linear(config.d_model, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        expect_shape(tokens, "B N 16", "tokens")
        x = self.blocks(self.embed(tokens))  # (B, N, D)
        return self.head(x.mean(dim=1))  # (B, D) -> (B, 10)


def train_rows(
    digits: Digits,
    block_config: BlockConfig,
    n_blocks: int = 12,
    lr: float = 1e-3,
    warmup_steps: int = 20,
    steps: int = 150,
    seed: int = 0,
    device: torch.device | str | None = "cpu",
) -> tuple[RowClassifier, History]:
    """Chapter 4: a fresh :class:`RowClassifier` trained with the course's loop.

    Batches of 64 training images; the whole test split is the validation
    batch, every 25 steps. ``seed`` sets the initial weights and the order of
    the batches. Returns (model, history).
    """
    expect_int(seed, "seed", least=0)
    splits = {
        "train": (rows_as_tokens(digits.x_train), digits.y_train),  # (1437, 8, 16)
        "val": (rows_as_tokens(digits.x_test), digits.y_test),  # (360, 8, 16)
    }
    train_batches = tensor_batches(splits, batch_size=64, seed=seed)
    whole_split = tensor_batches(splits, batch_size=None)

    def get_batch(split: str, step: int):
        return (train_batches if split == "train" else whole_split)(split, step)

    torch.manual_seed(seed)
    model = RowClassifier(block_config, n_blocks)
    run = TrainConfig(
        steps=steps,
        lr=lr,
        warmup_steps=warmup_steps,
        eval_every=25,
        eval_batches=1,  # the whole test split is one batch
        seed=seed,
        device=device,
    )
    history = fit(model, get_batch, cross_entropy_loss, run, progress=False)
    model.eval()
    return model, history


def row_accuracy(model: RowClassifier, digits: Digits) -> float:
    """Chapter 4: the share of the test split's digits ``model`` classifies right."""
    device = next(model.parameters()).device
    with torch.no_grad():
        scores = model(rows_as_tokens(digits.x_test).to(device)).cpu()  # (360, 10)
    return (scores.argmax(dim=-1) == digits.y_test).float().mean().item()


def rise_after(history: History, step: int) -> float:
    """Chapter 4: how far the validation loss climbs, later on, above its value
    at ``step`` (a step where it was measured): 0 when it never rises again."""
    val_at = dict(zip(history.val_steps, history.val_losses, strict=True))
    if step not in val_at:
        raise ValueError(
            f"rise_after: expected a step where the validation loss was measured "
            f"({sorted(val_at)}), got {step}"
        )
    later = [loss for s, loss in val_at.items() if s > step]
    return max([0.0, *(loss - val_at[step] for loss in later)])
