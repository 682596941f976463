"""Every chapter's exercises: the reference solutions in the source notebook pass
every check for full points, and the generated stubs report "not attempted"."""

import nbformat
import pytest
from exercise_helpers import ROOT, given_cells, namespace_from, solution_cells

from tools.release import student_version
from transformer_course.exercises import CHAPTERS, chapter, core

SOURCES = {
    n: next((ROOT / "exercises" / "source").glob(f"{n:02d}_*.ipynb")) for n in CHAPTERS
}
CASES = [(n, key) for n in CHAPTERS for key in chapter(n).exercises]


def test_every_chapter_has_a_source_notebook_and_enough_exercises():
    for n in CHAPTERS:
        assert SOURCES[n].is_file()
        assert len(chapter(n).exercises) >= 4
        assert len(chapter(n).quizzes) >= 4


def kernel_history(notebook) -> list[str]:
    """``In`` as a kernel that ran ``notebook`` top to bottom holds it: every
    code cell's source, magics transformed, after the empty entry 0. The checks
    read it (names computed with the course package, runner.py), so the
    reference solutions are checked as a learner's run would check them (the
    fourteenth red team found them failing in a kernel, where ``device =
    tc.setup()`` is in the history, while they passed here)."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    return ["", *(transform(c.source) for c in notebook.cells if c.cell_type == "code")]


@pytest.fixture(scope="module")
def namespaces():
    """chapter -> (namespace with the reference solutions, namespace with the stubs)"""
    result = {}
    for n, path in SOURCES.items():
        source = nbformat.read(path, as_version=4)
        given = given_cells(source)
        solved = namespace_from([*given, *solution_cells(source).values()])
        solved["In"] = kernel_history(source)
        stubs = solution_cells(student_version(source)).values()
        result[n] = (solved, namespace_from([*given, *stubs]))
    return result


def test_the_history_holds_the_setup_cell():
    history = kernel_history(nbformat.read(SOURCES[6], as_version=4))
    assert any("tc.setup(" in entry for entry in history)


@pytest.mark.parametrize(
    ("number", "key"), CASES, ids=[f"ch{n:02d}-{k}" for n, k in CASES]
)
def test_reference_solution_passes_every_check(namespaces, number, key):
    exercise = chapter(number).exercises[key]
    report = core.run_exercise(exercise, namespaces[number][0][exercise.function])
    assert report.status == "passed", report.results
    assert report.score == exercise.points


@pytest.mark.parametrize(
    ("number", "key"), CASES, ids=[f"ch{n:02d}-{k}" for n, k in CASES]
)
def test_stub_is_not_attempted(namespaces, number, key):
    exercise = chapter(number).exercises[key]
    report = core.run_exercise(exercise, namespaces[number][1][exercise.function])
    assert report.status == "not attempted"
    assert report.score == 0


@pytest.mark.parametrize("number", sorted(CHAPTERS))
def test_a_not_implemented_error_from_deeper_down_is_a_failure_not_a_stub(number):
    """Only the function's own ``raise NotImplementedError`` reads "not attempted";
    one raised inside torch (say, an operation missing on this device) or by a
    helper is the learner's bug, reported with its message."""
    key, exercise = next(iter(chapter(number).exercises.items()))
    source = (
        "def helper(*args):\n"
        "    raise NotImplementedError('not implemented for this device')\n\n"
        f"def {exercise.function}(*args):\n"
        "    return helper(*args)\n"
    )
    report = core.run_exercise(exercise, namespace_from([source])[exercise.function])
    assert report.status == "failed", key
    assert "NotImplementedError" in report.first_hint
    assert "not implemented for this device" in report.first_hint
    assert report.score == 0


