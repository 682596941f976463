"""Chapter 6's exercise checks: each usual mistake fails with its hint and loses
points (reference solutions, stubs and degenerate answers:
tests/test_exercise_solutions.py), the references are the package's own, and the
notebook and the grader agree."""

import math

import nbformat
import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import (
    graded_points_agreeing_with_the_kernel,
    namespace_from,
    read_source,
    solution_cells,
    submission,
    without_markers,
)

from transformer_course.exercises import chapter, core
from transformer_course.exercises.ch06 import (
    EXERCISES,
    NOTES_SCORES,
    QUIZZES,
    attend_with_cache,
    causal_weights,
    next_token_distribution,
)
from transformer_course.gpt import sample_next
from transformer_course.grading.sandbox import bwrap_problem
from transformer_course.kv_cache import LayerCache
from transformer_course.multihead import MultiHeadAttention

REFERENCE = {k: without_markers(v) for k, v in solution_cells(read_source(6)).items()}

MASK = (
    "def causal_attention_weights(scores):\n"
    "    N = scores.shape[-1]\n"
    "    ones = torch.ones(N, N, dtype=torch.bool)\n"
)
LOSS = "def next_token_loss(logits, ids):\n    B, N, V = logits.shape\n"
PROBS = "def next_token_probs(logits, temperature, top_k=None):\n"
TOP_K = (
    "    if top_k is not None:\n"
    "        kth = logits.topk(top_k, dim=-1).values[:, -1:]\n"
    "        logits = logits.masked_fill(logits < kth, float('-inf'))\n"
)
CACHE = (
    "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n"
    "    N, d = q.shape[-2:]\n"
    "    end = length + N\n"
    "    k_cache, v_cache = k_cache.clone(), v_cache.clone()\n"
)
WRITE = "    k_cache[:, :, length:end] = k\n    v_cache[:, :, length:end] = v\n"
PREFIX = "    K, Vs = k_cache[:, :, :end], v_cache[:, :, :end]\n"


def attend(
    keys="K",
    values="Vs",
    mask="torch.ones(N, end, dtype=torch.bool).tril(length)",
    scale=" / d**0.5",
):
    """The end of an attend_with_cache answer: attention of q on ``keys``."""
    masked = f".masked_fill(~({mask}), float('-inf'))" if mask else ""
    return (
        f"    s = (q @ {keys}.transpose(-2, -1){scale}){masked}\n"
        f"    return torch.softmax(s, -1) @ {values}, k_cache, v_cache\n"
    )


