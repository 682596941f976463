"""Checks and quizzes for exercises/03_multihead.ipynb (chapter 3, Multi-head attention)."""

from __future__ import annotations

import torch

from ..multihead import MultiHeadAttention, merge_heads, parameter_count, split_heads
from .core import (
    Check,
    Exercise,
    Failed,
    close_at_scale,
    returned_values,
    seeded_randn,
    unseen_check,
)
from .table import Returns, Shaped, Table, WrongShape
from .twins import loud_score_scale, one_size_at_a_time, other_divisor, resized
from .widgets import load_quizzes

__all__ = ["EXERCISES", "QUIZZES"]


# --- Exercise 1: split heads ------------------------------------------------------


def _split_cases():
    return [
        (seeded_randn(2, 3, 8), 4),
        (seeded_randn(1, 5, 12, seed=1), 3),
        (seeded_randn(2, 4, 6, seed=2), 1),
    ]


SPLIT_TABLE = Table(
    reference=split_heads,
    rows=(
        Shaped(
            lambda x, h: (*x.shape[:2], h, x.shape[2] // h),  # (B, N, H, d)
            "You have (B, N, H, d): transpose(1, 2) to put the heads before the tokens, (B, H, N, d).",
        ),
        Returns(
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),
            "Reshaping (B, N, D) straight to (B, H, N, d) mixes tokens across heads: head h must hold features h·d ... (h+1)·d − 1 of every token. Cut each token's D features into heads first, then move the heads before the tokens.",
        ),
        WrongShape(
            lambda case, got, want: (
                f"For x {tuple(case[0].shape)} and {case[1]} heads the result has shape (B, H, N, d) = {tuple(want.shape)}, got {tuple(got.shape)}."
            )
        ),
    ),
    otherwise="Head h must hold features h·d ... (h+1)·d - 1 of every token.",
)


def _random_sizes(g, large=False):
    """(B, N, H, d): small ones, or N and d of 5 to 9 when ``large``."""
    b, h = (int(t) for t in torch.randint(1, 5, (2,), generator=g))
    n, d = (int(t) for t in torch.randint(5 if large else 1, 10, (2,), generator=g))
    return b, n, max(h, 2) if large else h, d


def _random_split(g):
    cases = []
    for i in range(3):
        b, n, h, d = _random_sizes(g, large=i == 0)
        cases.append((torch.randn(b, n, h * d, generator=g), h))
    return cases


SPLIT = Exercise(
    "split_heads",
    "split_heads",
    "Exercise 1: split into heads",
    2,
    (
        Check(
            "(B, N, D) -> (B, H, N, d), head h owns a block of features",
            _split_cases,
            SPLIT_TABLE,
        ),
        unseen_check("the same on unseen inputs", _random_split, SPLIT_TABLE),
    ),
)

# --- Exercise 2: merge heads ------------------------------------------------------


def _merge_cases():
    return [(seeded_randn(2, 4, 3, 2),), (seeded_randn(1, 3, 5, 4, seed=1),)]


def _heads_not_moved_back(heads):
    B, H, N, d = heads.shape
    return heads.reshape(B, N, H * d)


MERGE_TABLE = Table(
    reference=merge_heads,
    rows=(
        Returns(
            _heads_not_moved_back,
            "Transpose back to (B, N, H, d) before reshaping to (B, N, H·d); otherwise tokens and heads get mixed.",
        ),
    ),
    otherwise=lambda case, got, want: (
        f"The result should be (B, N, H·d) = {tuple(want.shape)}, with head h's output in features h·d ... (h+1)·d - 1."
    ),
)


def _roundtrip_cases():
    return [(split_heads(seeded_randn(2, 3, 8, seed=3), 4),)]


ROUNDTRIP_TABLE = Table(
    reference=merge_heads,
    rows=(),
    otherwise="merge_heads(split_heads(x)) must give back x.",
)


def _random_heads(g):
    cases = []
    for i in range(3):
        b, n, h, d = _random_sizes(g, large=i == 0)
        h = max(h, 2) if i == 0 else h  # two heads at least, once: an order shows
        cases.append((torch.randn(b, h, n, d, generator=g),))  # (B, H, N, d)
    return cases


MERGE = Exercise(
    "merge_heads",
    "merge_heads",
    "Exercise 2: merge the heads",
    2,
    (
        Check("(B, H, N, d) -> (B, N, H·d)", _merge_cases, MERGE_TABLE),
        Check("undoes split_heads", _roundtrip_cases, ROUNDTRIP_TABLE),
        unseen_check("the same on unseen inputs", _random_heads, MERGE_TABLE),
    ),
)

# --- Exercise 3: a multi-head forward pass ---------------------------------------------
# The chapter's layout, rows are tokens (§3.2): q = x W_q, with W_qkv = [W_q W_k W_v]
# (D, 3D) and out = concat(heads) W_o; nn.Linear stores the transposes.


