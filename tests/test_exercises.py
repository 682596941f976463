"""The exercise machinery: check engine, chapter-1 checks, widgets (headless)."""

import sys
import warnings
from pathlib import Path

import pytest
import torch
from exercise_helpers import (
    WRONG,
    namespace_from,
    read_source,
    solution_cells,
    without_markers,
)

from tools.release import student_version
from transformer_course.exercises import chapter, core, widgets
from transformer_course.exercises.ch01 import EXERCISES, QUIZZES
from transformer_course.exercises.ch01 import _reference_merge as merge_reference


@pytest.fixture(scope="module")
def solutions():
    return namespace_from(solution_cells(read_source()).values())


@pytest.fixture(scope="module")
def stubs():
    notebook = student_version(read_source())
    return namespace_from(solution_cells(notebook).values())


@pytest.fixture(autouse=True)
def fresh_progress():
    for kept in (widgets.PROGRESS, widgets.TRIES, widgets.WRONG_GIVEN):
        kept.clear()
    yield
    for kept in (widgets.PROGRESS, widgets.TRIES, widgets.WRONG_GIVEN):
        kept.clear()


def failing(report):
    return {r.name: r.hint for r in report.results if not r.passed}


def fn(source, name):
    return namespace_from([source])[name]


# (exercise, wrong implementation, the check that must fail, words of its hint),
# run by tests/test_exercise_tables.py
CHECK_MISTAKES = [
    (
        "build_char_vocab",
        WRONG["build_char_vocab"],
        "ids are 0..V-1 in sorted character order",
        "sorted order",
    ),
    (
        "build_char_vocab",
        "def build_char_vocab(text):\n    return {c: i + 1 for i, c in enumerate(sorted(set(text)))}",
        "ids are 0..V-1 in sorted character order",
        "Start the ids at 0",
    ),
    (
        "build_char_vocab",
        "def build_char_vocab(text):\n    return {c: i for i, c in enumerate(sorted(set(text.split())))}",
        "every distinct character has one id",
        "set(text)",
    ),
    (
        "merge_pair",
        WRONG["merge_pair"],
        "overlapping pairs merge left to right",
        "skip past both",
    ),
    (
        "merge_pair",
        "def merge_pair(ids, pair, new_id):\n    out = list(ids)\n    i = len(out) - 2\n"
        "    while i >= 0:\n        if (out[i], out[i + 1]) == tuple(pair):\n            out[i:i + 2] = [new_id]\n"
        "            i -= 2\n        else:\n            i -= 1\n    return out",
        "overlapping pairs merge left to right",
        "left to right",
    ),
    (
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n    return F.one_hot(ids, table.shape[0]).to(table.dtype)",
        "shape (..., D)",
        "one column per vocabulary entry",
    ),
    (
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n    return F.one_hot(ids, table.shape[0]).float() @ table.float()",
        "equals a table lookup, in the table's dtype",
        "table's dtype",
    ),
    (
        "patchify",
        "def patchify(images, p):\n    B, C, H, W = images.shape\n"
        "    g = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)\n"
        "    return g.reshape(B, -1, C * p * p)",
        "patches in row-major order, each flattened as (C, p, p)",
        "row by row",
    ),
    (
        "patchify",
        "def patchify(images, p):\n    B, C, H, W = images.shape\n"
        "    g = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)\n"
        "    return g.reshape(B, -1, C * p * p)",
        "patches in row-major order, each flattened as (C, p, p)",
        "channel first",
    ),
    (
        "patchify",
        "def patchify(images, p):\n    return F.unfold(images, p, stride=p).transpose(1, 2)",
        "a clear ValueError for sizes that do not divide",
        "ValueError",
    ),
    (  # checks only the height
        "patchify",
        "def patchify(images, p):\n    B, C, H, W = images.shape\n"
        "    if H % p:\n        raise ValueError(f'{H}x{W} does not divide by {p}')\n"
        "    return F.unfold(images, p, stride=p).transpose(1, 2)",
        "a clear ValueError for sizes that do not divide",
        "got no error",
    ),
    (  # ids as text
        "merge_pair",
        "def merge_pair(ids, pair, new_id):\n"
        "    text = ' '.join(map(str, ids)).replace(f'{pair[0]} {pair[1]}', str(new_id))\n"
        "    return [int(t) for t in text.split()]",
        "replaces every occurrence",
        "compare ids as numbers",
    ),
    (  # edits the caller's list
        "merge_pair",
        "def merge_pair(ids, pair, new_id):\n    i = 0\n    while i + 1 < len(ids):\n"
        "        if (ids[i], ids[i + 1]) == tuple(pair):\n            ids[i:i + 2] = [new_id]\n"
        "        i += 1\n    return ids",
        core.INPUTS_UNCHANGED,
        "changed its input in place",
    ),
    (  # looks the rows up instead of multiplying
        "embed_one_hot",
        "def embed_one_hot(ids, table):\n    return table[ids]",
        "equals a table lookup, in the table's dtype",
        "F.embedding",
    ),
]


