"""The exercise notebooks' user interface: Check buttons, quizzes, progress.

All grading logic lives in :mod:`.core` (code exercises) and in the small
:class:`Quiz` classes below; these widgets only show results. Widgets write
their results into ``HTML`` widgets rather than ``Output`` capture, so that they
also work (and are tested) without a running kernel.

A quiz's box (:class:`QuizBox`) also carries the same quiz as self-contained
HTML and JavaScript (:mod:`.quiz_html`), which the book's static pages show
instead of the widget, whose Python callbacks cannot run there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import html
import json
import math
import os
import random
import re
import sys
import tempfile
import textwrap
import tomllib
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import ipywidgets as widgets

from . import quiz_html
from .core import (
    CHECK_SECONDS,
    FAILED,
    NOT_ATTEMPTED,
    NOT_CHECKED,
    NOT_RUN,
    PASSED,
    UNSEEN,
    Exercise,
    Report,
    foundations_note,
    run_exercise,
)
from .quiz_html import CHOOSE_FIRST, CORRECT, NOT_A_NUMBER, ON_TRY, TYPE_FIRST, WRONG

__all__ = ["MultipleChoice", "Numeric", "QuizBox", "check_widget", "progress_widget"]

# What this kernel has seen: exercise or quiz key -> "passed"/"failed"/"not attempted".
PROGRESS: dict[str, str] = {}
# For quizzes: how many answers were submitted, and whether the first was right.
TRIES: dict[str, tuple[int, bool]] = {}
#: The wrong answers given to each quiz (their :meth:`_Quiz.same_key`): one
#: given again is not another try
WRONG_GIVEN: dict[str, set] = {}
#: An exercise's share of its points where it failed with some: the progress
#: table says "60 % of its points", not "failed".
SHARES: dict[str, float] = {}


def _icon(color: str, mark: str, label: str) -> str:
    """A small inline SVG icon: drawn, so no emoji font is needed (on a minimal
    Linux, ✅ and ❌ showed as empty boxes)."""
    return (
        f'<svg width="14" height="14" viewBox="0 0 16 16" role="img" '
        f'aria-label="{label}" style="vertical-align:-2px">'
        f"<title>{label}</title>{mark.format(color=color)}</svg>"
    )


_ICONS = {
    PASSED: _icon(
        "#1a7f37",
        '<circle cx="8" cy="8" r="8" fill="{color}"/>'
        '<path d="M4.2 8.3l2.5 2.5 5-5.2" stroke="#fff" stroke-width="2" fill="none"/>',
        "passed",
    ),
    "failed": _icon(
        "#cf222e",
        '<circle cx="8" cy="8" r="8" fill="{color}"/>'
        '<path d="M5 5l6 6M11 5l-6 6" stroke="#fff" stroke-width="2"/>',
        "failed",
    ),
    NOT_ATTEMPTED: _icon(
        "#8c959f",
        # a dotted ring, like the others' discs but empty: a square outline read
        # as a checkbox to click (learner round)
        '<circle cx="8" cy="8" r="6.8" fill="none" stroke="{color}" '
        'stroke-width="1.8" stroke-dasharray="2.7 1.75"/>',
        "not attempted",
    ),
    "not checked": _icon(
        "#8c959f",
        '<circle cx="8" cy="8" r="8" fill="{color}"/>'
        '<path d="M4.5 8h7" stroke="#fff" stroke-width="2"/>',
        "not checked",
    ),
}


def _tally(report: Report) -> str:
    """ "4 of 6 checks passed", or "not checked" where no check judged a value
    (a learner round read "0 of 6 checks passed" above six grey marks as six
    failures)."""
    if _not_checked(report):
        return "not checked"
    return f"{report.passed_count} of {len(report.results)} checks passed"


def _not_checked(report: Report) -> bool:
    """Whether no check of ``report`` judged a value: every one failed for one
    reason that says the function never ran or could not be followed (a
    learner round read six red crosses as six mistakes)."""
    return _one_reason(report).startswith((NOT_RUN, NOT_CHECKED))


#: What a widget says where it cannot be shown: after the notebook is reopened or
#: its kernel restarted, in a viewer without widgets, in a text-only front end.
RERUN = (
    "(Run the notebook's cells from the top to use it, Run ▸ Run All Cells: "
    "it needs the notebook's running kernel and the cells above it.)"
)


#: Shown only while the kernel that drew a check or quiz is gone: JupyterLab
#: marks a widget's views "jupyter-widgets-disconnected" when its kernel
#: restarts or stops, and its buttons then do nothing, without a word.
#: Of ipywidgets' red broken-link icons, which it puts on every part of a
#: widget, only the outer box's is kept (a learner round counted seven on one
#: quiz, which read as seven errors). Its controls (a quiz's options, a
#: Submit or Check again button) are greyed out and take no clicks meanwhile (a
#: learner round clicked options that still looked alive after a restart).
KERNEL_GONE = (
    "<style>.tc-kernel-gone{display:none;color:#9a3412}"
    ".jupyter-widgets-disconnected .tc-kernel-gone{display:block}"
    ":is(.tc-widget-check,.tc-widget-quiz).jupyter-widgets-disconnected "
    ":is(input,button,label){pointer-events:none;opacity:.5}"
    ":is(.tc-widget-check,.tc-widget-quiz,.tc-widget-progress) "
    ".jupyter-widgets-disconnected::before{display:none}</style>"
    '<p class="tc-kernel-gone">The kernel that ran this cell has restarted or '
    "stopped, so these buttons do nothing now: run the notebook's cells again "
    "(Run ▸ Run All Cells) to use them.</p>"
)


def _kernel_gone_note() -> widgets.HTML:
    """:data:`KERNEL_GONE`, left out when the notebook is saved as shown."""
    from ..lab_settings import NOT_SAVED

    note = widgets.HTML(KERNEL_GONE)
    note.add_class(NOT_SAVED)
    return note


def grading_with_nbgrader() -> bool:
    """True while nbgrader autogrades or validates this notebook."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def _one_reason(report: Report) -> str:
    """The hint of a report whose checks all failed with the same hint (a
    forbidden function, a construct the screen refuses), or ""."""
    hints = {r.hint for r in report.results}
    failed = not any(r.passed for r in report.results)
    return hints.pop() if len(hints) == 1 and len(report.results) > 1 and failed else ""