# Functions that ignore their inputs (or most of them): right shapes and types,
# wrong values. They must earn nothing (issue 9).
DEGENERATE = {
    (1, "build_char_vocab"): ["def build_char_vocab(text):\n    return {}"],
    (1, "merge_pair"): ["def merge_pair(ids, pair, new_id):\n    return list(ids)"],
    (1, "embed_one_hot"): [
        "def embed_one_hot(ids, table):\n"
        "    return torch.zeros(*ids.shape, table.shape[1], dtype=table.dtype)"
    ],
    (1, "patchify"): [
        "def patchify(images, p):\n    B, C, H, W = images.shape\n"
        "    return torch.zeros(B, (H // p) * (W // p), C * p * p)"
    ],
    (2, "stable_softmax"): [
        "def stable_softmax(x):\n    return torch.full_like(x, 1 / x.shape[-1])"
    ],
    (2, "attention_weights"): [
        "def attention_weights(q, k, mask=None):\n"
        "    return torch.full((*q.shape[:-1], k.shape[-2]), 1 / k.shape[-2])"
    ],
    (2, "attention"): [
        "def attention(q, k, v):\n"
        "    return v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1])",
        "def attention(q, k, v):\n    return torch.zeros(*q.shape[:-1], v.shape[-1])",
    ],
    (2, "additive_score"): [
        "def additive_score(q, k, W_q, W_k, w):\n    return torch.zeros(k.shape[0])"
    ],
    (3, "split_heads"): [
        "def split_heads(x, h):\n    B, N, D = x.shape\n"
        "    return torch.zeros(B, h, N, D // h)"
    ],
    (3, "merge_heads"): [
        "def merge_heads(x):\n    B, H, N, d = x.shape\n    return torch.zeros(B, N, H * d)"
    ],
    (3, "multihead_forward"): [
        "def multihead_forward(x, W_qkv, W_o, n_heads):\n    return x",
        "def multihead_forward(x, W_qkv, W_o, n_heads):\n    return torch.zeros_like(x)",
    ],
    (3, "mha_parameter_count"): [
        "def mha_parameter_count(d_model, n_heads, bias):\n    return 0"
    ],
    (3, "heads_from_torch"): [
        "def heads_from_torch(W, n_heads):\n    D = W.shape[1]\n"
        "    return torch.zeros(3, n_heads, D // n_heads, D)"
    ],
    (4, "layer_norm"): [
        "def layer_norm(x, gamma, beta, eps=1e-5):\n    return torch.zeros_like(x)",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n    return x",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n    return beta.expand_as(x).clone()",
    ],
    (4, "mlp_forward"): [
        "def mlp_forward(x, W1, b1, W2, b2):\n    return torch.zeros_like(x)",
        "def mlp_forward(x, W1, b1, W2, b2):\n    return b2.expand_as(x).clone()",
    ],
    (4, "pre_norm_block"): [
        "def pre_norm_block(x, params, n_heads):\n    return x",
        "def pre_norm_block(x, params, n_heads):\n    return torch.zeros_like(x)",
    ],
    (4, "post_norm_block"): [
        "def post_norm_block(x, params, n_heads):\n    return x",
        "def post_norm_block(x, params, n_heads):\n"
        "    mean = x.mean(-1, keepdim=True)\n"
        "    return (x - mean) / x.std(-1, keepdim=True, unbiased=False)",
    ],
    (4, "block_parameter_count"): [
        "def block_parameter_count(d_model, n_heads, d_mlp, bias=True):\n    return 0"
    ],
    (5, "sinusoidal_table"): [
        "def sinusoidal_table(n_tokens, d_model):\n"
        "    return torch.zeros(n_tokens, d_model)",
        # row 0 for every position: the right norms, no position at all
        "def sinusoidal_table(n_tokens, d_model):\n"
        "    return torch.tensor([0.0, 1.0]).repeat(n_tokens, d_model // 2)",
    ],
    (5, "apply_rope"): [
        "def apply_rope(x, offset=0):\n    return x.clone()",
        "def apply_rope(x, offset=0):\n    return torch.zeros_like(x)",
    ],
    (5, "add_learned_positions"): [
        "def add_learned_positions(x, table, offset=0):\n    return x.clone()",
        "def add_learned_positions(x, table, offset=0):\n    return torch.zeros_like(x)",
    ],
    (5, "relative_scores"): [
        "def relative_scores(q, k, positions_q, positions_k):\n"
        "    return torch.zeros(q.shape[0], k.shape[0])",
    ],
    (5, "alibi"): [
        "def alibi(n_heads, n_tokens):\n"
        "    return torch.zeros(n_heads, n_tokens, n_tokens)",
        # the right distances, one slope for every head and size
        "def alibi(n_heads, n_tokens):\n"
        "    n = torch.arange(n_tokens)\n"
        "    d = (n[:, None] - n[None, :]).abs()\n"
        "    return -0.5 * d.expand(n_heads, -1, -1)",
    ],
    (6, "causal_attention_weights"): [
        # causal and normalised, but blind to the scores
        "def causal_attention_weights(scores):\n"
        "    n_q, n_k = scores.shape[-2:]\n"
        "    w = torch.ones(n_q, n_k).tril(n_k - n_q)\n"
        "    return (w / w.sum(-1, keepdim=True)).expand(scores.shape).clone()",
    ],
    (6, "next_token_loss"): [
        "def next_token_loss(logits, ids):\n"
        "    return torch.tensor(float(logits.shape[-1])).log()",
    ],
    (6, "next_token_probs"): [
        "def next_token_probs(logits, temperature, top_k=None):\n"
        "    return torch.full_like(logits, 1 / logits.shape[-1])",
    ],
    (6, "attend_with_cache"): [
        "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n"
        "    return torch.zeros_like(q), k_cache.clone(), v_cache.clone()",
    ],
    (7, "embed_patches"): [
        "def embed_patches(images, weight, bias, patch_size):\n"
        "    B, C, height, width = images.shape\n"
        "    N = (height // patch_size) * (width // patch_size)\n"
        "    return torch.zeros(B, N, weight.shape[0])",
        # the bias alone, for every patch of every image
        "def embed_patches(images, weight, bias, patch_size):\n"
        "    B, C, height, width = images.shape\n"
        "    N = (height // patch_size) * (width // patch_size)\n"
        "    return bias.expand(B, N, -1).clone()",
    ],
    (7, "vit_input"): [
        "def vit_input(patch_tokens, class_token, positions):\n"
        "    return positions.expand(patch_tokens.shape[0], -1, -1).clone()",
    ],
    (7, "classify"): [
        "def classify(features, weight, bias, pool):\n"
        "    return bias.expand(features.shape[0], -1).clone()",
    ],
    (7, "rollout"): [
        # rows sum to 1 and no mixing gives the identity, but blind to the maps
        "def rollout(maps, residual=True):\n"
        "    B, _, L, _ = maps[0].shape\n"
        "    return torch.eye(L).expand(B, L, L).clone()",
        "def rollout(maps, residual=True):\n"
        "    B, _, L, _ = maps[0].shape\n"
        "    return torch.full((B, L, L), 1 / L)",
    ],
    (7, "vit_flops"): [
        "def vit_flops(image_size, patch_size, channels, d_model, d_mlp, n_layers,\n"
        "              n_classes, class_token):\n"
        "    return 0",
    ],
}


def test_every_exercise_has_degenerate_answers_in_the_table():
    assert set(DEGENERATE) == set(CASES)


@pytest.mark.parametrize(
    ("number", "key", "source"),
    [(n, k, s) for (n, k), sources in DEGENERATE.items() for s in sources],
)
def test_a_function_that_ignores_its_inputs_earns_nothing(number, key, source):
    exercise = chapter(number).exercises[key]
    report = core.run_exercise(exercise, namespace_from([source])[exercise.function])
    assert report.status == "failed"
    assert report.score == 0, report.results
