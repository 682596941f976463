"""Grade a class: ``python -m transformer_course.grading.gradebook ASSIGNMENT``.

The safe way to autograde a class with nbgrader. nbgrader keeps doing what it is
good at (``generate_assignment``, release, collect, the gradebook, late
penalties, ``generate_feedback``, ``release_feedback``, ``export``), but the
scores come from the course grader (:mod:`transformer_course.grading.grade`), which runs
each submission in a sandbox and judges the results in its own process.
``nbgrader autograde`` is never needed: it would run each student's code
unsandboxed, and score it with check cells that run inside the student's own
kernel.

The course (its folder, course id, gradebook and folder layout) is read from
``nbgrader_config.py`` the way nbgrader reads it; ``--course`` and ``--db``
override it. For every student folder of the assignment
(``submitted/<student>/<ASSIGNMENT>/``) and every notebook that
``nbgrader generate_assignment`` registered, this command:

* grades the notebook in the sandbox: the course's exercises with the points of
  their check cells in the gradebook (which come from the source notebook's
  nbgrader metadata), and the instructor's own autograded test cells (their
  source taken from the gradebook, never from the submission);
* writes each grade cell's score into the gradebook, records the submission's
  ``timestamp.txt`` and applies nbgrader's late-penalty plugin
  (``LateSubmissionPlugin.penalty_method`` or ``AssignLatePenalties.plugin_class``);
* writes ``autograded/<student>/<ASSIGNMENT>/<notebook>.ipynb``: the submission,
  with each check cell's verdict and whole hint as its output, from which
  ``nbgrader generate_feedback`` makes the HTML feedback that
  ``nbgrader release_feedback`` hands back, and beside it the same table as text
  (``<notebook>.grades.txt``);
* updates the student's rows of the CSV (``--csv``: one row per exercise, with
  the student's name, email and LMS id from the gradebook) in place, and prints
  and writes a per-exercise summary of the class (``--summary``).

A notebook saved under another name (``01_tokens (1).ipynb``, as browsers save
a second download) is graded when it is the only candidate, and the feedback
says so. A notebook that is missing scores 0, unless the gradebook holds an
earlier score for it, which is kept (and the log and the feedback say so).

Exit status: 0 when every submission was graded, 2 on a setup error (no such
assignment in the gradebook, no submissions), 3 when no sandbox is available and
``--unsafe`` was not given.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import html
import io
import json
import logging
import os
import re
import stat
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import nbformat
from nbgrader.plugins.export import CsvExportPlugin

from ..exercises.core import CHECK_SECONDS
from .grade import (
    MAX_NOTEBOOK_BYTES,
    NOT_GRADED,
    ExerciseGrade,
    InstructorTest,
    NotebookGrade,
    add_sandbox_options,
    grade_notebook,
    printable,
    read_submission,
    write_text_atomically,
)
from .sandbox import Sandbox, SandboxUnavailable

__all__ = ["ClassRow", "CourseSettings", "course_settings", "grade_class", "main"]


@dataclass
class ClassRow:
    """One exercise (or instructor's test) of one student's notebook: a CSV row."""

    student: str
    first_name: str
    last_name: str
    email: str
    lms_user_id: str
    assignment: str
    notebook: str
    chapter: int | None
    exercise: str
    points: float
    max_points: float
    status: str
    hint: str
    seconds_late: float = 0.0
    late_penalty: float = 0.0  # nbgrader's, for the whole notebook
    #: the file graded when it was not ``<notebook>.ipynb`` (a browser's second
    #: download, "01_tokens (1).ipynb"), else "": said in the log, the feedback
    #: and grades.txt, and here, where an instructor's spreadsheet sees it
    graded_file: str = ""


CSV_FIELDS = [f.name for f in fields(ClassRow)]

# nbgrader's steps log what this command reports itself (lateness, penalties)
_NBGRADER_LOG = logging.getLogger("transformer_course.grading.gradebook.nbgrader")
_NBGRADER_LOG.addHandler(logging.NullHandler())
_NBGRADER_LOG.propagate = False


@dataclass
class CourseSettings:
    """What nbgrader's configuration says about the course."""

    root: Path
    course_id: str
    db_url: str
    coursedir: object  # nbgrader.coursedir.CourseDirectory
    config: object  # traitlets.config.Config, for nbgrader's plugins

    def folder(self, step: str, student: str, assignment: str) -> Path:
        """``<root>/<step>/<student>/<assignment>`` in nbgrader's layout."""
        directory = getattr(self.coursedir, f"{step}_directory")
        return Path(self.coursedir.format_path(directory, student, assignment))


def course_settings(
    course: Path | str | None = None, db_url: str | None = None
) -> CourseSettings:
    """nbgrader's settings, read as nbgrader reads them: ``nbgrader_config.py``
    from Jupyter's configuration folders and the current folder (and from
    ``course``, when given); ``course`` and ``db_url`` override what they say."""
    from nbgrader.apps.baseapp import NbGrader
    from nbgrader.coursedir import CourseDirectory

    # nbgrader runs `alembic` by name to set up a gradebook: from this environment
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])

    with _quiet():
        app = NbGrader(log_level="ERROR")  # "no nbgrader_config.py": said below
        app.initialize([])
        if course is not None and Path(course).resolve() != Path.cwd().resolve():
            from traitlets.config.loader import PyFileConfigLoader

            if (Path(course) / "nbgrader_config.py").is_file():
                loader = PyFileConfigLoader(
                    "nbgrader_config.py", path=str(Path(course).resolve())
                )
                app.update_config(loader.load_config())
        if course is not None:
            app.config.CourseDirectory.root = str(Path(course).resolve())
        if db_url:
            app.config.CourseDirectory.db_url = db_url
        coursedir = CourseDirectory(config=app.config)
    return CourseSettings(
        Path(coursedir.root),
        coursedir.course_id,
        coursedir.db_url,
        coursedir,
        app.config,
    )


@contextlib.contextmanager
def _quiet():
    """nbgrader's gradebook on SQLAlchemy 2 warns about its own queries, and its
    apps log to the console: neither is for the instructor."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="sqlalchemy")
        warnings.filterwarnings("ignore", module="nbgrader")
        warnings.filterwarnings("ignore", message=".*SQLAlchemy.*")
        warnings.filterwarnings("ignore", message=".*relationship.*")
        yield


def _exercise_of(cell_name: str) -> str:
    """The exercise a graded cell scores: ``check_merge_pair`` -> ``merge_pair``;
    an instructor's own test cell by its name."""
    return cell_name.removeprefix("check_")


def hours(seconds: float) -> str:
    """ "16.5 hours", "1 hour", "0.1 hours"; under 6 minutes, "5 minutes" or
    "12 seconds" (not "0 hours")."""
    if seconds < 60:
        return plural(round(seconds), "second")
    if seconds < 360:
        return plural(round(seconds / 60), "minute")
    value = f"{seconds / 3600:.1f}".removesuffix(".0")
    return f"{value} hour" + ("" if value == "1" else "s")


def plural(count: int, noun: str) -> str:
    """``1 student``, ``2 students``, ``1.5 points``."""
    return f"{count:g} {noun}{'' if count == 1 else 's'}"


