"""Checks and quizzes for exercises/06_gpt.ipynb (chapter 6, Causal language modelling).

The references are the course's own :func:`~transformer_course.attention.causal_mask`
and :func:`~transformer_course.attention.masked_softmax` (the masked attention
weights), the shifted cross-entropy of :func:`~transformer_course.data.window_batches`'
inputs and targets, the distribution :func:`~transformer_course.gpt.sample_next`
samples from, and :class:`~transformer_course.kv_cache.LayerCache` with
:func:`~transformer_course.attention.scaled_dot_product_attention` (causal,
aligned bottom-right), in float64. The hints name the usual mistakes: the mask
below the diagonal (the future visible), no mask, zeros instead of −∞, the mask
applied after the softmax, the diagonal excluded or one step of the future
included, the softmax over the queries; no shift, the shift the wrong way, the
batch rows run together, log₂, a sum, raw logits, probabilities without the log,
the sign; the temperature multiplied or ignored, top-k after the softmax, k ± 1,
zeros instead of −∞, top_k=None unhandled; the new keys written at the start of
the cache, the whole buffer attended to, the causal mask aligned top-left, no
mask, the cache ignored, no 1/√d, the caches returned cut short.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F

from ..attention import causal_mask, masked_softmax, scaled_dot_product_attention
from ..kv_cache import LayerCache
from .core import (
    PROPERTY,
    Check,
    Exercise,
    Failed,
    close,
    close_at_scale,
    each_value,
    returned_values,
    seeded_randn,
    unseen_check,
)
from .widgets import load_quizzes

__all__ = ["EXERCISES", "NOTES_SCORES", "QUIZZES", "next_token_distribution"]

# a NaN where the reference has one counts as equal (masked rows)
_close = partial(close, equal_nan=True)


NEG_INF = float("-inf")

#: The handwritten notes' scores for "This is a dog" (row n: query n, column m: key m).
NOTES_SCORES = torch.tensor(
    [
        [0.7, 0.1, 0.1, 0.1],
        [0.1, 0.6, 0.2, 0.1],
        [0.1, 0.3, 0.6, 0.1],
        [0.1, 0.3, 0.3, 0.3],
    ]
)


# --- Exercise 1: the causal mask -----------------------------------------------------


def _masked(scores, allowed, fill=NEG_INF, dim=-1):
    """softmax over ``dim`` of the scores with the positions not ``allowed`` set to
    ``fill`` (float64; a row with nothing allowed gives NaN, as torch.softmax)."""
    return torch.softmax(scores.double().masked_fill(~allowed, fill), dim=dim)


def causal_weights(scores: torch.Tensor) -> torch.Tensor:
    """The reference: scores (..., N, N) -> causal attention weights, float64."""
    N = scores.shape[-1]
    allowed = causal_mask(N, N)  # (N, N): key m ≤ query n
    return masked_softmax(scores.double().masked_fill(~allowed, NEG_INF))


def _mask_cases():
    s = 3 * seeded_randn(2, 3, 5, 5, seed=1)
    s[..., 0, 1:] += 4.0  # the future scores high: every mistake shows
    return [
        (NOTES_SCORES.clone(),),
        (s,),
        (2 * seeded_randn(6, 6, seed=2),),
        (seeded_randn(1, 1, 1, seed=3),),  # one token: it attends to itself only
        # scores of exactly 0 below the diagonal: a mask made from the scores
        # (scores.tril() == 0) would hide them
        (torch.zeros(2, 5, 5),),
        (
            torch.randint(
                -2, 3, (6, 6), generator=torch.Generator().manual_seed(6)
            ).float(),
        ),
    ]


def _judge_mask(cases, outcomes):
    # a single token (N = 1) cannot tell "the diagonal masked" from "the past
    # masked" (both leave it nothing to see): diagnose the longer cases first
    single = []
    for (scores,), got in each_value(cases, outcomes):
        if scores.shape[-1] == 1:
            single.append((scores, got))
        else:
            _diagnose_mask(scores, got)
    for scores, got in single:
        _diagnose_mask(scores, got)


def _diagnose_mask(scores, got):
    """Nothing if ``got`` is right for ``scores``, else Failed with the hint."""
    want = causal_weights(scores)
    if not _close(got, want):
        if got.shape != scores.shape:
            raise Failed(
                f"The weights have the scores' shape (..., N, N) = "
                f"{tuple(scores.shape)}, got {tuple(got.shape)}."
            )
        N = scores.shape[-1]
        ones = torch.ones(N, N, dtype=torch.bool)
        lower = ones.tril()
        if any(
            _close(got, candidate) or _close(got, candidate.nan_to_num(0.0))
            for candidate in (
                _masked(scores, ones.triu()),
                _masked(
                    scores, ones.triu(1)
                ),  # masked_fill(tril(...)): the diagonal too
            )
        ):
            raise Failed(
                "You masked the past and kept the future: query n (row n) may see "
                "keys 0..n, the lower triangle with its diagonal. Set the scores "
                "above the diagonal (key n′ > query n) to −∞: torch.ones(N, N, "
                "dtype=torch.bool).tril() marks what is allowed."
            )
        if _close(got, _masked(scores, ones)):
            raise Failed(
                "Apply the causal mask: without it every token sees the tokens "
                "after it, the very words it must predict. Set the scores above "
                "the diagonal to −∞ before the softmax."
            )
        if _close(got, _masked(scores, lower, fill=0.0)):
            raise Failed(
                "Fill the masked scores with −∞, not 0: a score of 0 still gets "
                "weight e⁰ = 1 in the softmax, so the future stays visible."
            )
        if _close(got, torch.softmax(scores.double(), -1) * lower):
            raise Failed(
                "Mask before the softmax: zeroing the future after it leaves rows "
                "that no longer sum to 1. Set the scores above the diagonal to −∞, "
                "then take the softmax."
            )
        if _close(got, _masked(scores, ones.tril(-1))) or _close(
            got, _masked(scores, ones.tril(-1)).nan_to_num(0.0)
        ):
            raise Failed(
                "Keep the diagonal: token n attends to itself too (keys 0..n, "
                "tril() with diagonal=0). Without it the first token sees nothing "
                "and its row is 0/0."
            )
        if _close(got, _masked(scores, ones.tril(1))):
            raise Failed(
                "Off by one: query n sees keys 0..n, not the key n + 1 as well "
                "(tril() with diagonal=0, not 1)."
            )
        if _close(got, _masked(scores, lower, dim=-2)):
            raise Failed(
                "Take the softmax over the keys, the last dimension (dim=-1): each "
                "row (one query) must sum to 1."
            )
        if (scores == 0).any() and _close(got, _masked(scores, scores.tril() != 0)):
            raise Failed(
                "Build the mask from the positions (torch.ones(N, N, dtype=torch."
                "bool).tril()), not from the scores' values: a score of exactly 0 "
                "below the diagonal is a real score and must keep its weight."
            )
        multiplied = torch.triu(torch.ones(N, N, dtype=torch.float64), 1) * NEG_INF
        if _close(got, torch.softmax(scores.double() + multiplied, -1)):
            raise Failed(
                "Your weights hold NaN. A mask made by multiplying, such as "
                "torch.triu(torch.ones(N, N), 1) * float('-inf'), puts 0·(−∞) = NaN "
                "on and below the diagonal: fill with masked_fill(~allowed, "
                "float('-inf')) or torch.where instead."
            )
        raise Failed(
            "Set the scores above the diagonal (key n′ > query n) to −∞, then take "
            "the softmax over the last dimension; compare with the notes' matrix: "
            "the row of 'is' (row 1, counting from 0) is [0.378, 0.622, 0, 0]."
        )


def _random_mask(g):
    cases = []
    for _ in range(3):
        lead = torch.randint(
            1, 4, (int(torch.randint(0, 3, (), generator=g)),), generator=g
        )
        N = int(torch.randint(1, 9, (), generator=g))
        scale = 1 + 3 * torch.rand((), generator=g)
        scores = scale * torch.randn(*lead.tolist(), N, N, generator=g)
        scores[torch.rand(scores.shape, generator=g) < 0.2] = 0.0  # exact zeros
        cases.append((scores,))
    N = int(torch.randint(17, 49, (), generator=g))  # longer than any fixed case
    cases.append((2 * torch.randn(N, N, generator=g),))
    return cases


def _future_cases():
    s = seeded_randn(2, 7, 7, seed=4)
    changed = s.clone()
    future = torch.ones(7, 7, dtype=torch.bool).triu(1)
    changed[:, future] = 10 * seeded_randn(2, int(future.sum()), seed=5)
    # and future scores of 10⁵: a mask that adds −10⁴ lets them through
    loud = s.clone()
    loud[:, future] = 1e5 + 10 * seeded_randn(2, int(future.sum()), seed=6)
    return [(s,), (changed,), (loud,)]


def _judge_future(cases, outcomes):
    first, changed, loud = returned_values(outcomes)
    if first.shape != cases[0][0].shape or {changed.shape, loud.shape} != {first.shape}:
        raise Failed("The weights have the scores' shape (..., N, N).")
    N = first.shape[-1]
    future = torch.ones(N, N, dtype=torch.bool).triu(1)
    if (
        first[..., future].abs().max() > 1e-7
        or not _close(first, changed)
        or not _close(first, loud)
    ):
        raise Failed(
            "A query must give zero weight to every later key, whatever its score: "
            "changing the scores above the diagonal must change nothing."
        )


def _judge_rows(cases, outcomes):
    for (scores,), got in each_value(cases, outcomes):
        if got.shape != scores.shape:
            raise Failed("The weights have the scores' shape (..., N, N).")
        sums = got.double().sum(-1)
        if not (close(sums, torch.ones_like(sums), atol=1e-5) and (got >= 0).all()):
            raise Failed(
                "Every row (one query) holds non-negative weights that sum to 1: "
                "the softmax over the keys it may see."
            )


CAUSAL_WEIGHTS = Exercise(
    "causal_attention_weights",
    "causal_attention_weights",
    "Exercise 1: causal attention weights",
    3,
    (
        Check(
            "equals the masked softmax, the notes' matrix included",
            _mask_cases,
            _judge_mask,
        ),
        unseen_check("the same on unseen inputs", _random_mask, _judge_mask),
        Check("each row sums to 1", _mask_cases, _judge_rows, PROPERTY),
        Check(
            "zero weight on the future, whatever its scores",
            _future_cases,
            _judge_future,
            PROPERTY,
        ),
    ),
    forbidden=("scaled_dot_product_attention",),
    loud=(0,),  # a softmax inside: scores past 88 as well
    overflow_hint=(
        "Your function returned nan or inf for finite scores that reach a few "
        "hundred. Writing exp yourself, it overflows past 88 in float32 (inf / inf "
        "= nan) unless you subtract each row's maximum first, as chapter 2's "
        "stable softmax does. Masking the weights after the softmax and dividing "
        "each row by its sum fails there too: a large future score takes all the "
        "weight, the past's weights underflow to 0, and the row is 0/0. Set the "
        "scores above the diagonal to −∞, then take a stable softmax."
    ),
)

# --- Exercise 2: the next-token loss -------------------------------------------------


def _ce(logits, targets):
    """Mean cross-entropy in nats, logits (..., V) and targets (...), float64."""
    V = logits.shape[-1]
    return F.cross_entropy(logits.double().reshape(-1, V), targets.reshape(-1))


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The reference: row n of logits (B, N, V) predicts ids[:, n + 1]."""
    return _ce(logits[:, :-1], ids[:, 1:])


