"""Grade a submitted exercise notebook: ``python -m transformer_course.grading.grade NB.ipynb``.

How a submission is graded, exercise by exercise:

1. The grader makes each check's inputs (cases) in its own process.
2. A fresh sandboxed process (:mod:`transformer_course.grading.sandbox`: bubblewrap,
   without the course package, network or the rest of the file system) runs a
   preamble that stands in for the notebook's setup cell, then the learner's own
   code cells above the exercise's check cell, in notebook order: the solution
   cell, solutions in new cells below the stub (the last definition wins),
   earlier solutions the exercise builds on, helper and import cells. Locked
   cells (checks, quizzes) are not run; a chapter's given code (chapter 4's
   ``self_attention``) runs where its locked cell is, its text from its checks'
   module (``GIVEN``), not from the submission. A cell that hangs or crashes
   and does not define this exercise's function is left out and the exercise
   graded again.
3. The sandbox calls the function on the cases exactly as the notebook's check
   does (:func:`transformer_course.exercises.runner.call_cases`) and saves plain
   outcomes in a strict format (JSON and raw tensor bytes, no pickle); the
   grader reads them with every type and size checked before use
   (:func:`.sandbox.read_output`) and judges them in its own process, where
   submitted code never runs.

A cell past ``--timeout`` seconds, a dead process (``os._exit``, memory),
``sys.exit()`` or a flood of output costs that exercise its points, never the
grader. The whole notebook, rounds of grading again included, has a deadline
(:data:`STARTUP_SECONDS` plus ``JOB_STAGES × --timeout`` per exercise), and
what the grader parses itself is bounded (:data:`MAX_NOTEBOOK_BYTES`,
:data:`MAX_CELL_CHARS`, :data:`MAX_CODE_CHARS`). The exit status is 0 whenever grading worked, whatever the score; 2 when
the notebook cannot be read; 3 when no sandbox is available and ``--unsafe`` was
not given.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings as warnings_module
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from ..exercises import CHAPTERS, screen
from ..exercises.core import (
    CHECK_SECONDS,
    FAILED,
    NOT_CHECKED,
    NOT_RUN,
    Exercise,
    foundations_note,
    outcome_from_dict,
    report_from_outcomes,
    screened_out,
)
from ..exercises.runner import LOCKED, to_plain
from .cell_names import read_cell_names
from .sandbox import JOB_STAGES, STARTUP_SECONDS, Sandbox, SandboxUnavailable

#: The screen's own file, run on its own (see :func:`screen_apart`).
SCREEN_SCRIPT = Path(screen.__file__)

__all__ = [
    "ExerciseGrade",
    "InstructorTest",
    "NotebookGrade",
    "grade_notebook",
    "instructor_plan",
    "main",
]

#: Stands in for the exercise notebooks' locked setup cell: the same names (plt,
#: torch, F, tc, device), seeded the same way, with the course package's
#: stand-in for tc (calling anything from it raises: it holds the answers).
PREAMBLE = """\
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import transformer_course as tc  # the sandbox's stand-in: every call raises
import random
import numpy
random.seed(0)
numpy.random.seed(0)
torch.manual_seed(0)
del numpy
import tqdm  # no monitor thread: it would read as one a cell left running
tqdm.tqdm.monitor_interval = 0
del tqdm
device = torch.device("cpu")
from transformer_course.exercises import chapter  # stand-ins too: ex.check(...)
ex = chapter  # in a learner's cell is passed over, as the package's calls are
"""


def locked_bindings(
    notebook: nbformat.NotebookNode,
    names: dict[tuple[str, int], frozenset[str] | None] | None = None,
) -> str:
    """Lines that bind, to the hidden package's stand-in, every name a locked
    cell binds at its top level (a "try it" cell's ``notes_scores``): the grader
    runs no locked cell, so a learner's statement that reads one of them is
    passed over, as one that reads ``tc`` is, instead of stopping its cell with
    a NameError (the eighteenth red team). ``names``: :func:`cell_names`'s, read
    afresh when not given."""
    if names is None:
        names = cell_names(notebook)
    provided = set(re.findall(r"^(\w+) =", PREAMBLE, re.M)) | {"tc", "plt", "F"}
    bound: set[str] = set()
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") == "code" and _is_locked(cell):
            bound |= names.get(("stored", index)) or set()
    wanted = sorted(n for n in bound - provided if n.isidentifier())[:200]
    return "".join(f"{name} = tc.locked_cell\n" for name in wanted)


def cell_names(
    notebook: nbformat.NotebookNode,
) -> dict[tuple[str, int], frozenset[str] | None]:
    """What the grader needs of the cells before it runs them, parsed in a child
    process with a deadline (:mod:`.cell_names`): ``("stored", index)``, the
    names a locked cell binds; ``("top", index)``, the names a learner's cell
    defines at its top level; None for a cell that does not parse, or was not
    parsed in time."""
    questions = [
        ("stored" if _is_locked(cell) else "top", index, _source(cell))
        for index, cell in enumerate(notebook.cells)
        if cell.get("cell_type") == "code"
    ]
    return read_cell_names(questions)


#: An exercise the sandbox never got to (it stopped before the exercise's job
#: in every try): not a verdict on the submission. The gradebook keeps the
#: earlier score and exits non-zero (an instructor saw a correct notebook get 0
#: for this, once, on a loaded machine).
NOT_GRADED = "not graded"

#: Bounds on what the grader reads and parses in its own process: a notebook
#: file, one code cell, all code cells together (the course's cells are a few
#: thousand characters).
MAX_NOTEBOOK_BYTES = 32 * 2**20
MAX_CELL_CHARS = 200_000
MAX_CODE_CHARS = 1_000_000
MAX_CELLS = 5_000
MAX_JSON_VALUES = 1_000_000  # commas, colons and brackets: a bound on its objects


@dataclass
class ExerciseGrade:
    key: str
    title: str
    points: float
    max_points: float
    checks_passed: int
    checks: int
    # passed / failed / not attempted / missing / syntax error / timeout /
    # crashed / error
    status: str
    hint: str


@dataclass(frozen=True)
class InstructorTest:
    """A test cell an instructor added to the source notebook (nbgrader's
    autograded test: a locked code cell with ``grade: true`` and ``points``).

    It runs in the sandbox, after the learner's code cells above it, with the
    same limits as an exercise, and earns all its points when it runs without
    an error (nbgrader's rule for test cells), none otherwise. Its source comes
    from the instructor (the gradebook, or the source notebook), never from the
    submission.
    """

    key: str  # the cell's nbgrader grade_id
    source: str
    points: float
    title: str = "instructor's test"
    function: None = None  # it defines nothing: the whole cell is the check
    forbidden: tuple = ()
    checks: tuple = ()
    mutable_inputs: bool = True  # so one check in all: the cell runs (see _grade)


@dataclass
class NotebookGrade:
    notebook: str
    chapter: int
    exercises: list[ExerciseGrade]
    chapter_reason: str = ""  # why this chapter: the file name, metadata or --chapter
    warnings: list[str] = field(default_factory=list)
    sandbox: str = ""  # how submitted code ran

    @property
    def total(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_total(self) -> float:
        return sum(e.max_points for e in self.exercises)

    def as_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "chapter": self.chapter,
            "chapter_reason": self.chapter_reason,
            "warnings": list(self.warnings),
            "sandbox": self.sandbox,
            "total": self.total,
            "max_total": self.max_total,
            "exercises": [asdict(e) for e in self.exercises],
        }

    def table(self, width: int = 100) -> str:
        """The grades as text: one row per exercise, its status and its whole
        hint wrapped under it (never cut short)."""
        rows = [("exercise", "points", "checks", "status")]
        for e in self.exercises:
            rows.append(
                (
                    e.key,
                    f"{e.points:g}/{e.max_points:g}",
                    f"{e.checks_passed}/{e.checks}",
                    e.status,
                )
            )
        rows.append(("TOTAL", f"{self.total:g}/{self.max_total:g}", "", ""))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = []
        hints = [e.hint for e in self.exercises] + [""]
        for (a, b, c, d), hint in zip(rows, ["", *hints], strict=True):
            lines.append(f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}  {d}")
            if hint:
                lines += textwrap.wrap(
                    hint, width, initial_indent="    hint: ", subsequent_indent="    "
                )
        lines.insert(1, "-" * min(width, max(len(line) for line in lines)))
        header = [f"{self.notebook}: chapter {self.chapter} ({self.chapter_reason})"]
        header += [f"warning: {w}" for w in self.warnings]
        header += [f"graded in: {self.sandbox}", ""]
        return "\n".join(header + lines)


def add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    """``--timeout SECONDS`` (per cell) and ``--unsafe``, for the grader and
    the gradebook alike."""
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=CHECK_SECONDS,
        help=f"seconds per cell ({CHECK_SECONDS:g})",
    )
    parser.add_argument(
        "--unsafe",
        action="store_true",
        help="grade without the bubblewrap sandbox (trusted submissions only)",
    )


def positive_seconds(text: str) -> float:
    """``--timeout``: a number of seconds above 0 (0 would fail every cell)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < seconds < math.inf:  # nan and inf too: inf would lift every deadline
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds above 0, got {text}"
        )
    return seconds


def _nbgrader(cell: nbformat.NotebookNode) -> dict:
    """A cell's nbgrader metadata ({} when missing or malformed)."""
    metadata = cell.get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def _source(cell: nbformat.NotebookNode) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(str(s) for s in source)
    return source if isinstance(source, str) else ""


def _is_locked(cell: nbformat.NotebookNode) -> bool:
    meta = _nbgrader(cell)
    return bool(meta.get("locked") or meta.get("grade"))


def _defines(names: frozenset[str] | None, source: str, name: str) -> bool:
    """True if the cell defines ``name`` at its top level (def or assignment),
    ``names`` being what it defines there (:func:`cell_names`)."""
    if names is None:  # not Python, or not parsed in time: look for the def alone
        return re.search(rf"^def\s+{re.escape(name)}\s*\(", source, re.M) is not None
    return name in names


def _oversized_cells_left_out(
    notebook: nbformat.NotebookNode, earlier: Sequence[str] = ()
) -> list[str]:
    """Empty the code cells past the size limits (parsing them would cost the
    grader memory and time: about 0.5 GB and 2.5 s per MB); say which, after
    ``earlier`` warnings of the same kind (those of :func:`read_submission`)."""
    warnings, total = list(earlier), 0
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "code":
            continue
        size = len(_source(cell))
        total += size
        if size > MAX_CELL_CHARS or total > MAX_CODE_CHARS:
            cell["source"] = ""
            limit = (
                f"more than {MAX_CELL_CHARS:,} in one cell"
                if size > MAX_CELL_CHARS
                else f"the notebook's code passes {MAX_CODE_CHARS:,} in all"
            )
            warnings.append(
                f"cell {index + 1} has {size:,} characters ({limit}): not run"
            )
    if len(warnings) > 3:  # one line for the rest, however many
        warnings[3:] = [
            f"and {len(warnings) - 3:,} more cells past the limits: not run"
        ]
    return warnings


def _check_cell_index(cells: list, exercise: Exercise) -> int | None:
    """Where the exercise's check cell is (by nbgrader id, else by its call)."""
    for index, cell in enumerate(cells):
        if _nbgrader(cell).get("grade_id") == f"check_{exercise.key}":
            return index
    call = re.compile(rf"""\.check\(\s*["']{re.escape(exercise.key)}["']""")
    for index, cell in enumerate(cells):
        if cell.get("cell_type") == "code" and call.search(_source(cell)):
            return index
    return None


def learner_cells(
    notebook: nbformat.NotebookNode, exercise: Exercise
) -> list[tuple[int, str]]:
    """The code cells the grader runs for ``exercise``: (index, source).

    Every unlocked code cell above the exercise's check cell (all of them when
    there is no check cell), as a notebook run from the top would have run them,
    and below it, up to the next locked cell (where the next exercise begins),
    every cell too: an answer written under the check, with the helpers it
    calls, and checked with **Check again**, which sees all of them (the
    thirteenth red team's helper under the check passed there and failed
    here). A later exercise's cell that reuses the name for a helper of its
    own does not replace this exercise's answer.
    """
    cells = notebook.cells
    stop = _check_cell_index(cells, exercise)
    stop = len(cells) if stop is None else stop
    end = next(
        (i for i in range(stop + 1, len(cells)) if _is_locked(cells[i])), len(cells)
    )
    return [
        (index, _source(cell))
        for index, cell in enumerate(cells)
        if cell.get("cell_type") == "code"
        and not _is_locked(cell)
        and index != stop
        and index < end
    ]


def _test_cell_index(notebook: nbformat.NotebookNode, grade_id: str) -> int:
    """Where the cell ``grade_id`` is (the end when the submission lacks it)."""
    cells = notebook.cells
    return next(
        (i for i, c in enumerate(cells) if _nbgrader(c).get("grade_id") == grade_id),
        len(cells),
    )


#: How many copies of one locked cell (a pasted copy of the given cell or of
#: an instructor's test) the grader runs, at most.
MAX_COPIES = 4


def _locked_cell_indices(notebook: nbformat.NotebookNode, grade_id: str) -> list[int]:
    """Where the locked code cells with this nbgrader id are (the first
    :data:`MAX_COPIES`): the grader runs its own text of them there. None where
    such a cell is missing or not locked (an unlocked one is the learner's own
    code, and runs as such)."""
    found = []
    for index, cell in enumerate(notebook.cells):
        if (
            grade_id
            and _nbgrader(cell).get("grade_id") == grade_id
            and cell.get("cell_type") == "code"
            and _is_locked(cell)
        ):
            found.append(index)
    return found[:MAX_COPIES]


def as_python(source: str | None) -> str | None:
    """An instructor's cell as a kernel runs it: IPython's syntax (``%precision
    3``, ``!ls``, ``x?``) made Python, as IPython makes it, in the grader's own
    process (the text is the instructor's, never the submission's); the
    sixty-fifth red team's ``%precision 3`` in a test was a SyntaxError in the
    grader and nothing in a kernel."""
    if source is None:
        return None
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # left as written: its own job says why
        return source


def cells_above(
    notebook: nbformat.NotebookNode, grade_id: str
) -> list[tuple[int, str]]:
    """The learner's code cells above the cell ``grade_id`` (all of them when the
    submission lacks it): what a notebook run from the top had run before it."""
    cells = notebook.cells
    stop = _test_cell_index(notebook, grade_id)
    return [
        (index, _source(cell))
        for index, cell in enumerate(cells[:stop])
        if cell.get("cell_type") == "code" and not _is_locked(cell)
    ]


def instructor_plan(
    source: nbformat.NotebookNode, known: Sequence[str]
) -> tuple[dict[str, float], list[InstructorTest]]:
    """What an instructor's source notebook says about grading, from its nbgrader
    metadata: the points of each check cell ``check_<key>`` for the exercises in
    ``known``, and the instructor's own autograded test cells (locked code cells
    with ``grade: true``, ``solution: false``) in notebook order."""
    points: dict[str, float] = {}
    tests: list[InstructorTest] = []
    for cell in source.cells:
        meta = _nbgrader(cell)
        grade_id = meta.get("grade_id")
        if (
            not meta.get("grade")
            or meta.get("solution")
            or not isinstance(grade_id, str)
        ):
            continue
        if cell.get("cell_type") != "code":
            continue  # a manually graded answer: nbgrader's formgrader scores it
        try:
            value = float(meta.get("points", 0))
        except (TypeError, ValueError):
            raise ValueError(f"{grade_id}: points must be a number") from None
        if grade_id.removeprefix("check_") in known and grade_id.startswith("check_"):
            points[grade_id.removeprefix("check_")] = value
        elif grade_id in known:
            raise ValueError(
                f"the test cell {grade_id!r} has the name of an exercise: give it "
                "another grade_id"
            )
        else:
            tests.append(InstructorTest(grade_id, _source(cell), value))
    return points, tests


def _outcomes(raw: list, shape: list[int]) -> list:
    """Outcomes from a job's checked result (:func:`.sandbox.read_output`): one
    per case, each value within the size limits a learner's result has (a value
    past them is an outcome "ResultTooLarge", as in the notebook)."""
    if [len(x) for x in raw] != shape:
        raise ValueError("the grading data does not have one outcome per case")
    result = []
    for outcomes in raw:
        checked = []
        for o in outcomes:
            try:
                o = {**o, "value": to_plain(o["value"])}
            except Exception as err:  # too large or too deep
                message = f"your function returned {_message_of(err)}"
                o = {"error": "ResultTooLarge", "message": message}
            checked.append(outcome_from_dict(o))
        result.append(checked)
    return result


def _message_of(err: Exception) -> str:
    return err.args[0] if err.args and type(err.args[0]) is str else "too much"


def _grade(
    exercise: Exercise,
    status: str,
    hint: str,
    passed: int = 0,
    points: float = 0.0,
    checks: int = 0,
) -> ExerciseGrade:
    return ExerciseGrade(
        exercise.key,
        exercise.title,
        points,
        exercise.points,
        passed,
        # + "leaves its inputs unchanged", where the inputs could change
        checks or len(exercise.checks) + exercise.mutable_inputs,
        status,
        printable(hint),
    )


def printable(text: str, limit: int = 500) -> str:
    """``text`` on one line, without control characters, at most ``limit`` long:
    a hint may quote the learner's error messages."""
    text = "".join(c if c.isprintable() else " " for c in str(text))
    return text[:limit] + ("…" if len(text) > limit else "")


def _verdict(exercise: Exercise, job: dict, result) -> ExerciseGrade:
    """An exercise's grade from what its sandboxed job gave."""
    note = f" ({'; '.join(job['left_out'])})" if job["left_out"] else ""
    if result.status != "ok":
        return _grade(exercise, result.status, result.detail + note)
    output = result.output
    if output.get("preamble_error"):
        return _grade(
            exercise, "error", f"the grader's setup failed: {output['preamble_error']}"
        )
    if isinstance(exercise, InstructorTest):
        error = output.get("test_error")
        if error == "":
            return _grade(exercise, "passed", note.strip(), 1, float(exercise.points))
        error = (error or "an error it could not report").rstrip(": ")
        # the statuses the course's own exercises use for the same two cases
        status = (
            "not attempted"
            if error.startswith("NotImplementedError")
            else "missing"
            if error.startswith("NameError")
            else "failed"
        )
        return _grade(exercise, status, f"the test cell raised {error}{note}")
    if not output.get("defined"):
        errors = [e for e in output["errors"] if e[0] in job["defining"]]
        syntax = [
            e
            for e in errors
            if e[1].startswith(("SyntaxError", "IndentationError", "TabError"))
        ]
        if syntax:
            return _grade(
                exercise,
                "syntax error",
                f"cell {syntax[-1][0] + 1}, which defines {exercise.function}(), "
                f"has a syntax error: "
                f"{re.sub(r'<ipython-input-[^>]*>, ', '', syntax[-1][1])}{note}",
            )
        raised = f" (the cell raised {errors[-1][1]})" if errors else ""
        return _grade(
            exercise, "missing", f"{exercise.function}() is not defined{raised}{note}"
        )
    try:
        outcomes = _outcomes(output["outcomes"], [len(c) for c in job["cases"]])
    except ValueError as err:
        return _grade(exercise, "error", f"could not read the results: {err}")
    return _of_report(
        exercise, report_from_outcomes(exercise, job["cases"], outcomes), note
    )


def _of_report(exercise: Exercise, report, note: str = "") -> ExerciseGrade:
    """The grade a report of the course's checks gives, ``note`` after its hint:
    "not run" or "not checked" where no check judged a value (a cell the
    screen refused, a function that debugs inside itself), not "failed",
    which an instructor read as wrong answers."""
    status = report.status
    if status == FAILED and report.results:
        hint = report.results[0].hint
        if hint.startswith(NOT_RUN):
            status = "not run"
        elif hint.startswith(NOT_CHECKED):
            status = "not checked"
    return _grade(
        exercise,
        status,
        (report.first_hint + note).strip(),
        report.passed_count,
        report.score,
        len(report.results),
    )


#: How long the static screen may read a notebook's cells, for all of its
#: exercises together (an honest notebook takes a few milliseconds, plus the
#: child's start and its imports of the libraries the cells reach, about 2 s
#: for torch), and how much memory it may use.
SCREEN_SECONDS = 20
SCREEN_BYTES = 3 << 30  # the sandbox's own: it imports the libraries, torch too


def screen_apart(cells: dict[str, list[tuple[int, str]]]) -> dict[str, screen.Finding]:
    """What :func:`..exercises.screen.screen` finds in each exercise's cells
    (``{exercise key: [(cell number, source), ...]}``), read in a child
    process with :data:`SCREEN_SECONDS` and :data:`SCREEN_BYTES`: the cells are
    a submission's, and reading them in the grader's own process gave a hostile
    cell the whole class run to stall (the forty-second red team). A child that
    runs out of time or memory, or says nothing a finding can be read from,
    refuses every exercise it was screening, naming the longest cell; an
    exercise with nothing refused is left out of the result."""
    if not cells:
        return {}

    def limit_memory() -> None:  # in the child, before it runs
        with contextlib.suppress(ValueError, OSError, AttributeError):
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (SCREEN_BYTES, SCREEN_BYTES))

    try:
        done = subprocess.run(
            [sys.executable, "-I", "-W", "ignore", str(SCREEN_SCRIPT)],
            input=json.dumps(cells),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a child's warnings: never read (red team 60)
            text=True,
            timeout=SCREEN_SECONDS,
            preexec_fn=limit_memory if os.name == "posix" else None,
            check=False,
        )
        said = json.loads(done.stdout) if done.returncode == 0 else None
        findings = {
            key: screen.Finding(int(found[0]), int(found[1]), str(found[2]))
            for key, found in said.items()
            if key in cells and found is not None
        }
    except (subprocess.TimeoutExpired, ValueError, LookupError, TypeError):
        findings = None
    except AttributeError:  # said is None: the child failed
        findings = None
    if findings is not None:
        return findings
    longest = max(
        (cell for listed in cells.values() for cell in listed), key=lambda c: len(c[1])
    )
    unread = screen.Finding(
        longest[0],
        1,
        f"cells the screen could not read within {SCREEN_SECONDS} s and "
        f"{SCREEN_BYTES >> 30} GiB",
    )
    return dict.fromkeys(cells, unread)