MISTAKES = [
    # --- causal_attention_weights
    (
        "causal_attention_weights",
        MASK + "    return scores.masked_fill(~ones.triu(), float('-inf')).softmax(-1)",
        "You masked the past and kept the future",
    ),
    (
        "causal_attention_weights",
        MASK
        + "    return scores.masked_fill(ones.tril(-1), float('-inf')).softmax(-1)",
        "You masked the past and kept the future",
    ),
    (
        "causal_attention_weights",
        MASK + "    return scores.softmax(-1)",
        "Apply the causal mask",
    ),
    (  # the seventeenth red team: renormalised after the softmax, 0/0 when loud
        "causal_attention_weights",
        MASK + "    w = scores.softmax(-1) * ones.tril()\n"
        "    return w / w.sum(-1, keepdim=True)",
        "Masking the weights after the softmax and dividing",
    ),
    (  # ... and the hint for the product alone no longer advises it
        "causal_attention_weights",
        MASK + "    return scores.softmax(-1) * ones.tril()",
        "Set the scores above the diagonal to −∞, then take the softmax.",
    ),
    (
        "causal_attention_weights",
        MASK + "    return scores.masked_fill(~ones.tril(), 0.0).softmax(-1)",
        "not 0",
    ),
    (  # the mask multiplied into the scores: zeros too
        "causal_attention_weights",
        MASK + "    return (scores * ones.tril()).softmax(-1)",
        "not 0",
    ),
    (
        "causal_attention_weights",
        MASK + "    return scores.softmax(-1) * ones.tril()",
        "Mask before the softmax",
    ),
    (
        "causal_attention_weights",
        MASK
        + "    return scores.masked_fill(~ones.tril(-1), float('-inf')).softmax(-1)",
        "Keep the diagonal",
    ),
    (
        "causal_attention_weights",
        MASK + "    w = scores.masked_fill(~ones.tril(-1), float('-inf')).softmax(-1)\n"
        "    return w.nan_to_num(0.0)",
        "Keep the diagonal",
    ),
    (
        "causal_attention_weights",
        MASK
        + "    return scores.masked_fill(~ones.tril(1), float('-inf')).softmax(-1)",
        "Off by one",
    ),
    (
        "causal_attention_weights",
        MASK + "    return scores.masked_fill(~ones.tril(), float('-inf')).softmax(-2)",
        "over the keys, the last dimension",
    ),
    (  # the weights from the fused kernel: q = scores, k = v = I
        "causal_attention_weights",
        MASK + "    eye = torch.eye(N, dtype=scores.dtype)\n"
        "    return F.scaled_dot_product_attention(\n"
        "        scores, eye, eye, is_causal=True, scale=1.0\n    )",
        "not to use F.scaled_dot_product_attention",
    ),
    # --- next_token_loss
    (
        "next_token_loss",
        LOSS + "    return F.cross_entropy(logits.reshape(-1, V), ids.reshape(-1))",
        "Shift the targets",
    ),
    (
        "next_token_loss",
        LOSS + "    return F.cross_entropy(logits[:, 1:].reshape(-1, V), "
        "ids[:, :-1].reshape(-1))",
        "The shift goes the other way",
    ),
    (  # flattened first, then shifted: row b's last token predicts row b + 1's first
        "next_token_loss",
        LOSS + "    flat, targets = logits.reshape(-1, V), ids.reshape(-1)\n"
        "    return F.cross_entropy(flat[:-1], targets[1:])",
        "Shift within each sequence, then flatten",
    ),
    (
        "next_token_loss",
        LOSS + "    lp = torch.log2(logits[:, :-1].softmax(-1))\n"
        "    return -lp.gather(-1, ids[:, 1:, None]).mean()",
        "natural log",
    ),
    (
        "next_token_loss",
        LOSS + "    return F.cross_entropy(logits[:, :-1].reshape(-1, V), "
        "ids[:, 1:].reshape(-1), reduction='sum')",
        "the mean, not the sum",
    ),
    (  # summed over the positions, averaged over the batch
        "next_token_loss",
        LOSS + "    lp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])\n"
        "    return -lp.sum((1, 2)).mean()",
        "the mean, not the sum",
    ),
    (
        "next_token_loss",
        LOSS + "    lp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])\n"
        "    return lp.mean()",
        "Check the sign",
    ),
    (
        "next_token_loss",
        LOSS + "    return -logits[:, :-1].gather(-1, ids[:, 1:, None]).mean()",
        "Normalise the logits first",
    ),
    (
        "next_token_loss",
        LOSS + "    p = logits[:, :-1].softmax(-1).gather(-1, ids[:, 1:, None])\n"
        "    return -p.mean()",
        "Take the log of the probability",
    ),
    (  # one loss per prediction, not averaged
        "next_token_loss",
        LOSS + "    return F.cross_entropy(logits[:, :-1].reshape(-1, V), "
        "ids[:, 1:].reshape(-1), reduction='none')",
        "Return one number",
    ),
    # --- next_token_probs
    (
        "next_token_probs",
        PROBS
        + "    logits = logits * temperature\n"
        + TOP_K
        + "    return logits.softmax(-1)",
        "Divide the logits by the temperature, don't multiply",
    ),
    (
        "next_token_probs",
        PROBS + TOP_K + "    return logits.softmax(-1)",
        "Divide the logits by the temperature before the softmax",
    ),
    (  # top-k after the softmax, not renormalised
        "next_token_probs",
        PROBS + "    probs = (logits / temperature).softmax(-1)\n"
        "    if top_k is not None:\n"
        "        kth = probs.topk(top_k, dim=-1).values[:, -1:]\n"
        "        probs = probs * (probs >= kth)\n"
        "    return probs",
        "renormalise after it",
    ),
    (
        "next_token_probs",
        PROBS + "    logits = logits / temperature\n"
        "    if top_k is not None:\n"
        "        kth = logits.topk(top_k, dim=-1).values[:, -1:]\n"
        "        logits = logits.masked_fill(logits < kth, 0.0)\n"
        "    return logits.softmax(-1)",
        "not 0",
    ),
    (  # keeps k + 1: strictly below the k-th largest is not enough
        "next_token_probs",
        PROBS + "    logits = logits / temperature\n"
        "    if top_k is not None and top_k < logits.shape[-1]:\n"
        "        kth = logits.topk(top_k + 1, dim=-1).values[:, -1:]\n"
        "        logits = logits.masked_fill(logits < kth, float('-inf'))\n"
        "    return logits.softmax(-1)",
        "Keep exactly the k = ",
    ),
    (  # keeps k − 1: "> k-th" instead of "≥ k-th"
        "next_token_probs",
        PROBS + "    logits = logits / temperature\n"
        "    if top_k is not None and top_k < logits.shape[-1]:\n"
        "        kth = logits.topk(top_k, dim=-1).values[:, -1:]\n"
        "        logits = logits.masked_fill(logits <= kth, float('-inf'))\n"
        "    return logits.softmax(-1)",
        "Keep exactly the k = ",
    ),
    (
        "next_token_probs",
        PROBS + "    logits = logits / temperature\n"
        "    kth = logits.topk(top_k, dim=-1).values[:, -1:]\n"
        "    return logits.masked_fill(logits < kth, float('-inf')).softmax(-1)",
        "top_k=None keeps every token",
    ),
    (
        "next_token_probs",
        PROBS
        + "    logits = logits / temperature\n"
        + TOP_K
        + "    return logits.softmax(0)",
        "over the vocabulary, the last dimension",
    ),
    (  # top-k across the batch, not the vocabulary (learner round)
        "next_token_probs",
        PROBS + "    logits = logits / temperature\n"
        "    if top_k is not None and top_k <= logits.shape[0]:\n"
        "        kth = logits.topk(top_k, dim=0).values[-1:]\n"
        "        logits = logits.masked_fill(logits < kth, float('-inf'))\n"
        "    return logits.softmax(-1)",
        "across a batch of 3 rows, keeps every logit",  # the first case: k = B
    ),
    (
        "next_token_probs",
        PROBS + "    return (logits / temperature).softmax(-1)",
        "Apply top_k: with top_k = 3",
    ),
    (  # log-softmax over the positions (learner round)
        "next_token_loss",
        LOSS + "    lp = logits.log_softmax(dim=1)[:, :-1]\n"
        "    return -lp.gather(-1, ids[:, 1:, None]).mean()",
        "log-softmax over the vocabulary",
    ),
    (  # cross-entropy with the classes in the wrong dimension
        "next_token_loss",
        LOSS + "    return F.cross_entropy(logits[:, :-1], ids[:, 1:])",
        "F.cross_entropy takes the classes in dimension 1",
    ),
    # --- attend_with_cache
    (
        "attend_with_cache",
        CACHE
        + "    k_cache[:, :, :N] = k\n    v_cache[:, :, :N] = v\n"
        + PREFIX
        + attend(),
        "not at the start of the cache",
    ),
    (
        "attend_with_cache",
        CACHE
        + "    k_cache[:, :, length:end] = v\n    v_cache[:, :, length:end] = k\n"
        + PREFIX
        + attend(),
        "k goes into k_cache",
    ),
    (  # the whole preallocated buffer, zeros included
        "attend_with_cache",
        CACHE + WRITE + attend("k_cache", "v_cache", mask=None),
        "the rest of the buffer",
    ),
    (
        "attend_with_cache",
        CACHE
        + WRITE
        + "    M = k_cache.shape[-2]\n"
        + attend(
            "k_cache", "v_cache", "torch.ones(N, M, dtype=torch.bool).tril(M - N)"
        ),
        "the rest of the buffer",
    ),
    (  # top-left, as F.scaled_dot_product_attention(is_causal=True)
        "attend_with_cache",
        CACHE
        + WRITE
        + PREFIX
        + attend(mask="torch.ones(N, end, dtype=torch.bool).tril()"),
        "Align the causal mask bottom-right",
    ),
    (
        "attend_with_cache",
        CACHE
        + WRITE
        + PREFIX
        + "    out = F.scaled_dot_product_attention(q, K, Vs, is_causal=True)\n"
        "    return out, k_cache, v_cache\n",
        "Align the causal mask bottom-right",
    ),
    (
        "attend_with_cache",
        CACHE + WRITE + PREFIX + attend(mask=None),
        "Mask the future among the new tokens",
    ),
    (
        "attend_with_cache",
        CACHE + WRITE + attend("k", "v", "torch.ones(N, N, dtype=torch.bool).tril()"),
        "Attend to the stored keys and values too",
    ),
    (
        "attend_with_cache",
        CACHE + WRITE + PREFIX + attend(scale=""),
        "1/√d",
    ),
    (  # the views of the prefix instead of the whole caches
        "attend_with_cache",
        CACHE + WRITE + PREFIX + "    s = q @ K.transpose(-2, -1) / d**0.5\n"
        "    s = s.masked_fill(~torch.ones(N, end, dtype=torch.bool).tril(length), "
        "float('-inf'))\n"
        "    return torch.softmax(s, -1) @ Vs, K, Vs\n",
        "Return the whole caches",
    ),
    (
        "attend_with_cache",
        CACHE + WRITE + PREFIX + "    s = q @ K.transpose(-2, -1) / d**0.5\n"
        "    return torch.softmax(s, -1) @ Vs\n",
        "Return a tuple",
    ),
]


