"""The course grader: scores, and submissions that try to crash it or cheat.

Every attack found in the review of chapters 1-3 is a test here (issue 9). Each
grading starts one sandboxed process per exercise (about 2 s), so attacks are
combined into few submissions and gradings are limited with ``only=``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from exercise_helpers import (
    WRONG,
    WRONG_SCORES,
    by_key,
    insert_after,
    needs_bwrap,
    read_source,
    reference,
    source_path,
    submission,
    write,
)

import transformer_course
from transformer_course.exercises import CHAPTERS
from transformer_course.exercises.ch01 import EXERCISES
from transformer_course.grading.grade import grade_notebook

MAX = sum(e.points for e in EXERCISES.values())
PACKAGE = Path(transformer_course.__file__).resolve().parent
SOURCE_NOTEBOOK = source_path(1)


# --- scores ---------------------------------------------------------------------


@needs_bwrap
def test_cli_full_marks_for_the_solutions_and_json(tmp_path):
    path = write(tmp_path, submission())
    out = tmp_path / "grade.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_course.grading.grade",
            str(path),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert f"{MAX}/{MAX}" in run.stdout
    assert "chapter 1 (from the file name '01_tokens.ipynb')" in run.stdout
    assert "graded in: bubblewrap sandbox" in run.stdout
    data = json.loads(out.read_text())
    assert data["total"] == data["max_total"] == MAX
    assert {e["key"]: e["status"] for e in data["exercises"]} == dict.fromkeys(
        EXERCISES, "passed"
    )


@needs_bwrap
def test_partial_marks_for_a_deliberately_wrong_submission(tmp_path):
    result = grade_notebook(write(tmp_path, submission(WRONG)))
    assert {e.key: e.points for e in result.exercises} == pytest.approx(WRONG_SCORES)
    grades = by_key(result)
    assert "sorted order" in grades["build_char_vocab"].hint
    assert grades["embed_one_hot"].status == "not attempted"


@needs_bwrap
@pytest.mark.parametrize("chapter", [1, 2, 3])
def test_solutions_get_full_marks_and_stubs_not_attempted(tmp_path, chapter):
    name = source_path(chapter).name
    solved = grade_notebook(write(tmp_path, submission(chapter=chapter), name))
    assert solved.chapter == chapter
    assert solved.total == solved.max_total
    student = Path(__file__).resolve().parents[1] / "exercises" / name
    unsolved = grade_notebook(student)
    assert {e.status for e in unsolved.exercises} == {"not attempted"}
    assert unsolved.total == 0


# --- cheating ---------------------------------------------------------------------

CHEATS_CH02 = {
    # the answer key: the course package, or the checks' own reference helpers
    "stable_softmax": (
        "try:\n    import transformer_course as tc\nexcept ImportError:\n    pass\n"
        "def stable_softmax(x):\n    return tc.attention.stable_softmax(x)\n"
    ),
    "attention_weights": (
        "from transformer_course.exercises.ch02 import _reference_weights\n"
        "def attention_weights(q, k, mask=None):\n"
        "    return _reference_weights(q, k, mask)\n"
    ),
    # forbidden built-ins
    "attention": (
        "import torch.nn.functional as F\n"
        "def attention(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n"
    ),
    # monkeypatching the checks from a solution cell: no effect on the grader
    "additive_score": (
        "import transformer_course.exercises.widgets as w\n"
        "import transformer_course.exercises.core as core\n"
        "core.report_from_outcomes = lambda *a: None\n"
        "w.check_widget = lambda *a, **k: 2\n"
        "def additive_score(q, k, W_q, W_k, w):\n    return (W_q @ q + k @ W_k.T) @ w\n"
    ),
}


@needs_bwrap
def test_the_answer_key_forbidden_functions_and_patched_checks_earn_nothing(tmp_path):
    notebook = submission(CHEATS_CH02, chapter=2)
    # the watch itself (the screen would refuse the import of the answer key)
    path = write(tmp_path, notebook, "02_attention.ipynb")
    result = grade_notebook(path, screen=False)
    grades = by_key(result)
    assert result.total == 0, result.table()
    assert "course package" in grades["stable_softmax"].hint
    assert "course package (_reference_weights)" in grades["attention_weights"].hint
    assert "F.scaled_dot_product_attention" in grades["attention"].hint
    assert (
        "Apply tanh" in grades["additive_score"].hint
    )  # graded as the wrong answer it is


@needs_bwrap
def test_forbidden_softmax_in_every_spelling(tmp_path):
    source = (
        "def stable_softmax(x):\n"
        "    try:\n        return torch.ops.aten._softmax(x, -1, False)\n"
        "    except Exception:\n        return x.log_softmax(-1).exp()\n"
    )
    notebook = submission({"stable_softmax": source}, chapter=2)
    path = write(tmp_path, notebook, "02_attention.ipynb")
    # the watch itself (the screen would refuse torch.ops and the like)
    (grade,) = grade_notebook(path, only=["stable_softmax"], screen=False).exercises
    assert grade.points == 0
    assert "torch.softmax" in grade.hint


DEGENERATE_CH02 = {
    "stable_softmax": "def stable_softmax(x):\n    return torch.full_like(x, 1 / x.shape[-1])\n",
    "attention_weights": (
        "def attention_weights(q, k, mask=None):\n"
        "    return torch.full((*q.shape[:-1], k.shape[-2]), 1 / k.shape[-2])\n"
    ),
    "attention": (
        "def attention(q, k, v):\n"
        "    return v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1])\n"
    ),
    "additive_score": "def additive_score(q, k, W_q, W_k, w):\n    return torch.zeros(k.shape[0])\n",
}


@needs_bwrap
def test_functions_that_ignore_their_inputs_earn_nothing(tmp_path):
    notebook = submission(DEGENERATE_CH02, chapter=2)
    result = grade_notebook(write(tmp_path, notebook, "02_attention.ipynb"))
    assert {e.key: e.points for e in result.exercises} == dict.fromkeys(
        DEGENERATE_CH02, 0
    )


@needs_bwrap
def test_oversized_results_are_refused(tmp_path):
    source = "def stable_softmax(x):\n    return torch.zeros(1).expand(16_000_000)\n"
    notebook = submission({"stable_softmax": source}, chapter=2)
    path = write(tmp_path, notebook, "02_attention.ipynb")
    (grade,) = grade_notebook(path, only=["stable_softmax"]).exercises
    assert grade.points == 0
    assert "a tensor of shape (16000000,)" in grade.hint


# --- what a notebook run would see, the grader sees too ---------------------------


@needs_bwrap
def test_earlier_solutions_new_cells_and_import_cells_are_honoured(tmp_path):
    uses_own_softmax = (
        "def attention_weights(q, k, mask=None):\n"
        "    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return stable_softmax(scores)\n"
    )
    notebook = submission({"attention_weights": uses_own_softmax}, chapter=2)
    # the stub of `attention` stays as it is; the learner answers in a new cell
    # under it, with an import in a cell of its own
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "attention":
            cell.source = "def attention(q, k, v):\n    raise NotImplementedError()\n"
    insert_after(
        notebook,
        "attention",
        "import torch.nn.functional as Fn",
        "def attention(q, k, v):\n"
        "    w = Fn.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)\n"
        "    return w @ v\n",
    )
    path = write(tmp_path, notebook, "02_attention.ipynb")
    result = grade_notebook(path, only=["attention_weights", "attention"])
    assert result.total == 4 + 3, result.table()


# --- the report -------------------------------------------------------------------


@needs_bwrap
def test_the_report_names_the_chapter_and_warns_about_metadata(tmp_path):
    notebook = submission()
    notebook.metadata["transformer_course"] = {"chapter": 3}
    result = grade_notebook(write(tmp_path, notebook), only=["build_char_vocab"])
    assert result.chapter == 1
    assert result.chapter_reason == "from the file name '01_tokens.ipynb'"
    assert "metadata says chapter 3" in result.warnings[0]
    assert "warning: the notebook's metadata says chapter 3" in result.table()


def test_unknown_chapter_is_named(tmp_path):
    path = write(tmp_path, submission(), name="notes.ipynb")
    with pytest.raises(ValueError, match="cannot tell which chapter"):
        grade_notebook(path, unsafe=True)


def test_unreadable_notebook_is_a_clean_error(tmp_path):
    bad = tmp_path / "01_tokens.ipynb"
    bad.write_text("not json")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_course.grading.grade",
            str(bad),
            "--unsafe",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "could not grade" in run.stderr
    assert "Traceback" not in run.stderr


def test_without_bubblewrap_the_grader_refuses_in_one_line(tmp_path):
    path = write(tmp_path, submission())
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no bwrap
    run = subprocess.run(
        [sys.executable, "-m", "transformer_course.grading.grade", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 3
    assert run.stdout == ""
    (line,) = run.stderr.strip().splitlines()
    assert "bubblewrap (bwrap) is not installed" in line
    assert "--unsafe" in line


@needs_bwrap
def test_an_answer_below_the_check_and_a_course_import_are_honoured(tmp_path):
    notebook = submission(
        {
            # imports the course's softmax to compare with, then writes its own
            "stable_softmax": (
                "from transformer_course.attention import softmax as reference\n"
                + reference("stable_softmax", chapter=2)
            ),
            "attention": "def attention(q, k, v):\n    raise NotImplementedError()\n",
        },
        chapter=2,
    )
    # answered in a new cell under the check cell, then "Check again"
    insert_after(
        notebook,
        "check_attention",
        "def attention(q, k, v):\n"
        "    w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1)\n"
        "    return w @ v\n",
    )
    path = write(tmp_path, notebook, "02_attention.ipynb")
    result = grade_notebook(path, only=["stable_softmax", "attention"])
    assert result.total == 3 + 3, result.table()


@needs_bwrap
def test_a_later_exercise_reusing_the_name_does_not_replace_an_answer(tmp_path):
    # exercise 4's helper reuses the name apply_rope with another signature: in
    # the notebook, exercise 2's check ran before it and passed; so does the grader
    notebook = submission(chapter=5)
    insert_after(
        notebook,
        "ex4-text",
        "def apply_rope(x, positions):\n    return x.flip(0)\n",
    )
    path = write(tmp_path, notebook, "05_positions.ipynb")
    result = grade_notebook(path, only=["apply_rope"])
    (grade,) = result.exercises
    assert grade.status == "passed", grade.hint
    # a fix written under the exercise's own check still counts
    notebook = submission(
        {"apply_rope": "def apply_rope(x, offset=0):\n    return x\n"}, chapter=5
    )
    insert_after(notebook, "check_apply_rope", reference("apply_rope", chapter=5))
    path = write(tmp_path, notebook, "05_positions.ipynb")
    (grade,) = grade_notebook(path, only=["apply_rope"]).exercises
    assert grade.status == "passed", grade.hint


@needs_bwrap
def test_many_slow_cells_end_in_one_timeout_without_grading_again(tmp_path):
    import time

    notebook = submission()
    insert_after(notebook, "ex1-text", *["import time\ntime.sleep(0.7)\n"] * 8)
    started = time.monotonic()
    # one second per cell, four in all: 8 × 0.7 s goes past the total, not a cell
    (grade,) = grade_notebook(
        write(tmp_path, notebook), only=["build_char_vocab"], timeout=1
    ).exercises
    assert grade.status == "timeout"
    assert "in all" in grade.hint
    assert "left out" not in grade.hint
    assert grade.points == 0
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_the_preamble_defines_what_the_setup_cell_does(chapter):
    """An answer that uses a name of the setup cell (F, plt, …) runs in the
    notebook; it must run in the grader too: same names, without the package."""
    import ast

    import nbformat

    from transformer_course.grading.grade import PREAMBLE

    notebook = nbformat.read(source_path(chapter), as_version=4)
    (setup,) = [
        c
        for c in notebook.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"
    ]
    code = "\n".join(
        ("    pass" if line.lstrip().startswith("%") else line)
        for line in setup.source.splitlines()
    )

    def names(source):
        found = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.Assign):
                found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        return found

    course = {"tc", "chapter", "ex"}  # the package, hidden when grading
    assert names(code) - course <= names(PREAMBLE)
    assert "F" in names(code)


@needs_bwrap
@pytest.mark.parametrize(
    ("cell", "status"),
    [
        ("def double(x):\n    raise NotImplementedError\n", "not attempted"),
        ("x = 1\n", "missing"),  # no double() at all: the test's NameError
        ("def double(x):\n    return 3 * x\n", "failed"),
    ],
)
def test_an_instructors_test_reads_as_the_course_exercises_do(tmp_path, cell, status):
    """Issue 21's instructor: a stub read "failed", as did a function never
    written; the course's own exercises say "not attempted" and "missing"."""
    from transformer_course.grading.grade import InstructorTest

    notebook = insert_after(submission(), "quiz-text", cell)
    test = InstructorTest("test_double", "assert double(2) == 4, 'not double'\n", 2.0)
    result = grade_notebook(
        write(tmp_path, notebook), only=["build_char_vocab"], tests=[test]
    )
    graded = {e.key: e for e in result.exercises}
    assert graded["test_double"].status == status
    assert graded["test_double"].points == 0
    if status == "failed":  # the line that failed, as nbgrader's traceback shows
        assert graded["test_double"].hint == (
            "the test cell raised AssertionError: not double (line 1 of the test "
            "cell: assert double(2) == 4, 'not double')"
        )


