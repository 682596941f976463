"""Chapter 5, Positions: where each token is, told to attention.

Attention treats its tokens as a set: permute the input rows and the output
rows permute the same way (chapter 3). Word order has to be put in. The course
shows three ways, all written with the same angles
``n·ω_k``, ``ω_k = base^(−2k/D)`` (:func:`position_angles`):

* absolute positions added to the tokens before the first block:
  :func:`sinusoidal_positions` (Vaswani et al. 2017; lecture notes §9.5.1;
  eq. (5.2)), with its shift matrices :func:`sinusoidal_shift_matrix`
  (eq. (5.4)), or a table learned like the word embeddings,
  :class:`LearnedPositions` (GPT-2);
* rotary positions (RoPE, Su et al. 2021; eq. (5.5)), which rotate each head's
  queries and keys by their position so that the score of a query at n and
  a key at n′ depends on ``n − n′`` only: :class:`RotaryEmbedding`, which
  :class:`~transformer_course.multihead.MultiHeadAttention` and
  :class:`~transformer_course.block.Block` take as an option;
* a bias on the scores that grows with the distance between query and key
  (ALiBi, Press et al. 2022; eq. (5.7)): :func:`alibi_bias`, an additive float
  mask that goes where every attention mask goes, the ``mask`` argument.

Pairs of features: both the sinusoidal table and the rotary embedding pair
feature 2k with feature 2k+1 ("interleaved", as in the RoFormer paper and
Meta's LLaMA code). GPT-NeoX and Hugging Face's LLaMA pair feature i with
feature i + d/2 ("half-split"); the two differ by a fixed permutation of the
query and key features, which the learned W_q and W_k absorb (a test shows it).

Positions of a sequence of N tokens are ``offset, offset + 1, ..., offset + N − 1``;
``offset`` is the number of tokens that came before, for a KV cache (chapter 6).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .shapes import ShapeError, expect_int, expect_number, expect_shape

__all__ = [
    "LearnedPositions",
    "RotaryEmbedding",
    "SinusoidalPositions",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "apply_rotary_complex",
    "position_angles",
    "sinusoidal_positions",
    "sinusoidal_shift_matrix",
]


def _expect_even(value: object, name: str, why: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 2 or value % 2:
        raise ValueError(
            f"{name}: expected an even positive int ({why}), got {value!r}"
        )


def _expect_base(base: object) -> None:
    expect_number(base, "base", above=0)


def _expect_fits(n_tokens: int, offset: int, max_len: int | None) -> None:
    if max_len is not None and offset + n_tokens > max_len:
        raise ValueError(
            f"positions {offset}..{offset + n_tokens - 1}: offset + N = "
            f"{offset} + {n_tokens} = {offset + n_tokens} exceeds max_len = {max_len}"
        )


def position_angles(
    n_tokens: int,
    width: int,
    base: float = 10000.0,
    offset: int = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Chapter 5: the angles n·ω_k shared by sinusoidal and rotary positions, (N, width/2).

    Entry [n, k] is ``(offset + n) / base^(2k/width)``: pair k turns at the
    frequency ω_k = base^(−2k/width), from one turn per 2π tokens (k = 0) down
    to about one per 2π·base tokens. Always float64, so that positions in the
    thousands keep their digits; callers cast the sines and cosines.

    Args:
        n_tokens: N ≥ 0.
        width: D for the sinusoidal table, d (the head width) for rotary; even.
        base: 10000 in Vaswani et al. and RoPE.
        offset: the first position.
        device: where to build the angles.

    Returns:
        (N, width/2) float64.
    """
    expect_int(n_tokens, "n_tokens", least=0)
    _expect_even(width, "width", "features come in (sin, cos) pairs")
    _expect_base(base)
    expect_int(offset, "offset", least=0)
    n = torch.arange(offset, offset + n_tokens, dtype=torch.float64, device=device)
    two_k = torch.arange(0, width, 2, dtype=torch.float64, device=device)  # 2k
    return n[:, None] / base ** (two_k / width)  # (N, width/2): n / base^(2k/D)