IN_PLACE = (  # writes into the caller's caches: right values, changed inputs
    "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n"
    "    N, d = q.shape[-2:]\n    end = length + N\n" + WRITE + PREFIX + attend()
)


#: (exercise, answer, the property check that fails, words of its hint)
PROPERTY_MISTAKES = [
    (
        "attend_with_cache",
        IN_PLACE,
        "leaves its inputs unchanged",
        "changed its input in place (its fourth and fifth arguments,",
    ),
    (  # counts the filled positions by their non-zero keys: right while the
        # buffer past the stored tokens holds zeros, wrong on any other buffer
        "attend_with_cache",
        CACHE
        + WRITE
        + "    end = int((k_cache[0, 0] != 0).any(-1).sum())\n"
        + PREFIX
        + attend(mask="torch.ones(N, end, dtype=torch.bool).tril(end - N)"),
        "ignores later new tokens and the empty buffer",
        "Whatever lies in the caches past length + N must not matter",
    ),
    (  # right on the fixed cases (no score above 1e9 there), not on any scores
        "causal_attention_weights",
        MASK + "    w = scores.masked_fill(~ones.tril(), float('-inf')).softmax(-1)\n"
        "    return torch.where(scores.abs() > 5, scores.softmax(-1), w)",
        "zero weight on the future, whatever its scores",
        "zero weight to every later key",
    ),
    (
        "next_token_loss",
        LOSS + "    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), "
        "ids[:, 1:].reshape(-1))\n"
        "    return loss if logits.std() > 0 else torch.tensor(0.0)",
        "equal logits give ln V",
        "ln V",
    ),
    (
        "next_token_loss",
        LOSS + "    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), "
        "ids[:, 1:].reshape(-1))\n"
        "    return loss + 0.01 * logits[:, -1].abs().max() * (V == 9)",
        "≥ 0; ignores the last logits and the first token",
        "must not change the loss",
    ),
    (
        "next_token_probs",
        PROBS
        + "    logits = logits / temperature\n"
        + TOP_K
        + "    probs = logits.softmax(-1)\n"
        "    return probs if top_k != 1 else probs + 0.1",
        "top_k = 1 is greedy",
        "greedy decoding",
    ),
]


