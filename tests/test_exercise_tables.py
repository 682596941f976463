"""One harness for the exercise tables of every chapter (issue 24): each
chapter's test file holds its data, the answers and the hints they must get
(``MISTAKES``, ``CHECK_MISTAKES``, ``PROPERTY_MISTAKES``, ``HONEST``), and these
tests run them all.

* a usual mistake fails, loses points, and its first failing check gives its hint;
* a mistake named with the check it fails (a property check, say) fails that
  check, with its hint, and loses points;
* an honest answer written another way gets full marks;
* running every reference solution's checks leaves PyTorch's global random
  state as it was (checks draw from their own generators);
* every row of every judge written as a :class:`.table.Table` (a usual mistake,
  known by its value or its shape) gives its own hint on one of its check's
  cases, and no earlier row hides it: the proof comes from the tables, not from
  answers written by hand.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from exercise_helpers import (
    assert_check_hint,
    assert_first_hint,
    namespace_from,
    read_source,
    solution_cells,
    without_markers,
)

from transformer_course.exercises import CHAPTERS, chapter, core
from transformer_course.exercises.table import Table

TABLES = {
    n: importlib.import_module(
        f"test_exercises_ch{n:02d}" if n > 1 else "test_exercises"
    )
    for n in CHAPTERS
}


def _rows(name: str) -> list[tuple]:
    return [
        (n, *row) for n, module in TABLES.items() for row in getattr(module, name, [])
    ]


def _ids(rows: list[tuple]) -> list[str]:
    return [f"ch{row[0]}-{row[1]}-{i}" for i, row in enumerate(rows)]


MISTAKES = _rows("MISTAKES")
CHECK_MISTAKES = _rows("CHECK_MISTAKES") + _rows("PROPERTY_MISTAKES")
HONEST = _rows("HONEST")


def test_every_chapter_has_its_tables():
    assert {row[0] for row in MISTAKES} == set(TABLES) - {1, 2}
    assert {row[0] for row in CHECK_MISTAKES} == set(TABLES) - {3}
    assert {row[0] for row in HONEST} >= {5, 7}


@pytest.mark.parametrize(
    ("n", "key", "source_code", "hint"), MISTAKES, ids=_ids(MISTAKES)
)
@pytest.mark.filterwarnings("ignore:.*with a literal:SyntaxWarning")  # ch7's IS_CLS
def test_usual_mistake_gets_its_hint_and_loses_points(n, key, source_code, hint):
    assert_first_hint(chapter(n).exercises[key], source_code, hint)


@pytest.mark.parametrize(
    ("n", "key", "source_code", "check", "hint"),
    CHECK_MISTAKES,
    ids=_ids(CHECK_MISTAKES),
)
def test_a_mistake_fails_its_check_with_its_hint(n, key, source_code, check, hint):
    assert_check_hint(chapter(n).exercises[key], source_code, check, hint)


@pytest.mark.parametrize(("n", "key", "source_code"), HONEST, ids=_ids(HONEST))
def test_honest_answers_written_another_way_get_full_marks(n, key, source_code):
    exercise = chapter(n).exercises[key]
    report = core.run_exercise(
        exercise, namespace_from([source_code])[exercise.function]
    )
    assert report.status == "passed", report.results
    assert report.score == exercise.points


@pytest.mark.parametrize("n", [4, 5, 6, 7])
def test_checks_leave_the_global_random_state_alone(n):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    references = solution_cells(read_source(n)).values()
    namespace = namespace_from(without_markers(cell) for cell in references)
    for exercise in chapter(n).exercises.values():
        core.run_exercise(exercise, namespace[exercise.function])
    torch.testing.assert_close(torch.rand(3), expected)


def _table_rows() -> list[tuple]:
    """(chapter, exercise, check, table, row index) for every row of every
    value check judged by a table."""
    rows = []
    for n in CHAPTERS:
        for key, exercise in chapter(n).exercises.items():
            for check in exercise.checks:
                if check.kind == core.VALUE and isinstance(check.judge, Table):
                    rows += [
                        (n, key, check, check.judge, i)
                        for i in range(len(check.judge.rows) + 1)
                    ]
    return rows


TABLE_ROWS = _table_rows()


def test_some_chapters_judge_by_tables():
    assert {n for n, *_ in TABLE_ROWS} >= {3, 4}
    assert len(TABLE_ROWS) >= 30


@pytest.mark.parametrize(
    ("n", "key", "check", "table", "i"),
    TABLE_ROWS,
    ids=[f"ch{n}-{key}-{check.name[:20]}-{i}" for n, key, check, _, i in TABLE_ROWS],
)
def test_every_row_of_a_table_gives_its_hint(n, key, check, table, i, monkeypatch):
    """Row ``i`` (past the last row: an answer of the right shape that no row
    describes, and the ``otherwise`` hint) gives its own hint on some case of
    the check, or of the exercise's unseen inputs (drawn from a fixed seed), and
    no earlier row takes its answers."""
    exercise = chapter(n).exercises[key]
    row = table.rows[i] if i < len(table.rows) else None
    monkeypatch.setattr(core.os, "urandom", lambda size: bytes(range(1, size + 1)))
    twins = exercise.twin_cases(torch.Generator().manual_seed(0))
    cases = [*check.cases(), *exercise.drawn_cases(), *twins]
    said = []
    for case in cases:
        outcome, hint = table.example(row, case)
        if outcome is None or (
            not outcome.raised and table.equal(outcome.value, table.reference(*case))
        ):
            continue  # the mistake cannot show in this case
        with pytest.raises(core.Failed) as failed:
            table([case], [outcome])
        said.append((failed.value.hint, hint))
        if said[-1][0] == hint:
            break
    assert said, "no case tells this row from the reference"
    assert any(got == hint for got, hint in said), said[0]
