"""Grade a submitted exercise notebook: ``python -m transformer_course.grade NB.ipynb``.

How a submission is graded, exercise by exercise (see :mod:`.exercises.core`):

1. The grader makes each check's inputs (cases) in its own process.
2. A fresh kernel runs a preamble written by the grader (imports, seed), then
   the submission's solution cell for that exercise (found by its nbgrader
   ``grade_id``, else by ``def <function>(``), then calls the function on the
   cases and saves the outcomes. Nothing else of the submission runs, so
   edited check cells, or checks redefined in other cells, have no effect.
3. The grader loads the outcomes (tensors and plain data only:
   ``torch.load(weights_only=True)``) and judges them in its own process, where
   submitted code never runs.

A cell that runs past ``--timeout`` seconds, a kernel that dies (``os._exit``),
``sys.exit()``, or a flood of output costs that exercise its points, never the
grader: outputs are counted and dropped, and every exercise has its own kernel.
The exit status is 0 whenever grading worked, whatever the score.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import torch

from .exercises import CHAPTERS
from .exercises.core import Exercise, Outcome, report_from_outcomes

__all__ = ["ExerciseGrade", "NotebookGrade", "grade_notebook", "main"]

PREAMBLE = """\
import math
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
import transformer_course as tc
device = tc.setup(seed=0)
"""

HARVEST = """\
def _grader_harvest():
    import torch
    from transformer_course.exercises.core import to_plain
    function = globals().get({name!r})
    result = {{"defined": callable(function), "outcomes": []}}
    if callable(function):
        for cases in torch.load({cases!r}, weights_only=True):
            outcomes = []
            for case in cases:
                try:
                    value = to_plain(function(*case))
                    outcomes.append({{"value": value, "error": None, "message": ""}})
                except BaseException as err:
                    outcomes.append({{"value": None, "error": type(err).__name__,
                                     "message": str(err)[:500]}})
            result["outcomes"].append(outcomes)
    torch.save(result, {out!r})
