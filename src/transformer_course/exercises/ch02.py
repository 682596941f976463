"""Checks and quizzes for exercises/02_attention.ipynb (chapter 2, Attention).

Each check makes its own inputs, calls the learner's function (see :mod:`.core`)
and judges the outcomes with PyTorch's own functions as the reference, with a
hint for the usual mistakes: the softmax over the wrong axis, no
max-subtraction, the mask applied after the softmax, a missing 1/√d_k.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .core import (
    PROPERTY,
    Check,
    Exercise,
    Failed,
    close,
    close_at_scale,
    returned_values,
    seeded_randn,
    unseen_check,
)
from .widgets import load_quizzes

__all__ = ["EXERCISES", "QUIZZES"]


# --- Exercise 1: a stable softmax -------------------------------------------------


def _softmax_cases():
    return [
        (seeded_randn(3, 5),),
        (seeded_randn(2, 4, 6, seed=1),),
        (torch.tensor([[1.0, 2.0, 3.0]]),),
    ]


WHOLE_TENSOR_SUM = (
    "You divide by the sum of the whole tensor, so the whole tensor sums to 1: "
    "divide each row by its own sum, e.sum(dim=-1, keepdim=True)."
)
WRONG_AXIS = (
    "The softmax normalises over the wrong axis: each row (the last dimension, "
    "dim=-1) must sum to 1."
)


def _wrong_sum(x: torch.Tensor, out: torch.Tensor) -> str | None:
    """The hint for a softmax divided by the wrong sum (the whole tensor's, or
    along another axis), or None."""
    if out.shape != x.shape:
        return None
    e = torch.exp(x.double() - x.double().amax(-1, keepdim=True))
    if x.numel() > x.shape[-1] and close(out, e / e.sum(), equal_nan=True):
        return WHOLE_TENSOR_SUM
    for axis in range(x.dim() - 1):  # a row's maximum, another axis's sum
        if close(out, e / e.sum(axis, keepdim=True), equal_nan=True):
            return WRONG_AXIS
    if not torch.isfinite(out).all():
        return None
    if close(out.sum(-1), torch.ones(x.shape[:-1])):
        return None
    if x.numel() > x.shape[-1] and close(out.sum(), torch.tensor(1.0)):
        return WHOLE_TENSOR_SUM
    if _normalised_along_another_axis(x, out):
        return WRONG_AXIS
    return None


def _judge_softmax_axis(cases, outcomes):
    for (x,), out in zip(cases, returned_values(outcomes), strict=True):
        if close(out.sum(-1), torch.ones(x.shape[:-1])):
            continue
        hint = _wrong_sum(x, out)
        if hint:
            raise Failed(hint)
        raise Failed(
            "The outputs along the last dimension must be positive and sum to 1."
        )


def _judge_softmax_values(cases, outcomes):
    for (x,), out in zip(cases, returned_values(outcomes), strict=True):
        if not close(out, torch.softmax(x, dim=-1)):
            hint = _wrong_sum(x, out)
            if hint:
                raise Failed(hint)
            raise Failed(
                "Compute exp(x) / sum(exp(x)) along the last dimension; compare with torch.softmax(x, dim=-1)."
            )


def _large_cases():
    return [
        (torch.tensor([[1000.0, 999.0, 0.0]]),),
        (torch.tensor([[-1000.0, -1001.0]]),),
        (torch.tensor([[89.0, 90.0]]),),
        # rows on very different scales: one maximum for the whole tensor is not enough
        (torch.tensor([[1000.0, 999.0], [-1000.0, -1001.0]]),),
        # the maximum last, or in the middle: not the first entry of the row
        (torch.tensor([[0.0, 1000.0]]),),
        (torch.tensor([[-1000.0, 0.0, 1000.0], [5.0, 700.0, -3.0]]),),
        (1000 * seeded_randn(2, 3, 4, seed=11),),
    ]


def _normalised_along_another_axis(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether ``out`` is finite and sums to 1 along some axis but the last."""
    if x.dim() < 2 or out.shape != x.shape or not torch.isfinite(out).all():
        return False
    return any(
        close(out.sum(axis), torch.ones(out.sum(axis).shape))
        for axis in range(x.dim() - 1)
    ) and not close(out.sum(-1), torch.ones(x.shape[:-1]))


