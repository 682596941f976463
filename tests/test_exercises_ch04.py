"""Chapter 4's exercise checks: each usual mistake fails with its hint and loses
points (reference solutions, stubs and degenerate answers:
tests/test_exercise_solutions.py), and the notebook and the grader agree."""

import nbformat
import pytest
import torch
from exercise_helpers import (
    graded_points_agreeing_with_the_kernel,
    namespace_from,
    read_source,
    solution_cells,
    submission,
    without_markers,
)

from tools.release import student_version
from transformer_course.block import Block, BlockConfig
from transformer_course.exercises import CHAPTERS, chapter, core
from transformer_course.exercises.ch04 import (
    EXERCISES,
    GIVEN,
    QUIZZES,
    _reference_block,
    block_parameters,
)
from transformer_course.grading.sandbox import bwrap_problem

REFERENCE = {k: without_markers(v) for k, v in solution_cells(read_source(4)).items()}
# what the block exercises build on: the learner's layer_norm and mlp_forward, and
# the given self_attention (its locked cell, above the pre_norm_block cell)
HELPERS = REFERENCE["layer_norm"] + "\n" + REFERENCE["mlp_forward"] + "\n" + GIVEN
LN = "def layer_norm(x, gamma, beta, eps=1e-5):\n    mean = x.mean(-1, keepdim=True)\n"
MLP = "def mlp_forward(x, W1, b1, W2, b2):\n"
PRE = (
    "def pre_norm_block(x, p, H):\n"
    "    def n1(h):\n        return layer_norm(h, p['norm_1.weight'], p['norm_1.bias'])\n"
    "    def n2(h):\n        return layer_norm(h, p['norm_2.weight'], p['norm_2.bias'])\n"
    "    def attn(h):\n        return self_attention(h, p, H)\n"
    "    def mlp(h):\n        return mlp_forward(h, p['mlp.up_proj.weight'], "
    "p['mlp.up_proj.bias'], p['mlp.down_proj.weight'], p['mlp.down_proj.bias'])\n"
)
POST = PRE.replace("def pre_norm_block", "def post_norm_block")
COUNT = "def block_parameter_count(D, H, m, bias=True):\n"