_grader_harvest()
"""


@dataclass
class ExerciseGrade:
    key: str
    title: str
    points: float
    max_points: int
    checks_passed: int
    checks: int
    status: str  # passed / failed / not attempted / missing / timeout / crashed / error
    hint: str


@dataclass
class NotebookGrade:
    notebook: str
    chapter: int
    exercises: list[ExerciseGrade]

    @property
    def total(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_total(self) -> int:
        return sum(e.max_points for e in self.exercises)

    def as_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "chapter": self.chapter,
            "total": self.total,
            "max_total": self.max_total,
            "exercises": [asdict(e) for e in self.exercises],
        }

    def table(self) -> str:
        rows = [("exercise", "points", "checks", "status / hint")]
        for e in self.exercises:
            note = e.status + (f": {e.hint}" if e.hint else "")
            rows.append(
                (
                    e.key,
                    f"{e.points:g}/{e.max_points}",
                    f"{e.checks_passed}/{e.checks}",
                    note[:110],
                )
            )
        rows.append(("TOTAL", f"{self.total:g}/{self.max_total}", "", ""))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [
            f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}  {d}"
            for a, b, c, d in rows
        ]
        lines.insert(1, "-" * max(len(line) for line in lines))
        return "\n".join(lines)


class _Kernel:
    """A kernel whose outputs are counted and dropped, with a deadline per cell."""

    def __init__(self, workdir: Path):
        from jupyter_client.manager import KernelManager

        env = {
            **os.environ,
            "TRANSFORMER_COURSE_THREADS": "1",
            "MPLBACKEND": "Agg",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("NBGRADER_EXECUTION", None)
        self.km = KernelManager(kernel_name="python3")
        # The kernel's own stdout/stderr (os.write(1, ...)) must not reach ours.
        self.km.start_kernel(
            cwd=str(workdir),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float) -> tuple[str, str]:
        """Execute ``code``. Returns (status, detail): status is "ok", "error",
        "timeout" or "crashed"."""
        msg_id = self.kc.execute(code, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + timeout
        status, detail = "ok", ""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", f"a cell ran for more than {timeout:g} s"
            if not self.km.is_alive():
                return (
                    "crashed",
                    "the kernel died (os._exit, a crash or running out of memory)",
                )
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "error":
                status = "error"
                detail = f"{msg['content']['ename']}: {msg['content']['evalue']}"[:300]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                return status, detail
            # stream / display_data / execute_result: dropped, whatever their size

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        with contextlib.suppress(Exception):
            self.km.shutdown_kernel(now=True)


def _solution_source(notebook: nbformat.NotebookNode, exercise: Exercise) -> str | None:
    cells = [c for c in notebook.cells if c.get("cell_type") == "code"]
    for cell in cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == exercise.key:
            return cell.source
    for cell in cells:
        if f"def {exercise.function}(" in cell.source:
            return cell.source
    return None


def _outcomes(raw: object, shape: list[int]) -> list[list[Outcome]]:
    """Validate the harvested data and turn it into Outcomes."""
    if (
        not isinstance(raw, list)
        or [len(x) for x in raw if isinstance(x, list)] != shape
    ):
        raise ValueError("the grading data does not have one outcome per case")
    result = []
    for outcomes in raw:
        result.append(
            [
                Outcome(o.get("value"), o.get("error"), str(o.get("message", "")))
                for o in outcomes
            ]
        )
    return result


def _grade_exercise(
    exercise: Exercise, source: str | None, timeout: float, required: Sequence[str] = ()
) -> ExerciseGrade:
    def grade(
        status: str, hint: str, passed: int = 0, points: float = 0.0
    ) -> ExerciseGrade:
        return ExerciseGrade(
            exercise.key,
            exercise.title,
            points,
            exercise.points,
            passed,
            len(exercise.checks),
            status,
            hint,
        )

    if source is None:
        return grade("missing", f"no solution cell defines {exercise.function}()")
    case_lists = [check.cases() for check in exercise.checks]
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        work = Path(tmp)
        cases_path, out_path = work / "cases.pt", work / "outcomes.pt"
        torch.save(case_lists, cases_path)
        kernel = _Kernel(work)
        try:
            status, detail = kernel.run(PREAMBLE, timeout=max(timeout, 60))
            if status not in ("ok",):
                return grade("error", f"the grader's preamble failed: {detail}")
            for earlier in required:  # solution cells this exercise builds on
                status, detail = kernel.run(earlier, timeout)
                if status in ("timeout", "crashed"):
                    return grade(
                        status, f"in a solution cell this exercise uses, {detail}"
                    )
            status, detail = kernel.run(source, timeout)
            if status in ("timeout", "crashed"):
                return grade(status, f"in the solution cell, {detail}")
            harvest = HARVEST.format(
                name=exercise.function, cases=str(cases_path), out=str(out_path)
            )
            h_status, h_detail = kernel.run(harvest, timeout)
            if h_status in ("timeout", "crashed"):
                return grade(
                    h_status, f"while checking {exercise.function}(), {h_detail}"
                )
        finally:
            kernel.close()
        try:
            raw = torch.load(out_path, weights_only=True)
            if not raw["defined"]:
                hint = f"{exercise.function}() is not defined"
                return grade(
                    "missing", hint + (f" (the cell raised {detail})" if detail else "")
                )
            outcomes = _outcomes(raw["outcomes"], [len(c) for c in case_lists])
        except Exception as err:
            return grade(
                "error",
                f"could not read the results: {type(err).__name__}: {err}"[:200],
            )
    report = report_from_outcomes(exercise, case_lists, outcomes)
    return grade(report.status, report.first_hint, report.passed_count, report.score)


def _chapter_of(notebook: nbformat.NotebookNode, path: Path) -> int:
    declared = notebook.metadata.get("transformer_course", {}).get("chapter")
    if isinstance(declared, int) and declared in CHAPTERS:
        return declared
    prefix = path.name.split("_", 1)[0]
    if prefix.isdigit() and int(prefix) in CHAPTERS:
        return int(prefix)
    raise ValueError(
        f"{path.name}: cannot tell which chapter this is (expected a name like "
        f"'01_tokens.ipynb' or --chapter, one of {sorted(CHAPTERS)})"
    )


def grade_notebook(
    path: Path | str,
    chapter: int | None = None,
    timeout: float = 30.0,
    only: Sequence[str] | None = None,
) -> NotebookGrade:
    """Grade one submitted notebook; see the module docstring."""
    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    number = chapter if chapter is not None else _chapter_of(notebook, path)
    if number not in CHAPTERS:
        raise ValueError(f"chapter: expected one of {sorted(CHAPTERS)}, got {number!r}")
    module = importlib.import_module(f"transformer_course.exercises.{CHAPTERS[number]}")
    unknown = set(only or ()) - set(module.EXERCISES)
    if unknown:
        raise ValueError(
            f"only: expected keys among {sorted(module.EXERCISES)}, got {sorted(unknown)}"
        )
    grades = []
    for key, exercise in module.EXERCISES.items():
        if only is not None and key not in only:
            continue
        required = [
            _solution_source(notebook, module.EXERCISES[k]) for k in exercise.requires
        ]
        source = _solution_source(notebook, exercise)
        required_sources = [r for r in required if r is not None]
        grades.append(_grade_exercise(exercise, source, timeout, required_sources))
    return NotebookGrade(path.name, number, grades)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.grade", description=__doc__.splitlines()[0]
    )
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--json", type=Path, help="also write the grades to this file")
    parser.add_argument(
        "--chapter", type=int, help="the chapter (default: from the file name)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per cell (30)"
    )
    args = parser.parse_args(argv)
    try:
        result = grade_notebook(args.notebook, args.chapter, args.timeout)
    except (OSError, ValueError, nbformat.reader.NotJSONError) as err:
        print(f"could not grade {args.notebook}: {err}", file=sys.stderr)
        return 2
    print(result.table())
    if args.json:
        args.json.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
