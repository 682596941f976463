"""Chapter 4, Normalisation: LayerNorm (Turner's TokenNorm), RMSNorm, BatchNorm.

LayerNorm normalises each token on its own: over the D features of token n,

    x̂_n = (x_n − mean(x_n)) / √(var(x_n) + ε),    LayerNorm(x)_n = γ ⊙ x̂_n + β

with the mean and the (biased, 1/D) variance taken over the features, and γ, β
learned per feature (Turner §2.3, eq. (4.4) of chapter 4; Ba et al. 2016).
Turner calls it TokenNorm, since the statistics belong to one token. RMSNorm
(Zhang & Sennrich 2019) skips the mean: ``x / √(mean(x²) + ε) · γ``.

BatchNorm takes the statistics of each feature over the batch *and* the
sequence instead (Turner, fig. 5), so a token's output depends on every other
token in the batch: :func:`batch_norm_tokens`, for the chapter's comparison.

The teaching functions are written out; tests prove they equal
``F.layer_norm``, ``F.rms_norm`` and ``F.batch_norm`` in float64, values and
gradients. Shapes use the course's symbols: (..., D) is any number of leading
dimensions, e.g. (B, N, D), with D the model width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .shapes import expect_shape

__all__ = ["LayerNorm", "RMSNorm", "batch_norm_tokens", "layer_norm", "rms_norm"]


def _expect_gain_and_shift(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> None:
    """x (..., D); weight γ and bias β, where given, (D,) each.

    The parameters fix D (they are the layer's), so a wrong width is x's error.
    """
    dims: dict[str, int] = {}
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None:
            dims = expect_shape(param, "D", name, known=dims)
    expect_shape(x, "... D", "x", known=dims)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Chapter 4, eq. (4.4): each token's features to mean 0, variance 1, then γ, β.

    Args:
        x: (..., D) tokens, e.g. (B, N, D).
        weight: γ, (D,); None means 1.
        bias: β, (D,); None means 0.
        eps: ε, added to the variance so that a constant token divides by √ε, not 0.

    Returns:
        (..., D). Equal to ``F.layer_norm(x, (D,), weight, bias, eps)``.
    """
    _expect_gain_and_shift(x, weight, bias)
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1): one mean per token
    centred = x - mean  # (..., D)
    var = (centred**2).mean(dim=-1, keepdim=True)  # (..., 1): 1/D, not 1/(D-1)
    x_hat = centred / torch.sqrt(var + eps)  # (..., D)
    if weight is not None:
        x_hat = x_hat * weight  # γ ⊙ x̂, γ broadcast over the tokens
    if bias is not None:
        x_hat = x_hat + bias  # + β
    return x_hat


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """Chapter 4, eq. (4.5): divide each token by its root mean square, then γ.

    No mean is subtracted and there is no β: a cheaper normalisation that keeps
    the rescaling, which is what stops activations growing (Zhang & Sennrich 2019;
    LLaMA and most recent language models use it).

    Args:
        x: (..., D) tokens.
        weight: γ, (D,); None means 1.
        eps: ε, added to the mean square.

    Returns:
        (..., D). Equal to ``F.rms_norm(x, (D,), weight, eps)``.
    """
    _expect_gain_and_shift(x, weight, None)
    mean_square = (x**2).mean(dim=-1, keepdim=True)  # (..., 1): one per token
    x_hat = x / torch.sqrt(mean_square + eps)  # (..., D)
    return x_hat if weight is None else x_hat * weight


def batch_norm_tokens(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Chapter 4: BatchNorm over tokens, for comparison with :func:`layer_norm`.

    The statistics of feature i are taken over all B·N tokens of the batch
    (Turner, fig. 5), as ``nn.BatchNorm1d`` does in training mode, without
    running averages. Unlike LayerNorm, the output for one token changes when
    another sequence in the batch changes, and it differs between a batch and
    a single sequence.

    Args:
        x: (B, N, D) tokens.
        weight, bias: γ and β, (D,) each, or None.
        eps: ε, added to the variance.

    Returns:
        (B, N, D). Equal to ``F.batch_norm(x.transpose(1, 2), None, None, weight,
        bias, training=True, eps=eps).transpose(1, 2)``.
    """
    expect_shape(x, "B N D", "x")
    _expect_gain_and_shift(x, weight, bias)
    mean = x.mean(dim=(0, 1), keepdim=True)  # (1, 1, D): one mean per feature
    centred = x - mean  # (B, N, D)
    var = (centred**2).mean(dim=(0, 1), keepdim=True)  # (1, 1, D)
    x_hat = centred / torch.sqrt(var + eps)  # (B, N, D)
    if weight is not None:
        x_hat = x_hat * weight
    if bias is not None:
        x_hat = x_hat + bias
    return x_hat


class LayerNorm(nn.Module):
    """Chapter 4: :func:`layer_norm` with learned γ (``weight``) and β (``bias``).

    ``forward`` maps (..., D) to (..., D). The parameters start at γ = 1, β = 0
    and carry the names of ``nn.LayerNorm``'s, so state dicts load either way.

    By default it calls torch's fused kernel, ``F.layer_norm``, which computes
    exactly :func:`layer_norm` (tested in float64, values and gradients) in one
    pass over the tokens instead of seven: the written-out version's separate
    operations and their saved intermediates made a training step of the
    chapter-6 GPT 7–23 % slower (``benchmarks/gpt_speed.py``).
    ``fused=False`` runs the written-out equation.

    Args:
        d_model: D, the width of the tokens it normalises.
        eps: ε.
        bias: learn β; without it the layer only rescales (nanoGPT's option).
        fused: use ``F.layer_norm``; False: :func:`layer_norm`, step by step.
    """

    def __init__(
        self, d_model: int, eps: float = 1e-5, bias: bool = True, fused: bool = True
    ):
        super().__init__()
        self.d_model, self.eps, self.fused = d_model, eps, fused
        self.weight = nn.Parameter(torch.ones(d_model))  # γ
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None  # β

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expect_shape(x, "... D", "x", D=self.d_model)
        if self.fused:
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        fused = "" if self.fused else ", fused=False"
        return f"{self.d_model}, eps={self.eps}, bias={self.bias is not None}{fused}"


class RMSNorm(nn.Module):
    """Chapter 4: :func:`rms_norm` with a learned gain γ (``weight``), started at 1.

    ``forward`` maps (..., D) to (..., D); the state dict matches ``nn.RMSNorm``'s.
    Like :class:`LayerNorm` it calls torch's fused kernel (``F.rms_norm``), equal
    to :func:`rms_norm`, unless ``fused=False``.

    Args:
        d_model: D.
        eps: ε.
        fused: use ``F.rms_norm``; False: :func:`rms_norm`, step by step.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, fused: bool = True):
        super().__init__()
        self.d_model, self.eps, self.fused = d_model, eps, fused
        self.weight = nn.Parameter(torch.ones(d_model))  # γ

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expect_shape(x, "... D", "x", D=self.d_model)
        if self.fused:
            return F.rms_norm(x, (self.d_model,), self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        fused = "" if self.fused else ", fused=False"
        return f"{self.d_model}, eps={self.eps}{fused}"
