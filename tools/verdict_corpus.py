"""The verdict corpus: what the checks say of known submissions, recorded before
the exercise layer is refactored (issue 24) and compared after.

A submission is one answer to one exercise: each chapter's reference solution,
its stub, and every wrong or honest answer the exercise tests hold (the lists
``MISTAKES``, ``HONEST``, ``DEGENERATE``, ... of ``tests/test_exercise*.py``).
Its verdict is the report of the notebook's check (:func:`run_exercise`): the
status, the score, each check's name, pass and hint, and the note; with
``--grader``, also the sandboxed grader's points, status and hint for the same
answer, graded in submission notebooks of one answer per exercise. The unseen
inputs are seeded for the comparison (``os.urandom`` replaced while a verdict is
taken), so that a verdict is the same from run to run.

    python tools/verdict_corpus.py --record            # in-process verdicts
    python tools/verdict_corpus.py --record --grader   # and the grader's (slow)
    python tools/verdict_corpus.py --compare           # exit 1 on any change
    python tools/verdict_corpus.py --compare --grader  # the grader's too (slow)

A change of wording is taken in without re-recording everything: ``--accept
OLD NEW`` (repeatable) with ``--compare`` rewrites the recorded notebook verdicts
whose only difference is ``OLD`` written as ``NEW`` in their hints and check
names, and adds the answers the tests gained since; any other difference is
printed and nothing is written.

    python tools/verdict_corpus.py --compare --accept "a float" "a float32"
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "verdict_corpus.json"
for folder in (ROOT, ROOT / "tests"):  # tools/, the tests' helpers and answers
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
SETUP = "import transformer_course as tc\n"  # as the locked setup cell has it
TEST_MODULES = [
    "test_exercises",
    *(f"test_exercises_ch{n:02d}" for n in range(2, 8)),
    "test_exercise_solutions",
]


@contextlib.contextmanager
def seeded_urandom(label: str):
    """``os.urandom`` gives a stream of bytes fixed by ``label`` meanwhile."""
    state = hashlib.sha256(label.encode()).digest()
    real = os.urandom

    def fixed(n: int) -> bytes:
        nonlocal state
        out = b""
        while len(out) < n:
            state = hashlib.sha256(state).digest()
            out += state
        return out[:n]

    os.urandom = fixed
    try:
        yield
    finally:
        os.urandom = real


def _exercise_keys() -> dict[str, int]:
    from transformer_course.exercises import CHAPTERS, chapter

    return {key: n for n in CHAPTERS for key in chapter(n).exercises}


def _answers_in(value, keys: dict[str, int]) -> Iterator[tuple[int, str, str]]:
    """(chapter, key, source) for every entry of a test list or dict that
    names an exercise and holds a definition of its function."""
    from transformer_course.exercises import chapter

    entries = value.items() if isinstance(value, dict) else enumerate(value)
    for name, entry in entries:
        items = [*(name if isinstance(name, tuple) else (name,))]
        items += list(entry) if isinstance(entry, tuple | list) else [entry]
        key = next((i for i in items if isinstance(i, str) and i in keys), None)
        if key is None:
            continue
        function = chapter(keys[key]).exercises[key].function
        for item in items:
            if isinstance(item, str) and f"def {function}(" in item:
                yield keys[key], key, item


def submissions() -> list[dict]:
    """Every answer of the corpus: {"id", "chapter", "key", "source"}, sorted."""
    from exercise_helpers import read_source, solution_cells, without_markers

    from tools.release import student_version
    from transformer_course.exercises import CHAPTERS

    keys = _exercise_keys()
    found: dict[tuple[int, str, str], None] = {}
    for n in CHAPTERS:
        source = read_source(n)
        for key, cell in solution_cells(source).items():
            if key in keys:
                found[n, key, without_markers(cell)] = None
        for key, cell in solution_cells(student_version(source)).items():
            if key in keys:
                found[n, key, cell] = None
    for module_name in TEST_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, list | dict) and value:
                with contextlib.suppress(TypeError, AttributeError):
                    for answer in _answers_in(value, keys):
                        found[answer] = None
    corpus = []
    for n, key, source in sorted(found):
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        corpus.append(
            {"id": f"{n}/{key}/{digest}", "chapter": n, "key": key, "source": source}
        )
    return corpus


@functools.cache
def _references(n: int) -> tuple[str, ...]:
    """Chapter ``n``'s reference solutions, in notebook order."""
    from exercise_helpers import read_source, solution_cells, without_markers

    return tuple(without_markers(c) for c in solution_cells(read_source(n)).values())


def _given(n: int) -> str:
    """Chapter ``n``'s given code: the text of its locked "given" cells
    (``GIVEN`` of its checks' module, chapter 4's self_attention), or ""."""
    from transformer_course.exercises import CHAPTERS

    module = importlib.import_module(f"transformer_course.exercises.{CHAPTERS[n]}")
    return getattr(module, "GIVEN", "")


def notebook_verdict(entry: dict) -> dict:
    """The notebook's check of one answer, its unseen inputs seeded."""
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    exercise = chapter(entry["chapter"]).exercises[entry["key"]]
    # the chapter's given code (a locked cell, chapter 4's self_attention)
    given = _given(entry["chapter"])
    try:  # in a notebook whose other exercises are solved (some build on them)
        cells = [SETUP, given, *_references(entry["chapter"]), entry["source"]]
        function = namespace_from(cells).get(exercise.function)
    except Exception as err:  # an answer whose cell itself fails
        return {"defined": False, "error": type(err).__name__}
    with seeded_urandom(entry["id"]):
        report = core.run_exercise(exercise, function)
    return {
        "status": report.status,
        "score": round(report.score, 6),
        "note": report.note,
        "checks": [[r.name, r.passed, r.hint] for r in report.results],
    }