#: What stands for a hint that repeats the row above it, to the letter or
#: but for its numbers (the sizes an error names differ from case to case).
SAME_HINT = "(the same as above)"
SAME_BUT_NUMBERS = "(the same as above, with other numbers)"


def _hints_once(report: Report) -> list[str]:
    """Each check's hint, with one that repeats the hint of the row above it
    (an error raised on every input, said by every check) replaced by
    :data:`SAME_HINT` or :data:`SAME_BUT_NUMBERS`: a learner round read one
    paragraph five times."""
    shown, earlier = [], set()
    for result in report.results:
        hint = result.hint
        if hint and hint in earlier:
            shown.append(SAME_HINT)
        elif hint and _but_numbers(hint) in {_but_numbers(h) for h in earlier}:
            shown.append(SAME_BUT_NUMBERS)
        else:
            shown.append(hint)
        earlier.add(hint)
    return shown


#: dtype names, which an error names as it names sizes: "long int != double"
_DTYPE_WORDS = (
    r"\b(double|float|half|bfloat16|long int|long|int|short|bool|"
    r"complex(float|double)?|(float|int|uint|complex)\d+)\b"
)


def _but_numbers(hint: str) -> str:
    """``hint`` with its numbers and dtype names blanked, for comparing."""
    return re.sub(r"\d+", "#", re.sub(_DTYPE_WORDS, "#", hint))


def points_said(report: Report) -> str:
    """ "all of its points", "none of its points" or "60 % of its points", and
    why none when a check on unseen inputs failed (the learner round read "4 of
    6 checks passed" as partial credit).

    A share, not a number of points: an instructor may weigh an exercise
    differently (nbgrader's metadata, which the grader scales the checks to),
    and the notebook cannot see that weight; the share is the same on any scale.
    """
    share = report.score / report.exercise.points
    said = (
        "all of its points"
        if share >= 1
        else "none of its points"
        if share <= 0
        else f"{100 * share:.0f} % of its points"
    )
    unseen_failed = any(r.kind == UNSEEN and not r.passed for r in report.results)
    # every check failed for one reason (a forbidden function, the screen): that
    # reason is the hint, not the unseen inputs
    if unseen_failed and not _one_reason(report):
        said += " (a check on unseen inputs failed, which earns nothing)"
    return said


