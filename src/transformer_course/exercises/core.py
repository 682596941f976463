"""The check engine behind every exercise: plain Python, no widgets.

A check runs in two phases, so that grading never trusts the learner's process:

1. **call**: the learner's function is called on a list of inputs (*cases*)
   that the check makes deterministically. Each call gives an :class:`Outcome`:
   a value, or the name and message of the exception it raised.
2. **judge**: the check looks at the inputs and the outcomes, and either passes
   or raises :class:`Failed` with a targeted hint for the usual mistake.

In a notebook both phases run in the kernel (instant feedback). The grader
(``python -m transformer_course.grade``) runs phase 1 in a separate kernel that
holds the submission, and phase 2 in its own process, where submitted code never
runs: redefining or monkeypatching checks in the notebook cannot change a score.

Used by every exercise notebook (exercises/NN_topic.ipynb) through
``transformer_course.exercises.chNN`` modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "Check",
    "CheckResult",
    "Exercise",
    "Failed",
    "Outcome",
    "Report",
    "call_cases",
    "judge_outcomes",
    "report_from_outcomes",
    "returned_values",
    "run_exercise",
    "to_plain",
]

NOT_ATTEMPTED = "not attempted"
PASSED = "passed"
FAILED = "failed"


class Failed(Exception):  # noqa: N818  (a verdict, not an error)
    """A check did not pass; ``hint`` tells the learner what to look at."""

    def __init__(self, hint: str):
        super().__init__(hint)
        self.hint = hint


@dataclass(frozen=True)
class Outcome:
    """What one call of the learner's function gave: a value, or an exception."""

    value: Any = None
    error: str | None = None  # the exception's class name
    message: str = ""

    @property
    def raised(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class Check:
    """One test of an exercise.

    Attributes:
        name: a short statement of the property, e.g. "rows sum to 1".
        cases: makes the inputs: a list of argument tuples, deterministic.
        judge: ``judge(cases, outcomes)`` returns None to pass, or raises
            :class:`Failed` with a hint.
    """

    name: str
    cases: Callable[[], list[tuple]]
    judge: Callable[[list[tuple], list[Outcome]], None]


@dataclass(frozen=True)
class Exercise:
    """A function the learner writes, with its checks and its points.

    Attributes:
        key: identifier, also the nbgrader ``grade_id`` of the solution cell.
        function: the name the learner's function has in the notebook.
        title: shown above the results.
        points: points for passing every check (partial credit is
            proportional to the checks passed).
        checks: the battery of checks.
        requires: keys of earlier exercises whose solution cells this one may
            use (the grader runs those cells first, in the same kernel).
    """

    key: str
    function: str
    title: str
    points: int
    checks: tuple[Check, ...]
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    hint: str = ""


@dataclass(frozen=True)
class Report:
    """The results of one exercise."""

    exercise: Exercise
    status: str  # "passed", "failed" or "not attempted"
    results: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def passed_count(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def score(self) -> float:
        """Points earned: the exercise's points times the share of checks passed."""
        if not self.results:
            return 0.0
        return self.exercise.points * self.passed_count / len(self.results)

    @property
    def first_hint(self) -> str:
        return next((r.hint for r in self.results if not r.passed), "")


def returned_values(outcomes: list[Outcome], kind: type = torch.Tensor) -> list:
    """The values the learner's function returned, for a judge to inspect.

    Raises :class:`Failed` naming the first exception the function raised, or the
    first value that is not of ``kind``.
    """
    values = []
    for outcome in outcomes:
        if outcome.raised:
            raise Failed(f"Your function raised {outcome.error}: {outcome.message}")
        if not isinstance(outcome.value, kind):
            raise Failed(
                f"Return a {kind.__name__}, not {type(outcome.value).__name__}."
            )
        values.append(outcome.value)
    return values


def call_cases(function: Callable, cases: Sequence[tuple]) -> list[Outcome]:
    """Phase 1: call ``function(*case)`` for every case, catching what it raises.

    Inputs are cloned before each call, so a function that modifies its input
    cannot change what a later case (or the judge) sees.
    """
    outcomes = []
    for case in cases:
        args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case)
        try:
            outcomes.append(Outcome(value=function(*args)))
        except NotImplementedError as err:
            outcomes.append(Outcome(error="NotImplementedError", message=str(err)))
        except Exception as err:  # the learner's bug, reported as a hint
            outcomes.append(Outcome(error=type(err).__name__, message=str(err)))
    return outcomes


def judge_outcomes(
    check: Check, cases: list[tuple], outcomes: list[Outcome]
) -> CheckResult:
    """Phase 2: apply ``check.judge``; an unexpected exception is a failure too."""
    try:
        check.judge(cases, outcomes)
    except Failed as failure:
        return CheckResult(check.name, False, failure.hint)
    except Exception as err:  # e.g. the learner returned the wrong type
        raised = next((o for o in outcomes if o.raised), None)
        detail = (
            f"{raised.error}: {raised.message}"
            if raised
            else f"{type(err).__name__}: {err}"
        )
        return CheckResult(
            check.name,
            False,
            f"Your function raised or returned something unexpected ({detail}).",
        )
    return CheckResult(check.name, True)


def run_exercise(exercise: Exercise, function: Callable | None) -> Report:
    """Both phases, in this process: the notebook's instant feedback."""
    if function is None:
        return Report(exercise, NOT_ATTEMPTED)
    case_lists = [check.cases() for check in exercise.checks]
    outcome_lists = [call_cases(function, cases) for cases in case_lists]
    return report_from_outcomes(exercise, case_lists, outcome_lists)


def report_from_outcomes(
    exercise: Exercise,
    case_lists: list[list[tuple]],
    outcome_lists: list[list[Outcome]],
) -> Report:
    """Judge every check; a stub that raises NotImplementedError is "not attempted"."""
    every = [o for outcomes in outcome_lists for o in outcomes]
    if every and all(o.error == "NotImplementedError" for o in every):
        return Report(exercise, NOT_ATTEMPTED)
    results = tuple(
        judge_outcomes(check, cases, outcomes)
        for check, cases, outcomes in zip(
            exercise.checks, case_lists, outcome_lists, strict=True
        )
    )
    status = PASSED if all(r.passed for r in results) else FAILED
    return Report(exercise, status, results)


def to_plain(value: Any, depth: int = 0) -> Any:
    """A value made of tensors, numbers, strings, lists, tuples and dicts only.

    The grader moves outcomes between processes with ``torch.load(...,
    weights_only=True)``, which accepts nothing else; anything else becomes a
    description string, which the judge then rejects with a hint.
    """
    if depth > 20:
        return "<nested too deeply>"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, list | tuple):
        items = [to_plain(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {str(k): to_plain(v, depth + 1) for k, v in value.items()}
    return f"<{type(value).__name__}>"