def _with_a_maximum_not_the_rows(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether ``out`` is a softmax stabilised with the wrong maximum: the whole
    tensor's, or one along another axis (rows far below it turn to nan); in the
    input's dtype, where the learner's rows underflow."""
    for maximum in (x.max(), *(x.amax(a, keepdim=True) for a in range(x.dim() - 1))):
        e = torch.exp(x - maximum)
        if close(out, e / e.sum(-1, keepdim=True), equal_nan=True):
            return True
    return False


def _judge_softmax_large(cases, outcomes):
    for (x,), out in zip(cases, returned_values(outcomes), strict=True):
        if close(out, torch.softmax(x, dim=-1)):
            continue
        hint = _wrong_sum(x, out)
        if hint:
            raise Failed(hint)
        plain = torch.exp(x)
        unshifted = close(out, plain / plain.sum(-1, keepdim=True), equal_nan=True)
        wrong_maximum = _with_a_maximum_not_the_rows(x, out)
        if wrong_maximum and not unshifted:
            raise Failed(
                "Subtract each row's own maximum, along the last dimension "
                "(x.max(dim=-1, keepdim=True).values): with one maximum for the whole "
                "tensor, or one along another axis, a row whose values are all far "
                "below it underflows to 0/0 = nan."
            )
        if unshifted and not wrong_maximum:
            raise Failed(
                "Large logits overflow: exp(1000) is inf and inf/inf is nan. Subtract "
                "each row's maximum before exp (x - x.max(dim=-1, keepdim=True)"
                ".values); it cancels in the ratio."
            )
        if not torch.isfinite(out).all():  # these inputs cannot tell which
            raise Failed(
                "Some rows are nan or inf: subtract each row's own maximum "
                "(x.max(dim=-1, keepdim=True).values) before exp; it cancels in "
                "the ratio."
            )
        raise Failed(
            "Compute exp(x - max) / sum(exp(x - max)) along the last dimension; "
            "compare with torch.softmax(x, dim=-1)."
        )


def _shift_cases():
    x = seeded_randn(4, 5, seed=2)
    return [(x,), (x + 50.0,)]


def _judge_softmax_shift(cases, outcomes):
    first, shifted = returned_values(outcomes)
    if not close(first, shifted):
        raise Failed(
            "Adding the same constant to every entry of a row must not change the softmax."
        )


def _random_logits(g):
    cases = []
    # one, two and three dimensions, on three scales (in a drawn order)
    dims = torch.randperm(3, generator=g).add(1).tolist()
    for scale, d in zip((1.0, 30.0, 1000.0), dims, strict=True):
        shape = torch.randint(2, 10, (d,), generator=g).tolist()
        cases.append((scale * torch.randn(*shape, generator=g),))
    # and rows of 6 to 12 entries, two to four of them
    rows, width = (
        int(torch.randint(2, 5, (), generator=g)),
        int(torch.randint(6, 13, (), generator=g)),
    )
    cases.append((30 * torch.randn(rows, width, generator=g),))
    return cases


SOFTMAX = Exercise(
    key="stable_softmax",
    function="stable_softmax",
    title="Exercise 1: a softmax that does not overflow",
    points=3,
    checks=(
        Check(
            "each row (last dimension) sums to 1",
            _softmax_cases,
            _judge_softmax_axis,
            PROPERTY,
        ),
        Check("equals torch.softmax", _softmax_cases, _judge_softmax_values),
        Check(
            "finite and right for logits of ±1000", _large_cases, _judge_softmax_large
        ),
        unseen_check("the same on unseen logits", _random_logits, _judge_softmax_large),
        Check(
            "invariant to adding a constant",
            _shift_cases,
            _judge_softmax_shift,
            PROPERTY,
        ),
    ),
    forbidden=("softmax",),
    loud=(0,),  # a softmax inside: scores past 88 as well
)

# --- Exercise 2: attention weights ------------------------------------------------


def _reference_weights(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _weights_cases():
    return [
        (seeded_randn(4, 8), seeded_randn(6, 8, seed=1)),
        (seeded_randn(2, 3, 16, seed=2), seeded_randn(2, 5, 16, seed=3)),
    ]


def _judge_weights_rows(cases, outcomes):
    for (q, k), w in zip(cases, returned_values(outcomes), strict=True):
        want = (*q.shape[:-1], k.shape[-2])
        if tuple(w.shape) != want:
            raise Failed(
                f"For q {tuple(q.shape)} and k {tuple(k.shape)} the weights have shape (..., N_q, N_k) = {want}, got {tuple(w.shape)}."
            )
        if not close(w.sum(-1), torch.ones(w.shape[:-1])):
            raise Failed(
                "Each row (one query) must sum to 1: apply the softmax over the keys, dim=-1."
            )


def _judge_weights_scale(cases, outcomes):
    for (q, k), w in zip(cases, returned_values(outcomes), strict=True):
        if close(w, _reference_weights(q, k)):
            continue
        unscaled = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        if close(w, unscaled):
            raise Failed(
                "Divide the scores q kᵀ by √d_k before the softmax (d_k = q.shape[-1])."
            )
        if close(w, torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1)):
            raise Failed("Divide by the square root of d_k, not by d_k itself.")
        if _over_the_queries(q, k, None, w):
            raise Failed(OVER_THE_QUERIES)
        raise Failed(
            "The weights should be softmax(q kᵀ / √d_k) along the last dimension."
        )


def _mask_cases():
    mask = torch.ones(4, 6, dtype=torch.bool).tril(diagonal=2)  # True = may attend
    return [(seeded_randn(4, 8, seed=4), seeded_randn(6, 8, seed=5), mask)]


OVER_THE_QUERIES = (
    "The softmax runs over the queries (dim=-2): each row, one query's weights "
    "over the keys, must sum to 1, so take it over the keys, dim=-1."
)


def _over_the_queries(q, k, mask, w) -> bool:
    """Whether ``w`` is the softmax over the queries axis (dim=-2), masked or
    not, scaled or not."""
    if q.dim() < 2 or w.shape != (*q.shape[:-1], k.shape[-2]):
        return False
    for scale in (q.shape[-1] ** 0.5, 1.0):
        scores = q @ k.transpose(-2, -1) / scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        for candidate in (scores.softmax(-2), scores.softmax(-2).nan_to_num(0.0)):
            if close(w, candidate, equal_nan=True):
                return True
    return False


def _judge_mask(cases, outcomes):
    for (q, k, *rest), w in zip(cases, returned_values(outcomes), strict=True):
        mask = rest[0] if rest else None
        if close(w, _reference_weights(q, k, mask)):
            continue
        unscaled = q @ k.transpose(-2, -1)
        if mask is not None:
            unscaled = unscaled.masked_fill(~mask, float("-inf"))
        if close(w, torch.softmax(unscaled, dim=-1)):
            raise Failed(
                f"Divide the scores by √d_k = √{q.shape[-1]} before the softmax: "
                "softmax(q kᵀ/√d_k)."
            )
        if _over_the_queries(q, k, mask, w):
            raise Failed(OVER_THE_QUERIES)
        if mask is None:
            raise Failed(
                f"For q {tuple(q.shape)} and k {tuple(k.shape)} with no mask, the "
                "weights should be softmax(q kᵀ/√d_k) over the last axis, for any "
                "number of batch dimensions (transpose the last two axes of k)."
            )
        scaled = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        inverted = torch.softmax(scaled.masked_fill(mask, float("-inf")), dim=-1)
        if close(w, inverted, equal_nan=True) or close(w, inverted.nan_to_num(0.0)):
            raise Failed(
                "Your mask is inverted: True means the query may see the key. Fill "
                "the scores where the mask is False: masked_fill(~mask, float('-inf'))."
            )
        if bool((w[..., ~mask].abs() > 1e-6).any()):
            raise Failed(
                "Masked positions (mask == False) must get weight 0: fill their scores with -inf."
            )
        if not close(w.sum(-1), torch.ones(w.shape[:-1])):
            raise Failed(
                "The mask was applied after the softmax: a row with a masked key no longer sums to 1 (rows without a mask still do). Set masked scores to -inf before the softmax."
            )
        raise Failed(
            "With a mask, the weights should be softmax(q kᵀ/√d_k with masked scores set to -inf)."
        )


def _permutation_cases():
    q, k = seeded_randn(3, 8, seed=6), seeded_randn(5, 8, seed=7)
    perm = torch.tensor([3, 0, 4, 1, 2])
    return [(q, k), (q, k[perm])]


def _judge_permutation(cases, outcomes):
    w, w_perm = returned_values(outcomes)
    perm = torch.tensor([3, 0, 4, 1, 2])
    if not close(w_perm, w[:, perm]):
        raise Failed(
            "Reordering the keys must reorder the columns of the weights in the same way, nothing else."
        )


def _huge_masked_score_cases():
    """The mask case, and the same with key 5, which queries 0-2 may not see,
    turned towards query 0 and 10⁵ long: a mask that adds −10⁴ to the scores
    lets it through (the thirteenth red team's full marks here; chapter 6's
    causal weights already gave only partial credit)."""
    ((q, k, mask),) = _mask_cases()
    loud = k.clone()
    loud[5] = 1e5 * q[0] / q[0].norm()
    return [(q, k, mask), (q, loud, mask)]


def _judge_huge_masked_score(cases, outcomes):
    w, w_loud = returned_values(outcomes)
    mask = cases[0][2]
    if not close(w, _reference_weights(*cases[0])):
        _judge_mask(cases[:1], outcomes[:1])  # wrong already: the first mistake's hint
    blind = ~mask[:, 5]  # the queries that may not see key 5
    if w.shape != mask.shape or w_loud.shape != mask.shape:
        raise Failed(f"The weights have the mask's shape {tuple(mask.shape)}.")
    if bool((w_loud[~mask].abs() > 1e-6).any()) or not close(w_loud[blind], w[blind]):
        raise Failed(
            "A masked key must get weight 0 whatever its score, even 10⁵: set "
            "masked scores to -inf (masked_fill), not to a large negative number "
            "added to them."
        )


def _random_masked(g):
    cases = []
    # unbatched, one batch dimension and two: every shape (..., N, d) must work,
    # with one (N_q, N_k) mask for every sequence (as the docstring says), and none
    for lead in ((), (int(torch.randint(1, 4, (), generator=g)),), (2, 2)):
        n_q, n_k = (int(t) for t in torch.randint(1, 10, (2,), generator=g))
        d = int(torch.randint(1 if lead else 7, 21, (), generator=g))  # d ≥ 7 once
        n_k = n_k if lead else max(n_k, 2)  # two keys at least: weights show
        mask = torch.rand(n_q, n_k, generator=g) > 0.4
        mask[:, int(torch.randint(0, n_k, (), generator=g))] = True  # no empty row
        q = torch.randn(*lead, n_q, d, generator=g)
        k = torch.randn(*lead, n_k, d, generator=g)
        cases += [(q, k, mask), (q, k)]
    return cases


WEIGHTS = Exercise(
    key="attention_weights",
    function="attention_weights",
    title="Exercise 2: attention weights",
    points=4,
    checks=(
        Check(
            "shape (..., N_q, N_k), unmasked rows sum to 1",
            _weights_cases,
            _judge_weights_rows,
            PROPERTY,
        ),
        Check("softmax(q kᵀ / √d_k)", _weights_cases, _judge_weights_scale),
        Check("the mask is applied before the softmax", _mask_cases, _judge_mask),
        unseen_check("the same on unseen inputs", _random_masked, _judge_mask),
        Check(
            "a masked key gets weight 0, whatever its score",
            _huge_masked_score_cases,
            _judge_huge_masked_score,
            PROPERTY,
        ),
        Check(
            "permuting keys permutes columns",
            _permutation_cases,
            _judge_permutation,
            PROPERTY,
        ),
    ),
    loud=(0,),  # a softmax inside: scores past 88 as well
)

# --- Exercise 3: single-head attention --------------------------------------------


def _attention_cases():
    return [
        (seeded_randn(4, 8), seeded_randn(6, 8, seed=1), seeded_randn(6, 5, seed=2)),
        (
            seeded_randn(2, 3, 16, seed=3),
            seeded_randn(2, 7, 16, seed=4),
            seeded_randn(2, 7, 4, seed=5),
        ),
    ]


def _judge_attention_shape(cases, outcomes):
    for (q, k, v), out in zip(cases, returned_values(outcomes), strict=True):
        want = (*q.shape[:-1], v.shape[-1])
        if tuple(out.shape) == (*q.shape[:-1], k.shape[-2]) and want != tuple(
            out.shape
        ):
            raise Failed(
                "You returned the weights (..., N_q, N_k): multiply them by v to get the outputs."
            )
        if tuple(out.shape) != want:
            raise Failed(
                f"The output has shape (..., N_q, d_v) = {want}, got {tuple(out.shape)}."
            )


def _judge_attention_values(cases, outcomes):
    for (q, k, v), out in zip(cases, returned_values(outcomes), strict=True):
        # float64, within float32's error at the output's scale: the thirteenth
        # red team saw an honest answer fail 2 gradings in 8,241 on loud twins
        want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
        if close_at_scale(out, want):
            continue
        scores = q @ k.transpose(-2, -1)
        if close(out, torch.softmax(scores, dim=-1) @ v):
            raise Failed("Divide the scores by √d_k before the softmax.")
        if v.shape[-1] != q.shape[-1] and close(
            out, torch.softmax(scores / v.shape[-1] ** 0.5, dim=-1) @ v
        ):
            raise Failed(
                f"Divide by √d_k, the width of q and k (here √{q.shape[-1]}), not by "
                f"√d_v, the width of v (√{v.shape[-1]})."
            )
        for scale in (q.shape[-1] ** 0.5, 1.0):
            if close(out, torch.softmax(scores / scale, dim=-2) @ v, equal_nan=True):
                raise Failed(OVER_THE_QUERIES)
        raise Failed(
            "The output should be softmax(q kᵀ/√d_k) v; compare with F.scaled_dot_product_attention(q, k, v)."
        )


def _attention_perm_cases():
    q, k, v = (
        seeded_randn(3, 8, seed=8),
        seeded_randn(5, 8, seed=9),
        seeded_randn(5, 4, seed=10),
    )
    perm = torch.tensor([4, 2, 0, 3, 1])
    return [(q, k, v), (q, k[perm], v[perm]), (q[[2, 0, 1]], k, v)]


def _judge_attention_perm(cases, outcomes):
    out, out_kv, out_q = returned_values(outcomes)
    if not close(out_kv, out):
        raise Failed(
            "Reordering keys and values together must not change the output: attention treats them as a set."
        )
    if not close(out_q, out[[2, 0, 1]]):
        raise Failed(
            "Reordering the queries must reorder the output rows in the same way."
        )


def _random_qkv(g):
    cases = []
    for batch in ((), (2,), (2, 3)):
        n_q, n_k, d_v = (int(t) for t in torch.randint(1, 10, (3,), generator=g))
        d = int(torch.randint(1 if batch else 7, 21, (), generator=g))  # d ≥ 7 once
        n_k = n_k if batch else max(n_k, 2)  # two keys at least: weights show
        cases.append(
            (
                torch.randn(*batch, n_q, d, generator=g),
                torch.randn(*batch, n_k, d, generator=g),
                torch.randn(*batch, n_k, d_v, generator=g),
            )
        )
    return cases


ATTENTION = Exercise(
    key="attention",
    function="attention",
    title="Exercise 3: single-head attention",
    points=3,
    checks=(
        Check(
            "shape (..., N_q, d_v)", _attention_cases, _judge_attention_shape, PROPERTY
        ),
        Check(
            "equals F.scaled_dot_product_attention",
            _attention_cases,
            _judge_attention_values,
        ),
        unseen_check("the same on unseen inputs", _random_qkv, _judge_attention_values),
        Check(
            "keys/values are a set; queries are equivariant",
            _attention_perm_cases,
            _judge_attention_perm,
            PROPERTY,
        ),
    ),
    forbidden=("scaled_dot_product_attention",),
    loud=(0,),  # a softmax inside: scores past 88 as well
)

# --- Exercise 4: an additive score ------------------------------------------------


def _additive_cases():
    g = [
        seeded_randn(*s, seed=i)
        for i, s in enumerate([(4,), (6, 3), (5, 4), (5, 3), (5,)], start=20)
    ]
    q, k, W_q, W_k, w = g
    return [(q, k, W_q, W_k, w), (2 * q, k, W_q, W_k, w)]


def _reference_additive(q, k, W_q, W_k, w):
    return torch.tanh(W_q @ q + k @ W_k.T) @ w  # (N,)


def _judge_additive(cases, outcomes):
    for (q, k, W_q, W_k, w), s in zip(cases, returned_values(outcomes), strict=True):
        if tuple(s.shape) != (k.shape[0],):
            raise Failed(
                f"Return one score per key: shape (N,) = ({k.shape[0]},), got {tuple(s.shape)}."
            )
        if close(s, _reference_additive(q, k, W_q, W_k, w)):
            continue
        if close(s, (W_q @ q + k @ W_k.T) @ w):
            raise Failed("Apply tanh to W_q q + W_k k_i before the dot product with w.")
        raise Failed(
            "s_i = w · tanh(W_q q + W_k k_i): W_q acts on the query, W_k on each key (a row of k)."
        )


def _bounded_cases():
    q, k, W_q, W_k, w = _additive_cases()[0]
    return [(100 * q, 100 * k, W_q, W_k, w)]


def _judge_bounded(cases, outcomes):
    (s,) = returned_values(outcomes)
    w = cases[0][4]
    if not torch.isfinite(s).all() or s.abs().max() > w.abs().sum() + 1e-4:
        raise Failed(
            "Additive scores are bounded by the sum of |w|, because tanh is between -1 and 1."
        )


def _random_additive(g):
    cases = []
    for _ in range(2):
        d_q, d_k, h, n = (int(t) for t in torch.randint(1, 7, (4,), generator=g))
        shapes = [(d_q,), (n, d_k), (h, d_q), (h, d_k), (h,)]
        cases.append(tuple(torch.randn(*s, generator=g) for s in shapes))
    return cases


ADDITIVE = Exercise(
    key="additive_score",
    function="additive_score",
    title="Exercise 4: an additive attention score",
    points=2,
    checks=(
        Check("s_i = w · tanh(W_q q + W_k k_i)", _additive_cases, _judge_additive),
        unseen_check("the same on unseen inputs", _random_additive, _judge_additive),
        Check("bounded by the sum of |w|", _bounded_cases, _judge_bounded, PROPERTY),
    ),
)

EXERCISES: dict[str, Exercise] = {
    e.key: e for e in (SOFTMAX, WEIGHTS, ATTENTION, ADDITIVE)
}

QUIZZES = load_quizzes("ch02")  # quizzes/ch02.toml
