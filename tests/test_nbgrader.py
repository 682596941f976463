"""nbgrader works on our source notebooks as they are: generate_assignment, then
autograde one correct and one wrong submission, offline, and read the gradebook."""

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


def test_generate_assignment_and_autograde(tmp_path, monkeypatch):
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
    for student in ("alice", "bob"):
        nbgrader(course, "db", "student", "add", student)
    nbgrader(course, "autograde", "ch01", "--force")

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        alice = gradebook.find_submission("ch01", "alice")
        bob = gradebook.find_submission("ch01", "bob")
        maximum = sum(e.points for e in EXERCISES.values())
        assert alice.max_score == maximum
        assert alice.score == pytest.approx(maximum)
        assert bob.score == pytest.approx(sum(WRONG_SCORES.values()))