def _scalar(outcome) -> torch.Tensor:
    """The one number the learner returned, as a 0-dim float64 tensor."""
    if (
        not outcome.raised
        and isinstance(outcome.value, int | float)
        and not isinstance(outcome.value, bool)
    ):
        return torch.tensor(float(outcome.value), dtype=torch.float64)
    (value,) = returned_values([outcome])
    if value.numel() != 1:
        raise Failed(
            f"Return one number, the mean over every prediction (a 0-dim tensor), "
            f"not a tensor of shape {tuple(value.shape)}."
        )
    return value.double().reshape(())


def _ids(B, N, V, seed):
    return torch.randint(V, (B, N), generator=torch.Generator().manual_seed(seed))


def _loss_cases():
    return [
        (2 * seeded_randn(2, 5, 7, seed=10), _ids(2, 5, 7, seed=11)),
        (3 * seeded_randn(3, 4, 65, seed=12), _ids(3, 4, 65, seed=13)),
        (seeded_randn(1, 2, 3, seed=14), _ids(1, 2, 3, seed=15)),
    ]


def _judge_loss(cases, outcomes):
    for (logits, ids), outcome in zip(cases, outcomes, strict=True):
        got = _scalar(outcome)
        want = next_token_loss(logits, ids)
        if _close(got, want):
            continue
        B, N, V = logits.shape
        x = logits.double()
        log_probs = x.log_softmax(-1)[:, :-1]  # (B, N - 1, V)
        picked = ids[:, 1:, None]  # (B, N - 1, 1)
        if _close(got, _ce(x, ids)):
            raise Failed(
                "Shift the targets: row n of the logits predicts the next token, "
                "ids[:, n + 1], not token n itself (which it has already seen). "
                "Use logits[:, :-1] with ids[:, 1:]."
            )
        if _close(got, _ce(x[:, 1:], ids[:, :-1])):
            raise Failed(
                "The shift goes the other way: logits[:, :-1] (every position but "
                "the last) predict ids[:, 1:] (every token but the first)."
            )
        if B > 1 and _close(got, _ce(x.reshape(-1, V)[:-1], ids.reshape(-1)[1:])):
            raise Failed(
                "Shift within each sequence, then flatten: shifting the flattened "
                "batch makes the last token of one row predict the first token of "
                "the next row, an unrelated sequence."
            )
        if _close(got, want / math.log(2)):
            raise Failed("Use the natural log (nats), not log₂ (bits).")
        if _close(got, want * B * (N - 1)) or (B > 1 and _close(got, want * (N - 1))):
            raise Failed(
                "Average over all B·(N − 1) predictions: the mean, not the sum."
            )
        if _close(got, -want):
            raise Failed(
                "The loss is minus the log-probability of the right token: "
                "−log p ≥ 0. Check the sign."
            )
        if _close(got, -x[:, :-1].gather(-1, picked).mean()):
            raise Failed(
                "Normalise the logits first: the log-probability is the logit minus "
                "logsumexp over the vocabulary (log_softmax), not the raw logit."
            )
        if _close(got, -log_probs.exp().gather(-1, picked).mean()):
            raise Failed("Take the log of the probability: the loss is −log p, not −p.")
        over_positions = x.log_softmax(1)[:, :-1]  # normalised over n, not over V
        sliced_over_positions = x[:, :-1].log_softmax(1)  # the same, after the shift
        flat = x[:, :-1].reshape(-1, V)  # (B·(N − 1), V)
        over_rows = flat.log_softmax(0).gather(-1, ids[:, 1:].reshape(-1, 1))
        if (
            _close(got, -over_positions.gather(-1, picked).mean())
            or _close(got, -sliced_over_positions.gather(-1, picked).mean())
            or _close(got, -over_rows.mean())
        ):
            raise Failed(
                "Take the log-softmax over the vocabulary, the last dimension "
                "(dim=-1): each position's V logits make one distribution, not the "
                "positions' or rows' logits of one token."
            )
        raise Failed(
            "The loss is the mean, over every b and every n < N − 1, of "
            "−log softmax(logits[b, n])[ids[b, n + 1]], the softmax taken over the "
            f"vocabulary (V = {V}): compare your code with the formula for the "
            "loss above the exercise, term by term."
        )


