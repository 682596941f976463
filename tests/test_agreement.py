"""The notebook and the grader agree (issue 9): the same submission, run top to
bottom in a real kernel (the score each check cell returns under nbgrader) and
graded in the sandbox, gets the same points for every exercise.

The submissions mix honest answers written in unusual ways (a helper from an
earlier exercise, an answer in a new cell under the stub, an import in a cell of
its own, a helper function in its own cell) with usual mistakes and cheats.
"""

import nbformat
import pytest
from exercise_helpers import insert_after, submission
from nbclient import NotebookClient

from transformer_course.grading.grade import grade_notebook
from transformer_course.grading.sandbox import bwrap_problem

pytestmark = pytest.mark.skipif(
    bwrap_problem() is not None, reason=f"no sandbox here: {bwrap_problem()}"
)


def kernel_scores(notebook, tmp_path, monkeypatch):
    """Run the notebook in a kernel; exercise key -> the score its check returned."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # checks return points
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    scores = {}
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if not grade_id.startswith("check_"):
            continue
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, errors  # a check cell itself never fails
        scores[grade_id.removeprefix("check_")] = float(results[0].data["text/plain"])
    return scores


CHAPTER_1 = {
    # right values, but the caller's list is changed
    "merge_pair": (
        "def merge_pair(ids, pair, new_id):\n"
        "    out = []\n"
        "    while ids:\n"
        "        if len(ids) > 1 and (ids[0], ids[1]) == tuple(pair):\n"
        "            out.append(new_id)\n"
        "            del ids[:2]\n"
        "        else:\n"
        "            out.append(ids.pop(0))\n"
        "    return out\n"
    ),
    # the forbidden lookup
    "embed_one_hot": "def embed_one_hot(ids, table):\n    return table[ids]\n",
    # checks only the height for divisibility
    "patchify": (
        "def patchify(images, p):\n"
        "    B, C, H, W = images.shape\n"
        "    if H % p:\n"
        "        raise ValueError(f'{H}x{W} is not divisible by {p}')\n"
        "    grid = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)\n"
        "    return grid.reshape(B, -1, C * p * p)\n"
    ),
}


def chapter_1_edits(notebook):
    # build_char_vocab through a helper defined in a cell of its own, above the stub
    insert_after(
        notebook, "ex1-text", "def _sorted_chars(text):\n    return sorted(set(text))\n"
    )
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "build_char_vocab":
            cell.source = (
                "def build_char_vocab(text):\n"
                "    return {c: i for i, c in enumerate(_sorted_chars(text))}\n"
            )


CHAPTER_2 = {
    # right values, but the caller's tensor is changed in place
    "stable_softmax": (
        "def stable_softmax(x):\n"
        "    x -= x.max(-1, keepdim=True).values\n"
        "    e = x.exp()\n"
        "    return e / e.sum(-1, keepdim=True)\n"
    ),
    # uses the learner's own stable_softmax, as the exercise allows
    "attention_weights": (
        "def attention_weights(q, k, mask=None):\n"
        "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    return stable_softmax(s)\n"
    ),
    "attention": "def attention(q, k, v):\n    raise NotImplementedError()\n",
}


def chapter_2_edits(notebook):
    # the stub of `attention` is left as it is; the answer is in new cells below
    insert_after(
        notebook,
        "attention",
        "import torch.nn.functional as Fn",
        "def attention(q, k, v):\n"
        "    w = Fn.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)\n"
        "    return w @ v\n",
    )


@pytest.mark.parametrize(
    ("chapter", "name", "replacements", "edit", "expected"),
    [
        (
            1,
            "01_tokens.ipynb",
            CHAPTER_1,
            chapter_1_edits,
            {
                "build_char_vocab": 3,
                "merge_pair": 2.5,  # loses "leaves its inputs unchanged" only
                "embed_one_hot": 0,  # forbidden lookup
                "patchify": 3.2,  # loses the ValueError property only
            },
        ),
        (
            2,
            "02_attention.ipynb",
            CHAPTER_2,
            chapter_2_edits,
            {
                "stable_softmax": 2.5,  # loses "leaves its inputs unchanged" only
                "attention_weights": 4,
                "attention": 3,
                "additive_score": 2,
            },
        ),
    ],
    ids=["chapter1", "chapter2"],
)
def test_notebook_and_grader_give_the_same_points(
    tmp_path, monkeypatch, chapter, name, replacements, edit, expected
):
    notebook = submission(replacements, edit, chapter=chapter)
    path = tmp_path / name
    nbformat.write(notebook, path)
    graded = {e.key: e.points for e in grade_notebook(path).exercises}
    in_kernel = kernel_scores(nbformat.read(path, as_version=4), tmp_path, monkeypatch)
    assert in_kernel == pytest.approx(graded)
    for key, points in expected.items():
        assert graded[key] == pytest.approx(points), key


RAISES_ON_LINE_3 = (
    "def stable_softmax(logits, dim=-1):\n"
    "    top = logits.max(dim=dim).values\n"
    "    e = torch.exp(logits - top)\n"
    "    return e / e.sum(dim=dim, keepdim=True)\n"
)


def test_an_error_names_the_learners_line_in_both(tmp_path):
    """An answer that raises is told the line of its own code that raised, the
    same in a kernel (IPython keeps each cell's lines) and in the grader; a
    learner round had a 7-line function and no line to look at."""
    from IPython.core.interactiveshell import InteractiveShell

    from transformer_course.exercises import chapter, core

    shell = InteractiveShell.instance()
    shell.run_cell("import torch\n" + RAISES_ON_LINE_3)
    exercise = chapter(2).exercises["stable_softmax"]
    report = core.run_exercise(exercise, shell.user_ns["stable_softmax"])
    where = "(line 3 of stable_softmax: e = torch.exp(logits - top))"
    assert where in report.first_hint
    assert report.score == 0

    path = tmp_path / "02_attention.ipynb"
    nbformat.write(submission({"stable_softmax": RAISES_ON_LINE_3}, chapter=2), path)
    graded = {e.key: e for e in grade_notebook(path).exercises}["stable_softmax"]
    assert where in graded.hint
    assert graded.points == 0
