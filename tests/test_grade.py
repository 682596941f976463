"""The autograder: scores, and submissions that try to crash it or cheat.

Each grading starts one kernel per exercise (a few seconds each), so hostile
behaviours are combined into few submissions.
"""

import json
import subprocess
import sys

import nbformat
import pytest
from exercise_helpers import WRONG, WRONG_SCORES, submission

from transformer_course.exercises.ch01 import EXERCISES
from transformer_course.grade import grade_notebook

MAX = sum(e.points for e in EXERCISES.values())


def write(tmp_path, notebook, name="01_tokens.ipynb"):
    path = tmp_path / name
    nbformat.write(notebook, path)
    return path


def scores(result):
    return {e.key: e.points for e in result.exercises}


def test_cli_full_marks_for_the_solutions_and_json(tmp_path):
    path = write(tmp_path, submission())
    out = tmp_path / "grade.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_course.grade",
            str(path),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "TOTAL" in run.stdout
    assert f"{MAX}/{MAX}" in run.stdout
    data = json.loads(out.read_text())
    assert data["total"] == MAX
    assert data["max_total"] == MAX
    assert {e["key"]: e["status"] for e in data["exercises"]} == dict.fromkeys(
        EXERCISES, "passed"
    )


def test_partial_marks_for_a_deliberately_wrong_submission(tmp_path):
    result = grade_notebook(write(tmp_path, submission(WRONG)))
    assert scores(result) == pytest.approx(WRONG_SCORES)
    assert result.total == pytest.approx(sum(WRONG_SCORES.values()))
    by_key = {e.key: e for e in result.exercises}
    assert "sorted order" in by_key["build_char_vocab"].hint
    assert by_key["embed_one_hot"].status == "not attempted"


HOSTILE = {
    # exits before defining the function
    "build_char_vocab": "import sys\nsys.exit('bye')\ndef build_char_vocab(text):\n    return {}\n",
    # loops forever at the top of the cell
    "merge_pair": "while True:\n    pass\n",
    # kills the kernel when called
    "embed_one_hot": "import os\ndef embed_one_hot(ids, table):\n    os._exit(3)\n",
}


def flood_then_solve(reference):
    return (
        "import os, sys\n"
        "for _ in range(50):\n"
        "    print('x' * 200_000)\n"
        "    sys.stderr.write('y' * 200_000)\n"
        "os.write(1, b'z' * 1_000_000)\n" + reference
    )


def test_hostile_submission_cannot_crash_the_grader(tmp_path):
    def edit(notebook):
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if grade_id == "patchify":
                cell.source = flood_then_solve(cell.source)
            if grade_id.startswith("check_"):
                cell.source = "pass  # the learner deleted the check"

    notebook = submission(HOSTILE, edit)
    result = grade_notebook(write(tmp_path, notebook), timeout=5)
    by_key = {e.key: e for e in result.exercises}
    assert by_key["build_char_vocab"].status == "missing"
    assert "SystemExit" in by_key["build_char_vocab"].hint
    assert by_key["merge_pair"].status == "timeout"
    assert by_key["embed_one_hot"].status == "crashed"
    # the rest is still graded, output flood and edited check cells notwithstanding
    assert by_key["patchify"].status == "passed"
    assert result.total == EXERCISES["patchify"].points


TAMPER = """
import torch
import transformer_course.exercises.core as core
import transformer_course.exercises.ch01 as ch01
from transformer_course.exercises.core import CheckResult, Report

def build_char_vocab(text):  # wrong: ids by first appearance
    return {c: i for i, c in enumerate(dict.fromkeys(text))}

# try to make every check pass
core.judge_outcomes = lambda check, cases, outcomes: CheckResult(check.name, True)
core.report_from_outcomes = lambda exercise, *a: Report(exercise, "passed", ())
for exercise in ch01.EXERCISES.values():
    object.__setattr__(exercise, "checks", ())
torch.allclose = lambda *a, **k: True
def check(*args, **kwargs):
    return 3
"""


def test_monkeypatching_the_checks_does_not_raise_the_score(tmp_path):
    notebook = submission({"build_char_vocab": TAMPER})
    result = grade_notebook(write(tmp_path, notebook), only=["build_char_vocab"])
    (grade,) = result.exercises
    assert grade.points == pytest.approx(WRONG_SCORES["build_char_vocab"])
    assert grade.checks == 3
    assert "sorted order" in grade.hint


def test_unreadable_notebook_is_a_clean_error(tmp_path):
    bad = tmp_path / "01_tokens.ipynb"
    bad.write_text("not json")
    run = subprocess.run(
        [sys.executable, "-m", "transformer_course.grade", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "could not grade" in run.stderr
    assert "Traceback" not in run.stderr


def test_unknown_chapter_is_named(tmp_path):
    path = write(tmp_path, submission(), name="notes.ipynb")
    with pytest.raises(ValueError, match="cannot tell which chapter"):
        grade_notebook(path)


def test_chapter_two_solutions_get_full_marks(tmp_path):
    from exercise_helpers import ROOT

    source = nbformat.read(
        ROOT / "exercises" / "source" / "02_attention.ipynb", as_version=4
    )
    result = grade_notebook(write(tmp_path, source, name="02_attention.ipynb"))
    assert result.chapter == 2
    assert result.total == result.max_total == 12


def test_an_exercise_can_use_the_solution_cells_it_requires(tmp_path):
    """Chapter 3's forward pass calls the learner's split_heads and merge_heads."""
    from exercise_helpers import ROOT

    source = nbformat.read(
        ROOT / "exercises" / "source" / "03_multihead.ipynb", as_version=4
    )
    path = write(tmp_path, source, name="03_multihead.ipynb")
    (grade,) = grade_notebook(path, only=["multihead_forward"]).exercises
    assert grade.status == "passed"
    assert grade.points == grade.max_points