def _random_loss(g):
    cases = []
    for _ in range(3):
        B = int(torch.randint(1, 5, (), generator=g))
        N = int(torch.randint(2, 9, (), generator=g))
        V = int(torch.randint(2, 70, (), generator=g))
        logits = 3 * torch.randn(B, N, V, generator=g)
        cases.append((logits, torch.randint(V, (B, N), generator=g)))
    N = int(torch.randint(30, 65, (), generator=g))  # a long window
    cases.append(
        (3 * torch.randn(2, N, 65, generator=g), torch.randint(65, (2, N), generator=g))
    )
    return cases


def _uniform_cases():
    return [
        (torch.zeros(2, 6, 65), _ids(2, 6, 65, seed=16)),
        (torch.full((1, 3, 10), 5.0), _ids(1, 3, 10, seed=17)),
    ]


def _judge_uniform(cases, outcomes):
    for (logits, _), outcome in zip(cases, outcomes, strict=True):
        got = _scalar(outcome)
        V = logits.shape[-1]
        if not _close(got, torch.tensor(math.log(V), dtype=torch.float64)):
            raise Failed(
                f"Equal logits give the uniform distribution over V = {V} tokens: "
                f"the loss is ln V = {math.log(V):.4f} nats, got {float(got):.4f}."
            )