def sinusoidal_positions(
    n_tokens: int,
    d_model: int,
    base: float = 10000.0,
    offset: int = 0,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Chapter 5, eq. (5.2): Vaswani et al.'s position table, (N, D).

    ``PE[n, 2k] = sin(n / base^(2k/D))`` and ``PE[n, 2k+1] = cos(n / base^(2k/D))``
    for the positions n = offset ... offset + N − 1 (lecture notes §9.5.1).
    Added to the (B, N, D) token embeddings, it broadcasts over the batch.
    Every row has norm √(D/2); the dot product of rows n and n′ is
    ``Σ_k cos((n − n′) ω_k)``, a function of n − n′ alone, and row n + j is row n
    turned by the same rotation for every n (:func:`sinusoidal_shift_matrix`).

    Args:
        n_tokens: N ≥ 0.
        d_model: D; even, for the (sin, cos) pairs.
        base: the longest wavelength is 2π·base tokens.
        offset: the first position.
        dtype: default ``torch.get_default_dtype()``; computed in float64.
        device: where to build it.

    Returns:
        (N, D) table.
    """
    _expect_even(d_model, "d_model", "features come in (sin, cos) pairs")
    angles = position_angles(n_tokens, d_model, base, offset, device)  # (N, D/2)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (N, D/2, 2)
    return table.flatten(-2).to(dtype or torch.get_default_dtype())  # (N, D)


def sinusoidal_shift_matrix(
    shift: int,
    d_model: int,
    base: float = 10000.0,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Chapter 5, eq. (5.4): R_j with PE(n + j) = R_j PE(n) for every n, (D, D).

    Block diagonal, one 2×2 rotation per pair of features::

        [ sin((n+j)ω) ]   [  cos(jω)  sin(jω) ] [ sin(nω) ]
        [ cos((n+j)ω) ] = [ −sin(jω)  cos(jω) ] [ cos(nω) ]

    R_j depends on the shift j, not on n: moving by j positions is one linear
    map for every position (Vaswani et al.'s reason for sinusoids). In the row
    convention of the course, ``table[n + j] = table[n] @ R_j.T``. R_j is
    orthogonal and ``R_i R_j = R_{i+j}``.

    Args:
        shift: j, any int (negative moves back).
        d_model: D, even.
        base, dtype, device: as in :func:`sinusoidal_positions`.

    Returns:
        (D, D) block-diagonal rotation.
    """
    expect_int(shift, "shift")
    _expect_even(d_model, "d_model", "features come in (sin, cos) pairs")
    _expect_base(base)
    two_k = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)
    angles = shift / base ** (two_k / d_model)  # (D/2,): j·ω_k
    cos, sin = angles.cos(), angles.sin()
    blocks = torch.stack(
        (torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2
    )  # (D/2, 2, 2): one rotation per pair
    return torch.block_diag(*blocks).to(dtype or torch.get_default_dtype())  # (D, D)


class SinusoidalPositions(nn.Module):
    """Chapter 5: adds :func:`sinusoidal_positions` to (B, N, D) tokens; no parameters.

    ``forward(x, offset=0)`` returns ``x + PE[offset : offset + N]`` in x's dtype.
    The table is computed for each call, so any length works; swap it with
    :class:`LearnedPositions`, which has the same ``forward``.

    Args:
        d_model: D, even.
        base: as in :func:`sinusoidal_positions`.
    """

    def __init__(self, d_model: int, base: float = 10000.0):
        super().__init__()
        _expect_even(d_model, "d_model", "features come in (sin, cos) pairs")
        _expect_base(base)
        self.d_model, self.base = d_model, base

    def positions(self, n_tokens: int, offset: int = 0) -> torch.Tensor:
        """The (N, D) table for positions offset ... offset + N − 1."""
        return sinusoidal_positions(n_tokens, self.d_model, self.base, offset)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, N, D) -> x + PE[offset : offset + N], (B, N, D)."""
        dims = expect_shape(x, "B N D", "x", D=self.d_model)
        table = sinusoidal_positions(
            dims["N"], self.d_model, self.base, offset, x.dtype, x.device
        )
        return x + table  # (B, N, D) + (N, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base}"


class LearnedPositions(nn.Module):
    """Chapter 5: a learned (max_len, D) table of position vectors, added to the tokens.

    Row n is a parameter, trained with the rest of the model (GPT-2). A
    learned table knows only the positions 0 ... max_len − 1 it was given, and
    a position seen rarely in training is learned poorly: the price of
    flexibility next to :func:`sinusoidal_positions`.

    Args:
        max_len: the number of positions in the table.
        d_model: D.

    Parameter ``weight`` (max_len, D), started at normal(0, 0.02) as in GPT-2.
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        expect_int(max_len, "max_len", least=1)
        expect_int(d_model, "d_model", least=1)
        self.max_len, self.d_model = max_len, d_model
        self.weight = nn.Parameter(torch.empty(max_len, d_model))  # E, one row per n
        nn.init.normal_(self.weight, std=0.02)

    def positions(self, n_tokens: int, offset: int = 0) -> torch.Tensor:
        """Rows offset ... offset + N − 1 of the table: (N, D)."""
        expect_int(n_tokens, "n_tokens", least=0)
        expect_int(offset, "offset", least=0)
        _expect_fits(n_tokens, offset, self.max_len)
        return self.weight[offset : offset + n_tokens]  # (N, D)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, N, D) -> x + E[offset : offset + N], (B, N, D)."""
        dims = expect_shape(x, "B N D", "x", D=self.d_model)
        return x + self.positions(dims["N"], offset)  # (B, N, D) + (N, D)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


