"""The order in which ``make test``'s two workers get the test files
(tests/conftest.py's scheduler for pytest-xdist)."""

# Test files that use the built book: one unit of work for pytest-xdist.
BOOK_FILES = ("tests/test_book.py", "tests/test_browser.py")
#: Seconds the slowest other test files took (CI, 2 cores, --durations=0,
#: 2026-11-29): they are handed out first, longest first. pytest-xdist hands
#: out files with the most tests first, which left the class-grading file
#: (377 s in 5 tests) for the end, run by one worker while the other idled:
#: about 3 of the suite's 17 to 18 minutes. Longest first, the other worker
#: works through these while one builds the book, and the two end together.
SLOW_FILES = {
    "tests/test_nbgrader.py": 377,
    "tests/test_red_team.py": 195,
    "tests/test_allowed_operators.py": 128,
    "tests/test_grade.py": 123,
    "tests/test_sandbox.py": 101,
    "tests/test_judges.py": 93,
    "tests/test_exercises_ch04.py": 63,
    "tests/test_benchmarks.py": 55,
    "tests/test_verdict_corpus.py": 52,
    "tests/test_jupyterlab.py": 47,
    "tests/test_exercise_tables.py": 43,
}


def put_the_slowest_first(workqueue) -> None:
    """Reorder pytest-xdist's queue of files (an OrderedDict) in place: the book's
    files, then :data:`SLOW_FILES`, longest first, then the rest as they were."""
    slowest_last = sorted(SLOW_FILES, key=SLOW_FILES.get)
    for scope in (*slowest_last, BOOK_FILES[0]):  # each moved to the front
        if scope in workqueue:
            workqueue.move_to_end(scope, last=False)
