"""Helpers for the exercise tests: load solutions and build submissions."""

import copy
from pathlib import Path

import nbformat

from tools.release import BEGIN, END, student_version

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "exercises" / "source" / "01_tokens.ipynb"
STUDENT = ROOT / "exercises" / "01_tokens.ipynb"
PRELUDE = "import torch\nimport torch.nn.functional as F\n"


def source_path(chapter=1):
    return next((ROOT / "exercises" / "source").glob(f"{chapter:02d}_*.ipynb"))


def read_source(chapter=1):
    return nbformat.read(source_path(chapter), as_version=4)


def solution_cells(notebook):
    """grade_id -> source, for the solution cells."""
    return {
        cell.metadata["nbgrader"]["grade_id"]: cell.source
        for cell in notebook.cells
        if cell.metadata.get("nbgrader", {}).get("solution")
    }


def given_cells(notebook):
    """The sources of the notebook's locked "given" cells (grade_id given_...,
    chapter 4's self_attention), which a kernel runs and the grader runs as its
    chapter's ``GIVEN``."""
    return [
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code"
        and cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("given_")
    ]


def namespace_from(sources):
    namespace = {}
    exec(PRELUDE, namespace)
    for source in sources:
        exec(source, namespace)
    return namespace


def without_markers(source):
    return "\n".join(
        line for line in source.splitlines() if line.strip() not in (BEGIN, END)
    )


def submission(replacements=None, edit=None, chapter=1):
    """A completed student notebook: the reference solutions, with the solution
    cells named in ``replacements`` (grade_id -> new source) swapped in, and
    ``edit(notebook)`` applied last."""
    notebook = student_version(read_source(chapter))
    reference = solution_cells(read_source(chapter))
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference:
            cell.source = (replacements or {}).get(
                grade_id, without_markers(reference[grade_id])
            )
    if edit is not None:
        edit(notebook)
    return copy.deepcopy(notebook)


def insert_after(notebook, grade_id, *sources):
    """Insert new (unlocked, metadata-free) code cells after the cell ``grade_id``,
    as a learner adding cells does."""
    index = next(
        i
        for i, cell in enumerate(notebook.cells)
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )
    for offset, source in enumerate(sources, start=1):
        notebook.cells.insert(index + offset, nbformat.v4.new_code_cell(source))
    return notebook


WRONG = {
    # ids in order of first appearance, not sorted: fails 1 of 3 checks
    "build_char_vocab": "def build_char_vocab(text):\n    return {c: i for i, c in enumerate(dict.fromkeys(text))}\n",
    # overlapping merges: fails a value check and the unseen one
    "merge_pair": (
        "def merge_pair(ids, pair, new_id):\n"
        "    out = []\n"
        "    for i in range(len(ids)):\n"
        "        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):\n"
        "            out.append(new_id)\n"
        "        elif i > 0 and (ids[i - 1], ids[i]) == tuple(pair):\n"
        "            continue\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "    return out\n"
    ),
    # left as the stub
    "embed_one_hot": "def embed_one_hot(ids, table):\n    raise NotImplementedError()\n",
}
# a failed unseen check voids the score; else value checks carry it (core.Report)
WRONG_SCORES = {
    "build_char_vocab": 0.0,  # its one value check fails
    "merge_pair": 0.0,  # 2 of 3 value checks pass, but the unseen one fails
    "embed_one_hot": 0.0,
    "patchify": 4.0,
}


# --- for the grader's tests (test_grade.py, test_sandbox.py, test_agreement.py) ---


def _needs_bwrap():
    import pytest

    from transformer_course.grading.sandbox import bwrap_problem

    return pytest.mark.skipif(
        bwrap_problem() is not None,
        reason=f"no sandbox on this machine: {bwrap_problem()}",
    )


needs_bwrap = _needs_bwrap()


def write(tmp_path, notebook, name="01_tokens.ipynb"):
    path = tmp_path / name
    nbformat.write(notebook, path)
    return path


def by_key(result):
    return {e.key: e for e in result.exercises}


def edited(source, *edits):
    """``source`` with each (old, new) edit made, each old text found exactly once."""
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def reference(key, chapter=1):
    """The reference solution of exercise ``key``, without the markers."""
    return without_markers(solution_cells(read_source(chapter))[key])


# --- for the chapters' exercise tests (test_exercises_ch04.py onwards) -------------


def assert_first_hint(exercise, source_code, hint):
    """``source_code`` (a usual mistake) fails ``exercise``, loses points, and the
    first failing check's hint contains ``hint``."""
    from transformer_course.exercises import core

    report = core.run_exercise(
        exercise, namespace_from([source_code])[exercise.function]
    )
    assert report.status == "failed"
    assert hint in report.first_hint, report.first_hint
    assert report.score < exercise.points


def assert_check_hint(exercise, source_code, check, hint):
    """``source_code`` fails the check named ``check`` with ``hint`` in its hint,
    and loses points."""
    from transformer_course.exercises import core

    report = core.run_exercise(
        exercise, namespace_from([source_code])[exercise.function]
    )
    failed = {r.name: r.hint for r in report.results if not r.passed}
    assert check in failed, failed
    assert hint in failed[check]
    assert report.score < exercise.points


def graded_points_agreeing_with_the_kernel(notebook, path, tmp_path, monkeypatch):
    """Write ``notebook`` to ``path``, grade it in the sandbox and run it in a real
    kernel; assert both give the same points and return them ({key: points})."""
    import pytest
    from test_agreement import kernel_scores

    from transformer_course.grading.grade import grade_notebook

    nbformat.write(notebook, path)
    graded = {e.key: e.points for e in grade_notebook(path).exercises}
    in_kernel = kernel_scores(nbformat.read(path, as_version=4), tmp_path, monkeypatch)
    assert in_kernel == pytest.approx(graded)
    return graded