def _expect_rotary_input(x: torch.Tensor, angles: torch.Tensor) -> dict[str, int]:
    """Check x (..., N, d) against angles (N, d/2); return the sizes."""
    dims = expect_shape(x, "... N d", "x")
    if dims["d"] % 2:
        raise ShapeError(
            f"x: expected an even width d (features are rotated in pairs), "
            f"got shape {tuple(x.shape)}"
        )
    if not x.dtype.is_floating_point:
        raise TypeError(f"x: expected a floating-point dtype, got {x.dtype}")
    expect_shape(angles, "N h", "angles", N=dims["N"], h=dims["d"] // 2)
    return dims


def apply_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Chapter 5, eq. (5.5): turn each pair (x_{2i}, x_{2i+1}) of token n by angles[n, i].

    The teaching form, in real arithmetic::

        x̃_{2i}   = x_{2i} cos θ − x_{2i+1} sin θ
        x̃_{2i+1} = x_{2i} sin θ + x_{2i+1} cos θ        θ = angles[n, i] = n·ω_i

    A rotation keeps lengths, and two vectors turned by θ_n and θ_n′ have the
    dot product of the originals with one turned by θ_n − θ_n′: with θ = n·ω
    the score of a query at position n and a key at n′ depends on n − n′ only
    (the chapter's q̃_n · k̃_n′ = q_nᵀ R_{n−n′} k_n′, eq. (5.6)). Equal to
    :func:`apply_rotary_complex`.

    Args:
        x: (..., N, d) queries or keys, d even.
        angles: (N, d/2), e.g. :func:`position_angles` (any floating dtype;
            the sines and cosines are cast to x's dtype).

    Returns:
        (..., N, d), x's dtype.
    """
    _expect_rotary_input(x, angles)
    cos = angles.cos().to(x.dtype)  # (N, d/2)
    sin = angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., N, d/2) each: x_{2i}, x_{2i+1}
    rotated = torch.stack(
        (even * cos - odd * sin, even * sin + odd * cos), dim=-1
    )  # (..., N, d/2, 2)
    return rotated.flatten(-2)  # (..., N, d): pairs back in place


def apply_rotary_complex(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Chapter 5, eq. (5.5): :func:`apply_rotary` as a product of complex numbers.

    Pair i of token n is the complex number ``z = x_2i + i·x_2i+1``; rotating it
    by θ is ``z · e^{iθ}`` (RoFormer, eq. 13; Meta's LLaMA code). Same shapes
    and result as :func:`apply_rotary`; x must be float32 or float64.
    """
    dims = _expect_rotary_input(x, angles)
    pairs = x.reshape(*x.shape[:-1], dims["d"] // 2, 2).contiguous()  # (..., N, d/2, 2)
    z = torch.view_as_complex(pairs)  # (..., N, d/2) complex
    turn = torch.polar(torch.ones_like(angles), angles).to(z.dtype)  # e^{iθ}, (N, d/2)
    return torch.view_as_real(z * turn).flatten(-2)  # (..., N, d)


class RotaryEmbedding(nn.Module):
    """Chapter 5: rotary positions (RoPE) for each head's queries and keys.

    ``forward(q, k, offset=0)`` turns the queries q (B, H, N, d) and keys k
    (B, H, N, d) of positions offset ... offset + N − 1 with
    :func:`apply_rotary` (interleaved pairs (2i, 2i+1), frequencies
    ω_i = base^(−2i/d)) and returns both, same shapes. The values are not
    turned. Attention then scores ``q̃_n · k̃_n′ = f(q, k, n − n′)``: relative
    positions, with nothing added to the tokens.

    No parameters and no tables: the angles are computed in float64 at each
    call, so the module works in any dtype and is exact in float64.

    Args:
        head_dim: d, the head width; even.
        max_len: the largest offset + N accepted (the context a model is trained
            for); None accepts any.
        base: 10000 in the RoPE paper and LLaMA.
    """

    def __init__(
        self, head_dim: int, max_len: int | None = None, base: float = 10000.0
    ):
        super().__init__()
        _expect_even(head_dim, "head_dim", "features are rotated in pairs")
        if max_len is not None:
            expect_int(max_len, "max_len", least=1)
        _expect_base(base)
        self.head_dim, self.max_len, self.base = head_dim, max_len, base

    def angles(self, n_tokens: int, offset: int = 0, device=None) -> torch.Tensor:
        """(N, d/2) float64 angles of positions offset ... offset + N − 1."""
        expect_int(n_tokens, "n_tokens", least=0)
        expect_int(offset, "offset", least=0)
        _expect_fits(n_tokens, offset, self.max_len)
        return position_angles(n_tokens, self.head_dim, self.base, offset, device)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, offset: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k (B, H, N, d) -> the same, each token turned by its position."""
        dims = expect_shape(q, "B H N d", "q", d=self.head_dim)
        expect_shape(k, "B H N d", "k", known=dims)
        angles = self.angles(dims["N"], offset, q.device)  # (N, d/2)
        return apply_rotary(q, angles), apply_rotary(k, angles)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_len={self.max_len}, base={self.base}"


def alibi_slopes(
    n_heads: int,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Chapter 5, eq. (5.7): the H slopes of ALiBi (Press et al. 2022), (H,).

    For H a power of two, the geometric sequence ``2^(−8h/H)``, h = 1 ... H: for
    H = 8 the slopes are 1/2, 1/4, ..., 1/256, so each head looks at a
    different distance. Otherwise, as in the authors' code: the slopes of the
    largest power of two P < H, then every other slope of 2P, the first H − P.

    Returns:
        (H,) slopes, largest first; dtype default ``torch.get_default_dtype()``.
    """
    expect_int(n_heads, "n_heads", least=1)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** int(math.log2(n_heads))  # P, the largest power of two ≤ H
    slopes = power_of_two(below) + power_of_two(2 * below)[0::2][: n_heads - below]
    return torch.tensor(slopes, dtype=dtype or torch.get_default_dtype(), device=device)


def alibi_bias(
    n_queries: int,
    n_heads: int,
    n_keys: int | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Chapter 5, eq. (5.7): ``bias[h, i, j] = −m_h · |i − j|``, an additive mask (H, N_q, N_k).

    Pass it as the ``mask`` of attention (a floating-point mask is added to the
    scores q kᵀ/√d): key j loses m_h per token of distance from query i, and
    nothing is added to the tokens. It broadcasts against (B, H, N_q, N_k).
    The symmetric form serves encoders; with ``is_causal=True`` the keys after
    each query are cut off and what remains, −m_h·(i − j) for j ≤ i, is Press
    et al.'s causal ALiBi. Queries are aligned bottom-right like
    :func:`~transformer_course.attention.causal_mask`: with N_k > N_q (cached
    keys) query i is at position i + N_k − N_q.

    Args:
        n_queries: N_q ≥ 1.
        n_heads: H; slopes from :func:`alibi_slopes`.
        n_keys: N_k ≥ 1; default N_q.
        dtype, device: of the result; dtype default ``torch.get_default_dtype()``.

    Returns:
        (H, N_q, N_k) float bias, 0 on the diagonal, negative elsewhere.
    """
    n_keys = n_queries if n_keys is None else n_keys
    expect_int(n_queries, "n_queries", least=1)
    expect_int(n_keys, "n_keys", least=1)
    slopes = alibi_slopes(n_heads, torch.float64, device)  # (H,)
    i = torch.arange(n_queries, dtype=torch.float64, device=device) + n_keys - n_queries
    j = torch.arange(n_keys, dtype=torch.float64, device=device)
    distance = (i[:, None] - j[None, :]).abs()  # (N_q, N_k): |i − j|
    bias = -slopes[:, None, None] * distance  # (H, N_q, N_k)
    return bias.to(dtype or torch.get_default_dtype())
