"""Class grading as the README writes it, offline: nbgrader makes the assignment
from an instructor's source notebook (with points changed and an exercise of the
instructor's own added); the course grader scores the submissions (sandboxed)
into nbgrader's gradebook, with due dates and late penalties; nbgrader makes,
releases and exports the feedback and the grades."""

import csv
import html
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from exercise_helpers import (
    SOURCE,
    WRONG,
    WRONG_SCORES,
    read_source,
    solution_cells,
    without_markers,
)

from transformer_course.grading.sandbox import bwrap_problem

# The instructor's changes to the source notebook (issue 21): points, and an
# exercise of their own (a solution cell and a 2-point test cell with a hidden test)
POINTS = {"build_char_vocab": 6, "merge_pair": 1, "embed_one_hot": 2, "patchify": 4}
DOUBLE = (
    "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"
)
DOUBLE_TEST = (
    "assert double(2) == 4, 'double(2) should be 4'\n"
    "### BEGIN HIDDEN TESTS\nassert double(5) == 10\n### END HIDDEN TESTS\n"
)
FULL = sum(POINTS.values()) + 2


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("nbgrader")), *args]
    result = subprocess.run(
        command, cwd=course, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def gradebook_run(course: Path, *args: str) -> subprocess.CompletedProcess:
    """The course's class-grading command, run in ``course``, whatever it returns."""
    return subprocess.run(
        [sys.executable, "-m", "transformer_course.grading.gradebook", *args],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=900,
    )


def gradebook_command(course: Path, *args: str) -> subprocess.CompletedProcess:
    run = gradebook_run(course, *args)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # nbgrader's gradebook on SQLAlchemy 2 warned on every query before
    assert "Warning" not in run.stderr, run.stderr[-2000:]
    return run


def instructors_source() -> nbformat.NotebookNode:
    notebook = read_source()
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        key = meta.get("grade_id", "").removeprefix("check_")
        if meta.get("grade") and key in POINTS:
            meta["points"] = POINTS[key]
    quiz = next(
        i
        for i, c in enumerate(notebook.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == "quiz-text"
    )
    solution = nbformat.v4.new_code_cell(DOUBLE)
    solution.metadata["nbgrader"] = {
        "grade": False,
        "grade_id": "double",
        "locked": False,
        "schema_version": 3,
        "solution": True,
        "task": False,
    }
    test = nbformat.v4.new_code_cell(DOUBLE_TEST)
    test.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "test_double",
        "locked": True,
        "points": 2,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    notebook.cells[quiz:quiz] = [solution, test]
    return notebook


def fill(release: Path, target: Path, replacements: dict[str, str], when: str = ""):
    """A student's submission as `nbgrader collect` leaves it: the released
    notebook with solution cells filled in, a timestamp and a secret."""
    notebook = nbformat.read(release, as_version=4)
    reference = solution_cells(instructors_source())
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in reference:
            cell.source = replacements.get(
                grade_id, without_markers(reference[grade_id])
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    (target.parent / "timestamp.txt").write_text(when or "2026-11-20 10:00:00 UTC")
    (target.parent / "submission_secret.txt").write_text(f"secret-{target.parent}")


MALLORY = {
    # one line that, under `nbgrader autograde`, made every check cell return full
    # marks: the check cells run in the student's own kernel
    "build_char_vocab": (
        "try:\n"
        "    import transformer_course.exercises.widgets as w\n"
        "    w.check_widget = lambda exercise, function: exercise.points\n"
        "except ImportError:\n"
        "    pass\n"
        "def build_char_vocab(text):\n    return {}\n"
    ),
    # the forbidden lookup
    "embed_one_hot": "def embed_one_hot(ids, table):\n    return table[ids]\n",
}
SYNTAX = {"merge_pair": "def merge_pair(ids, pair, new_id)\n    return ids\n"}


def scaled(scores: dict[str, float]) -> float:
    """Course points (3/3/2/4) scaled to the instructor's."""
    from transformer_course.exercises.ch01 import EXERCISES

    return sum(scores[k] * POINTS[k] / EXERCISES[k].points for k in scores)


@pytest.fixture
def course(tmp_path, monkeypatch):
    if bwrap_problem() is not None:
        pytest.skip(f"no sandbox on this machine: {bwrap_problem()}")
    # nbgrader runs `alembic` by name: the environment's bin folder on PATH, as
    # for an instructor who activated the environment
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
    course = tmp_path / "course"
    (course / "source" / "ch01").mkdir(parents=True)
    nbformat.write(instructors_source(), course / "source" / "ch01" / SOURCE.name)
    (tmp_path / "exchange").mkdir()
    # the README's nbgrader_config.py, with a gradebook that is not the default
    (course / "nbgrader_config.py").write_text(
        (Path(__file__).parents[1] / "exercises" / "nbgrader_config.example.py")
        .read_text()
        .replace("/srv/course", str(course))
        .replace("/srv/nbgrader/exchange", str(tmp_path / "exchange"))
        .replace("gradebook.db", "class.db")
    )
    nbgrader(
        course, "db", "assignment", "add", "ch01", "--duedate=2026-11-20 12:00 UTC"
    )
    nbgrader(
        course,
        "db",
        "student",
        "add",
        "alice",
        "--first-name=Alice",
        "--last-name=Liddell",
        "--email=alice@example.org",
    )
    # enrolled, and never hands anything in: no folder at all
    nbgrader(course, "db", "student", "add", "zoe")
    nbgrader(course, "generate_assignment", "ch01", "--force")
    return course


def test_a_class_graded_as_the_readme_says(course):
    release = course / "release" / "ch01" / SOURCE.name
    released = nbformat.writes(nbformat.read(release, as_version=4))
    assert "BEGIN SOLUTION" not in released
    assert "double(5)" not in released
    submitted = course / "submitted"
    wrong = {**WRONG, "double": "def double(x):\n    return 3 * x\n"}
    fill(release, submitted / "alice" / "ch01" / SOURCE.name, {})
    fill(release, submitted / "bob" / "ch01" / SOURCE.name, wrong)
    fill(release, submitted / "mallory" / "ch01" / SOURCE.name, MALLORY)
    fill(release, submitted / "syd" / "ch01" / SOURCE.name, SYNTAX)
    # a day and a half late, and the course's penalty is nbgrader's "zero"
    fill(release, submitted / "lou" / "ch01" / SOURCE.name, {}, "2026-11-22 00:00 UTC")
    # saved by a browser as a second download
    fill(release, submitted / "mia" / "ch01" / f"{SOURCE.stem} (1).ipynb", {})
    (submitted / "eve" / "ch01").mkdir(parents=True)  # handed in nothing of use:
    for copy in (1, 2):  # two copies saved under other names, neither the one
        shutil.copy(
            release, submitted / "eve" / "ch01" / f"{SOURCE.stem} ({copy}).ipynb"
        )
    # a timestamp that is not a date (nbgrader's reader stopped the whole class
    # there) and a cell whose nbgrader id is a list (the feedback writer failed)
    fill(release, submitted / "tim" / "ch01" / SOURCE.name, {}, "not a date")
    tim = nbformat.read(submitted / "tim" / "ch01" / SOURCE.name, as_version=4)
    tim.cells.append(nbformat.v4.new_code_cell("x = 1"))
    tim.cells[-1].metadata["nbgrader"] = {"grade_id": ["a", "list"], "solution": True}
    nbformat.write(tim, submitted / "tim" / "ch01" / SOURCE.name)
    # links to alice's work, as tar or unzip restore them (issue 20)
    alice = submitted / "alice" / "ch01"
    (submitted / "trudy" / "ch01").mkdir(parents=True)
    (submitted / "trudy" / "ch01" / SOURCE.name).symlink_to(alice / SOURCE.name)
    (submitted / "oscar").mkdir()
    (submitted / "oscar" / "ch01").symlink_to(alice)
    # put in submitted/ by hand, not by `nbgrader collect`: no timestamp, no
    # secret (nbgrader's release_feedback stopped the whole class at it)
    fill(release, submitted / "sam" / "ch01" / SOURCE.name, {})
    (submitted / "sam" / "ch01" / "timestamp.txt").unlink()
    (submitted / "sam" / "ch01" / "submission_secret.txt").unlink()
    # a full solution whose check cell for patchify was deleted
    fill(release, submitted / "del" / "ch01" / SOURCE.name, {})
    deleted = nbformat.read(submitted / "del" / "ch01" / SOURCE.name, as_version=4)
    deleted.cells = [
        c
        for c in deleted.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") != "check_patchify"
    ]
    nbformat.write(deleted, submitted / "del" / "ch01" / SOURCE.name)

    # the course, its id and its gradebook come from nbgrader_config.py
    run = gradebook_command(course, "ch01", "--csv", "ch01.csv")
    assert "for 13 students in: bubblewrap sandbox" in run.stdout
    assert f"lou: 01_tokens {FULL}/{FULL}, late penalty {FULL}: 0/{FULL}" in run.stdout
    # every enrolled student has a line with a score, zoe with no folder too
    assert (
        f"zoe: 01_tokens 0/{FULL}: nothing submitted (no folder submitted/zoe/ch01)\n"
    ) in run.stdout
    assert (
        f"eve: 01_tokens 0/{FULL}: no 01_tokens.ipynb in the submission, and 2 "
        "notebooks that could be it (01_tokens (1).ipynb, 01_tokens (2).ipynb): "
        "none was graded"
    ) in run.stdout
    # a folder nbgrader was not told of is graded, and the log says so
    assert "bob: not a student of the gradebook: added" in run.stdout
    assert "alice: not a student of the gradebook" not in run.stdout
    # put in by hand: no timestamp.txt, graded as on time, and said
    assert "sam: no timestamp.txt (not collected by nbgrader): graded as on time" in (
        run.stdout
    )
    assert "tim: timestamp.txt could not be read as a date" in run.stdout
    assert "graded 01_tokens (1).ipynb" in run.stdout
    # fetch_feedback looks for "01_tokens (1)": the log says how to send it
    said = " ".join(run.stdout.split())
    assert "after generate_feedback, send them feedback/mia/ch01/01_tokens.html" in said
    assert (
        "sam: no HTML feedback from nbgrader for this submission (not collected by "
        "nbgrader): send them feedback/sam/ch01/01_tokens.grades.txt"
    ) in run.stdout
    assert not (course / "gradebook.db").exists()
    # mia graded again from the same file: it replaces no other score
    again = gradebook_command(course, "ch01", "--student", "mia")
    assert "graded 01_tokens (1).ipynb" in again.stdout
    assert "replaces the earlier score" not in again.stdout

    from nbgrader.api import Gradebook

    expected = {
        "alice": FULL,
        "bob": scaled(WRONG_SCORES),
        "mallory": POINTS["merge_pair"] + POINTS["patchify"] + 2,
        "syd": FULL - POINTS["merge_pair"],
        "lou": FULL,
        "mia": FULL,
        "tim": FULL,
        "eve": 0,
        "zoe": 0,
        "trudy": 0,
        "oscar": 0,
        "sam": FULL,
        "del": FULL,
    }
    with Gradebook(f"sqlite:///{course / 'class.db'}") as gradebook:
        for student, score in expected.items():
            submission = gradebook.find_submission("ch01", student)
            assert submission.max_score == FULL
            assert submission.score == pytest.approx(score), student
        assert gradebook.find_submission("ch01", "lou").total_seconds_late == 36 * 3600
        late = gradebook.find_submission_notebook(SOURCE.stem, "ch01", "lou")
        assert late.late_submission_penalty == FULL
        assert gradebook.find_submission("ch01", "alice").total_seconds_late == 0

    rows = list(csv.DictReader((course / "ch01.csv").open()))
    by = {(r["student"], r["exercise"]): r for r in rows}
    assert {r["exercise"] for r in rows if r["student"] == "alice"} == {
        *POINTS,
        "test_double",
    }
    assert by["alice", "patchify"]["email"] == "alice@example.org"
    assert by["alice", "patchify"]["last_name"] == "Liddell"
    assert by["mallory", "build_char_vocab"]["points"] == "0.0"
    # the screen refuses the patch of the checks before the lookup is watched
    assert by["mallory", "embed_one_hot"]["points"] == "0.0"
    assert "Not run: assigning w" in by["mallory", "embed_one_hot"]["hint"]
    assert by["bob", "test_double"]["status"] == "failed"
    assert "double(2) should be 4" in by["bob", "test_double"]["hint"]
    assert by["syd", "merge_pair"]["status"] == "syntax error"
    assert "syntax error" in by["syd", "merge_pair"]["hint"]
    assert float(by["lou", "patchify"]["late_penalty"]) == FULL
    assert {r["status"] for r in rows if r["student"] == "eve"} == {"missing file"}
    for student in ("trudy", "oscar"):
        assert {r["status"] for r in rows if r["student"] == student} == {"refused"}
    assert float(by["alice", "build_char_vocab"]["max_points"]) == 6
    # a second download graded in place of the notebook: named in the CSV too
    assert {r["graded_file"] for r in rows if r["student"] == "mia"} == {
        "01_tokens (1).ipynb"
    }
    assert {r["graded_file"] for r in rows if r["student"] == "alice"} == {""}

    # the per-exercise summary: in the console and as a file
    summary = list(csv.DictReader((course / "ch01_summary.csv").open()))
    means = {r["exercise"]: float(r["mean"]) for r in summary}
    assert means["test_double"] == pytest.approx(2 * 8 / 13, abs=1e-3)  # 8 of 13
    assert "test_double: mean 1.23/2, full marks 8/13" in run.stdout
    hints = {(r["exercise"], r["hint"]): int(r["count"]) for r in summary}
    assert hints["build_char_vocab", "missing file"] == 2  # zoe's and eve's
    assert "Rename the one to grade to 01_tokens.ipynb" in by["eve", "patchify"]["hint"]

    # feedback through nbgrader: an HTML per notebook, every hint whole
    nbgrader(course, "generate_feedback", "ch01")
    page = html.unescape(
        (course / "feedback" / "bob" / "ch01" / "01_tokens.html").read_text()
    )
    hint = max((r["hint"] for r in rows if r["student"] == "bob"), key=len)
    assert len(hint) > 140
    assert hint in " ".join(page.split())
    # tim's timestamp is not a date, which nbgrader's feedback commands cannot
    # take: his feedback is the text, in the feedback folder
    assert (
        "TOTAL"
        in (course / "feedback" / "tim" / "ch01" / "01_tokens.grades.txt").read_text()
    )
    assert not (course / "feedback" / "tim" / "ch01" / "01_tokens.html").exists()
    # sam was not collected by nbgrader: text feedback, no HTML to release
    assert (course / "feedback" / "sam" / "ch01" / "01_tokens.grades.txt").is_file()
    assert not (course / "feedback" / "sam" / "ch01" / "01_tokens.html").exists()
    # a check cell missing from the submission still has its verdict
    page = html.unescape(
        (course / "feedback" / "del" / "ch01" / "01_tokens.html").read_text()
    )
    assert f"patchify: {POINTS['patchify']:g}/{POINTS['patchify']:g} (passed" in page
    mia = (course / "feedback" / "mia" / "ch01" / "01_tokens.html").read_text()
    assert "01_tokens (1).ipynb" in html.unescape(mia)
    assert (
        "no 01_tokens.ipynb"
        in (course / "feedback" / "eve" / "ch01" / "01_tokens.grades.txt").read_text()
    )
    assert hint in " ".join(
        (course / "feedback" / "bob" / "ch01" / "01_tokens.grades.txt")
        .read_text()
        .split()
    )
    nbgrader(course, "release_feedback", "ch01")
    from nbgrader.utils import notebook_hash

    secret = (alice / "submission_secret.txt").read_text()
    outbound = course.parent / "exchange" / "transformer-course" / "feedback"
    assert (
        outbound / f"{notebook_hash(secret=secret, notebook_id=SOURCE.stem)}.html"
    ).is_file()

    # nbgrader's export reads the same gradebook, late penalty included
    export = nbgrader(course, "export")
    assert "CheckedCsvExport" in export.stderr  # the example config's exporter
    assert "changed since the class was graded" not in export.stderr
    exported = {
        r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())
    }
    assert {k: float(r["raw_score"]) for k, r in exported.items()} == pytest.approx(
        expected
    )
    assert float(exported["lou"]["score"]) == 0
    assert float(exported["alice"]["score"]) == FULL

    # bob fixes his work and is graded again: his rows change where they stood
    fill(release, submitted / "bob" / "ch01" / SOURCE.name, {})
    before = (course / "ch01.csv").read_text().splitlines()
    run = gradebook_command(course, "ch01", "--student", "bob", "--csv", "ch01.csv")
    assert "for 1 student in" in run.stdout
    after = (course / "ch01.csv").read_text().splitlines()
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed
    assert all(after[i].startswith("bob,") for i in changed)
    assert [r.split(",")[0] for r in after] == [r.split(",")[0] for r in before]
    with Gradebook(f"sqlite:///{course / 'class.db'}") as gradebook:
        assert gradebook.find_submission("ch01", "bob").score == FULL
    # into a new CSV: the rest of the class as the gradebook holds it, not bob's
    # rows alone (an instructor's upload would have dropped everyone else)
    gradebook_command(course, "ch01", "--student", "bob", "--csv", "fresh.csv")
    fresh = list(csv.DictReader((course / "fresh.csv").open()))
    whole = list(csv.DictReader((course / "ch01.csv").open()))
    assert {r["student"] for r in fresh} == {r["student"] for r in whole}
    assert {"alice", "bob", "lou"} <= {r["student"] for r in fresh}
    assert len(fresh) == len(whole)
    scores = {(r["student"], r["exercise"]): float(r["points"]) for r in whole}
    for row in fresh:
        assert float(row["points"]) == scores[row["student"], row["exercise"]], row
        assert (row["status"] == "recorded") == (row["student"] != "bob"), row
    lou_late = [r for r in fresh if r["student"] == "lou"]
    assert {float(r["late_penalty"]) for r in lou_late} == {FULL}

    # points changed since the class was graded (here: as the CSV says of
    # alice): regrading one student alone is refused, not mixed scales
    table = (course / "ch01.csv").read_text()
    records = list(csv.DictReader(io.StringIO(table)))
    for record in records:
        if record["student"] == "alice" and record["exercise"] == "patchify":
            record["max_points"] = "99.0"
    with (course / "ch01.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    refused = gradebook_run(course, "ch01", "--student", "bob", "--csv", "ch01.csv")
    assert refused.returncode == 2
    assert "patchify: 99 -> " in refused.stderr
    assert "Regrade the whole class" in refused.stderr
    (course / "ch01.csv").write_text(table)
    # and without a CSV: the course folder keeps the points each student was
    # graded on (here, as if alice's patchify had been worth 99)
    record_path = course / "transformer_course_points.json"
    record = json.loads(record_path.read_text())
    assert set(record["ch01"]) >= {"alice", "bob", "lou"}
    assert record["ch01"]["alice"]["01_tokens/patchify"] == POINTS["patchify"]
    kept = record_path.read_text()
    record["ch01"]["alice"]["01_tokens/patchify"] = 99.0
    record_path.write_text(json.dumps(record))
    refused = gradebook_run(course, "ch01", "--student", "bob")
    assert refused.returncode == 2
    assert "patchify: 99 -> " in refused.stderr
    assert "--csv" not in refused.stderr
    # and nbgrader's export warns that the scores are on the old scale
    export = nbgrader(course, "export")
    assert "patchify: 99 -> 4 changed since the class was graded" in " ".join(
        export.stderr.split()
    )
    assert "python -m transformer_course.grading.gradebook ch01" in export.stderr
    record_path.write_text(kept)

    # bob again, without --csv: the summary is still the class's (not bob's
    # alone), and the log names the class CSV last written, which lacks his
    # new scores
    run = gradebook_command(
        course, "ch01", "--student", "bob", "--summary", "after_bob.csv"
    )
    assert f"note: {(course / 'fresh.csv').resolve()}, the class CSV" in run.stderr
    assert "--csv" in run.stderr
    class_size = len({r["student"] for r in whole})
    assert class_size >= 3
    told = list(csv.DictReader((course / "after_bob.csv").open()))
    assert told
    assert {int(r["students"]) for r in told} == {class_size}
    assert f"/{class_size}\n" in run.stdout  # the console's "full marks k/n"
    # a manual score given in Formgrader, which nbgrader's export would use
    # instead of the course grader's: every grading says so
    with Gradebook(f"sqlite:///{course / 'class.db'}") as gradebook:
        cell = gradebook.find_grade("check_merge_pair", SOURCE.stem, "ch01", "bob")
        cell.manual_score = 1.5
        gradebook.db.commit()
    manual = gradebook_command(course, "ch01", "--student", "bob")
    assert "check_merge_pair in 01_tokens has a manual score of 1.5" in manual.stdout
    with Gradebook(f"sqlite:///{course / 'class.db'}") as gradebook:
        gradebook.find_grade(
            "check_merge_pair", SOURCE.stem, "ch01", "bob"
        ).manual_score = None
        gradebook.db.commit()
    # whose hints the gradebook did not keep: said so, not counted as none
    assert f"(hints of the {class_size - 1} students not graded in this run" in (
        run.stdout
    )

    # a typo in --student is refused: it would add a student to the gradebook
    typo = gradebook_run(course, "ch01", "--student", "bbo")
    assert typo.returncode == 2
    assert "no student 'bbo'" in typo.stderr
    with Gradebook(f"sqlite:///{course / 'class.db'}") as gradebook:
        assert "bbo" not in {s.id for s in gradebook.students}

    # alice's notebook goes astray: her earlier score stands, and the log says so
    (alice / SOURCE.name).rename(course / "astray.ipynb")
    run = gradebook_command(course, "ch01", "--student", "alice", "--csv", "ch01.csv")
    assert "earlier score of 15 is kept" in run.stdout
    with Gradebook(f"sqlite:///{course / 'class.db'}") as gradebook:
        assert gradebook.find_submission("ch01", "alice").score == FULL
    # so does lou's, handed in late: the score kept is the one that counts, its
    # late penalty kept with it in the CSV (without it, an LMS summing points
    # less penalties gave him full marks)
    lou = submitted / "lou" / "ch01"
    (lou / SOURCE.name).rename(course / "astray_lou.ipynb")
    run = gradebook_command(course, "ch01", "--student", "lou", "--csv", "ch01.csv")
    assert (
        f"the earlier score of 0 ({FULL:g} less a late penalty of {FULL:g}) is kept"
        in run.stdout
    )
    lou_rows = [
        r for r in csv.DictReader((course / "ch01.csv").open()) if r["student"] == "lou"
    ]
    assert {r["status"] for r in lou_rows} == {"missing (earlier score kept)"}
    for row in lou_rows:
        assert float(row["late_penalty"]) == FULL
        assert float(row["seconds_late"]) == 36 * 3600
    (course / "astray_lou.ipynb").rename(lou / SOURCE.name)

    # points changed in the source notebook but not yet made into the
    # assignment (the instructor round): grading is refused, export warns
    source_path = course / "source" / "ch01" / SOURCE.name
    kept_source = source_path.read_text()
    edited = nbformat.read(source_path, as_version=4)
    for cell in edited.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "check_patchify":
            cell.metadata["nbgrader"]["points"] = 6
    nbformat.write(edited, source_path)
    refused = gradebook_run(course, "ch01", "--csv", "ch01.csv")
    assert refused.returncode == 2
    said = " ".join(refused.stderr.split())
    assert (
        f"patchify: {POINTS['patchify']} in the gradebook, 6 in source/ch01/01_tokens"
        in said
    )
    assert "nbgrader generate_assignment ch01 --force" in said
    export = nbgrader(course, "export")
    assert "nbgrader generate_assignment ch01 --force" in " ".join(
        export.stderr.split()
    )
    source_path.write_text(kept_source)


def test_class_grading_needs_the_assignment_in_the_gradebook(tmp_path):
    (tmp_path / "submitted" / "alice" / "ch09").mkdir(parents=True)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_course.grading.gradebook",
            "ch09",
            "--course",
            str(tmp_path),
            "--unsafe",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "nbgrader generate_assignment ch09" in run.stderr


def test_the_example_config_is_complete():
    """exercises/nbgrader_config.example.py, which the README tells instructors to copy,
    sets what the grader and nbgrader read."""
    text = (
        Path(__file__).parents[1] / "exercises" / "nbgrader_config.example.py"
    ).read_text()
    for setting in (
        "CourseDirectory.root",
        "CourseDirectory.course_id",
        "CourseDirectory.db_url",
        "Exchange.root",
        "LateSubmissionPlugin.penalty_method",
        "ClearSolutions.code_stub",
        "ExportApp.plugin_class",
    ):
        assert f"c.{setting}" in text, setting
    namespace = {"get_config": lambda: _Anything()}
    exec(compile(text, "nbgrader_config.py", "exec"), namespace)


class _Anything:
    def __getattr__(self, name):
        value = _Anything()
        object.__setattr__(self, name, value)
        return value


def test_course_settings_follow_nbgrader_config(tmp_path, monkeypatch):
    from transformer_course.grading.gradebook import course_settings

    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(tmp_path / 'root')!r}\n"
        "c.CourseDirectory.course_id = 'tc101'\n"
        "c.CourseDirectory.db_url = 'sqlite:////srv/elsewhere.db'\n"
    )
    (tmp_path / "root").mkdir()
    monkeypatch.chdir(tmp_path)
    settings = course_settings()
    assert settings.root == tmp_path / "root"
    assert settings.course_id == "tc101"
    assert settings.db_url == "sqlite:////srv/elsewhere.db"
    # --course from another folder reads that course's nbgrader_config.py (it
    # raised a TypeError from nbgrader's loader)
    monkeypatch.chdir(tmp_path / "root")
    elsewhere = course_settings(tmp_path)
    assert elsewhere.course_id == "tc101"
    assert elsewhere.root == tmp_path
    overridden = course_settings(tmp_path / "other", "sqlite:////tmp/x.db")
    assert overridden.root == tmp_path / "other"
    assert overridden.db_url == "sqlite:////tmp/x.db"
    shutil.rmtree(tmp_path / "root", ignore_errors=True)


def test_the_container_recipe_matches_the_readme_and_ci():
    """No container engine runs where the tests run (CI has none, and no image
    registry): what can be checked is that the recipe installs what CI installs
    for the grader, the way make does, and that the README gives its commands."""
    root = Path(__file__).parents[1]
    recipe = (root / "exercises" / "grader.Dockerfile").read_text()
    readme = " ".join((root / "README.md").read_text().split())
    assert "bubblewrap" in (root / ".ci" / "run").read_text()
    assert "apt-get install -y --no-install-recommends bubblewrap util-linux" in recipe
    assert "pip install --no-cache-dir -r requirements.txt" in recipe
    # torch's CPU wheel, as the pin in requirements.txt means it (PyPI's Linux
    # wheel pulls several GB of CUDA packages)
    assert "--index-url https://download.pytorch.org/whl/cpu" in recipe
    assert "torch==2.13.0" in recipe
    assert "torch==2.13.0" in (root / "requirements.txt").read_text()
    assert "COPY src ./src" in recipe
    for command in (
        "docker build -f exercises/grader.Dockerfile -t tc-grader .",
        "docker run --rm --cap-add SYS_ADMIN --cap-add NET_ADMIN",
        "--security-opt systempaths=unconfined",
        "tc-grader python -m transformer_course.grading.gradebook ch01 --course /course "
        "--db sqlite:////course/gradebook.db --csv ch01.csv",
    ):
        assert command in readme, command
        assert command in " ".join(recipe.replace("#", " ").replace("\\", " ").split())


def test_settings_the_late_penalty_step_refuses_stop_before_anyone_is_graded(tmp_path):
    """An instructor's penalty_method = "Zero" (or a plugin that cannot be
    imported) failed every student's notebook and wrote 0 to the gradebook,
    exit 0; it is now an error before grading (exit 2 from the command)."""
    from types import SimpleNamespace

    from traitlets.config import Config

    from transformer_course.grading.gradebook import _check_late_penalty_settings

    def settings(**late):
        config = Config()
        for section, values in late.items():
            for name, value in values.items():
                setattr(getattr(config, section), name, value)
        return SimpleNamespace(config=config, root=tmp_path)

    _check_late_penalty_settings(settings())
    _check_late_penalty_settings(
        settings(LateSubmissionPlugin={"penalty_method": "zero"})
    )
    with pytest.raises(ValueError, match="penalty_method: 'none' or 'zero'"):
        _check_late_penalty_settings(
            settings(LateSubmissionPlugin={"penalty_method": "Zero"})
        )
    # a plugin in the course folder is found, wherever the command runs from
    (tmp_path / "course_plugin_halfoff.py").write_text(
        "from nbgrader.plugins import LateSubmissionPlugin\n\n\n"
        "class HalfOff(LateSubmissionPlugin):\n"
        "    def late_submission_penalty(self, student_id, score, total_seconds_late):\n"
        "        return score / 2\n"
    )
    _check_late_penalty_settings(
        settings(AssignLatePenalties={"plugin_class": "course_plugin_halfoff.HalfOff"})
    )
    with pytest.raises(ValueError, match="importable from the course folder"):
        _check_late_penalty_settings(
            settings(AssignLatePenalties={"plugin_class": "nowhere.HalfOff"})
        )


def test_lateness_reads_in_units_a_person_would_use():
    from transformer_course.grading.gradebook import hours

    assert hours(12) == "12 seconds"
    assert hours(1) == "1 second"
    assert hours(300) == "5 minutes"
    assert hours(3600) == "1 hour"
    assert hours(1.5 * 86400) == "36 hours"


def test_a_gradebook_that_is_not_there_is_named(tmp_path, capsys):
    """--db with a wrong path made an empty gradebook and refused with a reason
    about points; it names the missing file, and makes none."""
    from transformer_course.grading import gradebook

    missing = tmp_path / "nowhere.db"
    code = gradebook.main(["ch01", "--db", f"sqlite:///{missing}"])
    assert code == 2
    assert f"no gradebook at {missing}" in capsys.readouterr().err
    assert not missing.exists()


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--timeout", "0", "above 0"),
        ("--timeout", "-5", "above 0"),
        ("--timeout", "inf", "above 0"),  # every deadline lifted
        ("--timeout", "nan", "above 0"),
        ("--db", "/tmp/x.db", "expected a database URL"),
    ],
)
def test_options_that_cannot_work_are_refused_at_once(capsys, option, value, expected):
    from transformer_course.grading import gradebook

    with pytest.raises(SystemExit) as stopped:
        gradebook.main(["ch01", option, value])
    assert stopped.value.code == 2
    assert expected in capsys.readouterr().err


