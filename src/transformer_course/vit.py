"""Chapter 7, Vision transformers: the chapter-4 block, trained on images.

A ViT reads an image as a sequence of patches (Turner §1.1, fig. 2;
Dosovitskiy et al. 2021):

    images (B, C, H, W) -> patches (B, N, C·p·p)            chapter 1's patchify
                        -> tokens W p_n + b (B, N, D)       PatchEmbedding
                        -> [x_0; tokens] + e_n (B, L, D)    class token, positions
                        -> M pre-norm blocks, no mask, final norm (B, L, D)
                        -> pooled h (B, D) -> logits (B, classes)

with N = (H/p)·(W/p) patches and L = N + 1 tokens with a class token, N
without. Turner's footnote 19 writes the input token as x_n = W p_n + e_n:
a linear map of the vectorised patch plus a learned position embedding (the
course's map, an ``nn.Linear``, adds a bias: x_n = W p_n + b + e_n).
Two ways to pool the final tokens into one vector for the softmax head
(Turner §4.2): the final representation of a learned class token x_0 that
attends to every patch ("cls"), or the mean of the patch tokens ("mean").

The blocks are exactly the GPT's (:class:`~transformer_course.block.Block`);
only the causal mask is gone: every patch may attend to every other.
:meth:`ViT.attention_maps` returns each block's attention weights and
:func:`attention_rollout` combines them across blocks (Abnar & Zuidema 2020).
The recipe that trains it on the digits is :mod:`~transformer_course.train_vit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from .block import BlockConfig, BlockStack
from .block import flop_count as block_flop_count
from .positions import LearnedPositions
from .shapes import (
    ShapeError,
    expect_bool,
    expect_choice,
    expect_positive_int,
    expect_shape,
)
from .tokens import patchify

__all__ = [
    "PatchEmbedding",
    "ViT",
    "ViTConfig",
    "attention_rollout",
    "flop_count",
    "patch_map",
]

POOLS = ("cls", "mean")


@dataclass
class ViTConfig:
    """Chapter 7: everything that defines a :class:`ViT`, in one place."""

    image_size: int = 8  # H = W, in pixels (the digits are 8×8)
    patch_size: int = 2  # p: each token is a p×p patch, so N = (H/p)² tokens
    in_channels: int = 1  # C: 1 for grey levels, 3 for RGB
    n_classes: int = 10  # the head's outputs
    n_layers: int = 4  # M, the number of blocks
    n_heads: int = 4  # H
    d_model: int = 64  # D
    d_mlp: int | None = None  # the MLP's hidden width; None: 4·D
    dropout: float = 0.0  # on the tokens, attention and both branches, in training
    pool: Literal["cls", "mean"] = "cls"  # class token x_0, or the mean of patches
    positions: bool = True  # learned position embeddings e_n (footnote 19)
    norm: Literal["layer", "rms"] = "layer"  # the blocks' and the final norm

    def __post_init__(self):
        for name in ("image_size", "patch_size", "in_channels", "n_classes"):
            expect_positive_int(getattr(self, name), name)
        expect_positive_int(self.n_layers, "n_layers")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"patch_size: expected a divisor of image_size {self.image_size}, "
                f"got {self.patch_size}"
            )
        expect_choice(self.pool, "pool", POOLS)
        expect_bool(self.positions, "positions")
        expect_choice(self.norm, "norm", ("layer", "rms"))
        self.block_config()  # checks d_model, n_heads, d_mlp, dropout

    @property
    def n_patches(self) -> int:
        """N = (H/p)², the number of patch tokens."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def n_tokens(self) -> int:
        """L, the sequence the blocks read: N patches, plus the class token."""
        return self.n_patches + (self.pool == "cls")

    def block_config(self) -> BlockConfig:
        """The chapter-4 :class:`BlockConfig` of every block (the GPT's kind)."""
        return BlockConfig(
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_mlp=self.d_mlp,
            dropout=self.dropout,
            norm=self.norm,
        )


