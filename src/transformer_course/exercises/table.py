"""One judge for the value checks of many exercises, read from a table (issue 24).

Most value checks ask the same questions of every case, in an order that
matters: does the answer equal the reference? If not, is it one of the usual
mistakes (each known by what it returns, by its shape alone, or by the error it
raises), or the wrong shape? The first row that matches gives the hint; if none
does, a last hint says what the answer should be. A :class:`Table` writes that
down once per exercise, and ``tests/test_exercise_tables.py`` proves from the
tables themselves that every row reaches its own hint.

    SPLIT_TABLE = Table(
        reference=split_heads,
        rows=(
            Shaped(lambda x, h: (*x.shape[:2], h, x.shape[2] // h), "transpose(1, 2) ..."),
            Returns(lambda x, h: x.reshape(...), "view as (B, N, H, d) first ..."),
            WrongShape(lambda case, got, want: f"... {tuple(want.shape)} ..."),
        ),
        otherwise="Head h must hold features h·d ... (h+1)·d - 1 of every token.",
    )
    Check("(B, N, D) -> (B, H, N, d)", _split_cases, SPLIT_TABLE)

A hint is a string, or ``hint(case, got, want)`` where it names the sizes of
the case at hand. Checks whose mistakes show only across cases (a count that
changes with the number of heads) keep a judge of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from .core import Failed, Outcome, close, returned_values

__all__ = ["Holds", "Raised", "Returns", "Shaped", "Table", "WrongShape"]

#: A hint: the text, or ``hint(case, got, want)`` -> the text.
Hint = str | Callable[[tuple, Any, Any], str]


def _said(hint: Hint, case: tuple, got: Any, want: Any) -> str:
    return hint if isinstance(hint, str) else hint(case, got, want)


@dataclass(frozen=True)
class Returns:
    """A usual mistake known by its value: ``returns(*case)`` is what it gives
    back, or a list of the ways it may (compared with :func:`.core.close`, so
    shapes too), or None where the mistake cannot show in that case."""

    returns: Callable[..., Any]
    hint: Hint
    equal_nan: bool = False

    def _answers(self, case: tuple) -> list:
        answers = self.returns(*case)
        return (
            []
            if answers is None
            else answers
            if isinstance(answers, list)
            else [answers]
        )

    def matches(self, case: tuple, got: Any, want: Any, equal=close) -> bool:
        if self.equal_nan:
            equal = partial(equal, equal_nan=True)
        return any(equal(got, a) for a in self._answers(case))

    def example(self, case: tuple, want: Any) -> Outcome | None:
        answers = self._answers(case)
        return Outcome(value=answers[0]) if answers else None


@dataclass(frozen=True)
class Shaped:
    """A usual mistake known by its shape alone: ``shape(*case)``."""

    shape: Callable[..., tuple]
    hint: Hint

    def matches(self, case: tuple, got: Any, want: Any) -> bool:
        return tuple(got.shape) == tuple(self.shape(*case))

    def example(self, case: tuple, want: Any) -> Outcome:
        return Outcome(value=torch.zeros(self.shape(*case)))


@dataclass(frozen=True)
class WrongShape:
    """Any shape but the reference's."""

    hint: Hint

    def matches(self, case: tuple, got: Any, want: Any) -> bool:
        return tuple(got.shape) != tuple(want.shape)

    def example(self, case: tuple, want: Any) -> Outcome:
        return Outcome(value=torch.zeros((*want.shape, 2)))

    @classmethod
    def of_input(cls, layout: str) -> WrongShape:
        """A shape other than the first argument's, which the answer keeps:
        "The output has the input's shape (B, N, D) = (2, 5, 8), got ..."."""
        return cls(
            lambda case, got, want: (
                f"The output has the input's shape {layout} = "
                f"{tuple(case[0].shape)}, got {tuple(got.shape)}."
            )
        )


@dataclass(frozen=True)
class Holds:
    """A usual mistake known by a property of the answer: ``holds(case, got)``
    (every head the same, say); ``example_of(*case)`` is such an answer, for
    the tests of the table."""

    holds: Callable[[tuple, Any], bool]
    hint: Hint
    example_of: Callable[..., Any]

    def matches(self, case: tuple, got: Any, want: Any) -> bool:
        return bool(self.holds(case, got))

    def example(self, case: tuple, want: Any) -> Outcome:
        return Outcome(value=self.example_of(*case))


@dataclass(frozen=True)
class Raised:
    """A usual mistake known by the error it raises: a message that holds one
    of ``says`` (torch's "shapes cannot be multiplied" for a weight used
    untransposed). Asked before the answer is read."""

    says: tuple[str, ...]
    hint: Hint

    def raised_by(self, outcome: Outcome) -> bool:
        return outcome.raised and any(s in outcome.message for s in self.says)

    def example(self, case: tuple, want: Any) -> Outcome:
        return Outcome(error="RuntimeError", message=self.says[0])


Row = Returns | Shaped | WrongShape | Holds | Raised


@dataclass(frozen=True)
class Table:
    """A value check's judge: ``reference(*case)`` is the answer, compared with
    ``equal`` (:func:`.core.close` unless the exercise needs a looser one);
    otherwise the first of ``rows`` that matches gives its hint, and
    ``otherwise`` where none does. Cases are judged in order, the first case
    answered wrongly deciding; an error raised in any case is reported first,
    unless ``case_by_case``, where a case's error counts only when the cases
    before it were answered right."""

    reference: Callable[..., Any]
    rows: tuple[Row, ...]
    otherwise: Hint
    equal: Callable[[Any, Any], bool] = close
    case_by_case: bool = False
    #: how an answer is compared with a mistake's (:class:`Returns`)
    row_equal: Callable[[Any, Any], bool] = close

    def __call__(self, cases: list[tuple], outcomes: list[Outcome]) -> None:
        if not self.case_by_case:
            self._raised(cases, outcomes)
            returned_values(outcomes)  # an error anywhere, named first
        for case, outcome in zip(cases, outcomes, strict=True):
            self._raised([case], [outcome])
            (got,) = returned_values([outcome])
            want = self.reference(*case)
            if self.equal(got, want):
                continue
            row = next(
                (r for r in self.rows if self._matches(r, case, got, want)), None
            )
            raise Failed(
                _said(self.otherwise if row is None else row.hint, case, got, want)
            )

    def _matches(self, row: Row, case: tuple, got: Any, want: Any) -> bool:
        if isinstance(row, Raised):
            return False
        if isinstance(row, Returns):
            return row.matches(case, got, want, self.row_equal)
        return row.matches(case, got, want)

    def _raised(self, cases: list[tuple], outcomes: list[Outcome]) -> None:
        for case, outcome in zip(cases, outcomes, strict=True):
            for row in self.rows:
                if isinstance(row, Raised) and row.raised_by(outcome):
                    raise Failed(_said(row.hint, case, None, None))

    def example(self, row: Row | None, case: tuple) -> tuple[Outcome | None, str]:
        """An outcome that ``row`` describes for ``case`` (None where the row
        cannot show in it), and the hint it must get; ``row=None``: an answer of
        the right shape that no row describes, and the ``otherwise`` hint. For
        the tests that prove each row of a table gives its hint."""
        want = self.reference(*case)
        if row is None:
            outcome = Outcome(value=torch.full_like(want, 0.123))
            hint = self.otherwise
        else:
            outcome, hint = row.example(case, want), row.hint
        if outcome is None:
            return None, ""
        got = outcome.value
        return outcome, _said(
            hint, case, got, None if isinstance(row, Raised) else want
        )