def _reference_forward(x, W_qkv, W_o, n_heads):
    """The course's module, in float64: the answer a float32 computation rounds."""
    module = MultiHeadAttention(x.shape[-1], n_heads, bias=False).double()
    with torch.no_grad():
        module.qkv_proj.weight.copy_(W_qkv.T)  # nn.Linear's layout: (3D, D)
        module.out_proj.weight.copy_(W_o.T)
        return module(x.double())


def _forward_cases():
    return [
        (
            seeded_randn(2, 5, 8),
            seeded_randn(8, 24, seed=1) / 3,
            seeded_randn(8, 8, seed=2) / 3,
            2,
        ),
        (
            seeded_randn(1, 4, 12, seed=3),
            seeded_randn(12, 36, seed=4) / 3,
            seeded_randn(12, 12, seed=5) / 3,
            4,
        ),
    ]


def _attended(x, W_qkv, n_heads, scale, dim=-1, split=True):
    """The heads' outputs, merged, (B, N, D), before W_o: softmax(q kᵀ / scale)
    v over ``dim``, per head (``split``) or as one head of width D."""
    D = x.shape[-1]
    q, k, v = (x @ W_qkv).split(D, dim=-1)  # 3 × (B, N, D)
    if not split:
        return torch.softmax(q @ k.transpose(-2, -1) / scale, dim) @ v
    qh, kh, vh = (split_heads(t, n_heads) for t in (q, k, v))  # (B, H, N, d) each
    return merge_heads(torch.softmax(qh @ kh.transpose(-2, -1) / scale, dim) @ vh)


