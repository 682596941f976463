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

import hashlib
import html
import math
import os
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ipywidgets as widgets

from . import quiz_html
from .core import NOT_ATTEMPTED, PASSED, Exercise, Report, run_exercise
from .quiz_html import CHOOSE_FIRST, CORRECT, NOT_A_NUMBER, TYPE_FIRST, WRONG

__all__ = ["MultipleChoice", "Numeric", "QuizBox", "check_widget", "progress_widget"]

# What this kernel has seen: exercise or quiz key -> "passed"/"failed"/"not attempted".
PROGRESS: dict[str, str] = {}

_ICONS = {PASSED: "✅", "failed": "❌", NOT_ATTEMPTED: "⬜"}


def grading_with_nbgrader() -> bool:
    """True while nbgrader autogrades or validates this notebook."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


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
    rows = "".join(
        f"<tr><td>{'✅' if r.passed else '❌'}</td><td>{html.escape(r.name)}</td>"
        f"<td>{html.escape(r.hint)}</td></tr>"
        for r in report.results
    )
    return (
        f"<b>{_ICONS[report.status]} {title}: {report.passed_count} of "
        f"{len(report.results)} checks passed.</b>"
        f"<table><tr><th></th><th>check</th><th>hint</th></tr>{rows}</table>"
    )


def _current_definition(name: str) -> Callable | None:
    """The learner's latest definition of ``name`` in the notebook's namespace."""
    namespace = getattr(sys.modules.get("__main__"), "__dict__", {})
    found = namespace.get(name)
    return found if callable(found) else None


def check_widget(exercise: Exercise, function: Callable | None):
    """Run the checks now and show the results, with a "Check again" button.

    The button re-runs the checks on the learner's *current* definition of the
    function (looked up by name in the notebook), so it can be clicked after
    editing and re-running the solution cell.

    Under nbgrader autograding, returns the points earned instead (nbgrader
    reads a numeric cell result as partial credit).
    """
    report = run_exercise(exercise, function)
    PROGRESS[exercise.key] = report.status
    if grading_with_nbgrader():
        return report.score
    results = widgets.HTML(render_report(report))
    button = widgets.Button(description="Check again", icon="check")

    def on_click(_button) -> None:
        latest = _current_definition(exercise.function) or function
        fresh = run_exercise(exercise, latest)
        PROGRESS[exercise.key] = fresh.status
        results.value = render_report(fresh)

    button.on_click(on_click)
    box = widgets.VBox([results, button])
    box.report = report  # for tests and for the curious
    return box


class QuizBox(widgets.VBox):
    """A quiz as a widget, for Jupyter, that also carries itself as HTML.

    Its mime bundle holds both the widget view and ``text/html`` (the quiz as
    HTML and JavaScript, :mod:`.quiz_html`). Jupyter renders the widget view; the
    book is configured to render the HTML (``nb_mime_priority_overrides`` in
    ``_config.yml``), which works on a static page.
    """

    def __init__(self, children, *, fallback_html: str, **kwargs):
        super().__init__(children, **kwargs)
        self.fallback_html = fallback_html

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is not None:  # None once the widget is closed
            bundle["text/html"] = self.fallback_html
        return bundle


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

    def blank_message(self, value: object) -> str | None:
        """What to say when ``value`` is no answer yet (None when it is one)."""
        return CHOOSE_FIRST if value is None else None

    def widget(self) -> QuizBox:
        """The question, an answer control, a Submit button and the feedback."""
        PROGRESS.setdefault(self.key, NOT_ATTEMPTED)
        control = self._control()
        feedback = widgets.HTML("")
        submit = widgets.Button(description="Submit")

        def on_submit(_button) -> None:
            blank = self.blank_message(control.value)
            if blank is not None:
                feedback.value = blank
                return
            correct = self.grade(control.value)
            PROGRESS[self.key] = PASSED if correct else "failed"
            verdict = CORRECT if correct else WRONG
            feedback.value = f"<b>{verdict}</b> {html.escape(self.explanation)}"

        submit.on_click(on_submit)
        box = QuizBox(
            [
                widgets.HTML(f"<b>{html.escape(self.question)}</b>"),
                control,
                submit,
                feedback,
            ],
            fallback_html=self.html(),
        )
        box.control, box.submit, box.feedback = control, submit, feedback
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


_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")


def parse_number(text: object) -> float | None:
    """A number typed by a learner ("1,050,624", "1e6", " 64 "), or None.

    A comma is read only as a thousands separator: "6,4" is not a number (it
    could be a decimal comma), rather than 64.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    cleaned = text.strip().replace("_", "")
    if "," in cleaned:
        if not _THOUSANDS.fullmatch(cleaned):
            return None
        cleaned = cleaned.replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass
class Numeric(_Quiz):
    """A question with a numeric answer, right within a relative tolerance.

    The answer box starts empty: submitting nothing asks for an answer instead
    of grading 0.
    """

    answer: float = 0.0
    rel_tol: float = 1e-6

    def blank_message(self, value: object) -> str | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return TYPE_FIRST
        if parse_number(value) is None:
            return NOT_A_NUMBER.format(value=repr(value))
        return None

    def grade(self, answer: object) -> bool:
        number = parse_number(answer)
        return number is not None and math.isclose(
            number, self.answer, rel_tol=self.rel_tol, abs_tol=1e-12
        )

    def _control(self) -> widgets.Widget:
        return widgets.Text(value="", placeholder="a number", description="answer")

    def html(self) -> str:
        return quiz_html.number_quiz_html(
            self.key, self.question, float(self.answer), self.rel_tol, self.explanation
        )


def progress_widget(
    keys: Sequence[str], titles: Sequence[str] | None = None
) -> widgets.HTML:
    """A summary of which exercises and quizzes of this notebook pass."""
    titles = list(titles) if titles is not None else list(keys)
    rows = "".join(
        f"<tr><td>{_ICONS.get(PROGRESS.get(key, NOT_ATTEMPTED), '❌')}</td>"
        f"<td>{html.escape(title)}</td><td>{PROGRESS.get(key, NOT_ATTEMPTED)}</td></tr>"
        for key, title in zip(keys, titles, strict=True)
    )
    done = sum(PROGRESS.get(key) == PASSED for key in keys)
    return widgets.HTML(
        f"<b>Progress: {done} of {len(keys)} passed.</b><table>{rows}</table>"
    )