def _ignored_cases():
    logits, ids = 2 * seeded_randn(2, 6, 9, seed=18), _ids(2, 6, 9, seed=19)
    last = logits.clone()
    last[:, -1] = 10 * seeded_randn(
        2, 9, seed=20
    )  # predicts a token beyond the sequence
    first = ids.clone()
    first[:, 0] = (ids[:, 0] + 1) % 9  # never a target
    return [(logits, ids), (last, ids), (logits, first)]


def _judge_ignored(cases, outcomes):
    base, last, first = (_scalar(o) for o in outcomes)
    if base < 0:
        raise Failed("A cross-entropy is −log p with p ≤ 1: never negative.")
    if not (_close(base, last) and _close(base, first)):
        raise Failed(
            "The last position's logits predict a token that is not in the sequence, "
            "and the first token is never a target: changing either must not change "
            "the loss."
        )


NEXT_TOKEN_LOSS = Exercise(
    "next_token_loss",
    "next_token_loss",
    "Exercise 2: the next-token loss",
    3,
    (
        Check("equals the shifted cross-entropy", _loss_cases, _judge_loss),
        unseen_check("the same on unseen inputs", _random_loss, _judge_loss),
        Check("equal logits give ln V", _uniform_cases, _judge_uniform, PROPERTY),
        Check(
            "≥ 0; ignores the last logits and the first token",
            _ignored_cases,
            _judge_ignored,
            PROPERTY,
        ),
    ),
    loud=(0,),  # a softmax inside: scores past 88 as well
)

