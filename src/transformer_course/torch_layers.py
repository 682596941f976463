"""Chapters 3 and 4: the course's layers to and from PyTorch's, weights copied.

* :class:`~transformer_course.multihead.MultiHeadAttention` and
  ``nn.MultiheadAttention(batch_first=True)`` (chapter 3): PyTorch keeps the
  stacked query, key and value weights, ``in_proj_weight`` (3D, D), where the
  course has ``qkv_proj.weight``, the same rows in the same order.
* :class:`~transformer_course.block.Block` and
  ``nn.TransformerEncoderLayer(batch_first=True)`` (chapter 4), pre-norm
  (``norm_first=True``) or post-norm.

The tests use them to prove the course's layers equal PyTorch's, outputs and
gradients in float64; the benchmarks, to time the two on the same weights.

    theirs = tc.torch_layers.to_torch(ours)     # ours -> PyTorch's
    ours = tc.torch_layers.from_torch(theirs)   # PyTorch's -> ours
"""

from __future__ import annotations

import torch
from torch import nn

from .block import Block, BlockConfig
from .multihead import MultiHeadAttention

__all__ = ["from_torch", "to_torch"]


def to_torch(layer: MultiHeadAttention | Block) -> nn.Module:
    """PyTorch's layer with ``layer``'s weights: an ``nn.MultiheadAttention``
    for a :class:`MultiHeadAttention`, an ``nn.TransformerEncoderLayer`` for a
    :class:`Block` (both ``batch_first=True``)."""
    if isinstance(layer, MultiHeadAttention):
        return _attention_to_torch(layer)
    if isinstance(layer, Block):
        return _block_to_torch(layer)
    raise TypeError(
        f"to_torch: expected a MultiHeadAttention or a Block, got {type(layer).__name__}"
    )


def from_torch(layer: nn.MultiheadAttention | nn.TransformerEncoderLayer) -> nn.Module:
    """The course's layer with the weights of PyTorch's: a
    :class:`MultiHeadAttention` for an ``nn.MultiheadAttention``, a
    :class:`Block` for an ``nn.TransformerEncoderLayer``."""
    if isinstance(layer, nn.MultiheadAttention):
        return _attention_from_torch(layer)
    if isinstance(layer, nn.TransformerEncoderLayer):
        return _block_from_torch(layer)
    raise TypeError(
        "from_torch: expected an nn.MultiheadAttention or an "
        f"nn.TransformerEncoderLayer, got {type(layer).__name__}"
    )


def _attention_to_torch(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention(batch_first=True)`` with this module's weights.

    Raises ValueError for a module with rotary positions: torch's layer has none.
    """
    if module.rotary is not None:
        raise ValueError(
            "to_torch: nn.MultiheadAttention has no rotary positions, got a "
            "module with rotary set"
        )
    has_bias = module.qkv_proj.bias is not None
    reference = nn.MultiheadAttention(
        module.d_model,
        module.n_heads,
        dropout=module.dropout,
        bias=has_bias,
        batch_first=True,
        device=module.qkv_proj.weight.device,
        dtype=module.qkv_proj.weight.dtype,
    )
    with torch.no_grad():
        reference.in_proj_weight.copy_(module.qkv_proj.weight)  # (3D, D), rows q, k, v
        reference.out_proj.weight.copy_(module.out_proj.weight)
        if has_bias:
            reference.in_proj_bias.copy_(module.qkv_proj.bias)
            reference.out_proj.bias.copy_(module.out_proj.bias)
    return reference


def _attention_from_torch(reference: nn.MultiheadAttention) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` with the weights of an ``nn.MultiheadAttention``."""
    if reference.in_proj_weight is None:
        raise ValueError(
            "from_torch: expected packed q/k/v weights (kdim == vdim == embed_dim)"
        )
    has_bias = reference.in_proj_bias is not None
    module = MultiHeadAttention(
        reference.embed_dim,
        reference.num_heads,
        bias=has_bias,
        dropout=reference.dropout,
    )
    module = module.to(reference.in_proj_weight.device, reference.in_proj_weight.dtype)
    with torch.no_grad():
        module.qkv_proj.weight.copy_(reference.in_proj_weight)
        module.out_proj.weight.copy_(reference.out_proj.weight)
        if has_bias:
            module.qkv_proj.bias.copy_(reference.in_proj_bias)
            module.out_proj.bias.copy_(reference.out_proj.bias)
    return module


def _activation_name(layer: nn.TransformerEncoderLayer) -> str:
    """The name of a layer's activation, "relu" or "gelu"."""
    code = getattr(layer, "activation_relu_or_gelu", 0)  # torch: 1 relu, 2 gelu
    if code not in (1, 2):
        raise ValueError(
            f"from_torch: expected activation 'relu' or 'gelu', got {layer.activation}"
        )
    return "relu" if code == 1 else "gelu"


def _block_from_torch(layer: nn.TransformerEncoderLayer) -> Block:
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
    block.attn = _attention_from_torch(layer.self_attn)
    block.mlp.up_proj.load_state_dict(layer.linear1.state_dict())  # W_1, b_1
    block.mlp.down_proj.load_state_dict(layer.linear2.state_dict())  # W_2, b_2
    block.norm_1.load_state_dict(layer.norm1.state_dict())  # weight γ, bias β
    block.norm_2.load_state_dict(layer.norm2.state_dict())
    return block


def _block_to_torch(block: Block) -> nn.TransformerEncoderLayer:
    """Chapter 4: an ``nn.TransformerEncoderLayer(batch_first=True)`` with this block's weights.

    Raises ValueError for ``norm="rms"`` or ``"none"``: torch's layer has
    LayerNorm only; for ``rotary=True``: it has no rotary positions either; and
    for ``residual=False``.
    """
    c = block.config
    if c.norm != "layer":
        raise ValueError(
            f"to_torch: torch's layer has LayerNorm only, got norm={c.norm!r}"
        )
    if c.rotary:
        raise ValueError(
            "to_torch: torch's layer has no rotary positions, got rotary=True"
        )
    if not c.residual:
        raise ValueError(
            "to_torch: torch's layer always has residual connections, got residual=False"
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
    layer.self_attn.load_state_dict(_attention_to_torch(block.attn).state_dict())
    layer.linear1.load_state_dict(block.mlp.up_proj.state_dict())
    layer.linear2.load_state_dict(block.mlp.down_proj.state_dict())
    layer.norm1.load_state_dict(block.norm_1.state_dict())
    layer.norm2.load_state_dict(block.norm_2.state_dict())
    return layer
