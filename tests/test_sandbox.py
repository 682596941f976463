"""The grader's sandbox: nothing a submission starts outlives its grading, nothing
outside its scratch folder is visible or writable, a hostile cell costs only its own
exercise (issue 9)."""

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from exercise_helpers import (
    by_key,
    insert_after,
    needs_bwrap,
    reference,
    source_path,
    submission,
    write,
)

import transformer_course
from transformer_course.exercises.ch01 import EXERCISES
from transformer_course.grading.grade import grade_notebook, main
from transformer_course.grading.sandbox import bwrap_problem

MAX = sum(e.points for e in EXERCISES.values())
PACKAGE = Path(transformer_course.__file__).resolve().parent
SOURCE_NOTEBOOK = source_path(1)


# --- the sandbox: nothing outlives grading, nothing outside scratch is touched -------

ESCAPE = """
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", '''
import os, time
if os.fork():
    os._exit(0)
os.setsid()
time.sleep(2)
for target in {targets!r}:
    try:
        with open(target, "a") as handle:
            handle.write("hacked")
    except OSError:
        pass
# {marker}
'''], start_new_session=True)
"""


def alive(marker):
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                return True
    return False


@pytest.mark.parametrize(
    "unsafe", [pytest.param(False, marks=needs_bwrap), True], ids=["bwrap", "unsafe"]
)
def test_a_detached_process_dies_with_its_grading(
    tmp_path, unsafe, monkeypatch, capsys
):
    if unsafe:  # no bubblewrap on PATH: the grader's unsafe mode, with --unsafe
        monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
        bwrap_problem.cache_clear()
    grade_file = tmp_path / "grade.json"
    probe = PACKAGE / f"_probe_{uuid.uuid4().hex}.txt"
    marker = uuid.uuid4().hex
    attack = ESCAPE.format(targets=[str(grade_file), str(probe)], marker=marker)
    notebook = submission({"build_char_vocab": attack + reference("build_char_vocab")})
    path = write(tmp_path, notebook)
    args = [str(path), "--json", str(grade_file)] + (["--unsafe"] if unsafe else [])
    try:
        assert main(args) == 0
        shown = capsys.readouterr().out
        assert ("UNSAFE: no sandbox" in shown) == unsafe
        written = grade_file.read_text()
        assert not alive(marker)
        time.sleep(3)  # the detached process would have written by now
        assert grade_file.read_text() == written
        # full marks but for the exercise that forbids a function, whose
        # notebook may not import what the attack imports (exercises/screen.py)
        graded = json.loads(written)
        grades = {g["key"]: g for g in graded["exercises"]}
        assert graded["total"] == MAX - grades["embed_one_hot"]["max_points"]
        assert grades["embed_one_hot"]["hint"].startswith("Not run: import")
        assert not probe.exists()
    finally:
        probe.unlink(missing_ok=True)
        bwrap_problem.cache_clear()


HIDDEN = """
import os, pathlib, socket
seen = [p for p in {paths!r} if os.path.exists(p)]
for p in {writes!r}:
    try:
        pathlib.Path(p).write_text("hacked")
        seen.append(p)
    except OSError:
        pass
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
    seen.append("network")
except OSError:
    pass
try:  # importable (an empty stand-in), but nothing in it works
    import transformer_course
    transformer_course.attention.softmax(torch.ones(2), -1)
    seen.append("the course package works")
except Exception:
    pass
def build_char_vocab(text):
    if seen:
        raise RuntimeError("saw " + repr(seen))
    return {{c: i for i, c in enumerate(sorted(set(text)))}}
"""