def _database_url(text: str) -> str:
    """``--db``: a database URL, as nbgrader takes it."""
    if "://" not in text:
        raise argparse.ArgumentTypeError(
            f"expected a database URL such as sqlite:////srv/course/gradebook.db "
            f"(sqlite:/// and the absolute path), got {text!r}"
        )
    return text


def grade_class(
    assignment: str,
    course: Path | str | None = None,
    db_url: str | None = None,
    students: list[str] | None = None,
    timeout: float = CHECK_SECONDS,
    unsafe: bool = False,
    log=print,
) -> list[ClassRow]:
    """Grade every submission of ``assignment`` and record it; see the module doc.
    Returns the CSV rows of the students graded."""
    settings = course_settings(course, db_url)
    _check_late_penalty_settings(settings)
    sandbox = Sandbox(unsafe=unsafe)
    with _quiet():
        return _grade_students(settings, assignment, students, sandbox, timeout, log)


def _check_late_penalty_settings(settings) -> None:
    """Build nbgrader's late-penalty step and its plugin once, before anyone is
    graded: a setting it refuses (``penalty_method = "Zero"``, a
    ``plugin_class`` that cannot be imported from the course folder) stops
    the run here, instead of failing every student's notebook (and writing
    their scores as 0 to the gradebook).

    Raises:
        ValueError: naming the setting and nbgrader's complaint.
    """
    from nbgrader.preprocessors import AssignLatePenalties

    # the course folder's own modules (a plugin), importable as when nbgrader
    # runs there, wherever this command runs from (--course)
    if str(settings.root) not in sys.path:
        sys.path.append(str(settings.root))
    try:
        step = AssignLatePenalties(config=settings.config, log=_NBGRADER_LOG)
        step.plugin_class(parent=step)
    except Exception as err:
        raise ValueError(
            "the late-penalty settings of nbgrader_config.py do not work "
            "(LateSubmissionPlugin.penalty_method: 'none' or 'zero'; "
            "AssignLatePenalties.plugin_class: a class importable from the course "
            f"folder, {settings.root}): {type(err).__name__}: {err}"
        ) from None


def _grade_students(settings, assignment, students, sandbox, timeout, log):
    from nbgrader.api import Gradebook, MissingEntry

    rows: list[ClassRow] = []
    with Gradebook(settings.db_url, settings.course_id) as gradebook:
        try:
            notebooks = gradebook.find_assignment(assignment).notebooks
        except MissingEntry:
            raise ValueError(
                f"assignment {assignment!r} is not in the gradebook "
                f"{settings.db_url}: run `nbgrader generate_assignment {assignment}` "
                "first"
            ) from None
        submitted = settings.root / settings.coursedir.submitted_directory
        handed_in = {
            p.name
            for p in submitted.glob("*")
            if settings.folder("submitted", p.name, assignment).is_dir()
        }
        enrolled = {student.id for student in gradebook.students}
        if students is None:  # the class: who handed in, and who is enrolled
            students = sorted(handed_in | enrolled)
        unknown = [s for s in students if s not in handed_in | enrolled]
        if unknown:  # a typo would add a student to the gradebook, and the export
            raise ValueError(
                f"no student {', '.join(map(repr, unknown))}: no folder "
                f"{settings.folder('submitted', unknown[0], assignment)} and not in "
                "the gradebook (add one with `nbgrader db student add`)"
            )
        if not students:
            raise ValueError(
                f"no submissions: expected folders "
                f"{settings.folder('submitted', '<student>', assignment)}/"
            )
        log(
            f"grading {assignment} for {plural(len(students), 'student')} "
            f"in: {sandbox.description}"
        )
        plans = {nb.name: _plan_of(gradebook, nb) for nb in notebooks}
        due = gradebook.find_assignment(assignment).duedate
        for student in students:
            who = printable(student, 100)
            folder = settings.folder("submitted", student, assignment)
            timestamp, problem = _timestamp(settings, folder)
            if problem:
                log(f"{who}: {problem}")
            elif timestamp is None and due is not None and folder.is_dir():
                log(
                    f"{who}: no timestamp.txt (not collected by nbgrader): graded as on time"
                )
            if student not in enrolled:  # a folder's name nbgrader was not told of
                log(
                    f"{who}: not a student of the gradebook: added (a typo in the "
                    "folder's name? `nbgrader db student add` gives names and emails)"
                )
            gradebook.update_or_create_student(student)
            if timestamp is not None:
                gradebook.update_or_create_submission(
                    assignment, student, timestamp=timestamp
                )
            else:  # none now: an earlier one must not make the export late
                gradebook.update_or_create_submission(
                    assignment, student, timestamp=None
                )
            gradebook.db.commit()
            for name, plan in plans.items():
                job = _NotebookJob(settings, gradebook, student, assignment, name, plan)
                try:
                    rows += job.run(sandbox, timeout, log)
                except SandboxUnavailable:
                    raise
                except Exception as err:  # this student only: the class goes on
                    gradebook.db.rollback()
                    why = f"{type(err).__name__}: {printable(str(err), 300)}"
                    log(f"{printable(student, 100)}: {name} not graded: {why}")
                    rows += job.zero_rows("error", f"not graded: {why}")
                gradebook.db.commit()
    return rows


def recorded_rows(
    assignment: str,
    course: Path | str | None = None,
    db_url: str | None = None,
    leave_out: Sequence[str] = (),
) -> list[ClassRow]:
    """The rows of every student of ``assignment`` the gradebook holds a
    submission of, but those in ``leave_out``, as recorded (not graded again):
    status "recorded", with the lateness and penalty recorded with them. What a
    regrade of one student (``--student``) writes to a new CSV for the rest of
    the class, so that it is the class's, not one row set."""
    from nbgrader.api import Gradebook, MissingEntry

    settings = course_settings(course, db_url)
    rows: list[ClassRow] = []
    with _quiet(), Gradebook(settings.db_url, settings.course_id) as gradebook:
        try:
            notebooks = gradebook.find_assignment(assignment).notebooks
        except MissingEntry:
            return []
        plans = {nb.name: _plan_of(gradebook, nb) for nb in notebooks}
        students = sorted(
            submission.student.id
            for submission in gradebook.find_assignment(assignment).submissions
        )
        for student in students:
            if student in leave_out:
                continue
            for name, plan in plans.items():
                job = _NotebookJob(settings, gradebook, student, assignment, name, plan)
                with contextlib.suppress(MissingEntry):
                    rows += job._rows_of_earlier(
                        RECORDED, "not graded again in this run: its recorded score"
                    )
    return rows


#: The status of a row read from the gradebook, not graded in this run.
RECORDED = "recorded"
#: The autograded notebook's metadata key for the file it was graded from.
GRADED_FROM = "transformer_course_graded_from"


@dataclass
class _Plan:
    """How one notebook of the assignment is graded, from the gradebook."""

    chapter: int | None
    points: dict[str, float]  # exercise key -> the check cell's max_score
    tests: list[InstructorTest]  # the instructor's own autograded test cells
    cells: dict[str, dict]  # grade_id -> nbgrader metadata, for the feedback