class PatchEmbedding(nn.Module):
    """Chapter 7: images (B, C, H, W) -> patch tokens (B, N, D), W p_n + b.

    Cut into p×p patches (chapter 1's :func:`~transformer_course.tokens.patchify`,
    each flattened as (C, p, p)), then one linear map shared by every patch.
    That is a convolution with kernel p and stride p: ``as_conv2d()`` returns
    the ``nn.Conv2d`` with the same weights, and the two agree (tested).

    Args:
        image_size: H = W.
        patch_size: p, a divisor of ``image_size``.
        in_channels: C.
        d_model: D.
    """

    def __init__(
        self, image_size: int, patch_size: int, in_channels: int, d_model: int
    ):
        super().__init__()
        for name, value in [
            ("image_size", image_size),
            ("patch_size", patch_size),
            ("in_channels", in_channels),
            ("d_model", d_model),
        ]:
            expect_positive_int(value, name)
        if image_size % patch_size:
            raise ValueError(
                f"patch_size: expected a divisor of image_size {image_size}, "
                f"got {patch_size}"
            )
        self.image_size, self.patch_size = image_size, patch_size
        self.in_channels, self.d_model = in_channels, d_model
        self.proj = nn.Linear(in_channels * patch_size**2, d_model)  # W: C·p·p -> D

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> (B, N, D), patches numbered row by row."""
        size, C = self.image_size, self.in_channels
        if images.dim() == 3 and C == 1:
            raise ShapeError(
                f"images: expected shape (B, C, H, W) = (B, 1, {size}, {size}), got "
                f"{tuple(images.shape)}: add the channel axis, images.unsqueeze(1)"
            )
        expect_shape(images, "B C H W", "images", C=C, H=size, W=size)
        patches = patchify(images, self.patch_size)  # (B, N, C·p·p)
        return self.proj(patches)  # (B, N, D)

    def as_conv2d(self) -> nn.Conv2d:
        """The same map as an ``nn.Conv2d(C, D, kernel_size=p, stride=p)``."""
        p, C, D = self.patch_size, self.in_channels, self.d_model
        conv = nn.Conv2d(C, D, kernel_size=p, stride=p)
        conv = conv.to(self.proj.weight.device, self.proj.weight.dtype)
        with torch.no_grad():
            # a row of W is one output's weights over a (C, p, p) patch
            conv.weight.copy_(self.proj.weight.reshape(D, C, p, p))  # (D, C, p, p)
            conv.bias.copy_(self.proj.bias)
        return conv

    def extra_repr(self) -> str:
        return (
            f"image_size={self.image_size}, patch_size={self.patch_size}, "
            f"in_channels={self.in_channels}, d_model={self.d_model}"
        )


class ViT(nn.Module):
    """Chapter 7: a vision transformer, images (B, C, H, W) -> class logits (B, classes).

    Args:
        config: a :class:`ViTConfig`.

    Submodules: ``patch_embedding`` (:class:`PatchEmbedding`); ``class_token``
    (1, 1, D), the learned x_0, with ``pool="cls"`` only; ``positions``, a
    learned table e_n for the L tokens (None with ``positions=False``);
    ``blocks``, a chapter-4 :class:`BlockStack` with a final norm; ``head``,
    D -> classes.
    """

    def __init__(self, config: ViTConfig):
        super().__init__()
        c = self.config = config
        self.patch_embedding = PatchEmbedding(
            c.image_size, c.patch_size, c.in_channels, c.d_model
        )
        self.class_token = (
            nn.Parameter(torch.zeros(1, 1, c.d_model)) if c.pool == "cls" else None
        )
        self.positions = (
            LearnedPositions(c.n_tokens, c.d_model) if c.positions else None
        )
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = BlockStack(c.block_config(), c.n_layers)
        self.head = nn.Linear(c.d_model, c.n_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        """N(0, 0.02) weights and zero biases, the residual writers scaled by
        1/√(2M) as in the GPT; a zero head, so every class starts equally likely."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks.blocks:
            nn.init.normal_(block.attn.out_proj.weight, std=residual_std)
            nn.init.normal_(block.mlp.down_proj.weight, std=residual_std)
        nn.init.zeros_(self.head.weight)
        if self.class_token is not None:
            nn.init.normal_(self.class_token, std=0.02)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """The blocks' input: images (B, C, H, W) -> (B, L, D), x_n = W p_n + b + e_n.

        With a class token, x_0 comes first (L = N + 1); the position table
        has a row for it too.
        """
        x = self.patch_embedding(images)  # (B, N, D)
        if self.class_token is not None:
            x_0 = self.class_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
            x = torch.cat([x_0, x], dim=1)  # (B, N + 1, D)
        if self.positions is not None:
            x = self.positions(x)  # + e_n, (B, L, D)
        return self.dropout(x)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """The final representation of every token: (B, L, D), after the final norm."""
        return self.blocks(self.tokens(images))  # no mask: every token sees all

    def pool(self, features: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, D): the class token's row, or the mean of the patches."""
        expect_shape(features, "B L D", "features", L=self.config.n_tokens)
        if self.config.pool == "cls":
            return features[:, 0]  # (B, D): x_0's final representation
        return features.mean(dim=1)  # (B, D): x_pool = (1/N) Σ_n x_n

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> logits (B, classes)."""
        return self.head(self.pool(self.features(images)))  # (B, classes)

    @torch.no_grad()
    def attention_maps(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Every block's attention weights on ``images``: M tensors (B, H, L, L).

        Row t of head h in block m: how token t spreads its attention over the
        L tokens (it sums to 1). With a class token, row 0 shows what the
        class token reads from each patch.
        """
        x = self.tokens(images)  # (B, L, D)
        maps = []
        for block in self.blocks.blocks:
            maps.append(block.attention_weights(x))  # (B, H, L, L)
            x = block(x)  # (B, L, D)
        return maps

    def flop_count(self) -> dict[str, int]:
        """Forward FLOPs for one image by part, and their total (:func:`flop_count`)."""
        return flop_count(self.config)

    def parameter_count(self) -> dict[str, int]:
        """Parameters by part, and their total."""

        def count(module: nn.Module | None) -> int:
            return sum(p.numel() for p in module.parameters()) if module else 0

        counts = {
            "patch embedding": count(self.patch_embedding),
            "class token": 0 if self.class_token is None else self.class_token.numel(),
            "positions": count(self.positions),
            "blocks": count(self.blocks.blocks),
            "final norm": count(self.blocks.final_norm),
            "head": count(self.head),
        }
        counts["total"] = sum(counts.values())
        return counts


