"""Class grading: nbgrader makes the assignment from our source notebooks as they
are; the course grader (sandboxed) scores the submissions into nbgrader's
gradebook; nbgrader exports it. Offline."""

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from exercise_helpers import (
    SOURCE,
    WRONG,
    WRONG_SCORES,
    read_source,
    solution_cells,
    without_markers,
)

from transformer_course.exercises.ch01 import EXERCISES
from transformer_course.sandbox import bwrap_problem


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("nbgrader")), *args]
    result = subprocess.run(
        command, cwd=course, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def fill(release: Path, target: Path, replacements: dict[str, str]) -> None:
    """A student's submission: the released notebook with solution cells filled in."""
    notebook = nbformat.read(release, as_version=4)
    reference = solution_cells(read_source())
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference:
            cell.source = replacements.get(
                grade_id, without_markers(reference[grade_id])
            )
    target.parent.mkdir(parents=True)
    nbformat.write(notebook, target)


MALLORY = {
    # one line that, under `nbgrader autograde`, made every check cell return full
    # marks: the check cells run in the student's own kernel
    "build_char_vocab": (
        "try:\n"
        "    import transformer_course.exercises.widgets as w\n"
        "    w.check_widget = lambda exercise, function: exercise.points\n"
        "except ImportError:\n"
        "    pass\n"
        "def build_char_vocab(text):\n    return {}\n"
    ),
    # the forbidden lookup
    "embed_one_hot": "def embed_one_hot(ids, table):\n    return table[ids]\n",
}


def test_class_grading_writes_sandboxed_scores_into_the_gradebook(
    tmp_path, monkeypatch
):
    if bwrap_problem() is not None:
        pytest.skip(f"no sandbox on this machine: {bwrap_problem()}")
    # nbgrader runs `alembic` by name (also inside Gradebook): the environment's bin
    # folder must be on PATH, as for an instructor who activated the environment.
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
    course = tmp_path / "course"
    (course / "source" / "ch01").mkdir(parents=True)
    shutil.copy(SOURCE, course / "source" / "ch01" / SOURCE.name)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        "c.CourseDirectory.course_id = 'transformer-course'\n"
        f"c.CourseDirectory.db_url = 'sqlite:///{course / 'gradebook.db'}'\n"
    )
    nbgrader(course, "db", "assignment", "add", "ch01")
    nbgrader(course, "generate_assignment", "ch01", "--force")
    release = course / "release" / "ch01" / SOURCE.name
    released = nbformat.read(release, as_version=4)
    assert "BEGIN SOLUTION" not in nbformat.writes(released)

    fill(release, course / "submitted" / "alice" / "ch01" / SOURCE.name, {})
    fill(release, course / "submitted" / "bob" / "ch01" / SOURCE.name, WRONG)
    fill(release, course / "submitted" / "mallory" / "ch01" / SOURCE.name, MALLORY)
    (course / "submitted" / "eve" / "ch01").mkdir(parents=True)  # handed in nothing
    # links to alice's work, as tar or unzip restore them (issue 20): the notebook
    # itself, and the whole assignment folder
    alice = course / "submitted" / "alice" / "ch01"
    (course / "submitted" / "trudy" / "ch01").mkdir(parents=True)
    (course / "submitted" / "trudy" / "ch01" / SOURCE.name).symlink_to(
        alice / SOURCE.name
    )
    (course / "submitted" / "oscar").mkdir()
    (course / "submitted" / "oscar" / "ch01").symlink_to(alice)

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_course.gradebook",
            "ch01",
            "--csv",
            "grades.csv",
        ],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "bubblewrap sandbox" in run.stdout

    from nbgrader.api import Gradebook

    maximum = sum(e.points for e in EXERCISES.values())
    mallory_score = EXERCISES["merge_pair"].points + EXERCISES["patchify"].points
    expected = {
        "alice": maximum,
        "bob": sum(WRONG_SCORES.values()),
        "mallory": mallory_score,
        "eve": 0,
        "trudy": 0,
        "oscar": 0,
    }
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student, score in expected.items():
            submission = gradebook.find_submission("ch01", student)
            assert submission.max_score == maximum
            assert submission.score == pytest.approx(score), student

    rows = list(csv.DictReader((course / "grades.csv").open()))
    mallory = {r["exercise"]: r for r in rows if r["student"] == "mallory"}
    assert mallory["build_char_vocab"]["points"] == "0.0"
    assert "F.embedding" in mallory["embed_one_hot"]["hint"]
    assert {r["status"] for r in rows if r["student"] == "eve"} == {"missing file"}
    for student in ("trudy", "oscar"):
        assert {r["status"] for r in rows if r["student"] == student} == {"refused"}
        told = course / "feedback" / student / "ch01" / f"{SOURCE.stem}.grades.txt"
        assert "is a link" in told.read_text()
    feedback = course / "feedback" / "bob" / "ch01" / f"{SOURCE.stem}.grades.txt"
    assert "sorted order" in feedback.read_text()

    # nbgrader's own export reads the same gradebook
    nbgrader(course, "export")
    exported = {
        r["student_id"]: float(r["raw_score"])
        for r in csv.DictReader((course / "grades.csv").open())
    }
    assert exported == pytest.approx(expected)


def test_class_grading_needs_the_assignment_in_the_gradebook(tmp_path):
    (tmp_path / "submitted" / "alice" / "ch09").mkdir(parents=True)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_course.gradebook",
            "ch09",
            "--course",
            str(tmp_path),
            "--unsafe",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "nbgrader generate_assignment ch09" in run.stderr