def test_a_wrong_answer_earns_nothing_once_unseen_inputs_fail():
    # merge_pair: 3 value checks, 1 unseen check and 2 property checks. Overlapping
    # merges fail one value check and the unseen one: wrong on inputs drawn
    # afresh, so nothing, though two value checks pass (2/6 before issue 20).
    report = core.run_exercise(
        EXERCISES["merge_pair"], fn(WRONG["merge_pair"], "merge_pair")
    )
    assert report.passed_count == 4
    assert "the same on unseen lists" in failing(report)
    assert report.score == 0


IN_PLACE_MERGE = (
    "def merge_pair(ids, pair, new_id):\n"
    "    out, i = [], 0\n"
    "    while i < len(ids):\n"
    "        if tuple(ids[i:i + 2]) == tuple(pair):\n"
    "            out.append(new_id)\n"
    "            i += 2\n"
    "        else:\n"
    "            out.append(ids[i])\n"
    "            i += 1\n"
    "    ids.clear()  # changes the caller's list\n"
    "    return out\n"
)


def test_right_values_with_a_failed_property_earn_partial_credit():
    # every value and the unseen check pass; "leaves its inputs unchanged" fails
    report = core.run_exercise(
        EXERCISES["merge_pair"], fn(IN_PLACE_MERGE, "merge_pair")
    )
    assert list(failing(report)) == [core.INPUTS_UNCHANGED]
    assert report.score == pytest.approx(3 * 5 / 6)
    # the notebook says a share, right whatever points an instructor gives it
    assert widgets.points_said(report) == "83 % of its points"


def test_an_answer_right_only_on_the_fixed_inputs_earns_nothing():
    # a table of the fixed cases' answers (they are public in ch01.py)
    exercise = EXERCISES["merge_pair"]
    table = {}
    for check in exercise.checks:
        if check.kind != core.UNSEEN:
            for ids, pair, new_id in check.cases():
                table[(tuple(ids), tuple(pair), new_id)] = merge_reference(
                    ids, pair, new_id
                )
    report = core.run_exercise(
        exercise,
        lambda ids, pair, new_id: list(
            table.get((tuple(ids), tuple(pair), new_id), ids)
        ),
    )
    failed = failing(report)
    assert list(failed) == ["the same on unseen lists"]
    assert report.score == 0


def test_property_checks_count_once_the_values_are_right():
    # right values, but the caller's list is emptied: loses only that property
    source = (
        "def merge_pair(ids, pair, new_id):\n"
        "    merged, i = [], 0\n"
        "    while i < len(ids):\n"
        "        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):\n"
        "            merged.append(new_id)\n"
        "            i += 2\n"
        "        else:\n"
        "            merged.append(ids[i])\n"
        "            i += 1\n"
        "    ids.clear()\n"
        "    return merged"
    )
    report = core.run_exercise(EXERCISES["merge_pair"], fn(source, "merge_pair"))
    assert failing(report) == {
        core.INPUTS_UNCHANGED: failing(report)[core.INPUTS_UNCHANGED]
    }
    assert "changed its input in place (its first argument," in report.first_hint
    assert report.score == pytest.approx(3 * 5 / 6)


def test_a_crashing_function_gets_the_exception_as_hint():
    report = core.run_exercise(
        EXERCISES["merge_pair"],
        fn("def merge_pair(ids, pair, new_id):\n    return ids[99]", "merge_pair"),
    )
    assert report.status == "failed"
    assert "IndexError" in report.first_hint


LOOPS = """
def merge_pair(ids, pair, new_id):
    while True:
        try:
            pass
        except Exception:  # a learner's own handler does not keep it going
            pass
"""


def test_checks_stop_a_function_that_never_returns(monkeypatch, solutions):
    import signal
    import time

    monkeypatch.setattr(core, "CHECK_SECONDS", 0.3)
    before = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    report = core.run_exercise(EXERCISES["merge_pair"], fn(LOOPS, "merge_pair"))
    assert time.monotonic() - started < 10
    assert report.status == "failed"
    assert report.score == 0
    assert "did not return within 0.3 s" in report.note
    assert "grader stops it at the same limit" in report.note
    assert not any(r.passed for r in report.results)
    assert signal.getsignal(signal.SIGALRM) is before  # the kernel's, back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing pending
    # the widget says so too, in its table and in its plain-text fallback
    box = widgets.check_widget(EXERCISES["merge_pair"], fn(LOOPS, "merge_pair"))
    assert "did not return within 0.3 s" in box.children[0].value
    # an answer that returns is judged as before, and leaves no timer behind
    right = core.run_exercise(EXERCISES["merge_pair"], solutions["merge_pair"])
    assert right.status == "passed"
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


SWALLOWS = """
import time


def merge_pair(ids, pair, new_id):
    for _ in range(20):
        try:
            time.sleep(0.05)
        except:  # noqa: E722 - a bare except swallows the check's timeout too
            pass
    return list(ids)  # what it returns is never judged: its time is up
"""