def grader_verdicts(corpus: list[dict]) -> dict[str, dict]:
    """The sandboxed grader's points, status and hint for every answer: one
    notebook per chapter and round, each exercise's cell the round's answer
    (the reference where an exercise has fewer)."""
    from exercise_helpers import submission

    from transformer_course.grading.grade import grade_notebook

    by_chapter: dict[int, dict[str, list[dict]]] = {}
    for entry in corpus:
        by_chapter.setdefault(entry["chapter"], {}).setdefault(entry["key"], [])
        by_chapter[entry["chapter"]][entry["key"]].append(entry)
    verdicts = {}
    with tempfile.TemporaryDirectory() as folder:
        for n, answers in sorted(by_chapter.items()):
            rounds = max(len(a) for a in answers.values())
            for r in range(rounds):
                chosen = {k: a[r] for k, a in answers.items() if r < len(a)}
                notebook = submission(
                    {k: e["source"] for k, e in chosen.items()}, chapter=n
                )
                path = Path(folder) / f"{n:02d}_round{r}.ipynb"
                import nbformat

                nbformat.write(notebook, path)
                with seeded_urandom(f"grader {n} {r}"):
                    result = grade_notebook(path, chapter=n, only=sorted(chosen))
                for graded in result.exercises:
                    entry = chosen.get(graded.key)
                    if entry is not None:
                        verdicts[entry["id"]] = {
                            "points": round(graded.points, 6),
                            "status": graded.status,
                            "hint": graded.hint,
                        }
                print(f"chapter {n}, round {r + 1} of {rounds}", file=sys.stderr)
    return verdicts


def record(path: Path = CORPUS, with_grader: bool = False) -> dict:
    corpus = submissions()
    for entry in corpus:
        entry["notebook"] = notebook_verdict(entry)
    if with_grader:
        for entry_id, verdict in grader_verdicts(corpus).items():
            next(e for e in corpus if e["id"] == entry_id)["grader"] = verdict
    data = {"submissions": corpus}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return data


def differences(path: Path = CORPUS, with_grader: bool = False) -> list[str]:
    """Each recorded answer whose notebook verdict (and, ``with_grader``, the
    grader's) is no longer the same."""
    recorded = json.loads(path.read_text())["submissions"]
    changed = []
    for entry in recorded:
        now = notebook_verdict(entry)
        if now != entry["notebook"]:
            changed.append(f"{entry['id']}: {entry['notebook']} -> {now}")
    if with_grader:
        graded = grader_verdicts(recorded)
        for entry in recorded:
            now = graded.get(entry["id"])
            if "grader" in entry and now != entry["grader"]:
                changed.append(f"{entry['id']} (grader): {entry['grader']} -> {now}")
    return changed


def _reworded(verdict: dict, replacements: list[tuple[str, str]]) -> dict:
    """``verdict`` with each ``old`` text written as ``new`` in its check names
    and hints."""

    def reworded(text):
        for old, new in replacements:
            text = text.replace(old, new)
        return text

    if "checks" not in verdict:
        return verdict
    checks = [
        [reworded(name), passed, reworded(hint)]
        for name, passed, hint in verdict["checks"]
    ]
    return {**verdict, "checks": checks}


def accept(
    replacements: list[tuple[str, str]], path: Path = CORPUS, gained=submissions
) -> list[str]:
    """Take in a change of wording: every recorded notebook verdict that differs
    from today's only by ``replacements`` is rewritten, answers the tests gained
    since (``gained()``) are added; the differences that are not rewordings are returned, and
    then nothing is written."""
    data = json.loads(path.read_text())
    recorded = data["submissions"]
    known = {entry["id"] for entry in recorded}
    unexplained = []
    for entry in recorded:
        now = notebook_verdict(entry)
        if now == entry["notebook"]:
            continue
        if _reworded(entry["notebook"], replacements) == now:
            entry["notebook"] = now
        else:
            unexplained.append(f"{entry['id']}: {entry['notebook']} -> {now}")
    if unexplained:
        return unexplained
    for entry in gained():
        if entry["id"] not in known:
            entry["notebook"] = notebook_verdict(entry)
            recorded.append(entry)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--grader", action="store_true")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument(
        "--accept",
        nargs=2,
        action="append",
        metavar=("OLD", "NEW"),
        help="with --compare: take in OLD written as NEW in the notebook's hints",
    )
    args = parser.parse_args(argv)
    if args.accept:
        if not args.compare or args.grader or args.record:
            parser.error("--accept goes with --compare alone (no --grader, --record)")
        unexplained = accept([tuple(pair) for pair in args.accept])
        print("\n".join(unexplained) or f"rewordings taken in: {CORPUS}")
        return 1 if unexplained else 0
    if args.record:
        data = record(with_grader=args.grader)
        print(f"recorded {len(data['submissions'])} answers in {CORPUS}")
    if args.compare:
        changed = differences(with_grader=args.grader)
        print("\n".join(changed) or "every verdict as recorded")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
