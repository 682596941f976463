"""Issue 24's proof that a refactor of the exercise layer changed no verdict:
every answer of the recorded corpus (tests/verdict_corpus.json, made by
tools/verdict_corpus.py before the refactor) gets the same status, score, checks,
hints and note from the notebook's check, its unseen inputs seeded as then."""

import json
import runpy
from pathlib import Path

import pytest

TOOL = Path(__file__).parents[1] / "tools" / "verdict_corpus.py"


@pytest.fixture(scope="module")
def tool():
    return runpy.run_path(str(TOOL))


def test_the_corpus_holds_every_exercise_right_wrong_and_untouched(tool):
    from transformer_course.exercises import CHAPTERS, chapter

    recorded = json.loads(tool["CORPUS"].read_text())["submissions"]
    for n in CHAPTERS:
        for key in chapter(n).exercises:
            statuses = [
                e["notebook"].get("status")
                for e in recorded
                if e["chapter"] == n and e["key"] == key
            ]
            assert "passed" in statuses, (n, key)
            assert "not attempted" in statuses, (n, key)
            assert "failed" in statuses, (n, key)
    assert len(recorded) >= 300


def test_every_recorded_verdict_is_given_again(tool):
    changed = tool["differences"]()
    assert not changed, "\n".join(changed[:5])


def test_a_rewording_is_taken_in_and_nothing_else(tool, tmp_path):
    """``--accept OLD NEW``: a hint recorded with OLD where the check now says
    NEW is rewritten; a verdict that changed otherwise is reported, and then the
    corpus file is left as it was."""
    recorded = json.loads(tool["CORPUS"].read_text())["submissions"]
    failed = next(
        e
        for e in recorded
        if e["chapter"] == 2 and e["notebook"].get("status") == "failed"
    )
    *_, hint = next(c for c in failed["notebook"]["checks"] if not c[1])
    word = hint.split()[1]
    old = json.loads(json.dumps(failed))
    for check in old["notebook"]["checks"]:
        check[2] = check[2].replace(word, "OLDWORD")
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"submissions": [old]}))
    assert tool["accept"]([("OLDWORD", word)], path, gained=list) == []
    (now,) = json.loads(path.read_text())["submissions"]
    assert now["notebook"] == failed["notebook"]

    old["notebook"]["score"] += 1  # not a rewording
    path.write_text(json.dumps({"submissions": [old]}))
    before = path.read_text()
    (unexplained,) = tool["accept"]([("OLDWORD", word)], path, gained=list)
    assert unexplained.startswith(failed["id"])
    assert path.read_text() == before