def _grade_exercises(
    exercises: list[Exercise | InstructorTest],
    notebook: nbformat.NotebookNode,
    sandbox: Sandbox,
    timeout: float,
    screened: bool = True,
    given: str = "",
    given_id: str = "",
) -> list[ExerciseGrade]:
    """Grade exercises (and instructors' test cells) in one sandbox; see the
    module docstring. ``given``: the chapter's given code (its module's
    ``GIVEN``, the text of a locked cell such as chapter 4's self_attention),
    run where the notebook has that cell, as a kernel runs it: after the
    learner's cells above it, so that it replaces a function of the same name
    defined there (the sixty-second red team: a learner's own chapter 3
    self_attention, pasted higher up, won in the grader and lost in the
    kernel); right after the preamble where the submission lacks the cell."""
    final: dict[str, ExerciseGrade] = {}
    pending: dict[str, dict] = {}
    names = cell_names(notebook)  # parsed once, in a child with a deadline
    preamble = PREAMBLE + locked_bindings(notebook, names)
    # locked cells a kernel runs on the way down, their text from the package or
    # the instructor, never from the submission, at every cell that carries
    # their id (a pasted copy runs in a kernel too): the given cell, and each
    # instructor's test above an exercise, whose imports and names hold below
    # it, as in a kernel and in nbgrader, and whose failures are its own (the
    # sixty-third red team's "import numpy as np" in a test left a later
    # answer using np with 0 points in the grader alone). The runner runs them
    # with its own exec and compile (runner.LOCKED).
    # A cell's copies beyond MAX_COPIES are not run, and the time a locked
    # cell's text takes is granted once per id the package or the instructor
    # defines, not per copy in the submission (the sixty-fifth red team pasted
    # thousands of empty locked cells to buy a --timeout each).
    given_at = _locked_cell_indices(notebook, given_id) if given else []
    if given and not given_at:
        preamble += given
    placed = [(at, given, LOCKED, given_id) for at in given_at]
    for test in exercises:
        if isinstance(test, InstructorTest):
            text = as_python(test.source)
            placed += [
                (at, text, LOCKED, test.key)
                for at in _locked_cell_indices(notebook, test.key)
            ]

    def with_given(cells: list[tuple], below: int) -> list[tuple]:
        """``cells`` with the locked cells above ``below`` at their places."""
        above = [cell for cell in placed if cell[0] < below]
        return sorted([*cells, *above], key=lambda cell: cell[0]) if above else cells

    # Grading again without a cell that hung costs time: only within this budget
    # (a notebook of slow cells cannot keep the grader busy for many rounds).
    started = time.monotonic()
    budget = STARTUP_SECONDS + timeout * JOB_STAGES * len(exercises)
    # the locked cells' time: one --timeout per id, for each exercise
    budget += timeout * len({cell[3] for cell in placed}) * len(exercises)
    findings = screen_apart(
        {
            exercise.key: [
                (i + 1, source) for i, source in learner_cells(notebook, exercise)
            ]
            for exercise in exercises
            if screened and isinstance(exercise, Exercise) and exercise.forbidden
        }
    )
    for exercise in exercises:
        if isinstance(exercise, InstructorTest):
            above = cells_above(notebook, exercise.key)
            pending[exercise.key] = {
                "exercise": exercise,
                "cells": with_given(above, _test_cell_index(notebook, exercise.key)),
                "defining": set(),
                "left_out": [],
                "cases": [],
            }
            continue
        cells = learner_cells(notebook, exercise)
        defining = {
            i
            for i, source in cells
            if _defines(names.get(("top", i)), source, exercise.function)
        } or {  # defined some other way (in a loop, by exec...): any cell naming it
            i
            for i, source in cells
            if re.search(rf"\b{re.escape(exercise.function)}\b", source)
        }
        if not defining:
            final[exercise.key] = _grade(
                exercise, "missing", f"no cell defines {exercise.function}()"
            )
            continue
        finding = findings.get(exercise.key)
        if finding is not None:  # refused before it runs, as in the notebook
            cases = [check.cases() for check in exercise.checks]
            final[exercise.key] = _of_report(
                exercise, screened_out(exercise, cases, finding)
            )
            continue
        check_at = _check_cell_index(notebook.cells, exercise)
        pending[exercise.key] = {
            "exercise": exercise,
            "cells": with_given(
                cells, len(notebook.cells) if check_at is None else check_at
            ),
            "defining": defining,
            "left_out": [],
            "cases": [check.cases() for check in exercise.checks],
        }
    for _ in range(4):  # a round more for each cell left out (or a dead sandbox)
        if not pending or time.monotonic() - started >= budget:
            break
        keys = list(pending)
        jobs = [
            {
                "cells": pending[k]["cells"],
                "function": pending[k]["exercise"].function,
                "test": as_python(getattr(pending[k]["exercise"], "source", None)),
                "forbidden": pending[k]["exercise"].forbidden,
                "cases": pending[k]["cases"],
            }
            for k in keys
        ]
        results = sandbox.run(jobs, timeout, preamble, until=started + budget)
        for key, result in zip(keys, results, strict=True):
            job = pending[key]
            if result is None:  # never started: the sandbox died before it
                continue
            stage = result.stage
            if result.status == "overtime":  # slow in all, no single cell at fault
                final[key] = _grade(job["exercise"], "timeout", result.detail)
                del pending[key]
                continue
            if (
                time.monotonic() - started < budget
                and result.status in ("timeout", "crashed")
                and isinstance(stage, tuple)
                and stage[1] not in job["defining"]
            ):  # another cell is at fault: leave it out and grade again
                job["left_out"].append(
                    f"cell {stage[1] + 1} was left out ({result.status})"
                )
                job["cells"] = [cell for cell in job["cells"] if cell[0] != stage[1]]
                job["last"] = result  # it ran: whatever follows, not "not graded"
                continue
            final[key] = _verdict(job["exercise"], job, result)
            del pending[key]
    over = time.monotonic() - started >= budget
    for key, job in pending.items():
        last = job.get("last")
        if last is not None and not over:
            # the exercise ran in every round and another cell crashed or hung
            # each time (the sixteenth red team forged "not graded", which keeps
            # an earlier score, with four cells that end the process): the
            # submission's fault, so its own status, with the cells named
            final[key] = _grade(
                job["exercise"],
                last.status,
                "; ".join(job["left_out"])
                + ": too many cells above this exercise crash or hang; grading "
                "stopped there (run the notebook from the top and fix them)",
            )
            continue
        final[key] = (
            _grade(
                job["exercise"],
                "timeout",
                f"the notebook's grading took more than {budget:g} s in all "
                f"({STARTUP_SECONDS} s to start, {timeout * JOB_STAGES:g} s per "
                "exercise): make the slow cells faster",
            )
            if over
            else _grade(
                job["exercise"],
                NOT_GRADED,
                "could not be graded: the sandbox stopped before this exercise in "
                "every try (the machine, not the submission, as far as the grader "
                "can tell"
                + (
                    f": {sandbox.last_error}"
                    if getattr(sandbox, "last_error", "")
                    else ""
                )
                + "); grade it again",
            )
        )
    return [final[e.key] for e in exercises]