MISTAKES = [
    # --- layer_norm
    (
        "layer_norm",
        LN + "    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) "
        "* gamma + beta",
        "Use the biased variance",
    ),
    (
        "layer_norm",
        LN + "    std = x.var(-1, keepdim=True, unbiased=False).sqrt()\n"
        "    return (x - mean) / (std + eps) * gamma + beta",
        "inside the square root",
    ),
    (  # over the tokens of each sequence
        "layer_norm",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    mean = x.mean(-2, keepdim=True)\n"
        "    var = x.var(-2, keepdim=True, unbiased=False)\n"
        "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "not over the tokens or the batch",
    ),
    (  # BatchNorm's statistics: every token of the batch
        "layer_norm",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    dims = tuple(range(x.dim() - 1))\n"
        "    mean = x.mean(dims, keepdim=True)\n"
        "    var = x.var(dims, keepdim=True, unbiased=False)\n"
        "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "BatchNorm",
    ),
    (
        "layer_norm",
        LN + "    var = x.var(-1, keepdim=True, unbiased=False)\n"
        "    return (x - mean) / torch.sqrt(var + eps)",
        "γ ⊙ x̂ + β",
    ),
    (
        "layer_norm",
        LN + "    var = x.var(-1, keepdim=True, unbiased=False)\n"
        "    return (x - mean) / torch.sqrt(var + eps) * beta + gamma",
        "γ (gamma) multiplies",
    ),
    (
        "layer_norm",
        LN + "    var = x.var(-1, keepdim=True, unbiased=False)\n"
        "    return (x - mean) / torch.sqrt(var + eps) * gamma",
        "Add β",
    ),
    (
        "layer_norm",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)",
        "not to use F.layer_norm",
    ),
    (
        "layer_norm",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    norm = torch.nn.LayerNorm(x.shape[-1], eps=eps)\n"
        "    return norm(x) * gamma + beta",
        "not to use F.layer_norm",
    ),
    # --- mlp_forward
    (
        "mlp_forward",
        MLP + "    return (x @ W1.T + b1) @ W2.T + b2",
        "Apply the ReLU to the hidden layer",
    ),
    (
        "mlp_forward",
        MLP + "    return torch.relu(x @ W1 + b1) @ W2 + b2",
        "multiply by the transpose",
    ),
    (
        "mlp_forward",
        MLP + "    return torch.relu((x @ W1.T + b1) @ W2.T + b2)",
        "The ReLU goes between the two layers",
    ),
    (
        "mlp_forward",
        MLP + "    return torch.relu(torch.relu(x @ W1.T + b1) @ W2.T + b2)",
        "The ReLU goes between the two layers",
    ),
    (
        "mlp_forward",
        MLP + "    return torch.nn.functional.gelu(x @ W1.T + b1) @ W2.T + b2",
        "Use the ReLU",
    ),
    (
        "mlp_forward",
        MLP + "    return torch.relu(x @ W1.T) @ W2.T",
        "Add the biases",
    ),
    # --- pre_norm_block
    (
        "pre_norm_block",
        HELPERS + PRE + "    x = n1(x + attn(x))\n    return n2(x + mlp(x))",
        "That is the post-norm block",
    ),
    (
        "pre_norm_block",
        HELPERS + PRE + "    x = attn(n1(x))\n    return mlp(n2(x))",
        "residual connection",
    ),
    (
        "pre_norm_block",
        HELPERS + PRE + "    x = x + attn(n1(x))\n    return mlp(n2(x))",
        "residual connection",
    ),
    (
        "pre_norm_block",
        HELPERS + PRE + "    h = n1(x)\n    x = h + attn(h)\n    h = n2(x)\n"
        "    return h + mlp(h)",
        "not to its normalised copy",
    ),
    (
        "pre_norm_block",
        HELPERS + PRE + "    x = x + attn(n1(x))\n    return x + mlp(n1(x))",
        "its own normalisation, norm_2",
    ),
    (
        "pre_norm_block",
        HELPERS + PRE + "    x = x + attn(n2(x))\n    return x + mlp(n1(x))",
        "you swapped them",
    ),
    # a JupyterLab learner round: these two got the generic hint
    (
        "pre_norm_block",
        HELPERS + PRE + "    return x + attn(n1(x)) + mlp(n2(x))",
        "the parallel block",
    ),
    (
        "pre_norm_block",
        HELPERS + PRE + "    x = x + attn(n1(x))\n    return n2(x + mlp(n2(x)))",
        "ends with the sum, not a LayerNorm",
    ),
    # --- post_norm_block
    (
        "post_norm_block",
        HELPERS + POST + "    x = x + attn(n1(x))\n    return x + mlp(n2(x))",
        "That is the pre-norm block",
    ),
    (
        "post_norm_block",
        HELPERS + POST + "    x = x + n1(attn(x))\n    return x + n2(mlp(x))",
        "Normalise the sum",
    ),
    (
        "post_norm_block",
        HELPERS + POST + "    x = n1(attn(x))\n    return n2(mlp(x))",
        "residual connection",
    ),
    (
        "post_norm_block",
        HELPERS + POST + "    x = n1(x + attn(x))\n    return n1(x + mlp(x))",
        "its own normalisation, norm_2",
    ),
    (
        "post_norm_block",
        HELPERS + POST + "    x = n1(x + attn(x))\n    return x + mlp(x)",
        "Normalise after the MLP's addition too",
    ),
    # --- block_parameter_count
    (
        "block_parameter_count",
        COUNT + "    return 4 * D * D + 2 * D * m + 4 * D",
        "Add the biases of the linear layers",
    ),
    (
        "block_parameter_count",
        COUNT + "    return 4 * D * D + 2 * D * m + (5 * D + m if bias else 0)",
        "Count the two LayerNorms",
    ),
    (  # one norm, or γ only
        "block_parameter_count",
        COUNT + "    return 4 * D * D + 2 * D * m + (5 * D + m + 2 * D if bias else D)",
        "Count the two LayerNorms",
    ),
    (
        "block_parameter_count",
        COUNT
        + "    return 3 * D * D + 2 * D * m + (3 * D + D + m + 4 * D if bias else 2 * D)",
        "four D×D matrices",
    ),
    (
        "block_parameter_count",
        COUNT
        + "    return 4 * D * D + 8 * D * D + (4 * D + 4 * D + D + 4 * D if bias else 2 * D)",
        "Use d_mlp",
    ),
    (
        "block_parameter_count",
        COUNT + "    return H * (4 * D * D + 2 * D * m) + (13 * D if bias else 2 * D)",
        "must not depend on the number of heads",
    ),
    (
        "block_parameter_count",
        COUNT + "    return 4 * D * D + 2 * D * m + 9 * D + m",
        "With bias=False there are no biases",
    ),
]


