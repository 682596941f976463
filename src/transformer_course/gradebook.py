"""Grade a class: ``python -m transformer_course.gradebook ASSIGNMENT``.

The safe way to autograde a class with nbgrader. nbgrader keeps doing what it is
good at (``generate_assignment``, release, collect, the gradebook, ``export``,
feedback), but the scores come from the course grader
(:mod:`transformer_course.grade`), which runs each submission in a sandbox and
judges the results in its own process. ``nbgrader autograde`` is never needed:
it would run each student's code unsandboxed, and score it with check cells
that run inside the student's own kernel.

For every ``<course>/submitted/<student>/<ASSIGNMENT>/<notebook>.ipynb`` of the
assignment's notebooks (as ``nbgrader generate_assignment`` registered them),
this command:

* grades the notebook (the chapter comes from its file name);
* writes each exercise's points into the nbgrader gradebook, as the automatic
  score of the exercise's check cell (``check_<exercise>``);
* writes ``<course>/feedback/<student>/<ASSIGNMENT>/<notebook>.grades.txt``
  (the table with hints), and one CSV row per exercise (``--csv``).

A missing notebook scores 0 ("missing file"). Exit status: 0 when every
submission was graded, 2 on a setup error (no such assignment in the gradebook,
no submissions), 3 when no sandbox is available and ``--unsafe`` was not given.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .grade import NotebookGrade, grade_notebook, printable, write_text_atomically
from .sandbox import Sandbox, SandboxUnavailable

__all__ = ["ClassRow", "grade_class", "main"]

CSV_FIELDS = [
    "student",
    "assignment",
    "notebook",
    "chapter",
    "exercise",
    "points",
    "max_points",
    "status",
    "hint",
]


@dataclass
class ClassRow:
    """One exercise of one student's notebook (one CSV row)."""

    student: str
    assignment: str
    notebook: str
    chapter: int | None
    exercise: str
    points: float
    max_points: float
    status: str
    hint: str


def grade_class(
    course: Path | str,
    assignment: str,
    db_url: str | None = None,
    students: list[str] | None = None,
    timeout: float = 30.0,
    unsafe: bool = False,
    log=print,
) -> list[ClassRow]:
    """Grade every submission of ``assignment`` and record it; see the module doc."""
    from nbgrader.api import Gradebook, MissingEntry

    # nbgrader runs `alembic` by name to set up a gradebook: from this environment
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    course = Path(course).resolve()
    db_url = db_url or f"sqlite:///{course / 'gradebook.db'}"
    submitted = course / "submitted"
    if students is None:
        students = sorted(
            p.name for p in submitted.glob("*") if (p / assignment).is_dir()
        )
    if not students:
        raise ValueError(
            f"no submissions: expected folders {submitted}/<student>/{assignment}/"
        )
    sandbox = Sandbox(unsafe=unsafe)
    log(f"grading {assignment} for {len(students)} students in: {sandbox.description}")
    rows: list[ClassRow] = []
    with Gradebook(db_url) as gradebook:
        try:
            notebooks = [
                nb.name for nb in gradebook.find_assignment(assignment).notebooks
            ]
        except MissingEntry:
            raise ValueError(
                f"assignment {assignment!r} is not in the gradebook {db_url}: run "
                f"`nbgrader generate_assignment {assignment}` first"
            ) from None
        for student in students:
            gradebook.update_or_create_student(student)
            try:
                gradebook.find_submission(assignment, student)
            except MissingEntry:
                gradebook.add_submission(assignment, student)
            for name in notebooks:
                path = submitted / student / assignment / f"{name}.ipynb"
                try:
                    rows += _grade_one(
                        gradebook,
                        sandbox,
                        path,
                        student,
                        assignment,
                        name,
                        timeout,
                        log,
                    )
                except SandboxUnavailable:
                    raise
                except Exception as err:  # this student only: the class goes on
                    why = f"{type(err).__name__}: {printable(str(err), 300)}"
                    log(f"{printable(student, 100)}: {name} not graded: {why}")
                    rows += _zero_rows(
                        gradebook,
                        student,
                        assignment,
                        name,
                        "error",
                        f"not graded: {why}",
                    )
            gradebook.db.commit()
    return rows