# --- Exercise 3: temperature and top-k -----------------------------------------------


def next_token_distribution(
    logits: torch.Tensor, temperature: float, top_k: int | None = None
) -> torch.Tensor:
    """The reference: the (B, V) probabilities :func:`~..gpt.sample_next` samples
    from, for temperature > 0 (float64)."""
    logits = logits.double() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, NEG_INF)
    return torch.softmax(logits, dim=-1)


def _kept(logits, k):
    """Boolean (B, V): the k largest logits of each row (no ties in the checks)."""
    if k is None or k >= logits.shape[-1]:
        return torch.ones_like(logits, dtype=torch.bool)
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits >= kth


def _probs_cases():
    a, b = 2 * seeded_randn(3, 10, seed=30), 3 * seeded_randn(4, 65, seed=31)
    return [
        (a, 1.0, None),
        (a, 0.5, 3),
        (b, 2.0, 5),
        (b, 0.8, None),
        (seeded_randn(2, 6, seed=32), 1.5, 6),  # k = V: nothing removed
        (seeded_randn(2, 8, seed=33), 0.7, 1),
    ]


def _judge_probs(cases, outcomes):
    # a case of (logits, temperature) alone leaves top_k to its default, None
    cases = [(*case, None) if len(case) == 2 else case for case in cases]
    with_k_ran = all(
        not o.raised for (_, _, k), o in zip(cases, outcomes, strict=True) if k
    )
    for (logits, T, k), outcome in zip(cases, outcomes, strict=True):
        if k is None and outcome.raised and with_k_ran:
            raise Failed(
                f"top_k=None keeps every token: no top-k filtering at all (your "
                f"function raised {outcome.error}: {outcome.message})"
            )
        (got,) = returned_values([outcome])
        # in float64: logits · (1/T) and logits / T round apart in float32, and
        # loud logits of a few hundred turn that into 1e-5 of probability (1
        # honest grading in 3,621 failed before)
        exact = next_token_distribution(logits.double(), T, k)
        if close_at_scale(got, exact, equal_nan=True):
            continue
        if got.shape != logits.shape:
            raise Failed(
                f"Return the probabilities (B, V) = {tuple(logits.shape)}, "
                f"got {tuple(got.shape)}."
            )
        x = logits.double()
        keep = _kept(x, k)
        V = x.shape[-1]
        if _close(got, next_token_distribution(x * T * T, T, k)):
            raise Failed(
                "Divide the logits by the temperature, don't multiply: T < 1 "
                "sharpens the distribution, T > 1 flattens it."
            )
        if T != 1 and _close(got, next_token_distribution(x, 1.0, k)):
            raise Failed("Divide the logits by the temperature before the softmax.")
        if _close(got, torch.softmax(x / T, -1) * keep):
            raise Failed(
                "Filter before the softmax (set the logits outside the top k to −∞), "
                "or renormalise after it: the kept probabilities must sum to 1."
            )
        if _close(got, torch.softmax((x / T).masked_fill(~keep, 0.0), -1)):
            raise Failed(
                "Set the logits outside the top k to −∞, not 0: a logit of 0 still "
                "gets probability."
            )
        wrong_k = [j for j in ((k or V) - 1, (k or V) + 1) if 1 <= j <= V]
        if k is not None and any(
            _close(got, next_token_distribution(x, T, j)) for j in wrong_k
        ):
            raise Failed(
                f"Keep exactly the k = {k} largest logits of each row: the k-th "
                "largest included (logits ≥ the k-th largest), no more."
            )
        if k is not None and k < V and _close(got, torch.softmax(x / T, -1)):
            across = (
                f" (topk along dim=0, across a batch of {k} rows, keeps every "
                "logit: pick along the vocabulary, dim=-1)"
                if k == x.shape[0]
                else ""
            )
            raise Failed(
                f"Apply top_k: with top_k = {k}, only the {k} largest logits of each "
                f"row keep a probability; the rest get exactly 0{across}."
            )
        if k is not None and k <= x.shape[0]:
            kth_of_columns = x.topk(k, dim=0).values[-1:]  # (1, V): across the batch
            picked_down = torch.softmax(
                (x / T).masked_fill(x < kth_of_columns, NEG_INF), -1
            )
            if _close(got, picked_down):
                raise Failed(
                    "Pick the k largest logits of each row, along the vocabulary: "
                    "topk(k, dim=-1); dim=0 picks across the batch instead."
                )
        if _close(got, torch.softmax((x / T).masked_fill(~keep, NEG_INF), 0)):
            raise Failed(
                "Take the softmax over the vocabulary, the last dimension (dim=-1): "
                "each row is one sequence's distribution."
            )
        raise Failed(
            "Divide the logits by T, set those below the k-th largest of their row "
            "to −∞ (none when top_k is None), then take the softmax over the last "
            "dimension."
        )


