"""Chapter 2, Attention: weighted averages whose weights the data chooses.

Row convention (see the Notation page): queries ``q`` (..., N_q, d), keys ``k``
(..., N_k, d), values ``v`` (..., N_k, d_v). The attention weights

    A = softmax(q kᵀ · scale + mask)        (..., N_q, N_k), each row sums to 1

average the values: ``out = A v`` (lecture notes §9.3; Bishop: X̃ = Softmax(QKᵀ/√D)V;
Turner eq. 2 in columns). ``scale`` defaults to 1/√d.

Masks follow ``torch.nn.functional.scaled_dot_product_attention``: a boolean
mask is True where a query may attend to a key; a floating-point mask is added
to the scores (use ``-inf`` to forbid); any other dtype is an error.
``is_causal=True`` forbids the keys after each query, aligned bottom-right (see
:func:`causal_mask`): with N_q = N_k query n sees keys 0..n, and with cached
keys (N_k > N_q) the last query sees every key. A mask and ``is_causal`` given
together combine: a key is allowed only if both allow it.

A query that may attend to no key at all (a fully masked row, common with
padding) gets zero weights and a zero output, with finite gradients, as in
PyTorch's kernel; the plain formula would give 0/0 = NaN.

The teaching implementations here are explicit (matmul, softmax, mask); tests
prove they equal PyTorch's fused kernel in float64, outputs and gradients.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .shapes import ShapeError, expect_positive_int, expect_shape

__all__ = [
    "AdditiveAttention",
    "SelfAttention",
    "additive_scores",
    "attention_mask",
    "attention_weights",
    "causal_mask",
    "longest_path",
    "masked_softmax",
    "padding_mask",
    "path_lengths",
    "receptive_field",
    "scaled_dot_product_attention",
    "softmax",
]


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax: ``exp(x - max) / sum(exp(x - max))`` along ``dim``.

    Subtracting the maximum changes nothing mathematically (it cancels between
    numerator and denominator) but keeps ``exp`` from overflowing: ``exp(1000)``
    is ``inf`` in float32 and float64, ``exp(1000 - 1000)`` is 1. A row that is
    entirely ``-inf`` gives NaN, as ``torch.softmax`` does (attention uses
    :func:`masked_softmax`, which gives zeros there). Any shape.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    shifted = (
        x - x.amax(dim=dim, keepdim=True).detach()
    )  # the shift's gradient cancels anyway
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def masked_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """:func:`softmax`, except that a row with nothing allowed (all ``-inf``) gives zeros.

    Such a row is a query that may attend to no key, e.g. a padding position.
    The plain formula gives 0/0 = NaN there, and NaN gradients that spread into
    every query and key through the matrix products. PyTorch's fused kernel
    (2.13, the version the course is tested with) returns zeros with finite
    gradients, and so does this. Any shape.
    """
    row_max = scores.amax(dim=dim, keepdim=True).detach()  # the shift cancels
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)  # exp(-inf - 0) = 0
    exps = (scores - row_max).exp()
    total = exps.sum(dim=dim, keepdim=True)  # ≥ 1 (the max gives exp(0)), or 0
    return exps / total.masked_fill(total == 0, 1.0)  # a fully masked row: 0 / 1


def causal_mask(n_queries: int, n_keys: int | None = None, device=None) -> torch.Tensor:
    """Boolean (N_q, N_k) mask, True where query n may see key m: m ≤ n + N_k − N_q.

    Aligned bottom-right, as ``torch.nn.attention.bias.causal_lower_right``: the
    N_q queries are the last N_q positions of the N_k keys, so the last query
    sees every key. With N_q = N_k it is the lower triangle (query n sees keys
    0..n); with N_k > N_q (keys of earlier tokens kept in a cache) each new query
    also sees all the cached keys; with N_q > N_k the first N_q − N_k queries see
    no key. (``F.scaled_dot_product_attention(is_causal=True)`` aligns top-left
    instead, which agrees only when N_q = N_k.)
    """
    n_keys = n_queries if n_keys is None else n_keys
    expect_positive_int(n_queries, "n_queries")
    expect_positive_int(n_keys, "n_keys")
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return allowed.tril(diagonal=n_keys - n_queries)  # (N_q, N_k)


def padding_mask(lengths, n_keys: int, device=None) -> torch.Tensor:
    """Boolean (B, 1, N_k) mask, True at the real tokens: key m of sequence b is real if m < lengths[b].

    Sequences of different lengths are padded to a common N_k to make a batch;
    the padding keys must get no weight. The mask broadcasts against scores
    (B, N_q, N_k); for heads (B, H, N_q, N_k) use ``mask.unsqueeze(1)``, shape
    (B, 1, 1, N_k). A sequence of length 0 masks every key: its queries are
    fully masked rows and output zeros (chapter 2, masking).

    Args:
        lengths: B ints (a list or a 1-D integer tensor), each in 0..N_k.
        n_keys: N_k, the padded length.
    """
    expect_positive_int(n_keys, "n_keys")
    lengths = torch.as_tensor(lengths, device=device)
    if (
        lengths.ndim != 1
        or lengths.dtype.is_floating_point
        or lengths.dtype == torch.bool
    ):
        raise ValueError(
            f"lengths: expected B integers (a 1-D integer tensor or list), got "
            f"dtype {lengths.dtype} and shape {tuple(lengths.shape)}"
        )
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > n_keys):
        raise ValueError(
            f"lengths: expected values in 0..{n_keys} (n_keys), got {lengths.tolist()}"
        )
    positions = torch.arange(n_keys, device=lengths.device)  # (N_k,)
    return (positions < lengths[:, None]).unsqueeze(1)  # (B, 1, N_k)


def attention_mask(
    scores_shape: tuple[int, ...],
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor | None:
    """The one mask attention applies to scores of shape (..., N_q, N_k).

    Checks ``mask`` and combines it with :func:`causal_mask` when ``is_causal``:
    two boolean masks by logical AND; a floating-point mask gets ``-inf`` above
    the causal diagonal. Both paths of
    :class:`~transformer_course.multihead.MultiHeadAttention` call this, so they
    accept and reject the same masks.

    Args:
        scores_shape: (..., N_q, N_k), the shape of the scores to mask.
        mask: None, boolean (True = may attend) or floating point (added to the
            scores), broadcastable to ``scores_shape``.
        is_causal: also forbid the keys after each query.
        dtype: the scores' dtype; a floating-point mask is converted to it.
        device: where to build the causal mask.

    Returns:
        None if nothing is masked, else a boolean or ``dtype`` mask broadcastable
        to ``scores_shape``.

    Raises:
        TypeError: ``mask`` is not a tensor, or neither boolean nor floating point
            (an integer mask could mean 0/1 "may attend" or a bias).
        ShapeError: ``mask`` does not broadcast to ``scores_shape``.
    """
    scores_shape = tuple(scores_shape)
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"mask: expected a boolean or floating-point torch.Tensor "
                f"broadcastable to (..., N_q, N_k) = {scores_shape}, "
                f"got {type(mask).__name__}"
            )
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            raise TypeError(
                f"mask: expected dtype torch.bool (True = may attend) or a "
                f"floating-point dtype (added to the scores), got {mask.dtype}; "
                f"use mask.bool() for a 0/1 mask or mask.to(q.dtype) for a bias"
            )
        try:
            fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ShapeError(
                f"mask: expected a shape broadcastable to the scores "
                f"(..., N_q, N_k) = {scores_shape}, got {tuple(mask.shape)}"
            )
        if mask.dtype != torch.bool:
            mask = mask.to(dtype)
    if not is_causal:
        return mask
    causal = causal_mask(*scores_shape[-2:], device=device)  # (N_q, N_k)
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal  # allowed by both
    return torch.where(causal, mask, float("-inf"))  # the bias, -inf above


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A checked mask (see :func:`attention_mask`) as something to add to the scores."""
    if mask.dtype == torch.bool:
        return torch.zeros((), dtype=dtype, device=mask.device).masked_fill(
            ~mask, float("-inf")
        )
    return mask.to(dtype)