def render_report(report: Report) -> str:
    """The results of one exercise as HTML: one row per check, with hints."""
    title = html.escape(report.exercise.title)
    if report.status == NOT_ATTEMPTED:
        return (
            f"<b>{_ICONS[NOT_ATTEMPTED]} {title}: not attempted.</b> Replace "
            f"<code>raise NotImplementedError</code> in <code>"
            f"{html.escape(report.exercise.function)}</code> with your code, run "
            f"that cell, then check again."
        )
    hints = any(r.hint for r in report.results)  # no empty hint column
    reason = _one_reason(report)
    if reason:  # every check failed for one reason: said once, above the checks
        hints = False
    # left-aligned (JupyterLab right-aligns the cells of saved HTML tables),
    # the check's name kept readable beside long hints
    cell = '<td style="text-align: left; vertical-align: top">'
    failed_icon = _ICONS["not checked" if _not_checked(report) else "failed"]
    rows = "".join(
        f"<tr>{cell}{_ICONS[PASSED] if r.passed else failed_icon}</td>"
        f'<td style="text-align: left; vertical-align: top; min-width: 12em">'
        f"{html.escape(r.name)}</td>"
        + (f"{cell}{html.escape(hint)}</td>" if hints else "")
        + "</tr>"
        for r, hint in zip(report.results, _hints_once(report), strict=True)
    )
    note = f"<p>{html.escape(report.note)}</p>" if report.note else ""
    if reason:
        note += f"<p>{html.escape(reason)}</p>"
    return (
        f"<b>{_ICONS['not checked' if _not_checked(report) else report.status]} "
        f"{title}: {_tally(report)}, {html.escape(points_said(report))}.</b>"
        + note
        + '<table><tr><th></th><th style="text-align: left">check</th>'
        + ('<th style="text-align: left">hint</th>' if hints else "")
        + f"</tr>{rows}</table>"
    )


#: Plain text's width: nbgrader's Validate dialog shows it unwrapped, cutting
#: longer lines off at its edge.
TEXT_WIDTH = 78


def report_text(report: Report) -> str:
    """The same results as plain text (a widget's fallback, nbgrader's Validate),
    wrapped at :data:`TEXT_WIDTH` columns, a hint indented under its check."""
    title = report.exercise.title
    if report.status == NOT_ATTEMPTED:
        return f"{title}: not attempted."
    head = f"{title}: {_tally(report)}, {points_said(report)}."
    lines = textwrap.wrap(head, TEXT_WIDTH, break_on_hyphens=False)
    if report.note:
        lines += textwrap.wrap(report.note, TEXT_WIDTH, break_on_hyphens=False)
    reason = _one_reason(report)  # said once, not under every check
    if reason:
        lines += textwrap.wrap(reason, TEXT_WIDTH, break_on_hyphens=False)
    failed = "----" if _not_checked(report) else "FAIL"
    for result, hint in zip(report.results, _hints_once(report), strict=True):
        said = f"  [{'pass' if result.passed else failed}] {result.name}"
        said += f": {hint}" if hint and not reason else ""
        lines += textwrap.wrap(
            said,
            TEXT_WIDTH,
            subsequent_indent=" " * 9,  # under the check's name
            break_on_hyphens=False,
            break_long_words=True,  # a long shape or path still fits
        )
    return "\n".join(lines)


#: Under a check or the progress table on the built book's static pages, where
#: no kernel runs the "Check again" button.
NEEDS_KERNEL = (
    '<p class="tc-needs-kernel"><i>To check your answers, run this notebook: in '
    "Jupyter, run its cells from the top; from the book's page, open it on Colab or Binder "
    "with the launch button (the rocket) at the top.</i></p>"
)


class _WithFallback:
    """A widget whose mime bundle also carries ``text/plain`` and, where it
    has one, ``text/html``: what is shown where the widget cannot be drawn.

    Jupyter draws the widget; the plain text (with :data:`RERUN`) is for
    viewers without widgets; the book prefers the HTML (``_config.yml``), a
    static view of the same results that needs no kernel and has no button
    that does nothing.
    """

    fallback_text = ""
    fallback_html = ""

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:  # None once the widget is closed
            bundle["text/plain"] = f"{self.fallback_text}\n{RERUN}".strip()
            if self.fallback_html:
                bundle["text/html"] = self.fallback_html
        return bundle


