"""Chapter 6, The KV cache: keys and values of earlier tokens, kept for generation.

With the causal mask, a token's representation depends on the tokens before
it only (Turner §4.1, the incremental property): appending a token changes
nothing that was computed for the earlier ones. So when a model generates one
token at a time, the keys and values of the earlier tokens, in every block,
can be kept instead of recomputed, and each new token costs one query against
the stored keys instead of a pass over the whole sequence.

:class:`LayerCache` holds one attention layer's keys and values, preallocated
to ``max_len`` positions; :class:`KVCache` holds one per block.
:class:`~transformer_course.multihead.MultiHeadAttention`,
:class:`~transformer_course.block.Block` and
:class:`~transformer_course.block.BlockStack` take it as ``cache=``: the new
tokens' keys and values are written after the stored ones, the new queries
attend to all of them (the causal mask aligned bottom-right), and rotary
positions continue from the number of tokens stored.

Shapes: (B, H, N, d) as in chapter 3, with N the tokens stored so far.
"""

from __future__ import annotations

import torch

from .shapes import expect_positive_int, expect_shape

__all__ = ["KVCache", "LayerCache"]


class LayerCache:
    """Chapter 6: one attention layer's keys and values, room for ``max_len`` tokens.

    Args:
        batch_size: B.
        n_heads: H.
        max_len: the most tokens it can hold (a model's context length).
        head_dim: d.
        dtype, device: of the stored tensors (those of the model).

    ``keys`` and ``values`` are (B, H, max_len, d), allocated once; the first
    ``length`` positions are filled.
    """

    def __init__(
        self,
        batch_size: int,
        n_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ):
        for name, value in (
            ("batch_size", batch_size),
            ("n_heads", n_heads),
            ("max_len", max_len),
            ("head_dim", head_dim),
        ):
            expect_positive_int(value, name)
        shape = (batch_size, n_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0  # tokens stored

    def append(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, H, N, d) after the ``length`` tokens already here.

        Returns every stored key and value, (B, H, length + N, d) each: views
        of the preallocated tensors, nothing copied but the new tokens.
        """
        B, H, _, d = self.keys.shape
        dims = expect_shape(k, "B H N d", "k", B=B, H=H, d=d)
        expect_shape(v, "B H N d", "v", known=dims)
        end = self.length + dims["N"]
        if end > self.max_len:
            raise ValueError(
                f"cache: {self.length} tokens stored + {dims['N']} new = {end}, "
                f"more than its max_len = {self.max_len}; start a new cache (or "
                f"crop the sequence to the model's context)"
            )
        self.keys[:, :, self.length : end] = k  # (B, H, N, d) written in place
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def reset(self) -> None:
        """Forget every stored token (the memory stays allocated)."""
        self.length = 0


class KVCache:
    """Chapter 6: one :class:`LayerCache` per block of a stack.

    Args:
        n_blocks: M.
        batch_size, n_heads, max_len, head_dim, dtype, device: as in
            :class:`LayerCache`.

    ``layers[m]`` is block m's cache; ``length`` is the number of tokens stored
    (the same in every layer after a whole pass through the stack).
    """

    def __init__(
        self,
        n_blocks: int,
        batch_size: int,
        n_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ):
        expect_positive_int(n_blocks, "n_blocks")
        self.layers = [
            LayerCache(batch_size, n_heads, max_len, head_dim, dtype, device)
            for _ in range(n_blocks)
        ]
        self.max_len = max_len

    @property
    def length(self) -> int:
        """Tokens stored, as the last layer has them."""
        return self.layers[-1].length

    def reset(self) -> None:
        """Forget every stored token, in every layer."""
        for layer in self.layers:
            layer.reset()
