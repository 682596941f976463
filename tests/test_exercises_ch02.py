"""Chapter 2's exercise checks: each usual mistake fails with its hint (reference solutions and
stubs: tests/test_exercise_solutions.py)."""

import pytest
import torch
from exercise_helpers import namespace_from

from transformer_course.exercises import chapter, core
from transformer_course.exercises.ch02 import EXERCISES, QUIZZES

# (exercise, wrong implementation, the check that must fail, words of its hint),
# run by tests/test_exercise_tables.py
CHECK_MISTAKES = [
    (
        "stable_softmax",
        "def stable_softmax(x):\n    e = (x - x.max(dim=0, keepdim=True).values).exp()\n    return e / e.sum(dim=0, keepdim=True)",
        "each row (last dimension) sums to 1",
        "wrong axis",
    ),
    (
        "stable_softmax",
        "def stable_softmax(x):\n    return x.exp() / x.exp().sum(dim=-1, keepdim=True)",
        "finite and right for logits of ±1000",
        "Subtract each row's maximum",
    ),
    (  # one maximum for the whole tensor
        "stable_softmax",
        "def stable_softmax(x):\n    e = (x - x.max()).exp()\n    return e / e.sum(-1, keepdim=True)",
        "finite and right for logits of ±1000",
        "each row's own maximum",
    ),
    (
        "stable_softmax",
        "def stable_softmax(x):\n    return x.softmax(-1)",
        "equals torch.softmax",
        "not to use torch.softmax",
    ),
    (
        "attention",
        "def attention(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)",
        "equals F.scaled_dot_product_attention",
        "not to use F.scaled_dot_product_attention",
    ),
    (
        "attention_weights",
        "def attention_weights(q, k, mask=None):\n    return torch.softmax(q @ k.transpose(-2, -1), dim=-1)",
        "softmax(q kᵀ / √d_k)",
        "Divide the scores q kᵀ by √d_k",
    ),
    (
        "attention_weights",
        "def attention_weights(q, k, mask=None):\n    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1)",
        "softmax(q kᵀ / √d_k)",
        "not by d_k itself",
    ),
    (
        "attention_weights",
        "def attention_weights(q, k, mask=None):\n    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)\n"
        "    return w if mask is None else w * mask",
        "the mask is applied before the softmax",
        "after the softmax",
    ),
    (
        "attention_weights",
        "def attention_weights(q, k, mask=None):\n    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)",
        "the mask is applied before the softmax",
        "must get weight 0",
    ),
    (
        "attention_weights",
        "def attention_weights(q, k, mask=None):\n    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-2)",
        "shape (..., N_q, N_k), unmasked rows sum to 1",
        "over the keys",
    ),
    (
        "attention",
        "def attention(q, k, v):\n    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)",
        "shape (..., N_q, d_v)",
        "multiply them by v",
    ),
    (
        "attention",
        "def attention(q, k, v):\n    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v",
        "equals F.scaled_dot_product_attention",
        "Divide the scores by √d_k",
    ),
    (
        "additive_score",
        "def additive_score(q, k, W_q, W_k, w):\n    return (W_q @ q + k @ W_k.T) @ w",
        "s_i = w · tanh(W_q q + W_k k_i)",
        "Apply tanh",
    ),
]


def test_chapter_two_is_registered_with_enough_exercises_and_quizzes():
    ex = chapter(2)
    assert len(ex.exercises) >= 4
    assert len(ex.quizzes) >= 4
    box = ex.quiz("quiz_variance")
    box.control.value = "64"
    box.submit.click()
    assert "Correct" in box.feedback.value
    assert set(QUIZZES) <= set(ex.quizzes)