def _plan_of(gradebook, notebook) -> _Plan:
    from ..exercises import CHAPTERS

    prefix = notebook.name.split("_", 1)[0]
    chapter = int(prefix) if prefix.isdigit() and int(prefix) in CHAPTERS else None
    known: list[str] = []
    if chapter is not None:
        import importlib

        module = importlib.import_module(
            f"transformer_course.exercises.{CHAPTERS[chapter]}"
        )
        known = list(module.EXERCISES)
    points: dict[str, float] = {}
    tests: list[InstructorTest] = []
    cells: dict[str, dict] = {}
    sources = {cell.name: cell for cell in notebook.source_cells}
    for cell in notebook.grade_cells:
        source = sources.get(cell.name)
        cells[cell.name] = {
            "grade": True,
            "grade_id": cell.name,
            "locked": bool(source.locked) if source else True,
            "points": cell.max_score,
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
        key = _exercise_of(cell.name)
        if cell.name.startswith("check_") and key in known:
            points[key] = float(cell.max_score)
        elif cell.cell_type == "code" and source is not None:
            tests.append(
                InstructorTest(cell.name, source.source, float(cell.max_score))
            )
    for cell in notebook.solution_cells:
        cells.setdefault(cell.name, {"schema_version": 3, "grade_id": cell.name})
        cells[cell.name].update(solution=True, locked=False)
        cells[cell.name].setdefault("grade", False)
        cells[cell.name].setdefault("task", False)
    for cell in getattr(notebook, "task_cells", []):
        cells[cell.name] = {
            "grade": False,
            "grade_id": cell.name,
            "locked": True,
            "points": cell.max_score,
            "schema_version": 3,
            "solution": False,
            "task": True,
        }
    if chapter is None and not tests:
        raise ValueError(
            f"{notebook.name}: not a course notebook (expected a name like "
            "01_tokens) and no autograded test cells"
        )
    return _Plan(chapter, points, tests, cells)


def _timestamp(settings: CourseSettings, folder: Path):
    """(the submission's ``timestamp.txt`` as nbgrader reads it, or None; why it
    was not read, or ""). A file that is not a plain one of its own, or not a
    date, counts as absent: the submission is graded as on time, and the log
    says so (nbgrader itself stopped the whole class at such a file)."""
    path = folder / "timestamp.txt"
    if not path.exists() and not path.is_symlink():
        return None, ""
    unread = "timestamp.txt could not be read as a date: graded as on time"
    if path.is_symlink() or not path.is_file() or path.stat().st_size > 1000:
        return None, unread
    try:
        from nbgrader.utils import parse_utc

        return parse_utc(path.read_bytes().decode("utf-8").strip()), ""
    except Exception:  # nbgrader's own reader fails with an AttributeError here
        return None, unread


class _NotebookJob:
    """One notebook of one student: find it, grade it, record it."""

    def __init__(self, settings, gradebook, student, assignment, name, plan):
        self.settings, self.gradebook = settings, gradebook
        self.student, self.assignment, self.name, self.plan = (
            student,
            assignment,
            name,
            plan,
        )
        self.folder = settings.folder("submitted", student, assignment)
        self.person = self._person()

    def _person(self) -> dict[str, str]:
        record = self.gradebook.find_student(self.student)
        return {
            "first_name": record.first_name or "",
            "last_name": record.last_name or "",
            "email": record.email or "",
            "lms_user_id": getattr(record, "lms_user_id", None) or "",
        }

    def run(self, sandbox, timeout, log) -> list[ClassRow]:
        who = printable(self.student, 100)
        path, note, refused = self._find()
        if refused:
            log(f"{who}: {self.name}.ipynb refused: {refused}")
            hint = f"{self.name}.ipynb was not graded: {refused}"
            out_of = f"0/{self._max_points():g}"
            self._write_placeholder(f"{self.name}.ipynb: {out_of} points\n{hint}\n")
            return self.zero_rows("refused", hint)
        if path is None:
            earlier = self._earlier_score()
            candidates = getattr(self, "candidates", [])
            several = ""
            if candidates:
                shown = ", ".join(printable(name, 100) for name in candidates[:5])
                more = f" and {len(candidates) - 5} more" if len(candidates) > 5 else ""
                several = (
                    f"{len(candidates)} notebooks that could be it ({shown}"
                    f"{more}): none was graded, since which one is meant is not clear"
                    f". Rename the one to grade to {self.name}.ipynb and grade again"
                )
            if earlier:
                hint = (
                    f"no {self.name}.ipynb in the submission now: the earlier score "
                    f"of {self._earlier_said()} is kept (its feedback too)"
                    + (f"; {several}" if several else "")
                )
                log(f"{who}: {hint}")
                return self._rows_of_earlier("missing (earlier score kept)", hint)
            hint = (
                f"no {self.name}.ipynb in the submission"
                if self.folder.is_dir()
                else f"nothing submitted (no folder {self._shown(self.folder)})"
            )
            if several:
                hint += f", and {several}"
            out_of = f"0/{self._max_points():g}"
            log(f"{who}: {self.name} {out_of}: {hint}")
            self._write_placeholder(f"{self.name}.ipynb: {out_of} points\n{hint}\n")
            return self.zero_rows("missing file", hint)
        if note and self._earlier_score() and self._graded_from() != path.name:
            note += f" (it replaces the earlier score of {self._earlier_said()})"
        if note and self._returnable():
            # nbgrader's fetch_feedback looks for the name they submitted
            log(
                f"{who}: {note}; nbgrader cannot hand this feedback back: after "
                f"generate_feedback, send them feedback/{who}/{self.assignment}/"
                f"{self.name}.html"
            )
        elif note:  # not collected by nbgrader: the text is what goes back
            log(f"{who}: {note}")
        try:
            result = grade_notebook(
                path,
                chapter=self.plan.chapter,
                timeout=timeout,
                sandbox=sandbox,
                points=self.plan.points,
                tests=self.plan.tests,
            )
        except SandboxUnavailable:
            raise
        except Exception as err:  # this submission only: the class goes on
            why = printable(f"{type(err).__name__}: {err}", 300)
            log(f"{who}: could not grade {path.name}: {why}")
            hint = f"{path.name} could not be read: {why}"
            self._write_placeholder(f"{path.name}: 0 points\n{hint}\n")
            return self.zero_rows("unreadable", hint)
        not_graded = [e for e in result.exercises if e.status == NOT_GRADED]
        if not_graded:  # the sandbox, not the submission: keep what was there
            why = not_graded[0].hint
            earlier = self._rows_of_earlier(f"{NOT_GRADED} (earlier score kept)", why)
            log(
                f"{who}: {self.name}.ipynb NOT GRADED ({len(not_graded)} of "
                f"{len(result.exercises)} exercises: {why}); "
                + (
                    f"the earlier score of {self._earlier_said()} is kept"
                    if earlier
                    else "nothing recorded"
                )
                + f"; grade again with --student {who}"
            )
            return earlier or [
                self._plain_row(e.key, 0.0, e.max_points, NOT_GRADED, why)
                for e in result.exercises
            ]
        result.chapter_reason = f"the assignment's notebook {self.name}"
        if note:
            result.warnings.insert(0, note)
        self._record(result, log)
        late, penalty = self._late_penalty()
        text = result.table()
        after = f"{result.total - penalty:g}/{result.max_total:g}"
        if penalty:
            text += (
                f"\nlate by {hours(late)}: a penalty of {plural(penalty, 'point')}, "
                f"so {after}"
            )
        elif late > 0:
            text += f"\nlate by {hours(late)} (no penalty)"
        if not self._returnable():
            # nbgrader's generate_feedback would stop the class at this folder
            self._write_placeholder(text + "\n", notebook=False)
            log(
                f"{who}: no HTML feedback from nbgrader for this submission (not "
                "collected by nbgrader): send them feedback/"
                f"{who}/{self.assignment}/{self.name}.grades.txt"
            )
        else:
            self._write_autograded(path, result, late, penalty)
            self._write_feedback_text(text + "\n")
        total = f"{result.total:g}/{result.max_total:g}"
        log(
            f"{who}: {self.name} {total}"
            + (f", late penalty {penalty:g}: {after}" if penalty else "")
            + (
                f", late by {hours(late)} (no penalty)"
                if late > 0 and not penalty
                else ""
            )
        )
        rows = [self._row(e, result.chapter, late, penalty) for e in result.exercises]
        for row in rows:
            row.graded_file = path.name if note else ""
        return rows

    # --- finding the student's notebook ------------------------------------

    def _find(self) -> tuple[Path | None, str, str]:
        """(the notebook to grade or None, a note for the feedback, why it was
        refused or "")."""
        path = self.folder / f"{self.name}.ipynb"
        student_root = self.settings.root / self.settings.coursedir.submitted_directory
        student_root = student_root / self.student
        refused = _not_the_students_own(path, student_root)
        if refused or path.exists():
            return path, "", refused
        if self.folder.is_symlink() or not self.folder.is_dir():
            return None, "", ""
        others = sorted(
            p for p in self.folder.glob("*.ipynb") if p.stem not in self.gradebook_names
        )
        alike = [p for p in others if _meant(p.stem, self.name)]
        if len(alike) != 1 and len(self.gradebook_names) == 1:
            alike = others
        if len(alike) != 1:
            self.candidates = [p.name for p in alike]  # several: none is graded
            return None, "", ""
        found = alike[0]
        refused = _not_the_students_own(found, student_root)
        note = (
            f"graded {printable(found.name, 100)}: no {self.name}.ipynb was found "
            f"(next time, hand it in as {self.name}.ipynb)"
        )
        return found, note, refused

    @property
    def gradebook_names(self) -> set[str]:
        notebooks = self.gradebook.find_assignment(self.assignment).notebooks
        return {nb.name for nb in notebooks}

    # --- the gradebook -----------------------------------------------------

    def _grades(self) -> dict:
        notebook = self.gradebook.find_submission_notebook(
            self.name, self.assignment, self.student
        )
        return {grade.name: grade for grade in notebook.grades}

    def _earlier_score(self) -> float:
        return sum(
            g.auto_score or 0.0
            for g in self._grades().values()
            if g.cell_type == "code" and g.auto_score is not None
        )

    def _record(self, result: NotebookGrade, log) -> None:
        grades = self._grades()
        for exercise in result.exercises:
            name = self._cell_of(exercise.key)
            grade = grades.get(name)
            if grade is None:
                log(f"{self.student}: the gradebook has no cell {name} in {self.name}")
                continue
            grade.auto_score = float(min(exercise.points, grade.max_score))
            grade.needs_manual_grade = False
            if grade.manual_score is not None:  # Formgrader's, which nbgrader uses
                log(
                    f"{self.student}: warning: {name} in {self.name} has a manual "
                    f"score of {grade.manual_score:g} (given in Formgrader), which "
                    "nbgrader's export and feedback use instead of the course "
                    f"grader's {grade.auto_score:g}: clear it there to use the "
                    "grader's"
                )
        self.gradebook.db.commit()

    def _cell_of(self, key: str) -> str:
        """The grade cell of an exercise (``check_<key>``) or instructor's test."""
        return key if key in {t.key for t in self.plan.tests} else f"check_{key}"

    def _late_penalty(self) -> tuple[float, float]:
        """(seconds late, the penalty) after nbgrader's own late-penalty step."""
        from nbgrader.preprocessors import AssignLatePenalties

        step = AssignLatePenalties(config=self.settings.config, log=_NBGRADER_LOG)
        resources = {
            "nbgrader": {
                "notebook": self.name,
                "assignment": self.assignment,
                "student": self.student,
                "db_url": self.settings.db_url,
            }
        }
        step.preprocess(nbformat.v4.new_notebook(), resources)
        self.gradebook.db.expire_all()
        return self._recorded_lateness()

    def zero_rows(self, status: str, hint: str) -> list[ClassRow]:
        """Every autograded cell of the notebook scores 0, for one reason."""
        grades = self._grades()
        rows = []
        for cell in self.gradebook.find_notebook(
            self.name, self.assignment
        ).grade_cells:
            if cell.cell_type != "code":
                continue
            grades[cell.name].auto_score = 0.0
            rows.append(self._plain_row(cell.name, 0.0, cell.max_score, status, hint))
        self.gradebook.db.commit()
        return rows

    def _rows_of_earlier(self, status: str, hint: str) -> list[ClassRow]:
        """The rows of the score the gradebook holds, with the lateness and
        penalty recorded with it (a kept score that lost its penalty in the CSV
        was worth more there than in nbgrader's own export)."""
        late, penalty = self._recorded_lateness()
        rows = []
        for g in self._grades().values():
            if g.cell_type == "code":
                row = self._plain_row(
                    g.name, g.auto_score or 0.0, g.max_score, status, hint
                )
                row.seconds_late, row.late_penalty = late, penalty
                rows.append(row)
        return rows

    def _recorded_lateness(self) -> tuple[float, float]:
        """(seconds late, penalty) as the gradebook records them."""
        submission = self.gradebook.find_submission(self.assignment, self.student)
        notebook = self.gradebook.find_submission_notebook(
            self.name, self.assignment, self.student
        )
        return (
            float(submission.total_seconds_late or 0.0),
            float(notebook.late_submission_penalty or 0.0),
        )

    def _earlier_said(self) -> str:
        """The earlier score as it counts: "16", or "8 (16 less a late penalty
        of 8)"."""
        score = self._earlier_score()
        _, penalty = self._recorded_lateness()
        if not penalty:
            return f"{score:g}"
        return f"{score - penalty:g} ({score:g} less a late penalty of {penalty:g})"

    def _plain_row(self, cell, points, max_points, status, hint) -> ClassRow:
        return ClassRow(
            self.student,
            **self.person,
            assignment=self.assignment,
            notebook=self.name,
            chapter=self.plan.chapter,
            exercise=_exercise_of(cell),
            points=float(points),
            max_points=float(max_points),
            status=status,
            hint=hint,
        )

    def _row(self, e: ExerciseGrade, chapter, late, penalty) -> ClassRow:
        row = self._plain_row(e.key, e.points, e.max_points, e.status, e.hint)
        row.chapter, row.seconds_late, row.late_penalty = chapter, late, penalty
        return row

    # --- feedback ----------------------------------------------------------

    def _write_feedback_text(self, text: str) -> None:
        folder = self.settings.folder("autograded", self.student, self.assignment)
        write_text_atomically(folder / f"{self.name}.grades.txt", text)

    def _copy_collected_files(self, folder: Path) -> None:
        """What ``nbgrader collect`` left beside the notebook and nbgrader's
        feedback commands read: the secret, and the timestamp if it is a date
        (generate_feedback stops at one that is not)."""
        _copy_small_file(
            self.folder / "submission_secret.txt", folder / "submission_secret.txt"
        )
        if _timestamp(self.settings, self.folder)[0] is not None:
            _copy_small_file(self.folder / "timestamp.txt", folder / "timestamp.txt")

    def _returnable(self) -> bool:
        """Whether nbgrader's feedback commands can hand this submission back:
        collected by nbgrader (its secret file, and a timestamp that is a date).
        ``release_feedback`` stops the whole class at one that is not."""
        return (self.folder / "submission_secret.txt").is_file() and _timestamp(
            self.settings, self.folder
        )[0] is not None

    def _save_autograded(self, notebook: nbformat.NotebookNode) -> None:
        """``autograded/<student>/<assignment>/<notebook>.ipynb``, with the files
        nbgrader's feedback commands read beside it."""
        folder = self.settings.folder("autograded", self.student, self.assignment)
        write_text_atomically(
            folder / f"{self.name}.ipynb", nbformat.writes(notebook) + "\n"
        )
        self._copy_collected_files(folder)

    def _write_placeholder(self, text: str, notebook: bool = True) -> None:
        """Feedback for a notebook that was not graded: the text, and a
        one-cell notebook saying why, for ``nbgrader generate_feedback``.
        Where nbgrader's feedback commands cannot take it (not collected by
        nbgrader, or a timestamp that is not a date), the text goes straight to
        the feedback folder instead."""
        self._write_feedback_text(text)
        if not notebook or not self._returnable():
            # not collected by nbgrader: release_feedback could not hand a
            # notebook back (and would stop at it), so the text goes straight
            # to the feedback folder, for the instructor to send
            folder = self.settings.folder("feedback", self.student, self.assignment)
            write_text_atomically(folder / f"{self.name}.grades.txt", text)
            return
        notebook = nbformat.v4.new_notebook()
        notebook.cells.append(
            nbformat.v4.new_markdown_cell(
                "**Not graded.** " + markdown_text(printable(text, 1000))
            )
        )
        notebook.cells[0]["id"] = "cell-0"
        self._save_autograded(notebook)

    def _write_autograded(
        self, path: Path, result: NotebookGrade, late: float, penalty: float
    ) -> None:
        """The notebook ``nbgrader generate_feedback`` turns into HTML: the cells
        the grader read, nbgrader metadata from the gradebook only, and each
        check cell's verdict and whole hint as its output (a graded cell the
        submission lacks is added at the end, with its verdict)."""
        notebook, _ = read_submission(path)
        verdicts = {self._cell_of(e.key): e for e in result.exercises}
        tests = {t.key: t.source for t in self.plan.tests}
        seen: set[str] = set()
        for cell in notebook.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
            cell["metadata"] = {}
            if not isinstance(grade_id, str):
                continue  # a list, a dict: metadata of the submission's own making
            if grade_id not in self.plan.cells or grade_id in seen:
                continue
            seen.add(grade_id)
            cell["metadata"]["nbgrader"] = dict(self.plan.cells[grade_id])
            if cell.get("cell_type") != "code":
                continue
            if grade_id in tests:
                cell["source"] = tests[grade_id]  # the instructor's, as nbgrader does
            verdict = verdicts.get(grade_id)
            if verdict is not None:
                cell["outputs"] = [_verdict_output(verdict)]
        for grade_id, verdict in verdicts.items():
            if grade_id in seen or grade_id not in self.plan.cells:
                continue
            missing = nbformat.v4.new_code_cell(
                tests.get(grade_id, f"# {grade_id}: not in the submitted notebook")
            )
            missing["metadata"] = {"nbgrader": dict(self.plan.cells[grade_id])}
            missing["outputs"] = [_verdict_output(verdict)]
            notebook.cells.append(missing)
        summary = [
            "**Graded by the course grader**, in a sandbox: "
            f"{result.total:g} / {result.max_total:g} points."
        ]
        summary += [f"- {markdown_text(printable(w, 300))}" for w in result.warnings]
        if penalty:
            summary.append(
                f"- Late by {hours(late)}: a penalty of {plural(penalty, 'point')}."
            )
        elif late > 0:
            summary.append(f"- Late by {hours(late)} (no penalty).")
        notebook.cells.insert(0, nbformat.v4.new_markdown_cell("\n".join(summary)))
        for index, cell in enumerate(notebook.cells):
            cell["id"] = f"cell-{index}"
        notebook.metadata[GRADED_FROM] = path.name  # see _graded_from
        self._save_autograded(notebook)

    def _shown(self, path: Path) -> str:
        """``path`` relative to the course folder, where it lies inside it."""
        try:
            return str(path.relative_to(self.settings.root))
        except ValueError:
            return str(path)

    def _max_points(self) -> float:
        """The notebook's points, as the gradebook records them."""
        return sum(
            float(cell.max_score or 0)
            for cell in self.gradebook.find_notebook(
                self.name, self.assignment
            ).grade_cells
            if cell.cell_type == "code"
        )

    def _graded_from(self) -> str:
        """The name of the file the earlier score was graded from ("" if not
        known): a regrade of the same misnamed file replaces no other score."""
        path = (
            self.settings.folder("autograded", self.student, self.assignment)
            / f"{self.name}.ipynb"
        )
        try:
            if path.is_symlink() or path.stat().st_size > MAX_NOTEBOOK_BYTES:
                return ""
            name = json.loads(path.read_text("utf-8")).get("metadata", {})
            name = name.get(GRADED_FROM, "")
        except (OSError, ValueError, AttributeError):
            return ""
        return name if isinstance(name, str) else ""


#: Characters Markdown reads as syntax: escaped in text from a submission.
_MARKDOWN_SYNTAX = re.compile(r"([\\`*_\[\](){}!|#~])")


def markdown_text(text: str) -> str:
    """``text`` as it should read in a Markdown cell, whatever it holds: HTML
    escaped and Markdown's syntax characters backslashed, so that a warning
    quoting a submission's metadata (``<script>``, ``[a](javascript:…)``) shows
    as text in nbgrader's feedback page (the fourteenth red team put a live
    script there)."""
    return _MARKDOWN_SYNTAX.sub(r"\\\1", html.escape(text, quote=False))


def _verdict_output(verdict: ExerciseGrade) -> nbformat.NotebookNode:
    """A check cell's output in the feedback: its points, status and whole hint."""
    text = (
        f"{verdict.key}: {verdict.points:g}/{verdict.max_points:g} "
        f"({verdict.status}, {verdict.checks_passed}/{verdict.checks} checks)"
    )
    if verdict.hint:
        text += f"\nhint: {verdict.hint}"
    return nbformat.v4.new_output("stream", name="stdout", text=text + "\n")


def _copy_small_file(source: Path, target: Path) -> None:
    """Copy a plain file of a few KB (never a link, a FIFO or a device)."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > 10_000:
            return
        data = os.read(fd, 10_001)
    finally:
        os.close(fd)
    write_text_atomically(target, data.decode("utf-8", errors="replace"))


def _meant(stem: str, name: str) -> bool:
    """Whether a file named ``stem`` is likely the notebook ``name`` saved under
    another name: ``01_tokens (1)``, ``01_tokens-2``, ``Copy of 01_tokens``."""
    simple = re.sub(r"[^a-z0-9]", "", stem.lower())
    return re.sub(r"[^a-z0-9]", "", name.lower()) in simple


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


# --- the CSV and the summary ---------------------------------------------------


def current_points(
    assignment: str, course: Path | str | None = None, db_url: str | None = None
) -> dict[tuple[str, str], float]:
    """(notebook, exercise) -> its points in the gradebook now (what
    ``nbgrader generate_assignment`` last recorded from the source notebook)."""
    from nbgrader.api import Gradebook, MissingEntry

    settings = course_settings(course, db_url)
    with _quiet(), Gradebook(settings.db_url, settings.course_id) as gradebook:
        try:
            return points_in(gradebook, assignment)
        except MissingEntry:
            return {}


def points_in(gradebook, assignment: str) -> dict[tuple[str, str], float]:
    """(notebook, exercise) -> points, from an open nbgrader ``Gradebook``."""
    return {
        (nb.name, _exercise_of(cell.name)): float(cell.max_score)
        for nb in gradebook.find_assignment(assignment).notebooks
        for cell in nb.grade_cells
        if cell.cell_type == "code"
    }


def points_changed(
    path: Path, assignment: str, points: dict[tuple[str, str], float], regraded
) -> list[str]:
    """The exercises whose points differ, in the CSV at ``path``, from ``points``
    for students not in ``regraded``: their scores are on the old scale."""
    if not Path(path).is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        old = [
            r
            for r in map(_as_written, csv.DictReader(handle))
            if r.get("assignment") == assignment and r.get("student") not in regraded
        ]
    changed = {}
    for record in old:
        key = (record.get("notebook", ""), record.get("exercise", ""))
        try:
            before = float(record.get("max_points", ""))
        except ValueError:
            continue
        now = points.get(key)
        if now is None or now != before:
            changed[key] = (
                f"{key[1]}: {before:g} -> {'gone' if now is None else f'{now:g}'}"
            )
    return sorted(changed.values())


#: Beside nbgrader's own files in the course folder: the points each student was
#: last graded on, per assignment, so that regrading one student after the
#: points changed is refused with or without a CSV (the gradebook keeps scores,
#: not the scale they were given on).
POINTS_RECORD = "transformer_course_points.json"


def _points_key(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}"


def read_points_record(path: Path) -> dict:
    """The record at ``path`` ({assignment: {student: {"notebook/exercise":
    points}}}), or {} when it is missing or unreadable (a warning says which)."""
    if not Path(path).is_file():
        return {}
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        print(f"warning: ignoring {path}, which cannot be read: {err}", file=sys.stderr)
        return {}
    return record if isinstance(record, dict) else {}


def recorded_points_changed(
    path: Path, assignment: str, points: dict[tuple[str, str], float], regraded
) -> list[str]:
    """As :func:`points_changed`, from the record at ``path``: the exercises whose
    points differ from ``points`` for a student not in ``regraded``."""
    students = read_points_record(path).get(assignment, {})
    now = {_points_key(key): value for key, value in points.items()}
    changed = {}
    for student, before in students.items() if isinstance(students, dict) else ():
        if student in regraded or not isinstance(before, dict):
            continue
        for key in sorted(set(before) | set(now)):
            old, new = before.get(key), now.get(key)
            if old != new:
                exercise = key.split("/", 1)[-1]
                said = lambda v: "none" if v is None else f"{v:g}"  # noqa: E731
                changed[key] = f"{exercise}: {said(old)} -> {said(new)}"
    return sorted(changed.values())


def record_points(
    path: Path, assignment: str, points: dict[tuple[str, str], float], students
) -> None:
    """Note that ``students`` were graded on ``points`` (written atomically)."""
    record = read_points_record(path)
    scales = record.setdefault(assignment, {})
    if not isinstance(scales, dict):
        scales = record[assignment] = {}
    for student in students:
        scales[student] = {_points_key(k): v for k, v in sorted(points.items())}
    write_text_atomically(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


#: The points record's key for the class CSV last written per assignment.
CSV_KEY = "class CSV"


def remember_csv(path: Path, assignment: str, csv_path: Path) -> None:
    """Note, in the points record at ``path``, that ``csv_path`` is the class
    CSV of ``assignment``: a later regrade without ``--csv`` names it as stale."""
    record = read_points_record(path)
    files = record.get(CSV_KEY)
    if not isinstance(files, dict):
        files = record[CSV_KEY] = {}
    files[assignment] = str(Path(csv_path).resolve())
    write_text_atomically(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


def remembered_csv(path: Path, assignment: str) -> Path | None:
    """The class CSV last written for ``assignment`` (:func:`remember_csv`)."""
    files = read_points_record(path).get(CSV_KEY)
    name = files.get(assignment) if isinstance(files, dict) else None
    return Path(name) if isinstance(name, str) else None


SOURCE_DIFFERS = "the points in the source notebooks differ from the gradebook's ({})."
REGENERATE = (
    "nbgrader records an exercise's points when it makes the assignment: run "
    "nbgrader generate_assignment {assignment} --force"
)


#: An exercise added to an assignment that has submissions: nbgrader's
#: generate_assignment --force refuses (it cannot add cells then).
ADDED_AFTER_GRADING = (
    ". If students' submissions are in the gradebook already, nbgrader refuses "
    "to add a cell: the way back (README, step 4) deletes the assignment's grades "
    "and grades the class again: nbgrader db assignment remove {assignment} "
    "--force, nbgrader db assignment add {assignment} --duedate=..., nbgrader "
    "generate_assignment {assignment}, nbgrader release_assignment {assignment} "
    "--force"
)


def _missing_sqlite_file(url: str) -> str:
    """The path of a SQLite gradebook ``url`` names that does not exist, or ""."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix) :] in ("", ":memory:"):
        return ""
    path = Path(url[len(prefix) :].split("?")[0])
    return "" if path.exists() else str(path)


def source_points_differ(
    settings: CourseSettings, assignment: str, points: dict[tuple[str, str], float]
) -> list[str]:
    """Where the source notebooks' nbgrader points differ from the gradebook's
    (``points``): changed in ``source/`` and not yet recorded by ``nbgrader
    generate_assignment``, which is where the gradebook takes them from."""
    folder = settings.folder("source", ".", assignment)
    differ = []
    for path in sorted(folder.glob("*.ipynb")):
        try:
            notebook = nbformat.read(path, as_version=4)
        except (OSError, ValueError):  # not a notebook: nothing to compare
            continue
        for cell in notebook.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade"):
                continue
            key = (path.stem, _exercise_of(str(meta.get("grade_id", ""))))
            try:
                wanted = float(meta.get("points", 0))
            except (TypeError, ValueError):
                continue
            recorded = points.get(key)
            if recorded != wanted:
                where = path.relative_to(settings.root)
                differ.append(
                    f"{key[1]}: "
                    + (
                        "not in the gradebook"
                        if recorded is None
                        else f"{recorded:g} in the gradebook"
                    )
                    + f", {wanted:g} in {where}"
                )
    return differ


def stale_points_warning(
    root: Path, assignment: str, points, submitted: set[str] | None = None
) -> str:
    """A warning when some students of ``assignment`` (of ``submitted``, the
    students the gradebook holds a submission of, where given) were last graded
    on other points than ``points`` (the gradebook's now), else ""."""
    gone = ()
    if submitted is not None:  # an assignment removed and added again: no scores
        students = read_points_record(root / POINTS_RECORD).get(assignment)
        gone = set(students) - submitted if isinstance(students, dict) else ()
    changed = recorded_points_changed(root / POINTS_RECORD, assignment, points, gone)
    if not changed:
        return ""
    class_csv = remembered_csv(root / POINTS_RECORD, assignment)
    rewrite = f" --csv {class_csv}" if class_csv is not None else ""
    return (
        f"{assignment}: the points of {', '.join(changed)} changed since the class "
        "was graded, so the gradebook's scores are on the old scale. Grade the "
        "class again first: python -m transformer_course.grading.gradebook "
        f"{assignment}{rewrite}"
    )


class CheckedCsvExport(CsvExportPlugin):
    """``nbgrader export`` as nbgrader writes it (``grades.csv``), with a warning
    for each assignment whose points changed since the class was graded.

    Named in ``nbgrader_config.py``: ``c.ExportApp.plugin_class =
    "transformer_course.grading.gradebook.CheckedCsvExport"``.
    """

    def export(self, gradebook) -> None:
        coursedir = self.parent.coursedir
        root = Path(coursedir.root)
        settings = CourseSettings(
            root, coursedir.course_id, coursedir.db_url, coursedir, None
        )
        for assignment in gradebook.assignments:
            if self.assignment and assignment.name not in map(str, self.assignment):
                continue
            points = points_in(gradebook, assignment.name)
            submitted = {s.student.id for s in assignment.submissions}
            warning = stale_points_warning(root, assignment.name, points, submitted)
            if warning:
                self.log.warning(warning)
            differ = source_points_differ(settings, assignment.name, points)
            if differ:
                self.log.warning(
                    f"{assignment.name}: {SOURCE_DIFFERS.format(', '.join(differ))} "
                    f"{REGENERATE.format(assignment=assignment.name)}"
                )
        super().export(gradebook)


def merge_csv(path: Path, rows: list[ClassRow]) -> list[dict]:
    """The CSV at ``path`` with the rows of each (student, assignment) in ``rows``
    replaced where they stood (new students at the end); other rows kept."""
    fresh: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for row in rows:
        fresh[row.student, row.assignment].append(
            {field: getattr(row, field) for field in CSV_FIELDS}
        )
    merged: list[dict] = []
    placed: set[tuple[str, str]] = set()
    if Path(path).is_file():
        problem = _not_our_csv(path, None)  # main refuses it before grading too
        if problem:
            raise ValueError(problem)
        with open(path, newline="", encoding="utf-8") as handle:
            old = list(csv.DictReader(handle))
        for record in map(_as_written, old):
            key = (record.get("student", ""), record.get("assignment", ""))
            if key in fresh:
                if key not in placed:
                    merged += fresh[key]
                    placed.add(key)
                continue
            merged.append({field: record.get(field, "") for field in CSV_FIELDS})
    for key, records in fresh.items():
        if key not in placed:
            merged += records
    return merged


#: What makes a spreadsheet read a cell as a formula (OWASP, "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: object) -> object:
    """``value`` as a CSV cell that no spreadsheet runs as a formula: text that
    starts like one gets a leading ``'`` (the sixteenth red team put
    ``=HYPERLINK(...)`` into a hint); numbers, negative ones included, are kept.
    Text that starts with ``'`` gets one more, so that :func:`_as_written`
    reads every cell back as it was (``'@mal`` and ``@mal`` are two students:
    the forty-fifth red team)."""
    if not isinstance(value, str) or not value.startswith((*FORMULA_STARTS, "'")):
        return value
    if value.startswith("'"):
        return "'" + value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def _as_written(record: dict) -> dict:
    """A row read back from the class CSV with :func:`spreadsheet_safe`'s
    ``'`` taken off again, so that it keys and compares as the row it was
    written from (a student id ``@mal``, written ``'@mal``, kept its old rows
    beside each regrade's: the forty-fourth red team)."""
    return {
        field: value[1:]
        if isinstance(value, str)
        and value[:1] == "'"
        and value[1:].startswith((*FORMULA_STARTS, "'"))
        else value
        for field, value in record.items()
    }


#: Columns every class CSV this command writes has (:data:`CSV_FIELDS`).
_OUR_COLUMNS = frozenset({"student", "assignment", "exercise", "points"})


def _not_our_csv(path: Path | None, summary_path: Path | None) -> str:
    """Why ``--csv path`` (and ``--summary``) would overwrite a file that is not
    this command's class CSV, or "": nbgrader's ``grades.csv``, a summary, a
    CSV given as both."""
    if path is None:
        return ""
    if (
        summary_path is not None
        and Path(summary_path).resolve() == Path(path).resolve()
    ):
        return f"--csv and --summary name the same file ({path}): name two files"
    if not Path(path).is_file():
        return ""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError) as err:
        return f"{path} cannot be read as a CSV ({type(err).__name__})"
    missing = _OUR_COLUMNS - set(header)
    if header and missing:
        return (
            f"{path} is not a CSV this command wrote (no columns "
            f"{', '.join(sorted(missing))}; nbgrader export writes grades.csv): "
            "name another file for --csv, so that this one is not overwritten"
        )
    return ""


