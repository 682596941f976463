"""Self-checking exercises: check logic (``core``, ``chNN``) and widgets (``widgets``).

In an exercise notebook::

    from transformer_course.exercises import chapter
    ex = chapter(1)
    ex.check("merge_pair", merge_pair)   # results, hints, a "Check again" button
    ex.quiz("quiz_layout")               # a quiz question, graded on Submit
    ex.progress()                        # which exercises and quizzes pass

Autograding: ``python -m transformer_course.grading.grade NOTEBOOK.ipynb``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from . import core, widgets
from .core import Check, Exercise, Failed, Outcome, Report, run_exercise

__all__ = [
    "CHAPTERS",
    "ChapterExercises",
    "Check",
    "Exercise",
    "Failed",
    "Outcome",
    "Report",
    "chapter",
    "core",
    "run_exercise",
    "widgets",
]

#: Chapter number -> module with its EXERCISES and QUIZZES (from quizzes/chNN.toml).
CHAPTERS = {
    1: "ch01",
    2: "ch02",
    3: "ch03",
    4: "ch04",
    5: "ch05",
    6: "ch06",
    7: "ch07",
}


class ChapterExercises:
    """The exercises and quizzes of one chapter, as the notebook uses them."""

    def __init__(self, module: ModuleType):
        self.module = module
        self.exercises: dict[str, Exercise] = module.EXERCISES
        self.quizzes: dict[str, widgets._Quiz] = module.QUIZZES

    def check(self, key: str, function: Callable | None):
        """Run the checks of exercise ``key`` on ``function`` and show the results."""
        if key not in self.exercises:
            raise KeyError(
                f"exercise: expected one of {sorted(self.exercises)}, got {key!r}"
            )
        return widgets.check_widget(self.exercises[key], function, self.exercises)

    def quiz(self, key: str):
        """The quiz question ``key`` as a widget."""
        if key not in self.quizzes:
            raise KeyError(f"quiz: expected one of {sorted(self.quizzes)}, got {key!r}")
        return self.quizzes[key].widget()

    def progress(self):
        """A summary of which exercises and quizzes pass in this kernel."""
        keys = [*self.exercises, *self.quizzes]
        titles = [e.title for e in self.exercises.values()] + [
            f"Quiz: {widgets.quiz_html.unlinked(q.question)}"
            for q in self.quizzes.values()
        ]  # the table shortens long ones at a word, the whole one its tooltip
        return widgets.progress_widget(keys, titles)


def chapter(number: int) -> ChapterExercises:
    """The exercises of chapter ``number``."""
    if number not in CHAPTERS:
        raise ValueError(f"chapter: expected one of {sorted(CHAPTERS)}, got {number!r}")
    return ChapterExercises(importlib.import_module(f"{__name__}.{CHAPTERS[number]}"))