@needs_bwrap
def test_a_failed_bare_assert_is_named_by_its_line_but_a_hidden_one_is_not(tmp_path):
    """The instructors' round of issue 21: a bare assert said only
    "AssertionError"; a hidden test's text stays hidden from the student."""
    from transformer_course.grading.grade import InstructorTest

    notebook = insert_after(
        submission(), "quiz-text", "def double(x):\n    return 3 * x\n"
    )
    shown = InstructorTest("test_shown", "x = 2\nassert double(x) == 2 * x\n", 1.0)
    hidden = InstructorTest(
        "test_hidden",
        "assert double(0) == 0\n### BEGIN HIDDEN TESTS\nassert double(5) == 10\n"
        "### END HIDDEN TESTS\n",
        1.0,
    )
    result = grade_notebook(
        write(tmp_path, notebook), only=["build_char_vocab"], tests=[shown, hidden]
    )
    graded = {e.key: e for e in result.exercises}
    assert graded["test_shown"].hint == (
        "the test cell raised AssertionError (line 2 of the test cell: "
        "assert double(x) == 2 * x)"
    )
    assert graded["test_hidden"].hint == (
        "the test cell raised AssertionError (line 3 of the test cell, a hidden test)"
    )
    assert "10" not in graded["test_hidden"].hint