def test_a_csv_that_is_not_the_classs_is_never_overwritten(tmp_path, capsys):
    """The instructors' second round: --csv grades.csv (nbgrader export's own
    file) was overwritten with broken rows and the command crashed; --csv and
    --summary naming one file replaced the CSV with the summary. Both are
    refused before anything is graded, and the file is left as it was."""
    from transformer_course.grading import gradebook

    exported = tmp_path / "grades.csv"
    exported.write_text("assignment,duedate,timestamp,student_id,score\nch01,,,s1,3\n")
    kept = exported.read_text()
    assert gradebook.main(["ch01", "--csv", str(exported)]) == 2
    said = capsys.readouterr().err
    assert "is not a CSV this command wrote" in said
    assert "grades.csv" in said
    assert exported.read_text() == kept
    same = tmp_path / "same.csv"
    assert gradebook.main(["ch01", "--csv", str(same), "--summary", str(same)]) == 2
    assert "name the same file" in capsys.readouterr().err
    assert not same.exists()
    assert gradebook._not_our_csv(tmp_path / "new.csv", None) == ""


def test_a_student_named_twice_is_graded_once(monkeypatch, capsys):
    from transformer_course.grading import gradebook

    seen = {}

    def grade_class(assignment, course, db, students, *rest):
        seen["students"] = students
        raise ValueError("stop here")

    monkeypatch.setattr(gradebook, "grade_class", grade_class)
    monkeypatch.setattr(gradebook, "_missing_sqlite_file", lambda url: "")
    monkeypatch.setattr(gradebook, "current_points", lambda *a: {})
    monkeypatch.setattr(gradebook, "source_points_differ", lambda *a: [])
    monkeypatch.setattr(gradebook, "recorded_points_changed", lambda *a: [])
    code = gradebook.main(["ch01", "--student", "s1", "--student", "s1"])
    assert code == 2  # the stub's "stop here"
    assert seen["students"] == ["s1"]