def _random_probs(g):
    cases = []
    for k in (None, 1, 0, "V"):
        B = int(torch.randint(1, 5, (), generator=g))
        V = int(torch.randint(2, 70, (), generator=g))
        T = float(0.3 + 2 * torch.rand((), generator=g))
        if k == 0:  # a k between 2 and V
            k = int(torch.randint(2, V + 1, (), generator=g))
        if k == "V":  # every token kept: the same as no top-k
            k = V
        cases.append((3 * torch.randn(B, V, generator=g), T, k))
    # the defaults (top_k=None), left out
    B, V = (int(t) for t in torch.randint(2, 9, (2,), generator=g))
    cases.append(
        (
            3 * torch.randn(B, V, generator=g),
            float(0.3 + 2 * torch.rand((), generator=g)),
        )
    )
    return cases


def _judge_support(cases, outcomes):
    for (logits, _, k), got in each_value(cases, outcomes):
        if got.shape != logits.shape:
            raise Failed("Return the probabilities (B, V).")
        sums = got.double().sum(-1)
        if not close(sums, torch.ones_like(sums), atol=1e-5):
            raise Failed("Each row is a distribution: its probabilities sum to 1.")
        if (got[~_kept(logits, k)] != 0).any() or not (got[_kept(logits, k)] > 0).all():
            raise Failed(
                "Exactly the k largest logits of each row get a probability > 0; "
                "every other token gets exactly 0."
            )


def _greedy_cases():
    logits = 4 * seeded_randn(5, 12, seed=34)
    return [(logits, 0.1, 1), (logits, 3.0, 1)]


def _judge_greedy(cases, outcomes):
    for (logits, _, _), got in each_value(cases, outcomes):
        want = F.one_hot(logits.argmax(-1), logits.shape[-1]).double()
        if not _close(got, want):
            raise Failed(
                "With top_k = 1 only the most likely token remains: probability 1 "
                "on the argmax of each row (greedy decoding), at any temperature."
            )


NEXT_TOKEN_PROBS = Exercise(
    "next_token_probs",
    "next_token_probs",
    "Exercise 3: temperature and top-k",
    3,
    (
        Check(
            "equals the distribution tc.sample_next samples from",
            _probs_cases,
            _judge_probs,
        ),
        unseen_check("the same on unseen inputs", _random_probs, _judge_probs),
        Check(
            "rows sum to 1; zero outside the top k",
            _probs_cases,
            _judge_support,
            PROPERTY,
        ),
        Check("top_k = 1 is greedy", _greedy_cases, _judge_greedy, PROPERTY),
    ),
    loud=(0,),  # a softmax inside: scores past 88 as well
)

# --- Exercise 4: attention with a KV cache -------------------------------------------


def attend_with_cache(q, k, v, k_cache, v_cache, length):
    """The reference: the new keys and values written after ``length`` stored ones
    (:meth:`LayerCache.append`), the new queries attending to all of them with the
    causal mask aligned bottom-right. Returns (out, keys, values), float64."""
    B, H, max_len, d = k_cache.shape
    cache = LayerCache(B, H, max_len, d, dtype=torch.float64)
    cache.keys.copy_(k_cache)
    cache.values.copy_(v_cache)
    cache.length = length
    keys, values = cache.append(k.double(), v.double())  # (B, H, length + N, d)
    out = scaled_dot_product_attention(q.double(), keys, values, is_causal=True)
    return out, cache.keys, cache.values


def _attend(q, keys, values, allowed=None, scale=True):
    """softmax(q kᵀ/√d + mask) v in float64, ``allowed`` (N_q, N_k) or None."""
    scores = q.double() @ keys.double().transpose(-2, -1)
    if scale:
        scores = scores / q.shape[-1] ** 0.5
    if allowed is not None:
        scores = scores.masked_fill(~allowed, NEG_INF)
    return torch.softmax(scores, -1) @ values.double()


def _written(cache, new, start):
    out = cache.double().clone()
    out[:, :, start : start + new.shape[-2]] = new.double()
    return out