#: (exercise, answer, the property check that fails, words of its hint)
PROPERTY_MISTAKES = [
    (  # mixes the tokens (a softmax over them): the property check says so
        "mlp_forward",
        MLP + "    h = torch.relu(x @ W1.T + b1)\n"
        "    return (h.softmax(-2) * h.shape[-2]) @ W2.T + b2",
        "a token's output ignores the other tokens",
        "depends on token n only",
    ),
    (
        "layer_norm",
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    dims = tuple(range(x.dim() - 1))\n"
        "    mean = x.mean(dims, keepdim=True)\n"
        "    var = x.var(dims, keepdim=True, unbiased=False)\n"
        "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "a token's output ignores the other tokens",
        "LayerNorm, not BatchNorm",
    ),
    (
        "layer_norm",
        LN + "    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps)",
        "with γ = 1, β = 0: each token has mean 0, variance 1",
        "the 1/D variance",
    ),
    (
        "pre_norm_block",
        HELPERS + PRE + "    h = n1(x)\n    x = h + attn(h)\n    h = n2(x)\n"
        "    return h + mlp(h)",
        "branches that output zero pass x through",
        "return its input unchanged",
    ),
    (
        "post_norm_block",
        HELPERS + POST + "    x = x + attn(n1(x))\n    return x + mlp(n2(x))",
        "with γ₂ = 1, β₂ = 0 each output token has mean 0, variance 1",
        "ends with norm_2",
    ),
]


def test_chapter_four_is_registered():
    ex = chapter(4)
    assert len(ex.exercises) >= 4
    assert len(ex.quizzes) >= 4
    assert set(QUIZZES) == set(ex.quizzes)
    assert EXERCISES["layer_norm"].forbidden == ("layer_norm",)
    box = ex.quiz("quiz_block_parameters")
    box.control.value = "3152384"
    box.submit.click()
    assert "Correct" in box.feedback.value


@pytest.mark.parametrize(
    ("d_model", "n_heads", "d_mlp", "bias"),
    [(512, 8, 2048, True), (64, 4, 100, False), (6, 3, 5, True)],
)
def test_parameter_counts_are_the_block_s_own(d_model, n_heads, d_mlp, bias):
    block = Block(BlockConfig(d_model, n_heads, d_mlp, bias=bias))
    assert block_parameters(d_model, n_heads, d_mlp, bias) == sum(
        p.numel() for p in block.parameters()
    )


def test_quiz_answers_follow_from_the_package():
    assert QUIZZES["quiz_block_parameters"].answer == block_parameters(
        512, 8, 2048, True
    )
    D = 512  # 2·N²·D (scores and weighted values) = 8·N·D² (the MLP) at N = 4D
    N = QUIZZES["quiz_crossover"].answer
    assert 2 * N * N * D == 8 * N * D * D


# --- the notebook and the grader agree (as tests/test_agreement.py, chapter 4) ---