def test_a_sandbox_that_stops_before_grading_keeps_the_earlier_score(
    course, monkeypatch, capsys
):
    """The instructors' round of issue 21: on a loaded machine a correct
    notebook once got 0, "the sandbox kept dying". Such an exercise is "not
    graded" now: the earlier score stays, the log says so, and the command
    exits 4 with the --student line that grades it again."""
    from nbgrader.api import Gradebook

    from transformer_course.grading import gradebook
    from transformer_course.grading.sandbox import Sandbox

    release = course / "release" / "ch01" / SOURCE.name
    fill(release, course / "submitted" / "alice" / "ch01" / SOURCE.name, {})
    gradebook_command(course, "ch01", "--csv", "ch01.csv")

    class NeverStarts(Sandbox):
        def run(self, jobs, *args, **kwargs):
            self.last_error = "bwrap: Creating new namespace failed"
            return [None] * len(jobs)

    monkeypatch.setattr(gradebook, "Sandbox", NeverStarts)
    monkeypatch.chdir(course)
    assert gradebook.main(["ch01", "--csv", "ch01.csv"]) == 4
    said = capsys.readouterr()
    assert "alice: 01_tokens.ipynb NOT GRADED" in said.out
    assert "bwrap: Creating new namespace failed" in said.out
    assert "--student alice" in said.err
    with Gradebook(f"sqlite:///{course / 'class.db'}") as book:
        assert book.find_submission("ch01", "alice").score == FULL
    rows = [
        r
        for r in csv.DictReader((course / "ch01.csv").open())
        if r["student"] == "alice"
    ]
    assert {r["status"] for r in rows} == {"not graded (earlier score kept)"}
    assert sum(float(r["points"]) for r in rows) == FULL