@needs_bwrap
def test_a_helper_written_under_the_check_counts_as_check_again_saw_it(tmp_path):
    """The thirteenth red team: an answer calling a helper defined in a new
    cell under the check passed "Check again" and got 0 from the grader."""
    notebook = submission(
        {"stable_softmax": "def stable_softmax(x):\n    return _soft(x)\n"}, chapter=2
    )
    insert_after(
        notebook,
        "check_stable_softmax",
        "def _soft(x):\n"
        "    e = (x - x.max(dim=-1, keepdim=True).values).exp()\n"
        "    return e / e.sum(dim=-1, keepdim=True)\n",
    )
    path = write(tmp_path, notebook, "02_attention.ipynb")
    (grade,) = grade_notebook(path, only=["stable_softmax"]).exercises
    assert grade.status == "passed", grade.hint


@needs_bwrap
@pytest.mark.parametrize(
    "broken",
    [
        "def merge_pair(ids, pair, new_id)\n    return ids\n",  # SyntaxError
        "def merge_pair(ids, pair, new_id):\n        x = 1\n\treturn ids\n",  # TabError
    ],
)
def test_a_cell_that_does_not_parse_reads_syntax_error(tmp_path, broken):
    """A TabError read "missing" where a SyntaxError read "syntax error"."""
    notebook = submission({"merge_pair": broken})
    (grade,) = grade_notebook(write(tmp_path, notebook), only=["merge_pair"]).exercises
    assert grade.status == "syntax error", grade