def _cache_case(B, H, N, d, max_len, length, g, garbage=False):
    def randn(*shape):
        return torch.randn(*shape, generator=g)

    k_cache, v_cache = randn(B, H, max_len, d), randn(B, H, max_len, d)
    if not garbage:  # a cache as LayerCache keeps it: zeros past the stored tokens
        k_cache[:, :, length:] = 0
        v_cache[:, :, length:] = 0
    q, k, v = randn(B, H, N, d), randn(B, H, N, d), randn(B, H, N, d)
    return (q, k, v, k_cache, v_cache, length)


def _cache_cases():
    g = torch.Generator().manual_seed(40)
    return [
        _cache_case(2, 2, 1, 4, 8, 3, g),  # one generation step
        # a chunk of 3 after 4 stored tokens; stale values past them (a cache
        # reset for a new sequence keeps its old buffer)
        _cache_case(1, 2, 3, 4, 10, 4, g, garbage=True),
        _cache_case(1, 1, 4, 3, 6, 0, g),  # the prompt, into an empty cache
        _cache_case(2, 1, 2, 2, 5, 3, g),  # fills the cache to max_len
    ]


def _triple(outcome):
    if (
        not outcome.raised
        and isinstance(outcome.value, list | tuple)
        and len(outcome.value) == 3
    ):
        parts = returned_values([type(outcome)(value=x) for x in outcome.value])
        return tuple(parts)
    (value,) = returned_values([outcome], tuple)
    raise Failed(
        f"Return three tensors, (out, k_cache, v_cache), not {len(value)} values."
    )


def _judge_cache(cases, outcomes):
    for case, outcome in zip(cases, outcomes, strict=True):
        q, k, v, k_cache, v_cache, L = case
        out, keys, values = _triple(outcome)
        want_out, want_keys, want_values = attend_with_cache(*case)
        N = q.shape[-2]
        max_len, end = k_cache.shape[-2], L + N
        if keys.shape != k_cache.shape or values.shape != v_cache.shape:
            if keys.shape[-2] == end:
                raise Failed(
                    "Return the whole caches, (B, H, max_len, d) like the ones "
                    "given, with the new keys and values written in; not only the "
                    f"first length + N = {L} + {N} = {end} positions."
                )
            raise Failed(
                f"The caches keep their shape (B, H, max_len, d) = "
                f"{tuple(k_cache.shape)}, got {tuple(keys.shape)}."
            )
        if not (_close(keys, want_keys) and _close(values, want_values)):
            if _close(keys, want_values) and _close(values, want_keys):
                raise Failed("Return (out, k_cache, v_cache), in this order.")
            end_ok = _close(keys[:, :, :end], want_keys[:, :, :end]) and _close(
                values[:, :, :end], want_values[:, :, :end]
            )
            if end_ok and end < max_len:
                raise Failed(
                    f"Leave the caches past length + N = {L} + {N} = {end} as they were: write "
                    "the new keys and values into them (a copy), do not rebuild "
                    "them from zeros. A cache reused for a new sequence still holds "
                    "old values there; they must not matter, and must not be lost."
                )
            if _close(keys, _written(k_cache, k, 0)) and L > 0:
                raise Failed(
                    f"Write the new keys and values after the {L} stored ones, at "
                    f"positions length .. length + N − 1 = {L} .. {end - 1}, not at "
                    "the start of the cache (that overwrites the stored tokens)."
                )
            if _close(keys, _written(k_cache, v, L)) or _close(
                values, _written(v_cache, k, L)
            ):
                raise Failed("k goes into k_cache and v into v_cache.")
            raise Failed(
                "k_cache[:, :, length:length + N] holds the new keys (and v_cache the "
                "values); every other position stays as it was."
            )
        if out.shape != q.shape:
            raise Failed(
                f"out has the queries' shape (B, H, N, d) = {tuple(q.shape)}, "
                f"got {tuple(out.shape)}."
            )
        if _close(out, want_out):
            continue
        keys, values = want_keys, want_values  # (B, H, max_len, d)
        bottom_right = causal_mask(N, end)
        top_left = torch.ones(N, end, dtype=torch.bool).tril()
        if end < max_len and any(
            _close(out, _attend(q, keys, values, mask))
            for mask in (None, causal_mask(N, max_len))
        ):
            raise Failed(
                f"Attend to the first length + N = {L} + {N} = {end} positions of the caches "
                f"only: the rest of the buffer (up to max_len = {max_len}) holds no "
                "tokens yet, and its zero keys still get weight."
            )
        prefix_k, prefix_v = keys[:, :, :end], values[:, :, :end]
        if _close(out, _attend(q, prefix_k, prefix_v, top_left)):
            raise Failed(
                "Align the causal mask bottom-right: new query i is token length + i "
                "and sees keys 0 .. length + i, so it is torch.ones(N, length + N)"
                ".tril(diagonal=length). (F.scaled_dot_product_attention(is_causal="
                "True) aligns top-left, which is right only when length = 0.)"
            )
        if _close(out, _attend(q, prefix_k, prefix_v)):
            raise Failed(
                "Mask the future among the new tokens: new token i may not see the "
                "new tokens after it (with one new token there is nothing to mask)."
            )
        if L > 0 and _close(out, _attend(q, k, v, causal_mask(N, N))):
            raise Failed(
                "Attend to the stored keys and values too: the new queries see every "
                "token so far, keys 0 .. length + N − 1 of the updated cache."
            )
        if _close(out, _attend(q, prefix_k, prefix_v, bottom_right, scale=False)):
            raise Failed("Scale the scores by 1/√d, as in chapter 2.")
        raise Failed(
            "out = softmax(q Kᵀ/√d + mask) V with K, V the first length + N positions "
            "of the updated caches and the mask torch.ones(N, length + N).tril("
            "diagonal=length)."
        )