def test_chapter_six_is_registered():
    ex = chapter(6)
    assert len(ex.exercises) >= 4
    assert len(ex.quizzes) >= 4
    assert set(QUIZZES) == set(ex.quizzes)
    assert EXERCISES["causal_attention_weights"].forbidden == (
        "scaled_dot_product_attention",
    )
    box = ex.quiz("quiz_notes_softmax")
    box.control.value = "0.347"
    box.submit.click()
    assert "Correct" in box.feedback.value


# --- the references are the package's own ----------------------------------------------


def test_the_notes_matrix_with_its_slips_corrected():
    weights = causal_weights(NOTES_SCORES)
    expected = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.378, 0.622, 0.0, 0.0],
            [0.258, 0.316, 0.426, 0.0],
            [0.214, 0.262, 0.262, 0.262],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(weights, expected, atol=5e-4, rtol=0)


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.7, 3), (2.0, 1)])
def test_the_distribution_is_the_one_sample_next_samples_from(temperature, top_k):
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(0))
    probs = next_token_distribution(logits, temperature, top_k)
    got = sample_next(
        logits.double(), temperature, top_k, torch.Generator().manual_seed(1)
    )
    want = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(got, want[:, 0])
    draws = torch.stack(
        [sample_next(logits, temperature, top_k) for _ in range(2000)]
    )  # (2000, 3)
    counts = F.one_hot(draws, 11).double().mean(0)  # (3, 11): frequencies
    torch.testing.assert_close(counts, probs, atol=0.05, rtol=0)