def test_a_sandbox_that_never_reaches_an_exercise_says_not_graded(tmp_path, capsys):
    """Not "crashed" with 0, which reads as the submission's fault: the grader
    says "not graded", quotes the sandbox's stderr and exits 4."""
    from exercise_helpers import submission, write

    from transformer_course.grading import grade
    from transformer_course.grading.sandbox import Sandbox

    class NeverStarts(Sandbox):
        def run(self, jobs, *args, **kwargs):
            self.last_error = "bwrap: No permissions to create new namespace"
            return [None] * len(jobs)

    path = write(tmp_path, submission())
    result = grade.grade_notebook(path, sandbox=NeverStarts(unsafe=True))
    assert {e.status for e in result.exercises} == {grade.NOT_GRADED}
    assert "No permissions to create new namespace" in result.exercises[0].hint
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grade, "Sandbox", NeverStarts)
        assert grade.main([str(path), "--unsafe"]) == 4
    assert "not graded" in capsys.readouterr().err


def test_cells_that_crash_in_every_round_are_the_submissions_fault(tmp_path):
    """The sixteenth red team: four cells above the exercises that each end the
    process made every exercise "not graded", which keeps an earlier score.
    An exercise that ran in every round gets its own status, the cells named."""
    from exercise_helpers import submission, write

    from transformer_course.grading import grade
    from transformer_course.grading.sandbox import Sandbox, SandboxResult

    class CrashesAtAnotherCell(Sandbox):
        def run(self, jobs, *args, **kwargs):
            return [
                SandboxResult(
                    "crashed", "the process died", ("cell", job["cells"][0][0]), None
                )
                for job in jobs
            ]

    notebook = submission()
    crashing = "import os\nos._exit(1)\n"
    for _ in range(4):  # above every solution: none of them defines a function
        notebook.cells.insert(2, nbformat.v4.new_code_cell(crashing))
    path = write(tmp_path, notebook)
    result = grade.grade_notebook(
        path, sandbox=CrashesAtAnotherCell(unsafe=True), screen=False
    )
    for exercise in result.exercises:
        assert exercise.status == "crashed", exercise
        assert exercise.hint.count("was left out (crashed)") == 4, exercise.hint
        assert "too many cells above this exercise crash or hang" in exercise.hint
    assert grade.NOT_GRADED not in {e.status for e in result.exercises}


