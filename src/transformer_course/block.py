"""Chapter 4, The transformer block: attention, MLP, residuals and normalisation.

A block refines (B, N, D) tokens in two stages (Turner §2): multi-head
self-attention mixes information across the tokens (chapter 3), then an MLP
refines the features of each token on its own, with the same weights for every
token (Turner §2.2). Each stage is a residual branch, ``x + branch(x)``, so a
block whose branches output zero passes its input through unchanged
(Turner §2.3). Where the normalisation goes gives two blocks:

* pre-norm, the default (Xiong et al. 2020; Turner fig. 7; GPT-2 and later),
  normalises the input of each branch and leaves the residual path clean::

      x = x + attn(norm_1(x))
      x = x + mlp(norm_2(x))

* post-norm, the original transformer's "Add & Normalize" (Vaswani et al. 2017),
  normalises after each addition::

      x = norm_1(x + attn(x))
      x = norm_2(x + mlp(x))

Blocks are stacked M times, each applied to the output of the one before. The
block converts to and from ``torch.nn.TransformerEncoderLayer`` (batch_first,
norm_first either way), and tests prove the two agree, outputs and gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from . import multihead
from .multihead import MultiHeadAttention, _expect_heads, _expect_positive_int
from .norms import LayerNorm, RMSNorm
from .shapes import expect_shape

__all__ = ["MLP", "Block", "BlockConfig", "from_torch", "to_torch"]

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}
NORMS = {"layer": LayerNorm, "rms": RMSNorm}


@dataclass
class BlockConfig:
    """Chapter 4: everything that defines a :class:`Block`, in one place."""

    d_model: int  # D, the width of every token
    n_heads: int  # H; each head has width d = D / H
    d_mlp: int | None = None  # the MLP's hidden width; None: 4·D (Vaswani et al.)
    dropout: float = 0.0  # on attention weights and both branches, in training
    bias: bool = True  # biases in the linear layers, and β in LayerNorm
    norm: Literal["layer", "rms"] = "layer"  # LayerNorm or RMSNorm
    norm_first: bool = True  # pre-norm (Xiong et al.); False: post-norm
    activation: Literal["gelu", "relu"] = "gelu"  # the MLP's non-linearity
    eps: float = 1e-5  # ε of the normalisations

    def __post_init__(self):
        _expect_heads(self.d_model, self.n_heads)
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        _expect_positive_int(self.d_mlp, "d_mlp")
        if not 0 <= self.dropout <= 1:
            raise ValueError(f"dropout: expected a probability, got {self.dropout}")
        for field, value, choices in (
            ("norm", self.norm, NORMS),
            ("activation", self.activation, ACTIVATIONS),
        ):
            if value not in choices:
                raise ValueError(
                    f"{field}: expected one of {sorted(choices)}, got {value!r}"
                )
        if not self.eps > 0:
            raise ValueError(f"eps: expected a positive float, got {self.eps}")


class MLP(nn.Module):
    """Chapter 4: Linear, activation, Linear, applied to every token with the same weights.

    ``forward`` maps (..., N, D) to (..., N, D): token n's output depends on
    token n's features only (Turner §2.2: x_n = MLP_θ(y_n)). The hidden layer
    is wider, d_mlp = 4·D by default, and costs 2·D·d_mlp weights.

    Args:
        d_model: D.
        d_mlp: hidden width; None means 4·D.
        activation: ``"gelu"`` (exact, as ``nn.GELU()``) or ``"relu"`` (the
            original transformer's, as in the handwritten notes).
        bias: biases in both linear layers.
        dropout: on the output, in training.
    """

    def __init__(
        self,
        d_model: int,
        d_mlp: int | None = None,
        activation: str = "gelu",
        bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        d_mlp = 4 * d_model if d_mlp is None else d_mlp
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}"
            )
        self.d_model = d_model
        self.up_proj = nn.Linear(d_model, d_mlp, bias=bias)  # W_1: D -> d_mlp
        self.activation = ACTIVATIONS[activation]()
        self.down_proj = nn.Linear(d_mlp, d_model, bias=bias)  # W_2: d_mlp -> D
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expect_shape(x, "... D", "x", D=self.d_model)
        hidden = self.activation(self.up_proj(x))  # (..., N, d_mlp)
        return self.dropout(self.down_proj(hidden))  # (..., N, D)


class Block(nn.Module):
    """Chapter 4: the transformer block, pre-norm or post-norm (see the module).

    Args:
        config: a :class:`BlockConfig`.

    Submodules: ``norm_1``, ``attn`` (chapter 3's
    :class:`~transformer_course.multihead.MultiHeadAttention`), ``norm_2``,
    ``mlp`` (:class:`MLP`), and ``resid_dropout`` on the attention branch.
    """

    def __init__(self, config: BlockConfig):
        super().__init__()
        c = self.config = config
        Norm = NORMS[c.norm]
        norm_args = {"eps": c.eps, **({"bias": c.bias} if c.norm == "layer" else {})}
        self.norm_1 = Norm(c.d_model, **norm_args)
        self.attn = MultiHeadAttention(c.d_model, c.n_heads, c.bias, c.dropout)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.norm_2 = Norm(c.d_model, **norm_args)
        self.mlp = MLP(c.d_model, c.d_mlp, c.activation, c.bias, c.dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """x (B, N, D) -> (B, N, D).

        ``mask`` and ``is_causal`` go to attention as they are (see
        :meth:`MultiHeadAttention.forward`): a boolean mask is True where a
        query may attend to a key, e.g. (N, N), or (B, 1, 1, N) for key
        padding; ``is_causal`` forbids the keys after each query.
        """
        expect_shape(x, "B N D", "x", D=self.config.d_model)
        if self.config.norm_first:  # pre-norm: Turner fig. 7, Xiong et al.
            x = x + self.attend(self.norm_1(x), mask, is_causal)
            x = x + self.mlp(self.norm_2(x))
        else:  # post-norm: "Add & Normalize" after each branch
            x = self.norm_1(x + self.attend(x, mask, is_causal))
            x = self.norm_2(x + self.mlp(x))
        return x

    def attend(
        self,
        h: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The attention branch: h (B, N, D) -> (B, N, D), and (B, H, N, N) weights.

        The block's one call to attention: a KV cache or rotary positions, when
        the course adds them, are threaded through here.
        """
        out = self.attn(h, mask=mask, is_causal=is_causal, need_weights=need_weights)
        if need_weights:
            out, weights = out  # (B, N, D), (B, H, N, N)
            return self.resid_dropout(out), weights
        return self.resid_dropout(out)

    def attention_weights(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """The weights this block's attention gives x (B, N, D): (B, H, N, N).

        To see every block's weights, call this on each block's input in a stack.
        """
        expect_shape(x, "B N D", "x", D=self.config.d_model)
        h = self.norm_1(x) if self.config.norm_first else x
        return self.attend(h, mask, is_causal, need_weights=True)[1]


def _activation_name(layer: nn.TransformerEncoderLayer) -> str:
    """The name of a layer's activation, "relu" or "gelu"."""
    code = getattr(layer, "activation_relu_or_gelu", 0)  # torch: 1 relu, 2 gelu
    if code not in (1, 2):
        raise ValueError(
            f"from_torch: expected activation 'relu' or 'gelu', got {layer.activation}"
        )
    return "relu" if code == 1 else "gelu"


def from_torch(layer: nn.TransformerEncoderLayer) -> Block:
    """Chapter 4: a :class:`Block` with the weights of an ``nn.TransformerEncoderLayer``.

    Pre-norm if the layer has ``norm_first=True``, else post-norm. The layer's
    ``batch_first`` does not matter (it changes the input layout, not the
    weights): the block always takes (B, N, D). The two agree exactly with
    dropout 0; in training, torch also drops inside the MLP's hidden layer.
    """
    weight = layer.linear1.weight  # (d_mlp, D)
    config = BlockConfig(
        d_model=layer.self_attn.embed_dim,
        n_heads=layer.self_attn.num_heads,
        d_mlp=weight.shape[0],
        dropout=layer.dropout.p,
        bias=layer.linear1.bias is not None,
        norm="layer",
        norm_first=layer.norm_first,
        activation=_activation_name(layer),
        eps=layer.norm1.eps,
    )
    block = Block(config).to(weight.device, weight.dtype)
    block.attn = multihead.from_torch(layer.self_attn)
    block.mlp.up_proj.load_state_dict(layer.linear1.state_dict())  # W_1, b_1
    block.mlp.down_proj.load_state_dict(layer.linear2.state_dict())  # W_2, b_2
    block.norm_1.load_state_dict(layer.norm1.state_dict())  # weight γ, bias β
    block.norm_2.load_state_dict(layer.norm2.state_dict())
    return block


def to_torch(block: Block) -> nn.TransformerEncoderLayer:
    """Chapter 4: an ``nn.TransformerEncoderLayer(batch_first=True)`` with this block's weights.

    Raises ValueError for ``norm="rms"``: torch's layer has LayerNorm only.
    """
    c = block.config
    if c.norm != "layer":
        raise ValueError(
            f"to_torch: torch's layer has LayerNorm only, got norm={c.norm!r}"
        )
    weight = block.mlp.up_proj.weight
    layer = nn.TransformerEncoderLayer(
        c.d_model,
        c.n_heads,
        dim_feedforward=c.d_mlp,
        dropout=c.dropout,
        activation=c.activation,
        layer_norm_eps=c.eps,
        batch_first=True,
        norm_first=c.norm_first,
        bias=c.bias,
        device=weight.device,
        dtype=weight.dtype,
    )
    layer.self_attn.load_state_dict(multihead.to_torch(block.attn).state_dict())
    layer.linear1.load_state_dict(block.mlp.up_proj.state_dict())
    layer.linear2.load_state_dict(block.mlp.down_proj.state_dict())
    layer.norm1.load_state_dict(block.norm_1.state_dict())
    layer.norm2.load_state_dict(block.norm_2.state_dict())
    return layer