def _chapter_of(
    notebook: nbformat.NotebookNode, path: Path, chapter: int | None
) -> tuple[int, str, list[str]]:
    """(chapter, the reason, warnings): --chapter, else the file name, else metadata."""
    ours = notebook.metadata.get("transformer_course")
    declared = ours.get("chapter") if isinstance(ours, dict) else None
    # "01_tokens.ipynb", and as browsers and Colab rename a copy: "Copy of
    # 01_tokens.ipynb", "01_tokens (1).ipynb"
    numbers = [int(n) for n in re.findall(r"(?<!\d)(\d{2})_", path.name)]
    from_name = next((n for n in numbers if n in CHAPTERS), None)
    warnings = []
    if chapter is not None:
        if chapter not in CHAPTERS:
            raise ValueError(
                f"chapter: expected one of {sorted(CHAPTERS)}, got {chapter!r}"
            )
        number, reason = chapter, "given with --chapter"
    elif from_name is not None:
        number, reason = from_name, f"from the file name {path.name!r}"
    elif isinstance(declared, int) and declared in CHAPTERS:
        number, reason = declared, "from the notebook's metadata"
    else:
        raise ValueError(
            f"{path.name}: cannot tell which chapter this is (expected a name like "
            f"'01_tokens.ipynb' or --chapter, one of {sorted(CHAPTERS)})"
        )
    if declared is not None and declared != number:
        warnings.append(
            f"the notebook's metadata says chapter {declared!r}, but it was graded as "
            f"chapter {number} ({reason})"
        )
    if from_name is not None and from_name != number:
        warnings.append(
            f"the file name says chapter {from_name}, but it was graded as chapter "
            f"{number} ({reason})"
        )
    return number, reason, warnings