@needs_bwrap
def test_the_source_notebook_gives_points_and_must_be_the_chapters(tmp_path, capsys):
    """``--source`` scales the course's checks to the instructor's points; a
    source of another chapter than ``--chapter`` is refused (the instructor
    round graded chapter 1's check cells as tests of chapter 2: 2/31, exit 0)."""
    from exercise_helpers import read_source, source_path, submission, write

    from transformer_course.grading import grade

    source = read_source(1)
    for cell in source.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "check_patchify":
            cell.metadata["nbgrader"]["points"] = 6
    nbformat.write(source, tmp_path / source_path(1).name)
    (tmp_path / "submitted").mkdir()
    path = write(tmp_path / "submitted", submission())
    given = str(tmp_path / source_path(1).name)
    assert grade.main([str(path), "--chapter", "2", "--source", given]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "--source is chapter 1's notebook" in said
    assert "--chapter says 2" in said
    assert grade.main([str(path), "--source", given]) == 0
    table = capsys.readouterr().out
    assert "6/6" in table.replace(" ", "")
    assert f"points and test cells: from {given}" in table


@pytest.mark.parametrize(
    "left",
    [
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
        "import subprocess\nsubprocess.Popen(['sleep', '60'])\n",
    ],
    ids=["thread", "process"],
)
def test_a_thread_or_process_a_cell_left_running_refuses_the_forbidden_exercises(
    tmp_path, left
):
    """The twenty-second red team computed the forbidden function in a worker
    that a library started at cell time; the watch follows only the call. The
    screen refuses the imports; behind it, the runner refuses the call."""
    notebook = submission(
        {"stable_softmax": left + reference("stable_softmax", chapter=2)}, chapter=2
    )
    path = write(tmp_path, notebook, "02_attention.ipynb")
    graded = grade_notebook(path, unsafe=True, screen=False)
    grades = by_key(graded)
    for key in ("stable_softmax", "attention"):  # those that forbid a function
        assert grades[key].points == 0, grades[key]
        assert "a cell left a " in grades[key].hint
    assert grades["additive_score"].points == grades["additive_score"].max_points


def test_a_progress_bar_in_a_cell_leaves_nothing_running(tmp_path):
    """tqdm's monitor thread outlived its bar and read as a thread a cell left
    running (the twenty-third red team): the grader starts no monitor."""
    bar = "from tqdm import tqdm\nfor _ in tqdm(range(3)):\n    pass\n"
    notebook = submission(
        {"stable_softmax": bar + reference("stable_softmax", chapter=2)}, chapter=2
    )
    path = write(tmp_path, notebook, "02_attention.ipynb")
    grades = by_key(grade_notebook(path, unsafe=True))
    assert grades["stable_softmax"].points == grades["stable_softmax"].max_points


@needs_bwrap
def test_a_double_forked_process_refuses_the_forbidden_exercises(tmp_path):
    """The twenty-fourth red team: a process a cell double-forked is the
    sandbox runner's child, not the job's; every process in the sandbox counts."""
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )
    notebook = submission(
        {"stable_softmax": daemon + reference("stable_softmax", chapter=2)}, chapter=2
    )
    path = write(tmp_path, notebook, "02_attention.ipynb")
    grades = by_key(grade_notebook(path, screen=False))
    assert grades["stable_softmax"].points == 0, grades["stable_softmax"]
    assert "a process running" in grades["stable_softmax"].hint
    assert grades["additive_score"].points == grades["additive_score"].max_points