def test_a_function_that_swallows_the_timeout_still_timed_out(monkeypatch):
    """The eighteenth red team: a bare ``except:`` caught the timer's error, the
    function went on and returned, and the watch read the timer's handler as a
    use of the course package ("Don't call the course's own code"). The grader
    says "timeout"; so does the notebook now."""
    monkeypatch.setattr(core, "CHECK_SECONDS", 0.3)
    report = core.run_exercise(EXERCISES["merge_pair"], fn(SWALLOWS, "merge_pair"))
    assert report.score == 0
    assert "did not return within 0.3 s" in report.note
    assert "course" not in (report.first_hint or "")
    import signal

    from transformer_course.exercises import runner

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the timer is off
    assert not runner.STOP_CALLS  # and later checks call every case again
    again = core.run_exercise(EXERCISES["merge_pair"], fn(SWALLOWS, "merge_pair"))
    assert again.note.startswith("Your merge_pair() did not return")  # the same


def test_the_notebook_waits_as_long_as_the_grader(capsys):
    import inspect

    from transformer_course.grading import grade, gradebook

    for function in (grade.grade_notebook, gradebook.grade_class):
        default = inspect.signature(function).parameters["timeout"].default
        assert default == core.CHECK_SECONDS
    for module in (grade, gradebook):
        with pytest.raises(SystemExit):
            module.main(["--help"])
        assert f"seconds per cell ({core.CHECK_SECONDS:g})" in capsys.readouterr().out


def test_a_wrong_return_type_is_a_failure_not_a_crash():
    report = core.run_exercise(EXERCISES["embed_one_hot"], lambda ids, table: None)
    assert report.score == 0
    assert all(r.hint for r in report.results if not r.passed)
    assert not any(r.passed for r in report.results)  # None shows no property


def test_inputs_are_protected_from_mutation():
    shared = torch.ones(3)  # the same tensor object in both cases
    seen = []

    def mutating(x):
        seen.append(x.sum().item())
        x.zero_()  # a learner's function that modifies its input in place
        return x

    outcomes = core.call_cases(mutating, [(shared,), (shared,)])
    assert seen == [3.0, 3.0]  # the second call still got the original values
    assert shared.sum().item() == 3.0  # and the check's own copy is untouched
    assert [o.mutated for o in outcomes] == [(0,), (0,)]


# --- widgets, headless ---------------------------------------------------------


def test_check_widget_shows_results_and_check_again_uses_the_latest_definition(
    monkeypatch, stubs, solutions
):
    ex = chapter(1)
    box = ex.check("merge_pair", stubs["merge_pair"])
    results, button, _note = box.children
    assert "not attempted" in results.value
    assert widgets.PROGRESS["merge_pair"] == "not attempted"

    # the learner fixes the function and re-runs its cell: __main__ has the new one
    monkeypatch.setattr(
        sys.modules["__main__"], "merge_pair", solutions["merge_pair"], raising=False
    )
    button.click()
    assert "6 of 6 checks passed, all of its points" in results.value
    assert widgets.PROGRESS["merge_pair"] == "passed"


def test_an_interrupted_check_says_so_in_its_widget(monkeypatch, stubs):
    """The learner round of issue 21: after Kernel > Interrupt the widget still
    read "Checking ... (stopped after 30 s ...)" half a minute later."""
    box = chapter(1).check("merge_pair", stubs["merge_pair"])
    results, button, _note = box.children

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(widgets, "run_exercise", interrupted)
    with pytest.raises(KeyboardInterrupt):
        button.click()
    assert "Interrupted: the check of merge_pair() did not finish" in results.value


def test_check_widget_lists_failures_with_hints():
    box = chapter(1).check("merge_pair", fn(WRONG["merge_pair"], "merge_pair"))
    shown = box.children[0].value
    assert "4 of 6 checks passed" in shown
    assert "skip past both" in shown
    assert box.report.status == "failed"


def test_a_report_says_its_points_and_why_there_are_none():
    """The learner round read "4 of 6 checks passed" as partial credit, where a
    failed check on unseen inputs earns nothing: the header says both."""
    box = chapter(1).check("merge_pair", fn(WRONG["merge_pair"], "merge_pair"))
    report = box.report
    assert any(r.kind == "unseen" and not r.passed for r in report.results)
    said = "none of its points (a check on unseen inputs failed"
    assert said in box.children[0].value
    assert said in widgets.report_text(report).replace("\n", " ")


def test_a_hint_that_repeats_the_row_above_is_said_once():
    """An error on every input fails every check with one paragraph (its sizes
    differing from case to case): a learner round read it five times. Each
    repeat, to the letter or but for numbers, says so in a few words; the
    first says it all, in the HTML table and in the text alike."""
    Result = core.CheckResult
    first = "Your function raised RuntimeError: sizes 5 and 3 differ. Keep dims."
    results = (
        Result("a", False, first, core.VALUE),
        Result("b", False, first, core.VALUE),
        Result("c", False, first.replace("5", "8"), core.UNSEEN),
        Result("d", True, "", core.PROPERTY),
        Result("e", False, "another hint", core.PROPERTY),
    )
    report = core.Report(chapter(2).exercises["stable_softmax"], "failed", results)
    shown = widgets.render_report(report)
    text = widgets.report_text(report)
    for said in (shown, text.replace("\n", " ").replace("         ", "")):
        assert said.count("sizes 5 and 3 differ") == 1
        assert widgets.SAME_HINT in said
        assert widgets.SAME_BUT_NUMBERS in said
        assert "another hint" in said
    assert "sizes 8" not in shown