CHAPTER_4 = {
    # honest, written another way: var_mean and rsqrt
    "layer_norm": (
        "def layer_norm(x, gamma, beta, eps=1e-5):\n"
        "    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)\n"
        "    return (x - mean) * torch.rsqrt(var + eps) * gamma + beta\n"
    ),
    # honest, with F.linear and an import in the cell
    "mlp_forward": (
        "import torch.nn.functional as F\n\n\n"
        "def mlp_forward(x, W1, b1, W2, b2):\n"
        "    return F.linear(F.relu(F.linear(x, W1, b1)), W2, b2)\n"
    ),
    # the post-norm order
    "pre_norm_block": REFERENCE["pre_norm_block"].split("def pre_norm_block")[0]
    + PRE
    + "    x = n1(x + attn(x))\n    return n2(x + mlp(x))\n",
    # no biases
    "block_parameter_count": COUNT + "    return 4 * D * D + 2 * D * m + 4 * D\n",
}


@pytest.mark.skipif(bwrap_problem() is not None, reason="no sandbox here")
def test_notebook_and_grader_give_the_same_points(tmp_path, monkeypatch):
    graded = graded_points_agreeing_with_the_kernel(
        submission(CHAPTER_4, chapter=4),
        tmp_path / "04_block.ipynb",
        tmp_path,
        monkeypatch,
    )
    assert graded == pytest.approx(
        {
            "layer_norm": 4,
            "mlp_forward": 3,
            # fails the value check: its unseen and property checks count for nothing
            "pre_norm_block": 0,
            # builds on the learner's layer_norm and mlp_forward
            "post_norm_block": 3,
            "block_parameter_count": 0,
        }
    )


# --- answers that are not the learner's own -------------------------------------------

ENCODER_LAYER = (
    "def {name}(x, p, H):\n"
    "    D, m = x.shape[-1], p['mlp.up_proj.weight'].shape[0]\n"
    "    layer = torch.nn.TransformerEncoderLayer(\n"
    "        D, H, m, dropout=0.0, batch_first=True, norm_first={norm_first}\n"
    "    ).eval()\n"
    "    names = {{'self_attn.in_proj_': 'attn.qkv_proj.', 'self_attn.out_proj.': "
    "'attn.out_proj.', 'linear1.': 'mlp.up_proj.', 'linear2.': 'mlp.down_proj.', "
    "'norm1.': 'norm_1.', 'norm2.': 'norm_2.'}}\n"
    "    layer.load_state_dict({{\n"
    "        mine + kind: p[theirs + kind]\n"
    "        for mine, theirs in names.items() for kind in ('weight', 'bias')\n"
    "    }})\n"
    "    with torch.no_grad():\n"
    "        return layer(x)\n"
)


@pytest.mark.parametrize(
    ("key", "norm_first"), [("pre_norm_block", True), ("post_norm_block", False)]
)
def test_torch_s_encoder_layer_is_not_the_learner_s_block(key, norm_first):
    exercise = EXERCISES[key]
    source_code = ENCODER_LAYER.format(name=key, norm_first=norm_first)
    function = namespace_from([source_code])[key]
    (x, params, H), *_ = exercise.checks[0].cases()
    want = core.call_cases(function, [(x, params, H)])[0].value  # unwatched: right
    torch.testing.assert_close(
        want, _reference_block(params, H, norm_first)(x).detach(), atol=1e-5, rtol=1e-4
    )
    report = core.run_exercise(exercise, function)
    assert report.score == 0
    assert "nn.TransformerEncoderLayer" in report.first_hint


#: The fortieth red team (4/4 in the grader before the fix): torch's layer on
#: its slow path (a new layer trains), its self_attn swapped for the given
#: attention, calls no forbidden name: it is refused as torch's layer itself.
SLOW_ENCODER_LAYER = (
    "import torch\nfrom torch import nn\n\n\n"
    "class GivenAttention(nn.Module):\n"
    "    def __init__(self, params, n_heads):\n"
    "        super().__init__()\n"
    "        self.params, self.n_heads = params, n_heads\n\n"
    "    def forward(self, q, k, v, **kwargs):\n"
    "        return (self_attention(q, self.params, self.n_heads), None)\n\n\n"
    "def pre_norm_block(x, params, n_heads):\n"
    "    D, d_mlp = x.shape[-1], params['mlp.up_proj.weight'].shape[0]\n"
    "    layer = nn.TransformerEncoderLayer(\n"
    "        D, n_heads, d_mlp, dropout=0.0, activation='relu', batch_first=True,\n"
    "        norm_first=True,\n"
    "    ).to(x.dtype)\n"
    "    with torch.no_grad():\n"
    "        for mine, theirs in (\n"
    "            (layer.norm1, 'norm_1'), (layer.norm2, 'norm_2'),\n"
    "            (layer.linear1, 'mlp.up_proj'), (layer.linear2, 'mlp.down_proj'),\n"
    "        ):\n"
    "            mine.weight.copy_(params[theirs + '.weight'])\n"
    "            mine.bias.copy_(params[theirs + '.bias'])\n"
    "    layer.self_attn = GivenAttention(params, n_heads)\n"
    "    return layer(x)\n"
)