@pytest.mark.parametrize(
    ("name", "chapter"),
    [
        ("01_tokens.ipynb", 1),
        ("Copy of 02_attention.ipynb", 2),  # Colab's copy
        ("04_block (1).ipynb", 4),  # a browser's second download
        ("alice_03_multihead.ipynb", 3),
    ],
)
def test_the_chapter_is_read_from_a_copys_name(tmp_path, name, chapter):
    from transformer_course.grading.grade import _chapter_of

    number, reason, warnings = _chapter_of(submission(), tmp_path / name, None)
    assert number == chapter
    assert name in reason
    assert not warnings


def test_a_source_notebook_of_another_name_takes_the_chapter_given(tmp_path, capsys):
    """An instructor's source saved as src.ipynb, with --chapter 1: graded as
    chapter 1, not refused for its name (the instructors' round of issue 21)."""
    from transformer_course.grading import grade

    source = tmp_path / "src.ipynb"
    nbformat.write(read_source(), source)
    path = write(tmp_path, submission({}))
    code = grade.main(
        [str(path), "--source", str(source), "--chapter", "1", "--unsafe"]
    )
    said = capsys.readouterr()
    assert "cannot tell which chapter" not in said.err
    assert code == 0, said.err[-2000:]
    code = grade.main([str(path), "--source", str(source), "--unsafe"])
    assert code == 2
    assert "cannot tell which chapter" in capsys.readouterr().err