def _expect_tokens(tensor: torch.Tensor, name: str, what: str) -> None:
    """A ValueError unless ``tensor`` (..., N, width) has at least one token."""
    if tensor.shape[-2] == 0:
        raise ValueError(
            f"{name}: expected at least one {what} (a sequence of length ≥ 1), "
            f"got shape {tuple(tensor.shape)}"
        )


def _expect_queries_and_keys(q: torch.Tensor, k: torch.Tensor) -> dict[str, int]:
    """Check q (..., N_q, d) against k (..., N_k, d); return {"N", "M", "d"}."""
    dims = expect_shape(q, "... N d", "q")
    dims = expect_shape(k, "... M d", "k", known={"d": dims["d"]})
    _expect_tokens(q, "q", "query")
    _expect_tokens(k, "k", "key")
    if not q.dtype.is_floating_point or q.dtype != k.dtype:
        raise TypeError(
            f"q, k: expected the same floating-point dtype, got {q.dtype} and {k.dtype}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ShapeError(
            f"q, k: expected batch dimensions that broadcast, got q "
            f"{tuple(q.shape)} and k {tuple(k.shape)}"
        ) from None
    return dims


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """``softmax(q kᵀ · scale + mask)``: how much each query takes from each key.

    Args:
        q: (..., N_q, d) queries, N_q ≥ 1.
        k: (..., N_k, d) keys, N_k ≥ 1.
        mask: boolean (True = may attend) or floating point (added to the
            scores), broadcastable to (..., N_q, N_k).
        scale: multiplies the scores; default 1/√d.
        is_causal: forbid the keys after each query (:func:`causal_mask`,
            aligned bottom-right); combined with ``mask`` if both are given.

    Returns:
        (..., N_q, N_k) weights; each row sums to 1, except the row of a query
        allowed no key, which is zero.
    """
    dims = _expect_queries_and_keys(q, k)
    scale = 1.0 / math.sqrt(dims["d"]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., N_q, N_k)
    mask = attention_mask(scores.shape, mask, is_causal, scores.dtype, scores.device)
    if mask is not None:
        scores = scores + _additive(mask, scores.dtype)
    return masked_softmax(scores, dim=-1)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = False,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q kᵀ/√d + mask) v``, written out (the teaching path).

    Args:
        q: (..., N_q, d); k: (..., N_k, d); v: (..., N_k, d_v).
        mask, scale, is_causal: as in :func:`attention_weights`.
        return_weights: also return the (..., N_q, N_k) weights.

    Returns:
        (..., N_q, d_v), and the weights if asked for. Equal to
        ``torch.nn.functional.scaled_dot_product_attention`` with the same
        arguments (``attn_mask=mask``) where N_q = N_k; for N_q ≠ N_k,
        ``is_causal`` here matches ``attn_mask=causal_lower_right(N_q, N_k)``
        there. A query allowed no key outputs zeros.
    """
    weights = attention_weights(q, k, mask=mask, scale=scale, is_causal=is_causal)
    expect_shape(v, "... M e", "v", M=k.shape[-2])  # q and k: checked just above
    if v.dtype != q.dtype:
        raise TypeError(f"v: expected dtype {q.dtype} like q and k, got {v.dtype}")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ShapeError(
            f"q, k, v: expected batch dimensions that broadcast, got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        ) from None
    out = weights @ v  # (..., N_q, N_k) @ (..., N_k, d_v) -> (..., N_q, d_v)
    return (out, weights) if return_weights else out


def additive_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w: torch.Tensor,
) -> torch.Tensor:
    """Additive (Bahdanau) scores ``s[n, m] = wᵀ tanh(W_q q_n + W_k k_m)``.

    Args:
        q: (..., N_q, d_q); k: (..., N_k, d_k).
        W_q: (h, d_q); W_k: (h, d_k); w: (h,).

    Returns:
        (..., N_q, N_k) scores. Costs O(N_q · N_k · h) in time and memory, against
        O(N_q · N_k · d) time and O(N_q · N_k) memory for dot-product scores.
    """
    expect_shape(w, "h", "w")
    expect_shape(W_q, "h d", "W_q", h=w.shape[0])
    expect_shape(W_k, "h e", "W_k", h=w.shape[0])
    expect_shape(q, "... N d", "q", d=W_q.shape[1])
    expect_shape(k, "... M e", "k", e=W_k.shape[1])
    q_proj = q @ W_q.T  # (..., N_q, h)
    k_proj = k @ W_k.T  # (..., N_k, h)
    hidden = torch.tanh(
        q_proj.unsqueeze(-2) + k_proj.unsqueeze(-3)
    )  # (..., N_q, N_k, h)
    return hidden @ w  # (..., N_q, N_k)


class AdditiveAttention(nn.Module):
    """Additive attention: scores from a one-hidden-layer network, then softmax and average.

    ``forward(q, k, v, mask=None)`` takes q (..., N_q, d_query), k (..., N_k,
    d_key), v (..., N_k, d_v) and a mask as in :func:`attention_weights`; it
    returns ``(out, weights)`` with out (..., N_q, d_v) and weights (..., N_q, N_k).
    """

    def __init__(self, d_query: int, d_key: int, d_hidden: int):
        super().__init__()
        self.query_proj = nn.Linear(d_query, d_hidden, bias=False)  # W_q
        self.key_proj = nn.Linear(d_key, d_hidden, bias=False)  # W_k
        self.score = nn.Linear(d_hidden, 1, bias=False)  # w

    def forward(self, q, k, v, mask=None):
        scores = additive_scores(
            q, k, self.query_proj.weight, self.key_proj.weight, self.score.weight[0]
        )  # (..., N_q, N_k)
        _expect_tokens(q, "q", "query")
        _expect_tokens(k, "k", "key")
        expect_shape(v, "... M e", "v", M=k.shape[-2])
        mask = attention_mask(scores.shape, mask, dtype=scores.dtype)
        if mask is not None:
            scores = scores + _additive(mask, scores.dtype)
        weights = masked_softmax(scores, dim=-1)  # (..., N_q, N_k)
        return weights @ v, weights


class SelfAttention(nn.Module):
    """Single-head self-attention: queries, keys and values all come from x.

    ``q = x W_q``, ``k = x W_k``, ``v = x W_v`` (Turner: U_q, U_k as separate maps,
    eq. 3), then ``softmax(q kᵀ/√d_k) v``.

    Args:
        d_model: D, the width of the input tokens.
        d_k: width of queries and keys.
        d_v: width of values (and of the output).
        bias: add biases to the three projections.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int, bias: bool = False):
        super().__init__()
        self.d_model = d_model
        self.query_proj = nn.Linear(d_model, d_k, bias=bias)
        self.key_proj = nn.Linear(d_model, d_k, bias=bias)
        self.value_proj = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, x, mask=None, is_causal=False, need_weights=False):
        """x (..., N, D) -> (..., N, d_v); with ``need_weights`` also (..., N, N)."""
        expect_shape(x, "... N D", "x", D=self.d_model)
        _expect_tokens(x, "x", "token")
        q, k, v = (
            self.query_proj(x),
            self.key_proj(x),
            self.value_proj(x),
        )  # (..., N, d_k|d_v)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask=mask, is_causal=is_causal, return_weights=True
        )
        return (out, weights) if need_weights else out