def flop_count(config: ViTConfig) -> dict[str, int]:
    """Chapter 7: forward FLOPs of a :class:`ViT` for one image, by part and in total.

    Two FLOPs per multiply-add. Patch embedding 2·N·(C·p²)·D; each block's
    attention 8·L·D² + 4·L²·D and MLP 4·L·D·d_mlp (chapter 4's
    :func:`~transformer_course.block.flop_count` with L tokens, L = N + 1 with a
    class token); the head 2·D·classes. Norms, activations, biases, the softmax
    and the pooling are left out. With L = (H/p)² (+1), halving p quadruples the
    tokens: attention's L² term grows 16-fold, the rest 4-fold (Turner's
    footnote 14: with large patches, few tokens, the MLP dominates).
    """
    c = config
    per_block = block_flop_count(c.block_config(), c.n_tokens)
    patch_length = c.in_channels * c.patch_size**2  # C·p², one flattened patch
    counts = {
        "patch embedding": 2 * c.n_patches * patch_length * c.d_model,
        "attention": c.n_layers * per_block["attention"],
        "mlp": c.n_layers * per_block["mlp"],
        "head": 2 * c.d_model * c.n_classes,
    }
    counts["total"] = sum(counts.values())
    return counts


def attention_rollout(maps: list[torch.Tensor], residual: bool = True) -> torch.Tensor:
    """Chapter 7: attention rolled out across blocks (Abnar & Zuidema 2020): (B, L, L).

    Each block's weights (B, H, L, L) are averaged over the heads; with
    ``residual`` the skip connection is counted as attention to oneself,
    A' = (A + I)/2; then the blocks are chained, A_roll = A'_M ··· A'_2 A'_1.
    Row t of A_roll says how much each input token contributes to token t's final
    representation, if contributions simply multiply along the paths; every
    row sums to 1.

    Args:
        maps: M tensors (B, H, L, L), first block first
            (:meth:`ViT.attention_maps`).
        residual: count the skip connection (the usual choice).
    """
    if not maps:
        raise ValueError("maps: expected the weights of at least one block, got none")
    rollout = None
    for m, weights in enumerate(maps):
        expect_shape(weights, "B H L L", f"maps[{m}]")
        if m and weights.shape[::2] != maps[0].shape[::2]:  # (B, L) of every block
            raise ShapeError(
                f"maps[{m}]: expected shape (B, H, L, L) with B, L = "
                f"{maps[0].shape[0]}, {maps[0].shape[-1]} like maps[0], got "
                f"{tuple(weights.shape)}"
            )
        mean = weights.mean(dim=1)  # (B, L, L): the heads averaged
        if residual:
            eye = torch.eye(mean.shape[-1], dtype=mean.dtype, device=mean.device)
            mean = (mean + eye) / 2  # (B, L, L), rows still sum to 1
        rollout = mean if rollout is None else mean @ rollout  # (B, L, L)
    return rollout


def patch_map(weights: torch.Tensor, image_size: int, patch_size: int) -> torch.Tensor:
    """Chapter 7: one value per patch, spread over its pixels: (B, N) -> (B, H, W).

    Draws what the class token reads from each patch (a row of
    :meth:`ViT.attention_maps` or of :func:`attention_rollout`, without the
    class token's own column) on top of the image: pixel (i, j) gets the value
    of patch (i // p)·(H/p) + j // p, the row-by-row numbering of patchify.
    """
    if not isinstance(patch_size, int) or patch_size < 1 or image_size % patch_size:
        raise ValueError(
            f"patch_size: expected a divisor of image_size {image_size}, got {patch_size!r}"
        )
    side = image_size // patch_size  # patches per row and per column
    expect_shape(weights, "B N", "weights", N=side * side)
    grid = weights.reshape(-1, side, side)  # (B, H/p, W/p): patch (row, column)
    return grid.repeat_interleave(patch_size, 1).repeat_interleave(patch_size, 2)