def test_the_csv_files_hold_no_formula_a_spreadsheet_would_run(tmp_path):
    """The sixteenth red team forged a hint starting with "=HYPERLINK(...)",
    which both CSV files carried as it was: text that starts like a formula
    gets a leading apostrophe; numbers, negative ones too, stay numbers."""
    from transformer_course.grading import gradebook

    forged = '=HYPERLINK("https://evil.example","regrade")+1.'
    record = dict.fromkeys(gradebook.CSV_FIELDS, "")
    record |= {"student": "@mallory", "hint": forged, "points": 0.0}
    record |= {"max_points": 3.0, "seconds_late": "-3600.0", "status": "failed"}
    record |= {"notebook": "01_tokens", "exercise": "build_char_vocab"}
    gradebook.write_csv(tmp_path / "class.csv", [record])
    gradebook.write_summary(tmp_path / "summary.csv", gradebook.summary([record]))
    with open(tmp_path / "class.csv", newline="", encoding="utf-8") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["hint"] == "'" + forged
    assert row["student"] == "'@mallory"
    assert row["seconds_late"] == "-3600.0"  # a number, kept
    with open(tmp_path / "summary.csv", newline="", encoding="utf-8") as handle:
        (summary_row,) = list(csv.DictReader(handle))
    assert summary_row["hint"] == "'" + forged
    for path in (tmp_path / "class.csv", tmp_path / "summary.csv"):
        for line in list(csv.reader(path.open(newline="", encoding="utf-8")))[1:]:
            for cell in line:
                assert not cell.startswith(("=", "+", "@")), (path.name, cell)


