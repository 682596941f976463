"""Every chapter's exercises: the reference solutions in the source notebook pass
every check for full points, and the generated stubs report "not attempted"."""

import nbformat
import pytest
from exercise_helpers import ROOT, namespace_from, solution_cells

from transformer_course.exercises import CHAPTERS, chapter, core
from transformer_course.exercises.release import student_version

SOURCES = {
    n: next((ROOT / "exercises" / "source").glob(f"{n:02d}_*.ipynb")) for n in CHAPTERS
}
CASES = [(n, key) for n in CHAPTERS for key in chapter(n).exercises]


def test_every_chapter_has_a_source_notebook_and_enough_exercises():
    for n in CHAPTERS:
        assert SOURCES[n].is_file()
        assert len(chapter(n).exercises) >= 4
        assert len(chapter(n).quizzes) >= 4


@pytest.fixture(scope="module")
def namespaces():
    """chapter -> (namespace with the reference solutions, namespace with the stubs)"""
    result = {}
    for n, path in SOURCES.items():
        source = nbformat.read(path, as_version=4)
        result[n] = (
            namespace_from(solution_cells(source).values()),
            namespace_from(solution_cells(student_version(source)).values()),
        )
    return result


@pytest.mark.parametrize(
    ("number", "key"), CASES, ids=[f"ch{n:02d}-{k}" for n, k in CASES]
)
def test_reference_solution_passes_every_check(namespaces, number, key):
    exercise = chapter(number).exercises[key]
    report = core.run_exercise(exercise, namespaces[number][0][exercise.function])
    assert report.status == "passed", report.results
    assert report.score == exercise.points


@pytest.mark.parametrize(
    ("number", "key"), CASES, ids=[f"ch{n:02d}-{k}" for n, k in CASES]
)
def test_stub_is_not_attempted(namespaces, number, key):
    exercise = chapter(number).exercises[key]
    report = core.run_exercise(exercise, namespaces[number][1][exercise.function])
    assert report.status == "not attempted"
    assert report.score == 0