@needs_bwrap
def test_the_sandbox_hides_the_answer_key_and_protects_files(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    grade_file = tmp_path / "grade.json"
    grade_file.write_text("{}")
    probe = PACKAGE / f"_probe_{uuid.uuid4().hex}.txt"
    source = HIDDEN.format(
        paths=[
            str(SOURCE_NOTEBOOK),  # the solutions
            str(PACKAGE / "exercises" / "ch01.py"),  # the checks' references
            str(tmp_path),  # the submission's own folder (other submissions)
        ],
        writes=[str(grade_file), str(probe), str(Path(sys.prefix) / "probe.txt")],
        port=port,
    )
    try:
        path = write(tmp_path, submission({"build_char_vocab": source}))
        (grade,) = grade_notebook(path, only=["build_char_vocab"]).exercises
    finally:
        listener.close()
    assert grade.status == "passed", grade.hint
    assert grade_file.read_text() == "{}"
    assert not probe.exists()
    assert not (Path(sys.prefix) / "probe.txt").exists()


@needs_bwrap
def test_a_hostile_submission_costs_only_its_own_exercises(tmp_path):
    hostile = {
        # exits before defining the function
        "build_char_vocab": "import sys\nsys.exit('bye')\ndef build_char_vocab(text):\n    return {}\n",
        # loops forever (and is above every later exercise)
        "merge_pair": "while True:\n    pass\n",
        # kills its process when called
        "embed_one_hot": "import os\ndef embed_one_hot(ids, table):\n    os._exit(3)\n",
    }

    def edit(notebook):
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if grade_id == "patchify":
                cell.source = (
                    "import os, sys\nfor _ in range(50):\n    print('x' * 200_000)\n"
                    "    sys.stderr.write('y' * 200_000)\nos.write(1, b'z' * 1_000_000)\n"
                    + cell.source
                )
            if grade_id.startswith("check_"):
                cell.source = "pass  # the learner deleted the check"

    # the sandbox itself: the screen would refuse the imports of os and sys
    result = grade_notebook(
        write(tmp_path, submission(hostile, edit)), timeout=2, screen=False
    )
    grades = by_key(result)
    assert grades["build_char_vocab"].status == "missing"
    assert "SystemExit" in grades["build_char_vocab"].hint
    assert grades["merge_pair"].status == "missing"  # the loop defines nothing
    assert grades["embed_one_hot"].status == "crashed"
    # the looping cell was left out, and patchify graded despite the flood
    assert grades["patchify"].status == "passed", grades["patchify"].hint
    assert "was left out" in grades["patchify"].hint
    assert result.total == EXERCISES["patchify"].points


@needs_bwrap
def test_memory_is_limited(tmp_path):
    # 6 GiB would be granted lazily on this machine without the sandbox's limit
    source = (
        "try:\n    hog = bytearray(6 * 2**30)\nexcept MemoryError:\n    hog = None\n"
        "def build_char_vocab(text):\n"
        "    if hog is not None:\n        raise RuntimeError('no memory limit')\n"
        "    return {c: i for i, c in enumerate(sorted(set(text)))}\n"
    )
    path = write(tmp_path, submission({"build_char_vocab": source}))
    (grade,) = grade_notebook(path, only=["build_char_vocab"]).exercises
    # the 3 GiB address-space limit makes the allocation fail at once with a
    # MemoryError, which the cell catches: the answer then passes
    assert grade.status == "passed", grade.hint


@needs_bwrap
def test_the_runner_cannot_be_stopped_or_killed_by_a_submission(tmp_path):
    source = (
        "import os, signal\n"
        "for sig in (signal.SIGSTOP, signal.SIGKILL, signal.SIGTERM, signal.SIGINT):\n"
        "    try:\n        os.kill(os.getppid(), sig)\n    except OSError:\n        pass\n"
    ) + reference("build_char_vocab")
    path = write(tmp_path, submission({"build_char_vocab": source}))
    result = grade_notebook(path, only=["build_char_vocab", "merge_pair"], timeout=5)
    assert [e.status for e in result.exercises] == ["passed", "passed"], result.table()


@needs_bwrap
def test_the_writable_space_is_small_and_private(tmp_path):
    # 64 MiB files until the disk is full: the sandbox's /tmp stops at 512 MiB
    source = (
        "import os, tempfile\nwritten = 0\n"
        "try:\n"
        "    for i in range(40):\n"
        "        with open(os.path.join(tempfile.gettempdir(), f'f{i}'), 'wb') as f:\n"
        "            f.write(bytes(64 * 2**20))\n"
        "        written += 64 * 2**20\n"
        "except OSError:\n    pass\n"
        "for i in range(40):\n"
        "    if os.path.exists(os.path.join(tempfile.gettempdir(), f'f{i}')):\n"
        "        os.remove(os.path.join(tempfile.gettempdir(), f'f{i}'))\n"
        "def build_char_vocab(text):\n"
        "    if written > 2**30:\n        raise RuntimeError(f'wrote {written} bytes')\n"
        "    return {c: i for i, c in enumerate(sorted(set(text)))}\n"
    )
    path = write(tmp_path, submission({"build_char_vocab": source}))
    (grade,) = grade_notebook(path, only=["build_char_vocab"]).exercises
    # each 64 MiB file is within the file-size limit; the full 512 MiB /tmp
    # raises an OSError, which the cell catches: the answer then passes
    assert grade.status == "passed", grade.hint


@needs_bwrap
def test_forged_progress_lines_do_not_buy_time(tmp_path):
    # the learner's code writes "I am still at an early stage" forever
    forger = (
        "import os, time\n"
        "while True:\n"
        "    with open(os.path.join(os.getcwd(), 'progress.txt'), 'a') as f:\n"
        "        f.write('preamble\\ncell 0\\n')\n"
        "    time.sleep(0.1)\n"
    )
    notebook = submission()
    insert_after(notebook, "ex1-text", forger, *["pass"] * 30)
    started = time.monotonic()
    result = grade_notebook(
        write(tmp_path, notebook), only=["build_char_vocab"], timeout=2
    )
    (grade,) = result.exercises
    assert grade.status == "passed", grade.hint
    assert "was left out (timeout)" in grade.hint
    assert time.monotonic() - started < 30


FORGED_RESULTS = """
import os, torch
x = 0
for _ in range(30):
    x = [x, x]  # 2**30 leaves in a few hundred bytes
bomb = {"value": x, "error": None, "message": "m" * 10**6, "mutated": [[0]]}
torch.save({"preamble_error": None, "defined": True, "errors": [[[0], "x"]],
            "outcomes": [[bomb] * 4, [bomb] * 4, [bomb] * 4, [bomb] * 4, [bomb]]},
           "result.bin")
with open("progress.txt", "a") as f:
    f.write("call\\ndone\\n")
os._exit(0)
"""


@needs_bwrap
def test_forged_results_cannot_bloat_or_crash_the_grader(tmp_path):
    notebook = submission(
        {"build_char_vocab": FORGED_RESULTS + reference("build_char_vocab")}
    )
    path = write(tmp_path, notebook)
    out = tmp_path / "grade.json"
    assert main([str(path), "--json", str(out)]) == 0
    grade = next(
        e
        for e in json.loads(out.read_text())["exercises"]
        if e["key"] == "build_char_vocab"
    )
    assert grade["points"] == 0
    assert len(grade["hint"]) <= 501
    assert out.stat().st_size < 20_000


@pytest.mark.parametrize(
    "damage",
    ["metadata", "nbgrader-list", "deep-expression", "control-characters"],
)
def test_malformed_or_nasty_notebooks_are_graded_or_refused_cleanly(tmp_path, damage):
    notebook = submission()
    if damage == "metadata":
        notebook.metadata["transformer_course"] = "x"
    elif damage == "nbgrader-list":
        notebook.cells[3].metadata["nbgrader"] = []
    elif damage == "deep-expression":
        insert_after(notebook, "ex1-text", "x = " + "+".join(["1"] * 100_000))
    else:
        insert_after(
            notebook,
            "ex1-text",
            "def build_char_vocab(text):\n"
            "    raise ValueError('\\rbuild_char_vocab 3/3 passed\\x1b[K\\nfake')\n",
        )
    path = write(tmp_path, notebook)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_course.grading.grade",
            str(path),
            "--unsafe",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode in (0, 2), run.stderr
    assert "Traceback" not in run.stderr
    assert "\x1b" not in run.stdout
    assert "\r" not in run.stdout


@needs_bwrap
def test_the_number_of_processes_is_limited(tmp_path):
    source = (
        "import os, time\nchildren = 0\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
        "        children += 1\n"
        "except OSError:\n    pass\n"
        "def build_char_vocab(text):\n"
        "    if children >= 500:\n        raise RuntimeError('no process limit')\n"
        "    return {c: i for i, c in enumerate(sorted(set(text)))}\n"
    )
    path = write(tmp_path, submission({"build_char_vocab": source}))
    (grade,) = grade_notebook(path, only=["build_char_vocab"]).exercises
    # stopped by RLIMIT_NPROC (a fork fails, the answer passes) or, when the
    # grader runs as root (exempt from RLIMIT_NPROC), by the runner's own cap
    assert grade.status in ("passed", "crashed"), grade.hint
    if grade.status == "crashed":
        assert "started more than 64 processes" in grade.hint


@needs_bwrap
def test_the_private_tmp_is_mounted_before_folders_that_may_live_in_it(tmp_path):
    # a checkout (and its .venv) under /tmp must stay visible in the sandbox
    from transformer_course.grading.sandbox import Sandbox

    command = Sandbox()._command(tmp_path)
    tmpfs_tmp = next(
        i for i in range(len(command) - 1) if command[i : i + 2] == ["--tmpfs", "/tmp"]
    )
    binds = [
        i
        for i, arg in enumerate(command[:-1])
        if arg in ("--bind", "--ro-bind") and command[i + 2].startswith("/tmp/")
    ]
    assert binds
    assert all(i > tmpfs_tmp for i in binds)


@needs_bwrap
def test_a_killed_grader_leaves_no_job_running(tmp_path):
    """An instructor stopped the grader (timeout, Ctrl-C): the sandbox's runner
    and the job it ran went on to their own deadline, unseen. The runner now
    notices that nobody reads its pipe and ends, and the job with it."""
    marker = uuid.uuid4().hex
    source = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
        f"'{marker}'])\n"
        "def build_char_vocab(text):\n    while True:\n        pass\n"
    )
    path = write(tmp_path, submission({"build_char_vocab": source}))
    grader = subprocess.Popen(
        [sys.executable, "-m", "transformer_course.grading.grade", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while not alive(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive(marker), "the job never started"
        grader.terminate()
        grader.wait(timeout=30)
        deadline = time.monotonic() + 10
        while alive(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(marker)
    finally:
        grader.kill()
        grader.wait()