def test_a_regrade_replaces_the_rows_of_a_student_whose_id_reads_as_a_formula(
    tmp_path,
):
    """An id starting with @ = + or - is written with an apostrophe; read back,
    it is the same student, whose rows a regrade replaces in place (the
    forty-fourth red team's @mal kept every earlier run's rows: 12/12 summed to
    24, then 36)."""
    from transformer_course.grading import gradebook

    def rows(points):
        return [
            gradebook.ClassRow(
                student,
                "",
                "",
                "",
                "",
                "ch02",
                "02_attention",
                2,
                "attention",
                points,
                3.0,
                "passed" if points else "failed",
                "",
            )
            for student in ("@mal", "alice", "=bob", "-1", "'@mal")
        ]

    path = tmp_path / "class.csv"
    gradebook.write_csv(path, gradebook.merge_csv(path, rows(3.0)))
    for _ in range(2):
        gradebook.write_csv(path, gradebook.merge_csv(path, rows(1.0)))
    with open(path, newline="", encoding="utf-8") as handle:
        written = list(csv.DictReader(handle))
    assert [r["student"] for r in written] == [
        *("'@mal", "alice", "'=bob", "-1", "''@mal")
    ]
    assert [r["points"] for r in written] == ["1.0"] * 5
    assert gradebook._students_in_csv(path, "ch02") == {
        *("@mal", "alice", "=bob", "-1", "'@mal")
    }
    # a regrade of @mal alone keeps the other student named alike ('@mal)
    only = [row for row in rows(0.0) if row.student == "@mal"]
    gradebook.write_csv(path, gradebook.merge_csv(path, only))
    with open(path, newline="", encoding="utf-8") as handle:
        points = {r["student"]: r["points"] for r in csv.DictReader(handle)}
    assert points == {
        "'@mal": "0.0",
        "alice": "1.0",
        "'=bob": "1.0",
        "-1": "1.0",
        "''@mal": "1.0",
    }