def _random_cache(g):
    cases = []
    for _ in range(3):
        B, H, N, d = (int(t) for t in torch.randint(1, 5, (4,), generator=g))
        L = int(torch.randint(0, 6, (), generator=g))
        # the first cache ends exactly full (length + N == max_len)
        spare = 0 if not cases else int(torch.randint(0, 4, (), generator=g))
        max_len = L + N + spare
        cases.append(_cache_case(B, H, N, d, max_len, L, g, garbage=len(cases) == 1))
    # a long cache, far past the fixed cases' sizes
    N, L = (
        int(torch.randint(1, 5, (), generator=g)),
        int(torch.randint(20, 61, (), generator=g)),
    )
    cases.append(_cache_case(1, 2, N, 4, L + N + 3, L, g))
    return cases


def _later_cases():
    g = torch.Generator().manual_seed(41)
    case = _cache_case(1, 2, 4, 3, 9, 2, g)
    q, k, v, *rest = case
    k2, v2 = k.clone(), v.clone()
    k2[:, :, -1], v2[:, :, -1] = 5 * torch.randn(1, 2, 3, generator=g), 0
    garbage = _cache_case(1, 2, 4, 3, 9, 2, torch.Generator().manual_seed(41), True)
    # the last key pointing along the first query, 10⁵ long: its score for that
    # query is about 10⁵, which a mask that adds −10⁴ lets through
    k3 = k.clone()
    k3[:, :, -1] = 1e5 * q[:, :, 0] / q[:, :, 0].norm(dim=-1, keepdim=True)
    return [case, (q, k2, v2, *rest), garbage, (q, k3, v2, *rest)]


def _judge_later(cases, outcomes):
    (out, *_), (changed, *_), (garbage, *_), (loud, *_) = (_triple(o) for o in outcomes)
    if out.shape != cases[0][0].shape or {changed.shape, loud.shape} != {out.shape}:
        raise Failed("out has the queries' shape (B, H, N, d).")
    if not (
        _close(out[:, :, :-1], changed[:, :, :-1])
        and _close(out[:, :, :-1], loud[:, :, :-1])
    ):
        raise Failed(
            "A new token must not see the new tokens after it: changing the last "
            "token's key and value, even to a score of 10⁵, must leave the other "
            "outputs unchanged (mask with −∞, or a value far below any score)."
        )
    if not _close(out, garbage):
        raise Failed(
            "Whatever lies in the caches past length + N must not matter: attend to "
            "the first length + N positions only."
        )
    _, keys, values = _triple(outcomes[2])
    _, want_keys, want_values = attend_with_cache(*cases[2])
    if not (_close(keys, want_keys) and _close(values, want_values)):
        raise Failed(
            "Return the caches with the new keys and values written in and every "
            "other position as it was, whatever it holds."
        )


ATTEND_WITH_CACHE = Exercise(
    "attend_with_cache",
    "attend_with_cache",
    "Exercise 4: attention with a KV cache",
    4,
    (
        Check(
            "equals tc.LayerCache.append, then causal attention",
            _cache_cases,
            _judge_cache,
        ),
        unseen_check("the same on unseen inputs", _random_cache, _judge_cache),
        Check(
            "ignores later new tokens and the empty buffer",
            _later_cases,
            _judge_later,
            PROPERTY,
        ),
    ),
    loud=(0,),  # a softmax inside: scores past 88 as well
)

EXERCISES: dict[str, Exercise] = {
    e.key: e
    for e in (CAUSAL_WEIGHTS, NEXT_TOKEN_LOSS, NEXT_TOKEN_PROBS, ATTEND_WITH_CACHE)
}

QUIZZES = load_quizzes("ch06")  # quizzes/ch06.toml