@pytest.mark.parametrize(
    ("divisor", "hint"),
    [
        ("e.sum()", "the sum of the whole tensor"),
        ("e.sum(dim=0, keepdim=True)", "wrong axis"),
    ],
)
def test_a_softmax_divided_by_the_wrong_sum_is_told_so_by_every_check(divisor, hint):
    """With the row's maximum subtracted, the only mistake is the sum: no check
    tells this learner to subtract the maximum (issue 21)."""
    namespace = {"torch": torch}
    exec(
        "def stable_softmax(x):\n"
        "    e = (x - x.max(dim=-1, keepdim=True).values).exp()\n"
        f"    return e / {divisor}\n",
        namespace,
    )
    report = core.run_exercise(EXERCISES["stable_softmax"], namespace["stable_softmax"])
    failed = [r for r in report.results if not r.passed]
    assert len(failed) == 4
    assert all(hint in r.hint for r in failed), [r.hint for r in failed]


@pytest.mark.parametrize(
    ("key", "source", "hints"),
    [
        (
            "attention_weights",
            "def attention_weights(q, k, mask=None):\n"
            "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
            "    if mask is not None:\n"
            "        s = s.masked_fill(~mask, float('-inf'))\n"
            "    return torch.softmax(s, dim=-2)\n",
            ("runs over the queries (dim=-2)",),
        ),
        (
            "attention",
            "def attention(q, k, v):\n"
            "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
            "    return torch.softmax(s, dim=-2) @ v\n",
            ("runs over the queries (dim=-2)",),
        ),
        (
            "attention",
            "def attention(q, k, v):\n"
            "    s = q @ k.transpose(-2, -1) / v.shape[-1] ** 0.5\n"
            "    return torch.softmax(s, dim=-1) @ v\n",
            # (a drawn v of width 1 makes it no division at all, and says so)
            ("not by √d_v", "Divide the scores by √d_k"),
        ),
    ],
)
def test_the_learners_mistakes_in_attention_are_named(key, source, hints):
    """Issue 21's learner: a softmax over the queries was told "the mask was
    applied after the softmax"; √d_v for √d_k got the generic hint."""
    namespace = {"torch": torch}
    exec(source, namespace)
    report = core.run_exercise(EXERCISES[key], namespace[key])
    failed = [r for r in report.results if not r.passed]
    assert failed
    named = [r for r in failed if r.kind != core.PROPERTY]
    assert all(any(h in r.hint for h in hints) for r in named), [
        (r.name, r.hint) for r in failed
    ]
    assert any(hints[0] in r.hint for r in named)


@pytest.mark.parametrize(("masked", "full"), [("-1e4", False), ("-1e9", True)])
def test_a_mask_added_as_a_finite_number_lets_a_huge_masked_score_through(masked, full):
    """The thirteenth red team's −10⁴ mask had full marks here (chapter 6 gave
    it partial credit): a masked key whose score is 10⁵ gets through it."""
    namespace = {}
    exec(
        "import torch\n"
        "def attention_weights(q, k, mask=None):\n"
        "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    if mask is not None:\n"
        f"        s = s + (~mask) * {masked}\n"
        "    return torch.softmax(s, dim=-1)\n",
        namespace,
    )
    exercise = chapter(2).exercises["attention_weights"]
    report = core.run_exercise(exercise, namespace["attention_weights"])
    failed = [r.name for r in report.results if not r.passed]
    assert failed == (
        [] if full else ["a masked key gets weight 0, whatever its score"]
    )
    assert full or 0 < report.score < exercise.points


def test_an_inverted_mask_is_named_in_every_check_it_fails():
    """The learner round: masked_fill(mask, -inf), with True meaning "may see",
    was told to use -inf (it did) and masked_fill (it did)."""
    source = (
        "def attention_weights(q, k, mask=None):\n"
        "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(mask, float('-inf'))\n"
        "    return torch.softmax(s, dim=-1)\n"
    )
    function = namespace_from([source])["attention_weights"]
    report = core.run_exercise(EXERCISES["attention_weights"], function)
    failed = [r for r in report.results if not r.passed]
    assert failed
    for result in failed:
        assert "Your mask is inverted" in result.hint, (result.name, result.hint)
