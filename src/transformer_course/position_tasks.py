"""Chapter 5: the model and the task that compare position encodings.

* :class:`TokenModel`: ids (B, N) -> scores (B, N, n_out): embeddings, one of
  five ways of giving positions ("none", "sinusoidal", "learned", "rope",
  "alibi"), M blocks and a linear head;
* the lag task of §5.7, where only offsets matter: at every position n ≥ 3,
  output the token three places back, w_{n-3}. :func:`lag_batch` draws it,
  :func:`lag_loss` scores it, :func:`lag_accuracy` measures it per position,
  on sequences as long as wanted (longer than the training ones, to test
  extrapolation); :func:`train_lag` trains one model.

Used by chapter 5 and ``benchmarks/position_lag.py``, which repeats §5.7 over
seeds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .block import BlockConfig, BlockStack
from .positions import LearnedPositions, SinusoidalPositions, alibi_bias
from .shapes import expect_choice, expect_int, expect_token_ids
from .train import TrainConfig, fit

__all__ = [
    "ENCODINGS",
    "LAG",
    "TokenModel",
    "lag_accuracy",
    "lag_batch",
    "lag_loss",
    "train_lag",
]

#: The five ways of giving a model positions that chapter 5 compares.
ENCODINGS = ("none", "sinusoidal", "learned", "rope", "alibi")
#: The lag task's offset: the target at position n is the token at n - LAG.
LAG = 3
IGNORED = -100  # cross_entropy's ignore_index: positions with nothing LAG back


class TokenModel(nn.Module):
    """Chapter 5: ids (B, N) -> scores (B, N, n_out): embeddings, positions,
    M blocks, a linear head.

    positions: "none", "sinusoidal", "learned" (added to the tokens), "rope"
    (inside attention) or "alibi" (a bias on the scores, through the mask).
    """

    def __init__(
        self,
        vocab_size: int,
        n_out: int,
        positions: str,
        causal: bool = True,
        D: int = 64,
        H: int = 4,
        M: int = 2,
        max_len: int = 64,
    ):
        super().__init__()
        expect_choice(positions, "positions", ENCODINGS)
        self.vocab_size = vocab_size
        self.positions, self.causal, self.n_heads = positions, causal, H
        self.embed = nn.Embedding(vocab_size, D)
        self.add_positions = {
            "sinusoidal": SinusoidalPositions(D),
            "learned": LearnedPositions(max_len, D),
        }.get(positions)  # None for the others
        config = BlockConfig(d_model=D, n_heads=H, rotary=positions == "rope")
        self.blocks = BlockStack(config, M)
        self.head = nn.Linear(D, n_out)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        expect_token_ids(ids, self.vocab_size, "ids", "B N")
        x = self.embed(ids)  # (B, N, D)
        if self.add_positions is not None:
            x = self.add_positions(x)  # x + e_n
        mask = None
        if self.positions == "alibi":
            mask = alibi_bias(
                ids.shape[1], self.n_heads, device=ids.device
            )  # (H, N, N)
        x = self.blocks(x, mask=mask, is_causal=self.causal)  # (B, N, D)
        return self.head(x)  # (B, N, n_out)


def lag_batch(
    split: str, step: int, length: int = 16, batch_size: int = 64, vocab: int = 16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chapter 5: random tokens (B, N) and their targets w_{n-3} (B, N).

    The first :data:`LAG` targets are ``-100``, which the loss ignores. A batch
    depends on (split, step) alone: ``"train"`` and ``"val"`` never share one.
    """
    expect_int(length, "length", least=LAG + 1)
    generator = torch.Generator().manual_seed(2 * step + (split == "val"))
    ids = torch.randint(0, vocab, (batch_size, length), generator=generator)  # (B, N)
    targets = ids.roll(LAG, dims=1)  # (B, N): targets[:, n] = ids[:, n - 3]
    targets[:, :LAG] = IGNORED  # nothing three places back
    return ids, targets


def lag_loss(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """Chapter 5: the mean cross-entropy at the scored positions n ≥ 3."""
    ids, targets = batch
    scores = model(ids)  # (B, N, V)
    return F.cross_entropy(
        scores.flatten(0, 1), targets.flatten(), ignore_index=IGNORED
    )


def lag_accuracy(model: nn.Module, length: int, device=None) -> torch.Tensor:
    """Chapter 5: accuracy at each scored position n = 3 … N − 1, over 500
    sequences of ``length`` tokens never seen in training: (N − 3,)."""
    ids, targets = lag_batch("test", 10_000, length=length, batch_size=500)
    with torch.no_grad():
        guesses = model(ids.to(device)).argmax(dim=-1).cpu()  # (B, N)
    return (guesses == targets)[:, LAG:].float().mean(dim=0)  # (N − 3,)


def train_lag(
    encoding: str, steps: int = 400, seed: int = 0, device=None, warmup_steps: int = 20
) -> TokenModel:
    """Chapter 5: a :class:`TokenModel` (two blocks, D = 64) with ``encoding``,
    trained on the lag task with sequences of 16 tokens (lr 3e-3, 20 warm-up
    steps). ``seed`` sets the initial weights; the batches are the same for
    every seed."""
    torch.manual_seed(seed)
    model = TokenModel(16, 16, encoding, max_len=64)
    config = TrainConfig(
        steps=steps,
        lr=3e-3,
        warmup_steps=warmup_steps,
        eval_every=None,
        seed=seed,
        device=device,
    )
    fit(model, lag_batch, lag_loss, config, progress=False)
    model.eval()
    return model