class CheckBox(_WithFallback, widgets.VBox):
    """An exercise's results and its "Check again" button."""


class ProgressBox(_WithFallback, widgets.HTML):
    """The progress table."""


def _current_definition(name: str) -> Callable | None:
    """The learner's latest definition of ``name`` in the notebook's namespace."""
    namespace = getattr(sys.modules.get("__main__"), "__dict__", {})
    found = namespace.get(name)
    return found if callable(found) else None


def _with_foundations(
    report: Report, siblings: Mapping[str, Exercise] | None
) -> Report:
    """``report``, with a note when it failed and an earlier function of the
    learner's that it calls fails its own checks (run on its current definition)."""
    if report.status != FAILED or not siblings or not report.exercise.builds_on:
        return report

    def status_of(earlier: Exercise) -> str:
        return run_exercise(earlier, _current_definition(earlier.function)).status

    note = foundations_note(report.exercise, siblings, status_of)
    return dataclasses.replace(report, note=note) if note else report


def check_widget(
    exercise: Exercise,
    function: Callable | None,
    siblings: Mapping[str, Exercise] | None = None,
):
    """Run the checks now and show the results, with a "Check again" button.

    The button re-runs the checks on the learner's *current* definition of the
    function (looked up by name in the notebook), so it can be clicked after
    editing and re-running the solution cell.

    Under nbgrader autograding, returns the points earned instead (nbgrader
    reads a numeric cell result as partial credit).
    """
    report = _with_foundations(run_exercise(exercise, function), siblings)
    PROGRESS[exercise.key] = report.status
    SHARES[exercise.key] = report.score / report.exercise.points
    refresh_progress()
    if os.environ.get("NBGRADER_EXECUTION") == "validate":
        # nbgrader's Validate reads a grade cell that writes to stderr as failed,
        # with that text as the reason, and one that returns a number below its
        # points as "partial credit": say what the check says instead
        if report.status != PASSED:
            print(report_text(report), file=sys.stderr)
        return None
    if grading_with_nbgrader():
        return report.score
    results = widgets.HTML(render_report(report))
    button = widgets.Button(
        description="Check again",
        icon="check",
        # a button drawn before a kernel restart no longer reaches the kernel
        tooltip="Checks your current definition in the running kernel; after a "
        "restart, run the notebook's cells again first (Run All Cells)",
    )
    box = CheckBox([results, button, _kernel_gone_note()])
    box.add_class("tc-widget-check")  # saved as shown (lab_settings.saved_as_shown)

    def on_click(_button) -> None:
        latest = _current_definition(exercise.function) or function
        # seen while the checks run, and left if they never return (interrupted)
        results.value = (
            f"<i>Checking {html.escape(exercise.function)}() … (stopped after "
            f"{CHECK_SECONDS:g} s if it has not returned)</i>"
        )
        try:
            fresh = _with_foundations(run_exercise(exercise, latest), siblings)
        except KeyboardInterrupt:  # the kernel was interrupted while it checked
            results.value = (
                f"<i>Interrupted: the check of {html.escape(exercise.function)}() "
                "did not finish. Press Check again when it is ready.</i>"
            )
            raise
        PROGRESS[exercise.key] = fresh.status
        SHARES[exercise.key] = fresh.score / fresh.exercise.points
        refresh_progress()
        results.value = render_report(fresh)
        box.fallback_text = report_text(fresh)
        box.fallback_html = render_report(fresh) + NEEDS_KERNEL

    button.on_click(on_click)
    box.fallback_text = report_text(report)
    box.fallback_html = render_report(report) + NEEDS_KERNEL
    box.report = report  # for tests and for the curious
    return box


class QuizBox(_WithFallback, widgets.VBox):
    """A quiz as a widget, for Jupyter, that also carries itself as HTML.

    Its mime bundle holds both the widget view and ``text/html`` (the quiz as
    HTML and JavaScript, :mod:`.quiz_html`). Jupyter renders the widget view; the
    book is configured to render the HTML (``nb_mime_priority_overrides`` in
    ``_config.yml``), which works on a static page.
    """

    def __init__(self, children, *, fallback_html: str, fallback_text: str, **kwargs):
        super().__init__(children, **kwargs)
        self.fallback_html = fallback_html
        self.fallback_text = fallback_text
        self.add_class("tc-widget-quiz")  # saved as its static quiz (lab_settings)