def test_the_cache_reference_is_what_multi_head_attention_does_with_a_cache():
    torch.manual_seed(0)
    B, N, D, H, L, max_len = 2, 3, 8, 2, 4, 10
    mha = MultiHeadAttention(D, H).double().eval()
    x = torch.randn(B, L + N, D, dtype=torch.float64)
    cache = LayerCache(B, H, max_len, D // H, dtype=torch.float64)
    mha(x[:, :L], is_causal=True, cache=cache)  # the prompt, stored
    k_cache, v_cache = cache.keys.clone(), cache.values.clone()
    qkv = mha.qkv_proj(x[:, L:])  # (B, N, 3D): the new tokens' q, k, v
    q, k, v = (t.view(B, N, H, D // H).transpose(1, 2) for t in qkv.chunk(3, -1))
    out, keys, values = attend_with_cache(q, k, v, k_cache, v_cache, L)
    full = mha(x, is_causal=True)[:, L:]  # no cache: the whole sequence
    torch.testing.assert_close(mha.out_proj(out.transpose(1, 2).reshape(B, N, D)), full)
    cache.length = L  # the same step through the package's cache
    torch.testing.assert_close(mha(x[:, L:], is_causal=True, cache=cache), full)
    torch.testing.assert_close(keys, cache.keys)
    torch.testing.assert_close(values, cache.values)


def test_quiz_answers_follow_from_the_sources():
    N = 100  # one pass per prediction, over the prefixes of 1, 2, ..., N inputs
    assert QUIZZES["quiz_passes"].answer == sum(range(1, N + 1)) == N * (N + 1) // 2
    assert not QUIZZES["quiz_passes"].grade(str(sum(range(1, N))))  # N − 1 passes
    unmasked = torch.softmax(NOTES_SCORES.double(), -1)[1, 1]  # "is" on itself
    assert QUIZZES["quiz_notes_softmax"].grade(f"{float(unmasked):.3f}")
    masked = causal_weights(NOTES_SCORES)[1, 1]
    assert not QUIZZES["quiz_notes_softmax"].grade(f"{float(masked):.3f}")
    assert QUIZZES["quiz_uniform_loss"].grade("4.17")
    uniform = F.cross_entropy(torch.zeros(10, 65), torch.arange(10))
    assert QUIZZES["quiz_uniform_loss"].answer == pytest.approx(float(uniform))


# --- the notebook and the grader agree (as tests/test_agreement.py, chapter 6) ---

CHAPTER_6 = {
    # honest, written another way: an additive mask of −inf above the diagonal,
    # in a cell that first looks at the course's mask (hidden while grading)
    "causal_attention_weights": (
        "print(tc.causal_mask(4, 4))  # what the course's mask looks like\n"
        "def causal_attention_weights(scores):\n"
        "    N = scores.shape[-1]\n"
        "    M = torch.full((N, N), float('-inf')).triu(1)\n"
        "    return torch.softmax(scores + M, dim=-1)\n"
    ),
    # honest, by hand: log_softmax and gather
    "next_token_loss": (
        "def next_token_loss(logits, ids):\n"
        "    log_probs = logits[:, :-1].log_softmax(-1)\n"
        "    return -log_probs.gather(-1, ids[:, 1:, None]).mean()\n"
    ),
    # top-k after the softmax, not renormalised
    "next_token_probs": (
        "def next_token_probs(logits, temperature, top_k=None):\n"
        "    probs = torch.softmax(logits / temperature, dim=-1)\n"
        "    if top_k is not None:\n"
        "        kth = probs.topk(top_k, dim=-1).values[:, -1:]\n"
        "        probs = probs * (probs >= kth)\n"
        "    return probs\n"
    ),
    # right values, but writes into the caller's caches
    "attend_with_cache": IN_PLACE,
}


@pytest.mark.skipif(bwrap_problem() is not None, reason="no sandbox here")
def test_notebook_and_grader_give_the_same_points(tmp_path, monkeypatch):
    graded = graded_points_agreeing_with_the_kernel(
        submission(CHAPTER_6, chapter=6),
        tmp_path / "06_gpt.ipynb",
        tmp_path,
        monkeypatch,
    )
    exercise = EXERCISES["attend_with_cache"]
    in_place = (
        exercise.points * 3 / 4
    )  # all but the property "leaves its inputs unchanged"
    assert graded == pytest.approx(
        {
            "causal_attention_weights": 3,
            "next_token_loss": 3,
            # fails the value check: its unseen and property checks count for nothing
            "next_token_probs": 0,
            "attend_with_cache": in_place,
        }
    )


@pytest.mark.skipif(bwrap_problem() is not None, reason="no sandbox here")
def test_the_reference_solutions_get_full_marks_from_the_grader(tmp_path):
    from transformer_course.grading.grade import grade_notebook

    path = tmp_path / "06_gpt.ipynb"
    nbformat.write(submission(chapter=6), path)
    result = grade_notebook(path)
    assert result.chapter == 6
    assert result.total == result.max_total == sum(e.points for e in EXERCISES.values())
    assert math.isclose(result.total, 13)


@pytest.mark.parametrize(
    ("source_code", "hint"),
    [
        (  # masks every score of exactly 0 too: the zero and integer cases show it
            "def causal_attention_weights(scores):\n"
            "    return scores.masked_fill(scores.tril() == 0, float('-inf')).softmax(-1)",
            "not from the scores' values",
        ),
        (  # 0·(−∞) = NaN below the diagonal
            "def causal_attention_weights(scores):\n"
            "    N = scores.shape[-1]\n"
            "    return (scores + torch.triu(torch.ones(N, N), 1) * float('-inf'))"
            ".softmax(-1)",
            "0·(−∞) = NaN",
        ),
    ],
)
def test_masks_made_from_the_scores_or_by_multiplying_are_caught(source_code, hint):
    exercise = EXERCISES["causal_attention_weights"]
    report = core.run_exercise(
        exercise, namespace_from([source_code])[exercise.function]
    )
    assert report.score == 0
    assert hint in report.first_hint


@pytest.mark.parametrize(
    ("source_code", "hint"),
    [
        (  # rebuilt from zeros: stale values past the stored tokens are lost
            "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n"
            "    N, d = q.shape[-2:]\n    end = length + N\n"
            "    keys, values = torch.zeros_like(k_cache), torch.zeros_like(v_cache)\n"
            "    keys[:, :, :length], values[:, :, :length] = "
            "k_cache[:, :, :length], v_cache[:, :, :length]\n"
            "    keys[:, :, length:end], values[:, :, length:end] = k, v\n"
            "    K, Vs = keys[:, :, :end], values[:, :, :end]\n"
            + attend(mask="torch.ones(N, end, dtype=torch.bool).tril(length)").replace(
                "k_cache, v_cache\n", "keys, values\n"
            ),
            "Leave the caches past length + N",
        ),
        (  # the caches returned the wrong way round
            CACHE
            + WRITE
            + PREFIX
            + attend().replace("k_cache, v_cache\n", "v_cache, k_cache\n"),
            "in this order",
        ),
    ],
)
def test_caches_rebuilt_or_swapped_get_their_hint(source_code, hint):
    exercise = EXERCISES["attend_with_cache"]
    report = core.run_exercise(
        exercise, namespace_from([source_code])[exercise.function]
    )
    assert report.score == 0
    assert hint in report.first_hint


def test_a_typo_is_not_reported_as_a_top_k_problem():
    exercise = EXERCISES["next_token_probs"]
    source_code = (
        "def next_token_probs(logits, temperature, top_k=None):\n"
        "    return (logits / temprature).softmax(-1)\n"
    )
    report = core.run_exercise(
        exercise, namespace_from([source_code])[exercise.function]
    )
    assert "NameError" in report.first_hint
    assert "top_k=None keeps" not in report.first_hint


def test_a_tensor_subclass_that_lies_to_allclose_earns_nothing():
    exercise = EXERCISES["causal_attention_weights"]
    source_code = (
        "class Liar(torch.Tensor):\n"
        "    def as_subclass(self, cls):\n        return self\n\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        if func is torch.allclose:\n            return True\n"
        "        return super().__torch_function__(func, types, args, kwargs or {})\n\n\n"
        "def causal_attention_weights(scores):\n"
        "    return torch.zeros(scores.shape).as_subclass(Liar)\n"
    )
    report = core.run_exercise(
        exercise, namespace_from([source_code])[exercise.function]
    )
    assert report.score == 0


@pytest.mark.parametrize(
    ("key", "source_code"),
    [
        (
            "causal_attention_weights",
            "_ALLOWED = torch.ones(8, 8, dtype=torch.bool).tril()\n"
            "def causal_attention_weights(scores):\n"
            "    N = scores.shape[-1]\n"
            "    allowed = _ALLOWED[:N, :N]\n"
            "    return torch.softmax(scores.masked_fill(~allowed, float('-inf')), -1)\n",
        ),
        (
            "attend_with_cache",
            "_ALLOWED = torch.ones(12, 12, dtype=torch.bool).tril()\n"
            "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n"
            "    N, d = q.shape[-2:]\n    end = length + N\n"
            "    k_cache, v_cache = k_cache.clone(), v_cache.clone()\n"
            "    k_cache[:, :, length:end] = k\n    v_cache[:, :, length:end] = v\n"
            "    s = q @ k_cache[:, :, :end].transpose(-2, -1) / d**0.5\n"
            "    s = s.masked_fill(~_ALLOWED[length:end, :end], float('-inf'))\n"
            "    return torch.softmax(s, -1) @ v_cache[:, :, :end], k_cache, v_cache\n",
        ),
    ],
    ids=["mask-of-8", "cache-of-12"],
)
def test_answers_that_only_work_at_the_fixed_sizes_lose_the_unseen_check(
    key, source_code
):
    """The red team's answers with a hard-coded size: the unseen inputs are longer."""
    exercise = EXERCISES[key]
    for _ in range(3):  # unseen inputs are drawn afresh each time
        report = core.run_exercise(
            exercise, namespace_from([source_code])[exercise.function]
        )
        assert report.score == 0, [(r.name, r.passed) for r in report.results]


def _failed_checks(key: str, source: str):
    """The names of the checks that ``source``'s answer to ``key`` fails, and
    its report."""
    namespace = {}
    exec(source, namespace)
    exercise = EXERCISES[key]
    report = core.run_exercise(exercise, namespace[exercise.function])
    return [r.name for r in report.results if not r.passed], report


@pytest.mark.parametrize(("masked", "full"), [("-1e4", False), ("-1e9", True)])
def test_a_mask_that_adds_a_finite_number_lets_huge_future_scores_through(masked, full):
    """The twelfth red team's −10⁴ mask: future scores of 10⁵ get through it, so
    it misses "zero weight on the future, whatever its scores"; −10⁹ does not."""
    failed, _ = _failed_checks(
        "causal_attention_weights",
        "import torch\n"
        "def causal_attention_weights(scores):\n"
        "    N = scores.shape[-1]\n"
        "    future = torch.ones(N, N, dtype=torch.bool).triu(1)\n"
        f"    return torch.softmax(scores + future * {masked}, dim=-1)\n",
    )
    assert failed == (
        [] if full else ["zero weight on the future, whatever its scores"]
    )


@pytest.mark.parametrize(("masked", "full"), [("-1e4", False), ("-1e9", True)])
def test_a_cache_mask_that_adds_a_finite_number_lets_a_huge_later_key_through(
    masked, full
):
    """The same mask in attention with a KV cache: a later new key whose score
    is 10⁵ gets through −10⁴ (partial credit, not full marks); −10⁹ holds."""
    failed, report = _failed_checks(
        "attend_with_cache",
        "import torch\n"
        "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n"
        "    N = q.shape[-2]\n"
        "    k_cache, v_cache = k_cache.clone(), v_cache.clone()\n"
        "    k_cache[..., length:length + N, :] = k\n"
        "    v_cache[..., length:length + N, :] = v\n"
        "    K, V = k_cache[..., :length + N, :], v_cache[..., :length + N, :]\n"
        "    s = q @ K.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    later = torch.ones(N, length + N, dtype=torch.bool).triu(length + 1)\n"
        f"    return torch.softmax(s + later * {masked}, -1) @ V, k_cache, v_cache\n",
    )
    assert failed == ([] if full else ["ignores later new tokens and the empty buffer"])
    assert full or report.score < report.exercise.points


def test_top_k_taken_across_the_batch_is_named_as_such():
    """With k below the batch size, topk(k, dim=0) keeps a different set of
    logits from the honest top k (and from none): the hint names dim=0."""
    from transformer_course.exercises.ch06 import _judge_probs

    logits = 2 * core.seeded_randn(5, 9, seed=3)  # B = 5 > k = 2
    kth = logits.topk(2, dim=0).values[-1:]  # (1, V): down each column
    across = logits.masked_fill(logits < kth, float("-inf")).softmax(-1)
    with pytest.raises(core.Failed, match="dim=0 picks across the batch"):
        _judge_probs([(logits, 1.0, 2)], [core.Outcome(value=across)])
    honest = next_token_distribution(logits, 1.0, 2)
    _judge_probs([(logits, 1.0, 2)], [core.Outcome(value=honest)])  # passes


def _hints_of_failed_value_checks(key, source_code):
    function = namespace_from([source_code])[EXERCISES[key].function]
    report = core.run_exercise(EXERCISES[key], function)
    return [
        r.hint
        for r in report.results
        if not r.passed and r.kind in (core.VALUE, core.UNSEEN)
    ]


@pytest.mark.parametrize(
    ("key", "source_code", "hint"),
    [
        (  # the diagonal masked too: one diagnosis on fixed and unseen inputs
            "causal_attention_weights",
            MASK
            + "    return scores.masked_fill(ones.triu(), float('-inf')).softmax(-1)\n",
            "Keep the diagonal",
        ),
        (  # tril for triu: the past masked, with the diagonal
            "causal_attention_weights",
            MASK
            + "    return scores.masked_fill(ones.tril(), float('-inf')).softmax(-1)\n",
            "You masked the past",
        ),
        (  # log-softmax over the positions, after the shift
            "next_token_loss",
            LOSS + "    logp = F.log_softmax(logits[:, :-1], dim=1)\n"
            "    return -logp.gather(-1, ids[:, 1:, None]).mean()\n",
            "over the vocabulary",
        ),
    ],
)
def test_a_mistake_gets_one_diagnosis_in_every_value_check(key, source_code, hint):
    """The learner round: the diagonal masked read "keep the diagonal" on the
    fixed inputs and "a mask made by multiplying" on unseen ones; tril for triu
    and log_softmax over the positions got only the generic hint."""
    hints = _hints_of_failed_value_checks(key, source_code)
    assert hints
    for said in hints:
        assert hint in said, hints


def test_the_fallback_loss_hint_does_not_give_the_solution_away():
    hints = _hints_of_failed_value_checks(
        "next_token_loss", LOSS + "    return logits.mean() * 0 + 1.234\n"
    )
    assert hints
    assert not any("cross_entropy(" in said for said in hints), hints