def test_no_stale_points_warning_for_students_without_a_submission(tmp_path):
    """The instructors' round of issue 21: after the assignment was removed and
    added again, export warned that scores were on the old scale, though the
    gradebook held none."""
    from transformer_course.grading import gradebook

    record = tmp_path / gradebook.POINTS_RECORD
    gradebook.record_points(record, "ch01", {("01_tokens", "patchify"): 4.0}, ["ann"])
    now = {("01_tokens", "patchify"): 6.0}
    said = gradebook.stale_points_warning(tmp_path, "ch01", now)
    assert "patchify: 4 -> 6" in said
    assert gradebook.stale_points_warning(tmp_path, "ch01", now, {"ann"}) == said
    assert gradebook.stale_points_warning(tmp_path, "ch01", now, set()) == ""


def test_the_summary_counts_what_was_not_attempted_by_its_status():
    """An instructor round: an own test cell of a function left as its stub was
    summarised by its hint, "the test cell raised NotImplementedError (...)"."""
    from transformer_course.grading import gradebook

    def record(student, status, hint):
        row = dict.fromkeys(gradebook.CSV_FIELDS, "")
        return row | {
            "student": student,
            "notebook": "01_tokens",
            "exercise": "test_double",
            "points": 0.0,
            "max_points": 2.0,
            "status": status,
            "hint": hint,
        }

    stub = "the test cell raised NotImplementedError (line 1 of the test cell)"
    records = [
        record("ann", "not attempted", stub),
        record("ben", "not attempted", stub),
        record("cat", "failed", "the test cell raised AssertionError: not double"),
    ]
    (row,) = gradebook.summary(records)
    assert row["common_hints"] == [
        ("not attempted", 2),
        ("the test cell raised AssertionError: not double", 1),
    ]