def _students_in_csv(path: Path, assignment: str) -> set[str]:
    """The students with rows of ``assignment`` in the CSV at ``path``."""
    if not Path(path).is_file():
        return set()
    with open(path, newline="", encoding="utf-8") as handle:
        return {
            r.get("student", "")
            for r in map(_as_written, csv.DictReader(handle))
            if r.get("assignment") == assignment
        }


def write_csv(path: Path, records: list[dict]) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
    writer.writeheader()
    writer.writerows(
        {field: spreadsheet_safe(value) for field, value in record.items()}
        for record in records
    )
    write_text_atomically(path, out.getvalue())


#: Statuses of a whole notebook: counted in the summary as one, whatever the
#: student's own message (which names their files).
WHOLE_NOTEBOOK = (
    "missing file",
    "missing (earlier score kept)",
    "refused",
    "unreadable",
)


#: Statuses counted by their name in the summary, not by their hint: a whole
#: notebook's, and "not attempted" (an instructor's test of a function left as
#: its stub says "the test cell raised NotImplementedError (...)": the same
#: thing, in other words, for each student).
BY_STATUS = (*WHOLE_NOTEBOOK, "not attempted")


def summary(records: list[dict], hints: int = 3) -> list[dict]:
    """Per exercise (in order of first appearance): the class mean, how many
    students got full marks, and the most common hints with their counts (a
    notebook missing, refused or unreadable, or an exercise not attempted,
    counts by its status)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        key = (str(record["notebook"]), str(record["exercise"]))
        groups.setdefault(key, []).append(record)
    table = []
    for (notebook, exercise), group in groups.items():
        points = [float(r["points"]) for r in group]
        maximum = max(float(r["max_points"]) for r in group)
        common = collections.Counter(
            str(r["status"] if r["status"] in BY_STATUS else r["hint"] or r["status"])
            for r in group
            if float(r["points"]) < maximum
            and (r["hint"] or r["status"])
            and r["status"] != RECORDED  # its hint was not kept: none to count
        ).most_common(hints)
        table.append(
            {
                "notebook": notebook,
                "exercise": exercise,
                "students": len(group),
                "recorded": sum(r["status"] == RECORDED for r in group),
                "mean": sum(points) / len(points),
                "max_points": maximum,
                "full_marks": sum(p >= maximum for p in points) if maximum else 0,
                "common_hints": common,
            }
        )
    return table


def summary_text(table: list[dict]) -> str:
    lines = []
    for row in table:
        if not row["max_points"]:
            lines.append(
                f"{row['notebook']} {row['exercise']}: worth 0 points "
                f"({row['students']} students)"
            )
            continue
        lines.append(
            f"{row['notebook']} {row['exercise']}: mean {row['mean']:.2f}/"
            f"{row['max_points']:g}, full marks {row['full_marks']}/{row['students']}"
        )
        for hint, count in row["common_hints"]:
            lines.append(f"    {plural(count, 'student')}: {printable(hint, 300)}")
    recorded = max((row.get("recorded", 0) for row in table), default=0)
    if recorded:
        lines.append(
            f"(hints of the {plural(recorded, 'student')} not graded in this run are "
            "not counted: the gradebook keeps scores, not hints; the class CSV has "
            "them)"
        )
    return "\n".join(lines)


def write_summary(path: Path, table: list[dict]) -> None:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        [
            "notebook",
            "exercise",
            "students",
            "mean",
            "max_points",
            "full_marks",
            "hint",
            "count",
        ]
    )
    for row in table:
        common = row["common_hints"] or [("", 0)]
        for hint, count in common:
            writer.writerow(
                [
                    spreadsheet_safe(cell)
                    for cell in (
                        row["notebook"],
                        row["exercise"],
                        row["students"],
                        f"{row['mean']:.4g}",
                        f"{row['max_points']:g}",
                        row["full_marks"],
                        hint,
                        count,
                    )
                ]
            )
    write_text_atomically(path, out.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.grading.gradebook",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("assignment", help="the nbgrader assignment, e.g. ch01")
    parser.add_argument(
        "--course",
        type=Path,
        help="the course folder (default: CourseDirectory.root in nbgrader_config.py, "
        "else the current folder)",
    )
    parser.add_argument(
        "--db",
        type=_database_url,
        help="the gradebook URL (default: CourseDirectory.db_url in nbgrader_config.py, "
        "else sqlite:///<course>/gradebook.db)",
    )
    parser.add_argument(
        "--csv",
        type=Path,
        help="a CSV with one row per exercise: the students graded now replace "
        "their rows, the others' are kept",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        help="the per-exercise summary of the class as CSV (default: "
        "<assignment>_summary.csv beside --csv, when --csv is given)",
    )
    parser.add_argument(
        "--student", action="append", help="grade only this student (repeatable)"
    )
    add_sandbox_options(parser)
    args = parser.parse_args(argv)
    if args.student:  # --student s1 --student s1 grades s1 once
        args.student = list(dict.fromkeys(args.student))
    wrong_csv = _not_our_csv(args.csv, args.summary)
    if wrong_csv:
        print(f"refusing to grade {args.assignment}: {wrong_csv}", file=sys.stderr)
        return 2
    missing = _missing_sqlite_file(course_settings(args.course, args.db).db_url)
    if missing:  # SQLAlchemy would make an empty one, and nothing would match
        print(
            f"could not grade {args.assignment}: no gradebook at {missing} (check "
            "--db, or db_url in nbgrader_config.py; nbgrader makes the gradebook "
            "when it adds students or makes the assignment: nbgrader "
            f"generate_assignment {args.assignment})",
            file=sys.stderr,
        )
        return 2
    try:
        now = current_points(args.assignment, args.course, args.db)
        record = course_settings(args.course, args.db).root / POINTS_RECORD
    except (OSError, ValueError) as err:
        print(f"could not grade {args.assignment}: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # SQLAlchemy's: no driver, not a database, ...
        url = course_settings(args.course, args.db).db_url
        print(
            f"could not grade {args.assignment}: the gradebook {url} could not be "
            f"opened ({type(err).__name__}: {printable(str(err), 300)}); check --db "
            "or db_url in nbgrader_config.py",
            file=sys.stderr,
        )
        return 2
    differ = source_points_differ(
        course_settings(args.course, args.db), args.assignment, now
    )
    if differ:
        added = any("not in the gradebook" in d for d in differ)
        print(
            f"refusing to grade {args.assignment}: "
            f"{SOURCE_DIFFERS.format(', '.join(differ))} "
            f"{REGENERATE.format(assignment=args.assignment)}, then grade again"
            + (ADDED_AFTER_GRADING.format(assignment=args.assignment) if added else ""),
            file=sys.stderr,
        )
        return 2
    if args.student:
        regraded = set(args.student)
        changed = sorted(
            set(recorded_points_changed(record, args.assignment, now, regraded))
            | set(
                points_changed(args.csv, args.assignment, now, regraded)
                if args.csv
                else ()
            )
        )
        if changed:
            print(
                f"refusing to regrade only {', '.join(args.student)}: the points of "
                f"{', '.join(changed)} changed since the class was graded, so the "
                "other students' scores are on the old scale. Regrade the whole "
                f"class (without --student): python -m transformer_course.grading.gradebook "
                f"{args.assignment}" + (f" --csv {args.csv}" if args.csv else ""),
                file=sys.stderr,
            )
            return 2
    try:
        rows = grade_class(
            args.assignment,
            args.course,
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
    failed = sorted({r.student for r in rows if r.status.startswith(NOT_GRADED)})
    graded = {r.student for r in rows} - set(failed)
    if graded:
        record_points(record, args.assignment, now, sorted(graded))
    # the rest of the class as the gradebook holds it: a regrade of some
    # students writes and summarises the class, never those students alone
    others = (
        recorded_rows(args.assignment, args.course, args.db, leave_out=args.student)
        if args.student
        else []
    )
    records = [{f: getattr(r, f) for f in CSV_FIELDS} for r in rows + others]
    if args.csv:
        listed = _students_in_csv(args.csv, args.assignment) if args.student else ()
        records = merge_csv(
            args.csv, rows + [r for r in others if r.student not in listed]
        )
        write_csv(args.csv, records)
        remember_csv(record, args.assignment, args.csv)
    else:
        stale = remembered_csv(record, args.assignment)
        if stale is not None and stale.is_file():
            rescaled = points_changed(
                stale, args.assignment, now, set(args.student or ())
            )
            again = (
                f"grade the class again with --csv {stale}: its points changed "
                f"since ({', '.join(rescaled)})"
                if rescaled
                else f"add --csv {stale} to update its rows in place"
            )
            print(
                f"\nnote: {stale}, the class CSV written when {args.assignment} was "
                "last graded with --csv, does not have these scores (the gradebook "
                f"and nbgrader export do): {again}",
                file=sys.stderr,
            )
    table = summary([r for r in records if r["assignment"] == args.assignment])
    print(f"\nclass summary ({args.assignment}):\n{summary_text(table)}")
    target = args.summary or (
        args.csv.with_name(f"{args.assignment}_summary.csv") if args.csv else None
    )
    if target:
        write_summary(target, table)
    if failed:
        print(
            f"\n{plural(len(failed), 'student')} not graded (the sandbox stopped "
            "before their exercises; their earlier scores, if any, are kept): grade "
            "them again: python -m transformer_course.grading.gradebook "
            f"{args.assignment} " + " ".join(f"--student {s}" for s in failed),
            file=sys.stderr,
        )
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