def test_a_hint_that_repeats_any_row_above_is_said_once_dtypes_too():
    """A learner round: a one-hot left as int64 failed three rows with one
    paragraph, the second naming 'float' where the first named 'double', the
    third repeating the first across the second."""
    Result = core.CheckResult
    first = (
        "RuntimeError: expected m1 and m2 to have the same dtype: long int != double"
    )
    results = (
        Result("a", False, first, core.VALUE),
        Result("b", False, first.replace("double", "float"), core.UNSEEN),
        Result("c", False, first, core.PROPERTY),
    )
    report = core.Report(chapter(1).exercises["embed_one_hot"], "failed", results)
    assert widgets._hints_once(report) == [
        first,
        widgets.SAME_BUT_NUMBERS,
        widgets.SAME_HINT,
    ]


def test_under_nbgrader_the_check_returns_partial_credit(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    score = chapter(1).check("merge_pair", fn(IN_PLACE_MERGE, "merge_pair"))
    assert score == pytest.approx(3 * 5 / 6)


def test_multiple_choice_quiz_grades_and_explains_on_request():
    box = chapter(1).quiz("quiz_layout")
    # escaped, its citation a link (to the work itself)
    explained = widgets.quiz_html.linked(QUIZZES["quiz_layout"].explanation, book=False)
    assert '<a href="https://arxiv.org/abs/2304.10557"' in explained
    box.submit.click()
    assert "Choose an answer first" in box.feedback.value
    box.control.value = "(B, D, N)"
    box.submit.click()
    assert "Not quite" in box.feedback.value
    assert widgets.PROGRESS["quiz_layout"] == "failed"
    # as on the book's page: after a wrong answer the explanation (which gives
    # the answer away) waits behind a button
    assert explained not in box.feedback.value
    assert box.explanation.layout.display == "none"
    assert box.toggle.layout.display is None
    box.toggle.click()
    assert box.explanation.layout.display is None
    assert box.explanation.value == explained
    box.toggle.click()
    assert box.explanation.layout.display == "none"
    box.control.value = "(B, N, D)"
    box.submit.click()
    assert "Correct" in box.feedback.value
    assert "on try 2" in box.feedback.value  # the first try is what counts
    assert box.explanation.layout.display is None
    assert widgets.PROGRESS["quiz_layout"] == "passed"
    assert widgets.TRIES["quiz_layout"] == (2, False)
    progress = chapter(1).progress()
    assert "passed, on try 2" in progress.value
    assert "✅" not in progress.value
    assert "<svg" in progress.value
    # answering again, wrong and then right, does not move the try it passed on
    for answer in ("(B, D, N)", "(B, N, D)"):
        box.control.value = answer
        box.submit.click()
    assert widgets.TRIES["quiz_layout"] == (2, False)
    assert "on try 2" in box.feedback.value
    assert widgets.PROGRESS["quiz_layout"] == "passed"


def test_quiz_answers_come_back_when_the_cell_runs_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_COURSE_ANSWERS", str(tmp_path / "answers.json"))
    box = chapter(1).quiz("quiz_layout")
    box.control.value = "(B, N, D)"
    box.submit.click()
    widgets.PROGRESS.clear()
    widgets.TRIES.clear()  # a new kernel: the notebook reopened, or restarted
    again = chapter(1).quiz("quiz_layout")
    assert again.control.value == "(B, N, D)"
    assert "Correct" in again.feedback.value
    assert widgets.PROGRESS["quiz_layout"] == "passed"
    assert widgets.TRIES["quiz_layout"] == (1, True)
    again.control.value = "(B, D, N)"  # a wrong answer after the right one
    again.submit.click()
    widgets.PROGRESS.clear()
    widgets.TRIES.clear()
    third = chapter(1).quiz("quiz_layout")
    assert third.control.value == "(B, D, N)"  # the last answer, as typed
    assert widgets.PROGRESS["quiz_layout"] == "passed"  # passed on try 1
    assert widgets.TRIES["quiz_layout"] == (1, True)
    (tmp_path / "answers.json").write_text("{not json")  # damaged: start afresh
    assert chapter(1).quiz("quiz_layout").feedback.value == ""


def test_enter_in_a_number_box_submits():
    box = chapter(1).quiz("quiz_embedding_size")
    box.control.value = "38,597,376"
    box.control._submission_callbacks(box.control)  # what Enter sends
    assert "Correct" in box.feedback.value


def test_every_widget_says_in_plain_text_to_run_its_cell(stubs):
    ex = chapter(1)
    for shown in (
        ex.check("merge_pair", stubs["merge_pair"]),
        ex.quiz("quiz_layout"),
        ex.progress(),
    ):
        bundle = shown._repr_mimebundle_()
        assert widgets.RERUN in bundle["text/plain"], bundle["text/plain"]
    bundle = ex.check(
        "merge_pair", fn(WRONG["merge_pair"], "merge_pair")
    )._repr_mimebundle_()
    assert "skip past both" in " ".join(bundle["text/plain"].split())


def test_nbgrader_validate_reads_the_checks_verdict(
    monkeypatch, capsys, stubs, solutions
):
    """Validate called an unattempted exercise "Partial credit": a check cell
    now writes its verdict to stderr (failed, with the reason) unless it passed."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assert chapter(1).check("merge_pair", stubs["merge_pair"]) is None
    assert "not attempted" in capsys.readouterr().err
    assert chapter(1).check("merge_pair", solutions["merge_pair"]) is None
    assert capsys.readouterr().err == ""
    # a wrong answer: its hints whole, in lines the dialog shows uncut
    assert chapter(1).check("merge_pair", fn(WRONG["merge_pair"], "merge_pair")) is None
    said = capsys.readouterr().err
    assert "skip past both" in " ".join(said.split())
    assert max(len(line) for line in said.splitlines()) <= widgets.TEXT_WIDTH
    assert len(said.splitlines()) > 2


def test_numeric_quiz_accepts_the_answer_within_tolerance():
    box = chapter(1).quiz("quiz_embedding_size")
    box.submit.click()  # the box starts empty: no answer is not "0"
    assert "Type a number first" in box.feedback.value
    assert widgets.PROGRESS["quiz_embedding_size"] == "not attempted"
    box.control.value = "a lot"
    box.submit.click()
    assert "Type a number" in box.feedback.value
    box.control.value = "6,4"  # a decimal comma is not read as 64
    box.submit.click()
    assert "decimals take a point" in box.feedback.value
    box.control.value = "38597000"  # the count rounded: said, and not a try
    box.submit.click()
    assert "Give every digit" in box.feedback.value
    assert "quiz_embedding_size" not in widgets.TRIES
    box.control.value = "38596000"
    box.submit.click()
    assert "Not quite" in box.feedback.value
    box.control.value = "38,597,376"
    box.submit.click()
    assert "Correct" in box.feedback.value


def test_progress_summarises_exercises_and_quizzes(solutions):
    ex = chapter(1)
    ex.check("patchify", solutions["patchify"])
    box = ex.quiz("quiz_patches")
    box.control.value = "16"
    box.submit.click()
    shown = ex.progress().value
    assert f"Progress: 2 of {len(EXERCISES) + len(QUIZZES)} passed" in shown
    assert "Exercise 4: images into patch tokens" in shown
    # every cell left-aligned in itself: JupyterLab right-aligns saved tables
    cells = shown.count("<td")
    assert cells == 3 * (len(EXERCISES) + len(QUIZZES))
    assert shown.count('<td style="text-align: left"') == cells


def test_a_progress_table_follows_the_checks_and_answers_after_it(
    solutions, monkeypatch
):
    """A learner's round: the table drawn at the end of the notebook stayed at
    "0 of 10 passed" after everything passed, until its cell ran again. It
    follows each check, Check again and quiz answer, text fallback included."""
    from transformer_course.exercises import widgets

    for name in ("PROGRESS", "SHARES", "TRIES"):
        monkeypatch.setattr(widgets, name, {})
    monkeypatch.setenv("TRANSFORMER_COURSE_ANSWERS", "none")
    ex = chapter(1)
    table = ex.progress()
    total = len(EXERCISES) + len(QUIZZES)
    before = 0
    assert f"Progress: 0 of {total} passed" in table.value
    ex.check("build_char_vocab", solutions["build_char_vocab"])
    box = ex.quiz("quiz_patches")
    box.control.value = "16"
    box.submit.click()
    assert f"Progress: {before + 2} of {total} passed" in table.value
    assert f"Progress: {before + 2} of {total} passed" in table.fallback_text
    row = table.value.split('data-tc-progress="quiz_patches"')[1].split("</tr>")[0]
    assert "passed, on the first try" in row


def test_unknown_names_are_clear_errors():
    from transformer_course.exercises import CHAPTERS

    numbers = ", ".join(str(n) for n in sorted(CHAPTERS))
    with pytest.raises(
        ValueError, match=rf"chapter: expected one of \[{numbers}\], got 9"
    ):
        chapter(9)
    with pytest.raises(KeyError, match="exercise: expected one of"):
        chapter(1).check("merge", None)
    with pytest.raises(KeyError, match="quiz: expected one of"):
        chapter(1).quiz("nope")


def test_quiz_options_are_shuffled_deterministically_per_quiz():
    from transformer_course.exercises import CHAPTERS
    from transformer_course.exercises.widgets import MultipleChoice

    positions = []
    for number in CHAPTERS:
        for quiz in chapter(number).quizzes.values():
            if not isinstance(quiz, MultipleChoice):
                continue
            shown = quiz.shown()
            assert shown == quiz.shown()  # the same order on every run
            assert sorted(shown) == sorted(quiz.options)
            assert list(quiz.widget().control.options) == shown
            positions.append(shown.index(quiz.options[quiz.answer]))
    assert len(positions) >= 9
    # the right answer is not always in the same place
    assert len(set(positions)) >= 3
    assert max(positions.count(p) for p in positions) <= len(positions) // 2


def test_numeric_quizzes_start_blank():
    from transformer_course.exercises import CHAPTERS
    from transformer_course.exercises.widgets import Numeric

    for number in CHAPTERS:
        for quiz in chapter(number).quizzes.values():
            if isinstance(quiz, Numeric):
                assert quiz.widget().control.value == ""


@pytest.mark.parametrize(
    ("typed", "number"),
    [
        ("64", 64.0),
        (" 1,050,624 ", 1_050_624.0),
        ("1_000", 1000.0),
        ("1e3", 1000.0),
        ("-2.5", -2.5),
        ("38 597 376", 38_597_376.0),  # spaces between thousands
        ("38\u202f597\u202f376", 38_597_376.0),  # a narrow no-break space
        ("38 597,376", None),  # one separator throughout
        ("3 20", None),
        ("6,4", None),  # a decimal comma is not read as 64
        ("3,20", None),
        ("1,0000", None),
        ("", None),
        ("inf", None),
        ("six", None),
    ],
)
def test_numbers_typed_into_a_quiz(typed, number):
    assert widgets.parse_number(typed) == number


def test_a_numeric_quiz_reads_its_own_unit():
    quiz = widgets.Numeric("k", "How many MiB?", "8 × 4 MiB", answer=32, unit="MiB")
    assert quiz.grade("32 MiB")
    assert quiz.grade("32mib")
    assert quiz.grade("32")
    assert not quiz.grade("32 GiB")
    assert "asks for MiB" in quiz.blank_message("32 GiB")
    assert "asks for MiB" in quiz.blank_message("33,554,432 bytes")
    assert "Type a number" in quiz.blank_message("3,2")  # a decimal comma
    assert "Type a number" in widgets.Numeric("j", "?", "", answer=1).blank_message(
        "1 x"
    )


def test_the_notebook_calls_with_the_cases_as_the_grader_loads_them():
    """Saved and loaded as the grader's sandbox reads them: equal, not the same
    objects (so ``pool is "cls"`` fails in the notebook as in the grader)."""
    pool = "cls"
    tensor = torch.arange(6.0).reshape(2, 3)
    (loaded,) = core.as_the_grader_loads([[(tensor, pool, 3)]])
    (got_tensor, got_pool, got_int) = loaded[0]
    torch.testing.assert_close(got_tensor, tensor)
    assert got_pool == pool
    assert got_pool is not pool
    assert got_int == 3


def test_refusing_only_the_fixed_sizes_loses_the_error_check():
    """The error check draws one size afresh: a table of the fixed ones fails."""
    source = without_markers(solution_cells(read_source(1))["patchify"])
    cheat = source.replace(
        "if H % p or W % p:", "if (H, W, p) in {(8, 8, 3), (6, 8, 4), (8, 6, 4)}:"
    )
    assert cheat != source
    report = core.run_exercise(
        EXERCISES["patchify"], namespace_from([cheat])["patchify"]
    )
    failed = [r.name for r in report.results if not r.passed]
    assert failed == ["a clear ValueError for sizes that do not divide"]
    assert report.score < EXERCISES["patchify"].points


def test_an_error_message_without_the_patch_size_loses_the_error_check():
    source = without_markers(solution_cells(read_source(1))["patchify"])
    vague = source.replace("by patch size {p}", "by the patch size")
    assert vague != source
    report = core.run_exercise(
        EXERCISES["patchify"], namespace_from([vague])["patchify"]
    )
    failed = {r.name: r.hint for r in report.results if not r.passed}
    assert list(failed) == ["a clear ValueError for sizes that do not divide"]
    assert (
        "Name the image size and the patch size"
        in failed["a clear ValueError for sizes that do not divide"]
    )


def test_quiz_option_lengths_do_not_give_the_answer_away():
    """Picking the longest (or the shortest) option must not be a winning strategy:
    the right option is among the longest in at most a third of the quizzes, and
    among the shortest in at most a third (ties count)."""
    import importlib

    from transformer_course.exercises import CHAPTERS
    from transformer_course.exercises.widgets import MultipleChoice

    quizzes = []
    for module in CHAPTERS.values():
        chapter_module = importlib.import_module(
            f"transformer_course.exercises.{module}"
        )
        quizzes += [
            (f"{module}.{key}", quiz)
            for key, quiz in chapter_module.QUIZZES.items()
            if isinstance(quiz, MultipleChoice)
        ]
    assert len(quizzes) >= 9
    longest, shortest = [], []
    for name, quiz in quizzes:
        lengths = [len(option) for option in quiz.options]
        right = lengths[quiz.answer]
        if right == max(lengths):
            longest.append(f"{name} ({right} of {lengths})")
        if right == min(lengths):
            shortest.append(f"{name} ({right} of {lengths})")
    limit = len(quizzes) / 3
    assert len(longest) <= limit, (
        f"the right option is the longest in {len(longest)} of {len(quizzes)} "
        "quizzes: " + "; ".join(longest)
    )
    assert len(shortest) <= limit, (
        f"the right option is the shortest in {len(shortest)} of {len(quizzes)} "
        "quizzes: " + "; ".join(shortest)
    )


# --- hints name the mistake the learner made (issue 21) -------------------------------

SOFTMAX_MISTAKES = [
    # (the learner's body, words every failing row must not say, words one must say)
    (
        "    e = torch.exp(x)\n    return e / e.sum(-1, keepdim=True)",
        ["whole tensor", "wrong axis"],
        "Large logits overflow",
    ),
    (
        "    e = torch.exp(x - x.max(0, keepdim=True).values)\n"
        "    return e / e.sum(0, keepdim=True)",
        ["maximum before exp", "own maximum"],
        "wrong axis",
    ),
    (
        "    e = torch.exp(x - x.max())\n    return e / e.sum(-1, keepdim=True)",
        ["wrong axis", "Large logits overflow"],
        "each row's own maximum",
    ),
]


@pytest.mark.parametrize(("body", "never", "said"), SOFTMAX_MISTAKES)
def test_softmax_hints_name_the_mistake_made(body, never, said):
    exercise = chapter(2).exercises["stable_softmax"]
    report = core.run_exercise(
        exercise, fn(f"def stable_softmax(x):\n{body}", "stable_softmax")
    )
    hints = failing(report)
    assert any(said in h for h in hints.values()), hints
    for words in never:
        assert not any(words in h for h in hints.values()), (words, hints)


def test_no_property_is_passed_by_a_function_that_never_returns():
    for number in range(1, 8):
        for key, exercise in chapter(number).exercises.items():
            report = core.run_exercise(
                exercise,
                fn(
                    f"def {exercise.function}(*a, **k):\n    raise ValueError('no')",
                    exercise.function,
                ),
            )
            passed = [r.name for r in report.results if r.passed]
            assert not passed, (key, passed)
            # said as the value checks say it (the error, its line), once
            properties = [r for r in report.results if r.kind == core.PROPERTY]
            assert properties or not exercise.mutable_inputs, key
            assert all("raised" in r.hint for r in properties), key


def test_hints_are_plain_text():
    """Hints are shown as text (a widget's table, the grader's CSV): no markdown
    emphasis such as *before*, which showed its asterisks."""
    import ast
    import importlib
    import inspect
    import re

    for number in range(1, 8):
        module = importlib.import_module(f"transformer_course.exercises.ch{number:02d}")
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.search(r"(?<![\w*])\*[a-z]{3,}\*(?![\w*])", node.value), (
                    number,
                    node.value,
                )


def test_a_count_must_be_exact():
    """38,597,376.5 parameters was "Correct.": a count (an int answer) has no
    tolerance, in the notebook and on the page alike."""
    box = chapter(1).quiz("quiz_embedding_size")
    box.control.value = "38597376.5"
    box.submit.click()
    assert "Not quite" in box.feedback.value
    quiz = QUIZZES["quiz_embedding_size"]
    assert quiz.tolerance == 0
    from transformer_course.exercises.quiz_html import decode_payload

    key = quiz.html().split('data-key="')[1].split('"')[0]
    assert decode_payload(quiz.key, key)["rel_tol"] == 0


# More hints that name the mistake made (a learner's pass in JupyterLab, issue 21)
MORE_MISTAKES = [
    (
        1,
        "build_char_vocab",
        "def build_char_vocab(text):\n"
        "    return {c: i for i, c in enumerate(sorted(text))}\n",
        "each distinct character once",
        "Start the ids at 0",
    ),
    (
        1,
        "merge_pair",
        "def merge_pair(ids, pair, new_id):\n"
        "    return [new_id if (x, y) == tuple(pair) else x\n"
        "            for x, y in zip(ids, [*ids[1:], None])]\n",
        "kept the pair's second id",
        "Replace every occurrence",
    ),
    (
        1,
        "merge_pair",
        "def merge_pair(ids, pair, new_id):\n"
        "    out, i = [], 0\n"
        "    while i < len(ids) - 1:\n"
        "        if (ids[i], ids[i + 1]) == tuple(pair):\n"
        "            out.append(new_id)\n"
        "            i += 2\n"
        "        else:\n"
        "            out.append(ids[i])\n"
        "            i += 1\n"
        "    return out\n",
        "the last id is missing",
        "Replace every occurrence",
    ),
    (
        2,
        "attention_weights",
        "def attention_weights(q, k, mask=None):\n"
        "    s = q @ k.transpose(-2, -1)\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    e = (s - s.max(-1, keepdim=True).values).exp()\n"
        "    return e / e.sum(-1, keepdim=True)\n",
        "Divide the scores by √d_k",
        "With a mask, the weights should be",
    ),
]


@pytest.mark.parametrize(("number", "key", "source", "said", "never"), MORE_MISTAKES)
def test_more_hints_name_the_mistake_made(number, key, source, said, never):
    exercise = chapter(number).exercises[key]
    for _ in range(5):  # unseen inputs differ every time
        hints = failing(core.run_exercise(exercise, fn(source, exercise.function)))
        assert any(said in h for h in hints.values()), hints
        assert not any(never in h for h in hints.values()), hints


def test_a_dropped_last_id_is_named_by_the_overlap_check_too():
    """[1, 1, 1] -> [9]: the overlap check names the missing last id, as the
    worked example's does, not only "should give [9, 1]"."""
    (source,) = [row[2] for row in MORE_MISTAKES if "len(ids) - 1" in row[2]]
    exercise = chapter(1).exercises["merge_pair"]
    hints = failing(core.run_exercise(exercise, fn(source, exercise.function)))
    assert "the last id is missing" in hints["overlapping pairs merge left to right"]


def test_each_exercise_is_titled_as_its_notebook_heads_it():
    """The results box, the progress table and the grader's report name an
    exercise by the heading the learner reads above it."""
    import nbformat

    from transformer_course.exercises import CHAPTERS, chapter

    root = Path(__file__).resolve().parents[1]
    for number in CHAPTERS:
        path = next((root / "exercises").glob(f"{number:02d}_*.ipynb"))
        notebook = nbformat.read(path, as_version=4)
        headings = {
            line.lstrip("#").strip().replace("`", "")
            for cell in notebook.cells
            if cell.cell_type == "markdown"
            for line in cell.source.splitlines()
            if line.startswith("#")
        }
        for exercise in chapter(number).exercises.values():
            assert exercise.title in headings, (path.name, exercise.title)


def test_the_progress_table_says_partial_credit_as_a_share(monkeypatch):
    from transformer_course.exercises import widgets

    monkeypatch.setattr(widgets, "PROGRESS", {"a": "failed", "b": "failed"})
    monkeypatch.setattr(widgets, "SHARES", {"a": 0.6, "b": 0.0})
    assert widgets._status("a") == "60 % of its points"
    assert widgets._status("b") == "failed"


def _answer(x):
    return x


def test_a_check_says_when_the_latest_cell_did_not_define_the_function():
    """A learner broke their solution (a syntax error) and pressed Check again:
    the kernel still held the earlier definition, which passed, and nothing
    said so. The report names the cell that did not run."""
    from transformer_course.exercises.core import stale_definition

    ran = "def _answer(x):\n    return x\n"
    broken = "def _answer(x)\n    return x + 1\n"
    assert stale_definition(_answer, [(1, ran)]) == ""
    assert stale_definition(_answer, [(1, "print(1)")]) == ""
    note = stale_definition(_answer, [(1, ran), (2, "x = 3"), (3, broken)])
    assert note.startswith("In [3], your latest cell that defines _answer()")
    assert stale_definition(_answer, [(1, broken), (2, ran)]) == ""


@pytest.mark.parametrize(
    "body",
    ["    p = (x - x.amax(-1, keepdim=True)).exp()\n", "    yield x\n", "async"],
    ids=["no return", "a generator", "a coroutine"],
)
def test_a_function_that_returns_nothing_shows_no_property(body):
    """A learner round in JupyterLab: a softmax with no return statement, and one
    written as a generator, got the tick for "leaves its inputs unchanged"."""
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    exercise = chapter(2).exercises["stable_softmax"]
    if body == "async":
        source = "async def stable_softmax(x):\n    return x.softmax(-1)\n"
    else:
        source = f"def stable_softmax(x):\n{body}"
    function = namespace_from([source])["stable_softmax"]
    with warnings.catch_warnings():  # "coroutine ... was never awaited"
        warnings.simplefilter("ignore", RuntimeWarning)
        report = core.run_exercise(exercise, function)
    assert report.score == 0
    assert not any(result.passed for result in report.results), report


def _could_change(argument) -> bool:
    """Whether an argument could be changed in place by the learner's function."""
    if isinstance(argument, tuple | frozenset):
        return any(_could_change(a) for a in argument)
    immutable = (int, float, complex, str, bytes, type(None), torch.dtype)
    return not isinstance(argument, immutable)


@pytest.mark.parametrize("number", range(1, 8))
def test_inputs_unchanged_is_checked_exactly_where_an_input_could_change(number):
    """A JupyterLab learner round: block_parameter_count (sizes only) showed a tick
    for "leaves its inputs unchanged", a check that could not fail."""
    for exercise in chapter(number).exercises.values():
        arguments = [
            argument
            for check in exercise.checks
            if check.kind != core.UNSEEN
            for case in check.cases()
            for argument in case
        ]
        assert arguments, exercise.key
        could = any(_could_change(a) for a in arguments)
        assert exercise.mutable_inputs == could, exercise.key
        report = core.run_exercise(exercise, lambda *args: None)
        names = [result.name for result in report.results]
        assert (core.INPUTS_UNCHANGED in names) == could, (exercise.key, names)