def _grade_one(gradebook, sandbox, path, student, assignment, name, timeout, log):
    from nbgrader.api import MissingEntry

    course = path.parents[3]
    refused = _not_the_students_own(path, course / "submitted" / student)
    if refused:
        log(f"{student}: {name}.ipynb refused: {refused}")
        hint = f"{name}.ipynb was not graded: {refused}"
        feedback = course / "feedback" / student / assignment / f"{name}.grades.txt"
        write_text_atomically(feedback, f"{name}.ipynb: 0 points\n{hint}\n")
        return _zero_rows(gradebook, student, assignment, name, "refused", hint)
    if not path.is_file():
        log(f"{student}: {name}.ipynb is missing")
        return _zero_rows(
            gradebook,
            student,
            assignment,
            name,
            "missing file",
            f"no {name}.ipynb in the submission",
        )
    try:
        result: NotebookGrade = grade_notebook(path, timeout=timeout, sandbox=sandbox)
    except SandboxUnavailable:
        raise
    except Exception as err:  # this submission only: the class goes on
        why = printable(f"{type(err).__name__}: {err}", 300)
        log(f"{printable(student, 100)}: could not grade {path.name}: {why}")
        result = None
    if result is None:
        return _zero_rows(
            gradebook,
            student,
            assignment,
            name,
            "unreadable",
            "the notebook could not be read",
        )
    rows = []
    for exercise in result.exercises:
        try:
            grade = gradebook.find_grade(
                f"check_{exercise.key}", name, assignment, student
            )
        except MissingEntry:
            log(f"{student}: the gradebook has no cell check_{exercise.key} in {name}")
        else:
            grade.auto_score = float(min(exercise.points, grade.max_score))
        rows.append(
            ClassRow(
                student,
                assignment,
                name,
                result.chapter,
                exercise.key,
                exercise.points,
                exercise.max_points,
                exercise.status,
                exercise.hint,
            )
        )
    feedback = course / "feedback" / student / assignment / f"{name}.grades.txt"
    write_text_atomically(feedback, result.table() + "\n")
    log(f"{student}: {name} {result.total:g}/{result.max_total}")
    return rows


def _not_the_students_own(path: Path, folder: Path) -> str:
    """Why ``path`` is not a notebook of the student's own (a link to another
    student's, say: tar and unzip restore links), or "" when it is."""
    for item in (folder, *reversed(path.relative_to(folder).parents[:-1]), path):
        place = folder / item if item != folder else folder
        if place.is_symlink():
            target = printable(os.fsdecode(os.readlink(place)), 200)
            return f"{printable(place.name, 100)} is a link (to {target}), not a file"
    if not path.exists():
        return ""
    if not path.resolve().is_relative_to(folder.resolve()):
        return "it lies outside the student's own folder"
    if path.is_file() and path.stat().st_nlink > 1:
        return "it is a hard link to another file, not a file of its own"
    if not path.is_file():
        return "it is not a file"
    return ""


def _zero_rows(gradebook, student, assignment, name, status, hint) -> list[ClassRow]:
    """Every check cell of notebook ``name`` scores 0, for one reason."""
    rows = []
    for cell in gradebook.find_notebook(name, assignment).grade_cells:
        gradebook.find_grade(cell.name, name, assignment, student).auto_score = 0.0
        exercise = cell.name.removeprefix("check_")
        rows.append(
            ClassRow(
                student,
                assignment,
                name,
                None,
                exercise,
                0.0,
                cell.max_score,
                status,
                hint,
            )
        )
    return rows


def rows_to_csv(rows: list[ClassRow]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for row in rows:
        writer.writerow({field: getattr(row, field) for field in CSV_FIELDS})
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.gradebook",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("assignment", help="the nbgrader assignment, e.g. ch01")
    parser.add_argument(
        "--course", type=Path, default=Path.cwd(), help="the course folder (.)"
    )
    parser.add_argument(
        "--db", help="the gradebook URL (sqlite:///<course>/gradebook.db)"
    )
    parser.add_argument("--csv", type=Path, help="also write one row per exercise here")
    parser.add_argument(
        "--student", action="append", help="grade only this student (repeatable)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per cell (30)"
    )
    parser.add_argument(
        "--unsafe",
        action="store_true",
        help="grade without the bubblewrap sandbox (trusted submissions only)",
    )
    args = parser.parse_args(argv)
    try:
        rows = grade_class(
            args.course,
            args.assignment,
            args.db,
            args.student,
            args.timeout,
            args.unsafe,
        )
    except SandboxUnavailable as err:
        print(f"refusing to grade: {err}", file=sys.stderr)
        return 3
    except (OSError, ValueError) as err:
        print(f"could not grade {args.assignment}: {err}", file=sys.stderr)
        return 2
    if args.csv:
        write_text_atomically(args.csv, rows_to_csv(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