# --- answers kept across kernels --------------------------------------------------


def answers_file() -> Path | None:
    """Where submitted quiz answers are kept, so that re-running a quiz's cell
    (after a restart, or in a reopened notebook) restores it:
    ``TRANSFORMER_COURSE_ANSWERS``, else ``~/.transformer_course/answers.json``;
    none when that variable is ``none`` (the tests and the book build)."""
    chosen = os.environ.get("TRANSFORMER_COURSE_ANSWERS")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "none", "off") else Path(chosen)
    return Path.home() / ".transformer_course" / "answers.json"


def _read_answers() -> dict:
    path = answers_file()
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: start afresh (never fail a quiz)
    return data if isinstance(data, dict) else {}


def _save_answer(key: str, answer: str, right: bool) -> None:
    """Add one submitted answer to the file, atomically (a reader never sees half
    a file; a failure leaves the old one as it was)."""
    path = answers_file()
    if path is None:
        return
    data = _read_answers()
    entry = data.get(key) if isinstance(data.get(key), dict) else {}
    answers = entry.get("answers") if isinstance(entry.get("answers"), list) else []
    first = entry.get("first_try_right")
    data[key] = {
        "answers": [*answers, answer][-20:],
        "first_try_right": bool(right) if first is None else first,
        "right": bool(right) or bool(entry.get("right")),
    }
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".answers.", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1, ensure_ascii=False)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