@pytest.mark.parametrize("norm_first", [True, False])
def test_torch_s_encoder_layer_on_its_slow_path_is_refused(norm_first):
    key = "pre_norm_block" if norm_first else "post_norm_block"
    source_code = SLOW_ENCODER_LAYER.replace("def pre_norm_block", f"def {key}")
    source_code = source_code.replace("norm_first=True", f"norm_first={norm_first}")
    report = core.run_exercise(EXERCISES[key], namespace_from([source_code])[key])
    assert report.score == 0, report.first_hint
    assert "nn.TransformerEncoderLayer" in report.first_hint


LAYER_NORM_CHEATS = {
    # torch's own Python re-implementation of the operator
    "reference": "def layer_norm(x, gamma, beta, eps=1e-5):\n"
    "    import torch._refs\n"
    "    return torch._refs.native_layer_norm(x, [x.shape[-1]], gamma, beta, eps)[0]\n",
    # a cell that patches the runner (found through the garbage collector)
    "patched runner": "import contextlib\nimport gc\n\ngc.unfreeze()\n"
    "for watch in [o for o in gc.get_objects() if isinstance(o, type)]:\n"
    "    if watch.__name__ == '_Watch':\n"
    "        watch.modes = lambda self: (contextlib.nullcontext(),) * 2\n"
    "        watch.kernels = lambda self: contextlib.nullcontext()\n\n\n"
    "def layer_norm(x, gamma, beta, eps=1e-5):\n"
    "    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)\n",
}


@pytest.mark.skipif(bwrap_problem() is not None, reason="no sandbox here")
@pytest.mark.parametrize("cheat", sorted(LAYER_NORM_CHEATS))
def test_the_grader_refuses_a_layer_norm_that_is_torch_s(tmp_path, cheat):
    from transformer_course.grading.grade import grade_notebook

    path = tmp_path / "04_block.ipynb"
    nbformat.write(
        submission({"layer_norm": LAYER_NORM_CHEATS[cheat]}, chapter=4), path
    )
    # the watch itself: the screen would refuse the cheats' imports
    graded = {e.key: e for e in grade_notebook(path, screen=False).exercises}
    assert graded["layer_norm"].points == 0
    assert "not to" in graded["layer_norm"].hint
    if cheat == "patched runner":  # every exercise it runs before: the runner's
        # verdicts cannot be trusted once a cell has patched it (issue 20)
        assert graded["mlp_forward"].points == 0
        assert "switch off or look for its checks" in graded["mlp_forward"].hint
    else:
        assert graded["mlp_forward"].points == 3  # the rest of the notebook is graded


# --- an earlier function of the learner's that fails ----------------------------------

UNBIASED_LN = (
    LN + "    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) "
    "* gamma + beta\n"
)
FIX_FIRST = "First fix your layer_norm() (Exercise 1)"