def _head_scale(x, n_heads):
    """√d, d = D/H: one head's width."""
    return (x.shape[-1] // n_heads) ** 0.5


ONE_SOFTMAX = "Split q, k and v into heads (B, H, N, d) before the attention: one softmax per head."
FORWARD_TABLE = Table(
    reference=_reference_forward,
    equal=close_at_scale,
    rows=(
        WrongShape.of_input("(B, N, D)"),
        Returns(
            lambda x, W_qkv, W_o, h: _attended(x, W_qkv, h, _head_scale(x, h)) @ W_o.T,
            "Apply W_o as the chapter writes it, rows are tokens: heads W_o, not W_oᵀ "
            "(W_oᵀ is nn.Linear's layout).",
        ),
        Returns(
            lambda x, W_qkv, W_o, h: _attended(x, W_qkv, h, x.shape[-1] ** 0.5) @ W_o,
            "Scale the scores by 1/√d with d = D/H, the width of one head, not by 1/√D.",
        ),
        Returns(
            lambda x, W_qkv, W_o, h: _attended(x, W_qkv, h, 1) @ W_o,
            "Scale the scores by 1/√d (d = D/H, one head's width) before the "
            "softmax: q kᵀ alone grows with d and makes the softmax too peaked.",
        ),
        Returns(  # over the queries
            lambda x, W_qkv, W_o, h: (
                _attended(x, W_qkv, h, _head_scale(x, h), -2) @ W_o
            ),
            "Take the softmax over the keys, the last dimension (dim=-1): each "
            "query's weights sum to 1. Over dim=-2 each key's weights do.",
        ),
        Returns(
            lambda x, W_qkv, W_o, h: (
                _attended(x, W_qkv, h, _head_scale(x, h), split=False) @ W_o
            ),
            ONE_SOFTMAX,
        ),
        Returns(
            lambda x, W_qkv, W_o, h: (
                _attended(x, W_qkv, h, x.shape[-1] ** 0.5, split=False) @ W_o
            ),
            ONE_SOFTMAX,
        ),
    ),
    otherwise="out = merge_heads(softmax(q kᵀ/√d) v) W_o, with q, k, v = x W_qkv split into thirds and then into heads.",
)


def _random_forward(g):
    cases = []
    for i in range(2):
        b, n, h, d = _random_sizes(g, large=i == 0)
        D = h * d
        cases.append(
            (
                torch.randn(b, n, D, generator=g),
                torch.randn(D, 3 * D, generator=g) / D**0.5,
                torch.randn(D, D, generator=g) / D**0.5,
                h,
            )
        )
    return cases


def _loud_scale(case) -> float:
    """How much larger x must be for the largest score of a case to reach 300
    (x makes both q and k: the scores grow as its square)."""
    x, W_qkv, _, H = case
    D = x.shape[-1]
    q, k, _ = (x.double() @ W_qkv.double()).split(D, dim=-1)  # (B, N, D) each
    return loud_score_scale(split_heads(q, H), split_heads(k, H))  # (B, H, N, d)


FORWARD = Exercise(
    "multihead_forward",
    "multihead_forward",
    "Exercise 3: a multi-head forward pass",
    4,
    (
        Check(
            "equals tc.MultiHeadAttention with these weights",
            _forward_cases,
            FORWARD_TABLE,
        ),
        unseen_check("the same on unseen inputs", _random_forward, FORWARD_TABLE),
    ),
    forbidden=("scaled_dot_product_attention",),
    loud=(0,),  # a softmax inside: scores past 88 as well
    loud_scale=_loud_scale,  # x makes both q and k
    builds_on=("split_heads", "merge_heads"),
)

# --- Exercise 4: counting parameters -----------------------------------------------------


def _count_cases():
    return [
        (64, 1, True),
        (64, 8, True),
        (512, 8, True),
        (512, 16, False),
        (96, 3, False),
    ]


def _judge_count(cases, outcomes):
    counts = returned_values(outcomes, int)
    for (D, H, bias), got in zip(cases, counts, strict=True):
        want = parameter_count(D, H, bias)
        if got == want:
            continue
        if (
            len(
                {c for (d, _, b), c in zip(cases, counts, strict=True) if d == 64 and b}
            )
            > 1
        ):
            raise Failed(
                "The count must not depend on the number of heads: each head is D/H wide, so all heads together still need D×D per matrix."
            )
        if bias and got == 4 * D * D:
            raise Failed(
                "With bias=True add the biases: 3D for q, k, v and D for the output projection."
            )
        raise Failed(
            f"For D={D}, H={H}, bias={bias} expected {want:,}, got {got:,}: four D×D matrices (q, k, v, out), plus 4D biases."
        )


def _random_counts(g):
    cases = []
    for bias in (True, False):
        h = int(torch.randint(1, 20, (), generator=g))
        d = int(torch.randint(20 if bias else 1, 130, (), generator=g))  # wide, once
        cases.append((h * d, h, bias))
    return cases


def _resize_count(case, i, g):
    """One size of (D, H, bias) changed: D (a multiple of H), or H (another
    divisor of D); bias kept."""
    D, H, bias = case
    if i == 0:
        return (resized(D, g, multiple_of=H), H, bias)
    if i == 1:
        other = other_divisor(D, H, g)
        return None if other is None else (D, other, bias)
    return None


COUNT = Exercise(
    "mha_parameter_count",
    "mha_parameter_count",
    "Exercise 4: count the parameters",
    2,
    (
        Check("the count for any D, H and bias", _count_cases, _judge_count),
        unseen_check("the same for unseen sizes", _random_counts, _judge_count),
    ),
    twins=lambda case, g: one_size_at_a_time(case, g, _resize_count),
    mutable_inputs=False,  # numbers and strings only: nothing to change in place
)

# --- Exercise 5: weights from torch --------------------------------------------------------


def _convert_cases():
    return [(seeded_randn(24, 8), 2), (seeded_randn(36, 12, seed=1), 3)]


def _reference_convert(in_proj_weight, n_heads):
    D = in_proj_weight.shape[1]
    return in_proj_weight.view(3, n_heads, D // n_heads, D)  # (q/k/v, H, d, D)


def _heads_before_qkv(W, n_heads):
    D = W.shape[1]
    return W.view(n_heads, 3, D // n_heads, D).transpose(0, 1)


CONVERT_TABLE = Table(
    reference=_reference_convert,
    rows=(
        WrongShape(
            lambda case, got, want: (
                f"Return shape (3, H, d, D) = {tuple(want.shape)}: [q/k/v, head, output feature, input feature]."
            )
        ),
        Returns(
            lambda W, h: W.T.reshape(3, h, W.shape[1] // h, W.shape[1]),
            "in_proj_weight is (3D, D) already, (out, in), as nn.Linear stores a "
            "weight: split its rows without transposing it.",
        ),
        Returns(
            _heads_before_qkv,
            "torch stacks all query rows first, then all key rows, then all value rows: split into q, k, v first, then into heads.",
        ),
    ),
    otherwise="Rows h·d ... (h+1)·d - 1 of the query block (the first D rows) are head h's query weights; likewise for keys and values.",
)


def _random_in_proj(g):
    cases = []
    for _ in range(2):
        _, _, h, d = _random_sizes(g)
        cases.append((torch.randn(3 * h * d, h * d, generator=g), h))
    return cases


CONVERT = Exercise(
    "heads_from_torch",
    "heads_from_torch",
    "Exercise 5: per-head weights from nn.MultiheadAttention",
    2,
    (
        Check("in_proj_weight (3D, D) -> (3, H, d, D)", _convert_cases, CONVERT_TABLE),
        unseen_check("the same on unseen weights", _random_in_proj, CONVERT_TABLE),
    ),
)

EXERCISES: dict[str, Exercise] = {
    e.key: e for e in (SPLIT, MERGE, FORWARD, COUNT, CONVERT)
}

QUIZZES = load_quizzes("ch03")  # quizzes/ch03.toml