@dataclass
class _Quiz:
    key: str
    question: str
    explanation: str

    def grade(self, answer: object) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _control(self) -> widgets.Widget:  # pragma: no cover - abstract
        raise NotImplementedError

    def html(self) -> str:  # pragma: no cover - abstract
        """The quiz as self-contained HTML and JavaScript (see :mod:`.quiz_html`)."""
        raise NotImplementedError

    def near(self, answer: object) -> str:
        """What a wrong answer near the right one is told, or ""."""
        return ""

    def rounded(self, answer: object) -> str:
        """What the right answer rounded too far is told (not a try), or ""."""
        return ""

    def same_key(self, answer: object) -> object:
        """What makes two answers the same (a wrong one given twice is one try)."""
        return answer

    def blank_message(self, value: object) -> str | None:
        """What to say when ``value`` is no answer yet (None when it is one)."""
        return CHOOSE_FIRST if value is None else None

    def widget(self) -> QuizBox:
        """The question, an answer control, a Submit button, the verdict, and the
        explanation on request (as on the book's pages): open after a right
        answer, behind a button after a wrong one. The first try is what counts
        (:data:`TRIES`); answers are kept in :func:`answers_file`, and running
        the cell again restores them."""
        PROGRESS.setdefault(self.key, NOT_ATTEMPTED)
        control = self._control()
        feedback = widgets.HTML("")
        explanation = widgets.HTML(
            quiz_html.linked(self.explanation, book=False),
            layout=widgets.Layout(display="none"),
        )
        submit = widgets.Button(description="Submit")
        toggle = widgets.Button(
            description="Show the explanation",
            layout=widgets.Layout(display="none", width="auto"),
        )

        def show_explanation(shown: bool) -> None:
            explanation.layout.display = None if shown else "none"
            toggle.description = (
                "Hide the explanation" if shown else "Show the explanation"
            )

        def verdict(
            correct: bool,
            tries: int,
            first_right: bool,
            near: str = "",
            again: bool = False,
        ) -> None:
            text = CORRECT if correct else WRONG
            if correct and not first_right:
                text += ON_TRY.format(tries=tries)
            said = f"{near} {quiz_html.TRY_AGAIN}" if near else quiz_html.TRY_AGAIN
            if again:
                said = f"{quiz_html.SAME_AGAIN} {said}"
            if not correct and PROGRESS.get(self.key) == PASSED:
                # a wrong answer after the right one: the quiz stays passed
                when = "on the first try" if first_right else f"on try {tries}"
                said += " " + quiz_html.STAYS_PASSED.format(when=when)
            again = "" if correct else f" {html.escape(said)}"
            icon = _ICONS[PASSED if correct else "failed"]
            feedback.value = f"{icon} <b>{html.escape(text)}</b>{again}"
            toggle.layout.display = None
            show_explanation(correct)
            PROGRESS[self.key] = (
                PASSED if correct or PROGRESS.get(self.key) == PASSED else "failed"
            )
            TRIES[self.key] = (tries, first_right)
            refresh_progress()

        def on_submit(_widget=None) -> None:
            blank = self.blank_message(control.value)
            if blank is not None:
                feedback.value = html.escape(blank)
                return
            rounded = self.rounded(control.value)
            if rounded:  # the answer rounded too far: no mistake, not a try
                feedback.value = html.escape(rounded)
                return
            correct = self.grade(control.value)
            same = self.same_key(control.value)
            given = WRONG_GIVEN.setdefault(self.key, set())
            again = not correct and same in given
            if not correct:
                given.add(same)
            tries, first_right = TRIES.get(self.key, (0, None))
            if PROGRESS.get(self.key) != PASSED and not again:
                tries += 1  # the try it passed on stays; a repeat is no new try
            first_right = correct if first_right is None else first_right
            verdict(correct, tries, first_right, self.near(control.value), again)
            if not again:
                _save_answer(self.key, str(control.value), correct)

        submit.on_click(on_submit)
        toggle.on_click(
            lambda _b: show_explanation(explanation.layout.display == "none")
        )
        if isinstance(control, widgets.Text):  # Enter submits, as on the page
            with warnings.catch_warnings():  # ipywidgets 8 calls on_submit deprecated
                warnings.simplefilter("ignore", DeprecationWarning)
                control.on_submit(on_submit)
        saved = _read_answers().get(self.key)
        if isinstance(saved, dict) and isinstance(saved.get("answers"), list):
            answers = [a for a in saved["answers"] if isinstance(a, str)]
            last = answers[-1] if answers else None
            with contextlib.suppress(Exception):  # a saved answer no longer offered
                if last is not None:
                    control.value = last
                    WRONG_GIVEN[self.key] = {
                        self.same_key(answer)
                        for answer in answers
                        if not self.grade(answer)
                    }
                    right = [
                        i for i, answer in enumerate(answers) if self.grade(answer)
                    ]
                    tries = right[0] + 1 if right else len(answers)
                    first_right = saved.get("first_try_right")
                    correct = self.grade(last)
                    if right:
                        PROGRESS[self.key] = PASSED
                    verdict(
                        correct,
                        tries,
                        correct if first_right is None else bool(first_right),
                    )
        box = QuizBox(
            [
                widgets.HTML(f"<b>{quiz_html.linked(self.question, book=False)}</b>"),
                control,
                submit,
                feedback,
                toggle,
                explanation,
                _kernel_gone_note(),
            ],
            fallback_html=self.html(),
            fallback_text=f"Quiz: {quiz_html.unlinked(self.question)}",
        )
        box.control, box.submit, box.feedback = control, submit, feedback
        box.toggle, box.explanation = toggle, explanation
        return box

    def _repr_mimebundle_(self, **kwargs):
        return self.widget()._repr_mimebundle_(**kwargs)


@dataclass
class MultipleChoice(_Quiz):
    """A question with several options, one of them right.

    ``options`` are written with the right one at ``answer``; they are shown in
    an order shuffled deterministically from the quiz's key (:meth:`shown`), so
    the right answer's place varies from quiz to quiz but never between runs.
    """

    options: Sequence[str] = ()
    answer: int = 0  # index into options

    def __post_init__(self):
        if len(set(self.options)) != len(self.options) or len(self.options) < 2:
            raise ValueError(
                f"{self.key}: expected at least 2 distinct options, got {self.options!r}"
            )
        if not 0 <= self.answer < len(self.options):
            raise ValueError(
                f"{self.key}: answer must index options (0..{len(self.options) - 1}), "
                f"got {self.answer}"
            )

    def shown(self) -> list[str]:
        """The options in the order they are shown."""
        seed = int.from_bytes(hashlib.sha256(self.key.encode()).digest()[:8], "big")
        order = list(self.options)
        random.Random(seed).shuffle(order)
        return order

    def grade(self, answer: object) -> bool:
        return answer == self.options[self.answer]

    def html(self) -> str:
        shown = self.shown()
        return quiz_html.choice_quiz_html(
            self.key,
            self.question,
            shown,
            shown.index(self.options[self.answer]),
            self.explanation,
        )

    def _control(self) -> widgets.Widget:
        return widgets.RadioButtons(
            options=self.shown(), value=None, layout={"width": "max-content"}
        )