def _expect_connectivity(connectivity: torch.Tensor, name: str) -> int:
    """Check a boolean (N, N) connectivity; return N."""
    if not isinstance(connectivity, torch.Tensor) or connectivity.dtype != torch.bool:
        raise TypeError(
            f"{name}: expected a boolean torch.Tensor (N, N), True where output n "
            f"reads input m, got {getattr(connectivity, 'dtype', type(connectivity))}"
        )
    dims = expect_shape(connectivity, "N M", name)
    if dims["N"] != dims["M"]:
        raise ShapeError(
            f"{name}: expected a square (N, N) matrix, got {tuple(connectivity.shape)}"
        )
    return dims["N"]


def _compose(later: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """Boolean matrix product: output n reaches input m through some middle m'."""
    return (later.to(torch.float32) @ earlier.to(torch.float32)) > 0  # (N, N)


def receptive_field(*layers: torch.Tensor) -> torch.Tensor:
    """Which inputs each output can depend on after the given layers, in order.

    Each layer is a boolean (N, N) connectivity, True at [n, m] where output n
    of that layer reads input m: the convention of attention masks (full for
    self-attention, a band for a convolution, a diagonal pair for one step of a
    recurrence). Stacking layers composes them as boolean matrix products
    (chapter 2, cost). Returns (N, N) bool.
    """
    if not layers:
        raise ValueError("receptive_field: expected at least one layer")
    n = _expect_connectivity(layers[0], "layers[0]")
    reach = layers[0]
    for i, layer in enumerate(layers[1:], start=1):
        if _expect_connectivity(layer, f"layers[{i}]") != n:
            raise ShapeError(
                f"layers[{i}]: expected ({n}, {n}) like layers[0], got "
                f"{tuple(layer.shape)}"
            )
        reach = _compose(layer, reach)
    return reach


def path_lengths(connectivity: torch.Tensor) -> torch.Tensor:
    """The fewest layers through which input m can reach output n, every layer alike.

    Breadth-first search written as boolean matrix powers: after L layers the
    inputs reachable from output n are row n of ``connectivity`` to the power L
    (:func:`receptive_field`); the path length is the first L at which m
    appears. A graph on N positions needs at most N steps, so L runs to N.

    Args:
        connectivity: (N, N) bool, True where output n reads input m.

    Returns:
        (N, N) int64: the path length from input m to output n, or -1 where no
        stack of such layers ever carries m to n (a causal layer never carries
        information backwards).
    """
    n = _expect_connectivity(connectivity, "connectivity")
    lengths = torch.full((n, n), -1, dtype=torch.int64, device=connectivity.device)
    reach = connectivity
    for layers in range(1, n + 1):
        lengths[reach & (lengths < 0)] = layers  # reached for the first time
        reach = _compose(connectivity, reach)
    return lengths


def longest_path(connectivity: torch.Tensor) -> int:
    """The longest of the shortest paths between two different positions, in layers.

    The maximum of :func:`path_lengths` over pairs n ≠ m that are connected at
    all: 1 for self-attention, ⌈(N − 1)/r⌉ for a convolution of radius r (kernel
    2r + 1), N − 1 for a recurrence (chapter 2, cost). 0 if no pair is connected.
    """
    lengths = path_lengths(connectivity)  # (N, N)
    off_diagonal = ~torch.eye(len(lengths), dtype=torch.bool, device=lengths.device)
    return int(lengths[off_diagonal].max().clamp_min(0)) if len(lengths) > 1 else 0