def test_a_block_says_when_the_learner_s_own_layer_norm_is_the_mistake(monkeypatch):
    """The learner round: an unbiased variance in layer_norm failed both blocks
    with hints about the block's order. In the notebook, the block's report now
    names layer_norm first (checked on its current definition)."""
    import __main__
    from transformer_course.exercises import widgets

    namespace = namespace_from([HELPERS.replace(REFERENCE["layer_norm"], UNBIASED_LN)])
    for name in ("layer_norm", "mlp_forward"):
        monkeypatch.setitem(__main__.__dict__, name, namespace[name])
    block = namespace_from(
        [
            HELPERS.replace(REFERENCE["layer_norm"], UNBIASED_LN),
            REFERENCE["pre_norm_block"],
        ]
    )["pre_norm_block"]
    box = widgets.check_widget(EXERCISES["pre_norm_block"], block, EXERCISES)
    assert box.report.status == core.FAILED
    assert box.report.note.startswith(FIX_FIRST), box.report.note
    assert box.report.first_hint.startswith(FIX_FIRST)
    assert FIX_FIRST in widgets.report_text(box.report)
    # with a correct layer_norm and a wrong block, no such note
    monkeypatch.setitem(
        __main__.__dict__, "layer_norm", namespace_from([HELPERS])["layer_norm"]
    )
    box = widgets.check_widget(EXERCISES["pre_norm_block"], block, EXERCISES)
    assert box.report.note == "", box.report.note


def test_every_declared_foundation_is_called_by_the_reference_solution():
    """``builds_on`` names exercises of the same chapter whose functions the
    exercise's reference solution really calls."""
    import re

    for number in CHAPTERS:
        exercises = chapter(number).exercises
        cells = solution_cells(read_source(number))
        for key, exercise in exercises.items():
            for earlier in exercise.builds_on:
                assert earlier in exercises, (number, key, earlier)
                called = exercises[earlier].function
                assert re.search(rf"\b{called}\(", cells[key]), (number, key, earlier)


@pytest.mark.skipif(bwrap_problem() is not None, reason="no sandbox here")
def test_the_grader_names_the_learner_s_failing_layer_norm_in_the_blocks(tmp_path):
    from transformer_course.grading.grade import grade_notebook

    replacements = dict(REFERENCE) | {"layer_norm": UNBIASED_LN}
    notebook = submission(replacements, chapter=4)
    nbformat.write(notebook, tmp_path / "04_block.ipynb")
    keys = [
        "layer_norm",
        "pre_norm_block",
        "post_norm_block",
    ]  # mlp_forward: not graded
    graded = grade_notebook(tmp_path / "04_block.ipynb", only=keys).exercises
    grades = {e.key: e for e in graded}
    assert grades["layer_norm"].status == "failed"
    for key in ("pre_norm_block", "post_norm_block"):
        assert grades[key].status == "failed", grades[key]
        assert grades[key].hint.startswith(FIX_FIRST), grades[key].hint


# --- the given self_attention -------------------------------------------------------


@pytest.mark.parametrize("released", [False, True], ids=["source", "released"])
def test_the_given_attention_cell_is_locked_and_is_the_grader_s_text(released):
    """A JupyterLab learner round: self_attention sat in pre_norm_block's answer
    cell; deleted with it, it passed the live checks in the old kernel and
    failed in the grader. Now it is a locked cell that cannot be deleted, and
    the grader runs the same text (GIVEN) after its preamble."""
    notebook = read_source(4) if not released else student_version(read_source(4))
    (cell,) = [
        c
        for c in notebook.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "given_self_attention"
    ]
    assert cell.source.rstrip("\n") == GIVEN.rstrip("\n")
    assert cell.metadata.nbgrader.locked
    assert not cell.metadata.nbgrader.solution
    assert cell.metadata.deletable is False
    assert cell.metadata.editable is False
    assert "def self_attention" not in REFERENCE["pre_norm_block"]


@pytest.mark.skipif(bwrap_problem() is not None, reason="no sandbox here")
def test_the_grader_defines_the_given_attention_itself(tmp_path):
    from transformer_course.grading.grade import grade_notebook

    def without_given_cell(notebook):
        notebook.cells = [
            c
            for c in notebook.cells
            if c.metadata.get("nbgrader", {}).get("grade_id") != "given_self_attention"
        ]

    path = tmp_path / "04_block.ipynb"
    nbformat.write(submission(edit=without_given_cell, chapter=4), path)
    keys = ["pre_norm_block", "post_norm_block"]
    graded = {e.key: e for e in grade_notebook(path, only=keys).exercises}
    for key in keys:
        assert graded[key].status == "passed", graded[key]
        assert graded[key].points == EXERCISES[key].points