#: Thousands separators a learner may type: a comma, or a space (plain,
#: no-break, narrow no-break, thin), the same one throughout.
_THOUSANDS = re.compile(
    r"[+-]?\d{1,3}(?P<sep>[, \u00a0\u202f\u2009])\d{3}((?P=sep)\d{3})*(\.\d*)?"
)


def parse_number(text: object, unit: str = "") -> float | None:
    """A number typed by a learner ("1,050,624", "38 597 376", "1e6", " 64 ",
    "32 MiB" where the question's ``unit`` is MiB), or None.

    A comma is read only as a thousands separator: "6,4" is not a number (it
    could be a decimal comma), rather than 64.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    cleaned = _cleaned_number(text, unit)
    return None if cleaned is None else float(cleaned)


def _cleaned_number(text: object, unit: str = "") -> str | None:
    """The number in ``text`` as Python reads it ("1,050,624" -> "1050624",
    "32 MiB" -> "32"), or None; see :func:`parse_number`."""
    if not isinstance(text, str):
        return None
    cleaned = text.strip().replace("_", "")
    if unit and cleaned.lower().endswith(unit.lower()):
        cleaned = cleaned[: -len(unit)].strip()
    if any(sep in cleaned for sep in ", \u00a0\u202f\u2009"):
        match = _THOUSANDS.fullmatch(cleaned)
        if not match:
            return None
        cleaned = cleaned.replace(match.group("sep"), "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return cleaned if math.isfinite(value) else None


@dataclass
class Numeric(_Quiz):
    """A question with a numeric answer, right within a relative tolerance.

    The answer box starts empty: submitting nothing asks for an answer instead
    of grading 0.
    """

    answer: float = 0.0
    rel_tol: float = 1e-6
    unit: str = ""  # e.g. "MiB": "32 MiB" reads as 32
    #: usual wrong answers, each with its hint: {"value": 4, "hint": "..."}
    mistakes: Sequence[Mapping] = ()

    def __post_init__(self):
        for mistake in self.mistakes:
            if set(mistake) != {"value", "hint"} or self.grade(mistake["value"]):
                raise ValueError(
                    f"{self.key}: a mistake is {{'value': a wrong number, 'hint': "
                    f"text}}, got {mistake!r}"
                )

    def _mistakes(self) -> list[tuple[float, str]]:
        return [(float(m["value"]), str(m["hint"])) for m in self.mistakes]

    def blank_message(self, value: object) -> str | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return TYPE_FIRST
        if parse_number(value, self.unit) is None:
            if self.unit and re.search(r"[a-z]", str(value), re.IGNORECASE):
                return quiz_html.IN_THE_UNIT.format(unit=self.unit, value=repr(value))
            return NOT_A_NUMBER.format(value=repr(value))
        return None

    @property
    def tolerance(self) -> float:
        """The relative tolerance: none for a count (an int answer), which must
        be exact (38,597,376.5 parameters is not an answer)."""
        return 0.0 if isinstance(self.answer, int) else self.rel_tol

    def grade(self, answer: object) -> bool:
        number = parse_number(answer, self.unit)
        return number is not None and math.isclose(
            number, self.answer, rel_tol=self.tolerance, abs_tol=1e-12
        )

    def near(self, answer: object) -> str:
        number = parse_number(answer, self.unit)
        if number is None or self.grade(answer):
            return ""
        return quiz_html.near_miss(
            number, float(self.answer), self._mistakes(), self.tolerance
        )

    def rounded(self, answer: object) -> str:
        cleaned = _cleaned_number(answer, self.unit)
        if cleaned is None or self.grade(answer):
            return ""
        return quiz_html.rounded(
            cleaned, float(self.answer), self.tolerance, self._mistakes()
        )

    def same_key(self, answer: object) -> object:
        return parse_number(answer, self.unit)

    def _control(self) -> widgets.Widget:
        return widgets.Text(value="", placeholder="a number", description="answer")

    def html(self) -> str:
        return quiz_html.number_quiz_html(
            self.key,
            self.question,
            float(self.answer),
            self.tolerance,
            self.explanation,
            self.unit,
            self._mistakes(),
        )


def _status(key: str) -> str:
    """What the progress table says of an exercise or quiz."""
    status = PROGRESS.get(key, NOT_ATTEMPTED)
    share = SHARES.get(key, 0.0)
    if status == FAILED and 0 < share < 1:  # partial credit, not "failed"
        return f"{100 * share:.0f} % of its points"
    if key in TRIES and status == PASSED:
        tries, first_right = TRIES[key]
        return "passed, on the first try" if first_right else f"passed, on try {tries}"
    return status


def _shortened(title: str, length: int = 80) -> str:
    """``title``, cut at the last whole word before ``length`` characters."""
    if len(title) <= length:
        return title
    cut = title[:length].rsplit(" ", 1)[0].rstrip(",;:(")
    return f"{cut} …"


def progress_widget(
    keys: Sequence[str], titles: Sequence[str] | None = None
) -> widgets.HTML:
    """A summary of which exercises and quizzes of this notebook pass (for a
    quiz, whether on the first try)."""
    titles = list(titles) if titles is not None else list(keys)
    box = ProgressBox("")
    box.add_class("tc-widget-progress")  # saved as shown (lab_settings.saved_as_shown)
    _show_progress(box, list(keys), titles)
    _LIVE_TABLES.append((weakref.ref(box), list(keys), titles))
    return box


#: The progress tables drawn in this kernel, kept up to date as exercises are
#: checked and quizzes answered (a learner's round found one that stayed at
#: "0 of 10 passed" after all ten passed).
_LIVE_TABLES: list[tuple[weakref.ref, list[str], list[str]]] = []


def refresh_progress() -> None:
    """Redraw every progress table still shown from :data:`PROGRESS`."""
    _LIVE_TABLES[:] = [entry for entry in _LIVE_TABLES if entry[0]() is not None]
    for ref, keys, titles in _LIVE_TABLES:
        box = ref()
        if box is not None:
            _show_progress(box, keys, titles)


def _show_progress(box: ProgressBox, keys: list[str], titles: list[str]) -> None:
    """Draw the table of ``keys`` into ``box``, and its text fallbacks."""
    # each row names its key and status, and the table carries the icons, so
    # that on the book's static page a quiz answered there updates its row and
    # the count (quiz_html's script)
    # left-aligned in the cells themselves: JupyterLab right-aligns the cells of
    # a saved HTML table (a learner round, after reopening a notebook)
    cell = '<td style="text-align: left">'
    rows = "".join(
        f'<tr data-tc-progress="{html.escape(key)}" '
        f'data-status="{html.escape(PROGRESS.get(key, NOT_ATTEMPTED))}">'
        f"{cell}{_ICONS.get(PROGRESS.get(key, NOT_ATTEMPTED), _ICONS['failed'])}"
        f'</td><td style="text-align: left" title="{html.escape(title)}">'
        f"{html.escape(_shortened(title))}</td>"
        f"{cell}{html.escape(_status(key))}</td></tr>"
        for key, title in zip(keys, titles, strict=True)
    )
    done = sum(PROGRESS.get(key) == PASSED for key in keys)
    table = (
        f'<b class="tc-progress-head">Progress: {done} of {len(keys)} passed.</b>'
        f'<table class="tc-progress" data-icon-passed="{html.escape(_ICONS[PASSED])}" '
        f'data-icon-failed="{html.escape(_ICONS["failed"])}">{rows}</table>'
    )
    box.value = table
    box.fallback_html = table + NEEDS_KERNEL
    box.fallback_text = f"Progress: {done} of {len(keys)} passed.\n" + "\n".join(
        f"  {_shortened(title)}: {_status(key)}"
        for key, title in zip(keys, titles, strict=True)
    )


def load_quizzes(name: str) -> dict[str, _Quiz]:
    """The quizzes of one chapter's exercise notebook, from ``quizzes/NAME.toml``
    beside this module, in its order: an entry with ``options`` is a
    :class:`MultipleChoice`, one without a :class:`Numeric`."""
    source = resources.files(__package__).joinpath("quizzes", f"{name}.toml")
    entries = tomllib.loads(source.read_text(encoding="utf-8"))
    return {
        key: (MultipleChoice if "options" in entry else Numeric)(key=key, **entry)
        for key, entry in entries.items()
    }