def read_submission(path: Path) -> tuple[nbformat.NotebookNode, list[str]]:
    """The parts of a submitted notebook that grading reads, within bounds.

    The file's size and its number of JSON values are checked before it is
    parsed (a 31 MB notebook of 10⁷ empty objects cost nbformat 5.7 GB), and
    only each cell's type, source, id and nbgrader metadata, and the notebook's
    format and course metadata, reach nbformat (no outputs, no other metadata).
    A cell past :data:`MAX_CELL_CHARS` is emptied (the warnings say which).
    Returns (the notebook, warnings); raises ValueError for a file that is not
    such a notebook.
    """
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise ValueError(
            f"the notebook has {size:,} bytes, more than the {MAX_NOTEBOOK_BYTES:,} "
            "the grader reads (clear large outputs and grade it again)"
        )
    data = path.read_bytes()
    values = sum(data.count(c) for c in (b",", b":", b"[", b"{"))
    if values > MAX_JSON_VALUES:
        raise ValueError(
            f"the notebook holds about {values:,} JSON values, more than the "
            f"{MAX_JSON_VALUES:,} the grader reads (clear large outputs)"
        )
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        raise ValueError("not a notebook: the file is not JSON") from None
    cells = raw.get("cells") if type(raw) is dict else None
    if type(cells) is not list or not all(type(c) is dict for c in cells):
        raise ValueError("not a notebook of format 4: no list of cells")
    if len(cells) > MAX_CELLS:
        raise ValueError(
            f"the notebook has {len(cells):,} cells, more than {MAX_CELLS:,}"
        )
    metadata = raw.get("metadata") if type(raw.get("metadata")) is dict else {}
    minor = raw.get("nbformat_minor")
    kept = {
        "nbformat": raw.get("nbformat"),
        "nbformat_minor": minor,
        "metadata": {
            k: metadata[k]
            for k in ("transformer_course", "kernelspec", "language_info")
            if k in metadata and _small(metadata[k])
        },
        "cells": [],
    }
    warnings: list[str] = []
    for index, cell in enumerate(cells):
        cell_metadata = cell.get("metadata")
        source = cell.get("source", "")
        if type(source) is list and all(type(line) is str for line in source):
            source = "".join(source)
        if type(source) is not str:
            source = ""
        if len(source) > MAX_CELL_CHARS:
            warnings.append(
                f"cell {index + 1} has {len(source):,} characters (more than "
                f"{MAX_CELL_CHARS:,} in one cell): not run"
            )
            source = ""
        nbgrader = (
            cell_metadata.get("nbgrader") if type(cell_metadata) is dict else None
        )
        reduced = {
            "cell_type": cell.get("cell_type"),
            "source": source,
            "metadata": {"nbgrader": nbgrader} if _small(nbgrader) else {},
        }
        if type(minor) is int and minor >= 5:  # ids of our own: theirs may be huge
            reduced["id"] = f"cell-{index}"
        if reduced["cell_type"] == "code":
            reduced.update(outputs=[], execution_count=None)
        kept["cells"].append(reduced)
    try:
        with warnings_module.catch_warnings():
            warnings_module.simplefilter("ignore")
            notebook = nbformat.reads(
                json.dumps(kept, ensure_ascii=False), as_version=4
            )
            nbformat.validate(notebook)
    except nbformat.ValidationError as err:
        why = printable(getattr(err, "message", ""), 200)
        raise ValueError(f"not a valid notebook: {why}") from None
    return notebook, warnings


def _small(value: object, limit: int = 10_000) -> bool:
    """Metadata the grader keeps: present, and about ``limit`` characters at most
    (counted without copying anything: a string in it may be millions long)."""
    budget = [limit]

    def fits(v: object, depth: int) -> bool:
        if type(v) is str:
            budget[0] -= len(v)
        elif type(v) is dict:
            budget[0] -= len(v)
            return depth < 20 and all(
                fits(k, depth + 1) and fits(x, depth + 1) for k, x in v.items()
            )
        elif type(v) is list:
            budget[0] -= len(v)
            return depth < 20 and all(fits(x, depth + 1) for x in v)
        else:
            budget[0] -= 8
        return budget[0] >= 0

    return value is not None and fits(value, 0)


def grade_notebook(
    path: Path | str,
    chapter: int | None = None,
    timeout: float = CHECK_SECONDS,
    only: Sequence[str] | None = None,
    sandbox: Sandbox | None = None,
    unsafe: bool = False,
    points: dict[str, float] | None = None,
    tests: Sequence[InstructorTest] = (),
    screen: bool = True,
) -> NotebookGrade:
    """Grade one submitted notebook; see the module docstring.

    ``points`` gives an exercise's points where the instructor changed them
    (nbgrader's ``points`` of its check cell): the score is scaled to them.
    ``tests`` are the instructor's own test cells, graded after the exercises.
    ``screen=False`` skips reading the cells of exercises that forbid a function
    (:mod:`..exercises.screen`), for tests of the watch behind it; the command
    line always screens.
    Raises :class:`~transformer_course.grading.sandbox.SandboxUnavailable` when
    bubblewrap cannot run here and ``unsafe`` is False.
    """
    path = Path(path)
    notebook, too_large = read_submission(path)
    number, reason, warnings = _chapter_of(notebook, path, chapter)
    warnings += _oversized_cells_left_out(notebook, too_large)
    module = importlib.import_module(f"transformer_course.exercises.{CHAPTERS[number]}")
    for name, given in (("only", only or ()), ("points", points or {})):
        unknown = set(given) - set(module.EXERCISES)
        if unknown:
            raise ValueError(
                f"{name}: expected keys among {sorted(module.EXERCISES)}, "
                f"got {sorted(unknown)}"
            )
    sandbox = sandbox or Sandbox(unsafe=unsafe)
    exercises = [e for k, e in module.EXERCISES.items() if only is None or k in only]
    grades = _grade_exercises(
        [*exercises, *tests],
        notebook,
        sandbox,
        timeout,
        screen,
        given=getattr(module, "GIVEN", ""),
        given_id=getattr(module, "GIVEN_CELL", ""),
    )
    statuses = {grade.key: grade.status for grade in grades}
    for grade in grades:  # the learner's own earlier function fails: say so first
        exercise = module.EXERCISES.get(grade.key)
        if exercise is None or grade.status != "failed":
            continue
        note = foundations_note(
            exercise,
            {k: e for k, e in module.EXERCISES.items() if k in statuses},
            lambda earlier: statuses[earlier.key],
        )
        if note:
            grade.hint = f"{note} {grade.hint}".strip()
    for grade in grades:  # the instructor's points, where they differ from ours
        if points and grade.key in points and grade.max_points:
            wanted = float(points[grade.key])
            grade.points = round(grade.points * wanted / grade.max_points, 6)
            grade.max_points = wanted
    return NotebookGrade(
        path.name, number, grades, reason, warnings, sandbox.description
    )


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and a rename: a reader
    never sees half a file, and a failure leaves the old one as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(
            handle, "w", encoding="utf-8", errors="replace", newline=""
        ) as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_json_atomically(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` (see :func:`write_text_atomically`)."""
    write_text_atomically(path, json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.grading.grade",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--json", type=Path, help="also write the grades to this file")
    parser.add_argument(
        "--chapter",
        type=int,
        help="the chapter (default: from the file name, else the notebook's metadata)",
    )
    add_sandbox_options(parser)
    parser.add_argument(
        "--source",
        type=Path,
        help="the instructor's source notebook: points from its nbgrader metadata, "
        "and its own test cells graded too",
    )
    args = parser.parse_args(argv)
    try:
        points, tests = None, ()
        if args.source:
            source = nbformat.read(args.source, as_version=4)
            try:
                number, reason, _ = _chapter_of(source, args.source, None)
            except ValueError:  # a source named otherwise: as --chapter says
                if args.chapter is None:
                    raise
                number, reason = args.chapter, "given with --chapter"
            if args.chapter is not None and args.chapter != number:
                raise ValueError(
                    f"--source is chapter {number}'s notebook ({reason}), but "
                    f"--chapter says {args.chapter}: give the source of the chapter "
                    "you grade"
                )
            chapter_module = importlib.import_module(
                f"transformer_course.exercises.{CHAPTERS[number]}"
            )
            points, tests = instructor_plan(source, list(chapter_module.EXERCISES))
        result = grade_notebook(
            args.notebook,
            args.chapter,
            args.timeout,
            unsafe=args.unsafe,
            points=points,
            tests=tests,
        )

    except SandboxUnavailable as err:
        print(f"refusing to grade {args.notebook}: {err}", file=sys.stderr)
        return 3
    except (OSError, ValueError, nbformat.reader.NotJSONError) as err:
        print(f"could not grade {args.notebook}: {printable(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # a notebook malformed in a way not foreseen
        print(
            f"could not grade {args.notebook}: {type(err).__name__}: {printable(err)}",
            file=sys.stderr,
        )
        return 2
    print(result.table())
    print(
        f"points and test cells: from {args.source}"
        if args.source
        else "points: the course's (--source SOURCE.ipynb gives your points and "
        "grades your own test cells)"
    )
    if args.json:
        write_json_atomically(args.json, result.as_dict())
    missed = [e.key for e in result.exercises if e.status == NOT_GRADED]
    if missed:
        print(
            f"not graded ({', '.join(missed)}): the sandbox stopped before them; "
            "grade the notebook again",
            file=sys.stderr,
        )
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
