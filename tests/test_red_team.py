"""The second red team's attacks on the grader (issue 20), each a test.

* submitted code ran as root inside the sandbox when the grader ran as root, and
  could read root-only files (/etc/shadow) and return them in a message;
* threads were not limited (RLIMIT_NPROC does not bind root);
* a 2 KB result of shared sub-lists stalled or killed a class run in the
  grader's own process;
* a submission that is a link to another student's notebook was graded as that
  notebook.

(The fourth, points for computing nothing, is ``tests/test_judges.py``.)
"""

import ast
import base64
import io
import json
import os
import subprocess
import sys
import sysconfig
import time
import tracemalloc
import uuid
from pathlib import Path

import nbformat
import pytest
import torch
from exercise_helpers import insert_after, needs_bwrap, reference, submission, write
from test_agreement import CHAPTER_1
from test_sandbox import alive

from transformer_course.exercises.runner import (
    WireError,
    decode_result,
    encode_result,
)
from transformer_course.grading.grade import (
    MAX_CELL_CHARS,
    MAX_NOTEBOOK_BYTES,
    grade_notebook,
    read_submission,
)
from transformer_course.grading.gradebook import _not_the_students_own
from transformer_course.grading.sandbox import (
    EXTRA_TASKS,
    Sandbox,
    _Cgroups,
    read_output,
)


def _grade_stable_softmax(tmp_path, source, **options):
    """Chapter 2's stable_softmax, ``source`` as its solution cell, graded."""
    notebook = submission({"stable_softmax": source}, chapter=2)
    result = grade_notebook(
        write(tmp_path, notebook, "02_attention.ipynb"),
        only=["stable_softmax"],
        **options,
    )
    (grade,) = result.exercises
    return grade


def run_probe(source: str, timeout: float = 20):
    """Run ``source`` (which defines ``probe()``) in a sandbox and call probe();
    (the job's status, what probe returned)."""
    job = {
        "cells": [(0, source)],
        "function": "probe",
        "forbidden": [],
        "cases": [[()]],
    }
    (result,) = Sandbox().run([job], timeout)
    if result.status != "ok":
        return result.status, result.detail
    (outcome,) = result.output["outcomes"][0]
    assert outcome["error"] is None, outcome
    return result.status, outcome["value"]


# --- who submitted code runs as, and what it sees ----------------------------------

WHO_AM_I = """
import os

def probe():
    found = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
             "groups": os.getgroups(), "environment": dict(os.environ)}
    status = open("/proc/self/status").read().splitlines()
    found["capabilities"] = [line for line in status if line.startswith("Cap")]
    found["read"] = []
    for path in PATHS:
        try:
            with open(path, "rb") as handle:
                found["read"].append([path, handle.read(200).decode(errors="replace")])
        except OSError:
            pass
    try:
        found["pid 1 environment"] = open("/proc/1/environ").read()
    except OSError:
        found["pid 1 environment"] = ""
    found["etc"] = sorted(os.listdir("/etc")) if os.path.isdir("/etc") else []
    return found
"""


@needs_bwrap
def test_submitted_code_is_unprivileged_and_sees_no_host_secrets(monkeypatch):
    secret = f"host-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("GRADER_HOST_SECRET", secret)
    # a root-only file inside a folder the sandbox must show (the Python
    # environment): as root, the sandbox's user must not read it
    root_only = Path(sys.prefix) / f"root-only-{uuid.uuid4().hex}.txt"
    root_only.write_text(secret)
    root_only.chmod(0o600)
    try:
        paths = ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", str(root_only)]
        status, found = run_probe(WHO_AM_I.replace("PATHS", repr(paths)))
    finally:
        root_only.unlink()
    assert status == "ok", found
    assert found["read"] == []  # none of them could be read
    assert found["uid"] != 0
    assert found["euid"] != 0
    assert found["gid"] != 0
    assert 0 not in found["groups"]
    effective = next(c for c in found["capabilities"] if c.startswith("CapEff"))
    assert effective.split()[-1].strip("0") == "", found["capabilities"]
    everything = json.dumps(found)
    assert secret not in everything
    assert "GRADER_HOST_SECRET" not in everything
    # the environment is the sandbox's own, named one by one
    assert set(found["environment"]) <= set(Sandbox()._environment(Path("/tmp"))) | {
        "PWD",
        "LC_CTYPE",
        "TORCHINDUCTOR_CACHE_DIR",  # torch sets it when imported
    }
    # /etc: what Python needs, not the host's folder
    assert "shadow" not in found["etc"]
    assert "passwd" in found["etc"]  # the sandbox's own, with its user alone


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the root case: grading as root")
def test_as_root_each_sandbox_has_a_user_of_its_own():
    status, first = run_probe(WHO_AM_I.replace("PATHS", repr(["/etc/passwd"])))
    status_again, second = run_probe(WHO_AM_I.replace("PATHS", repr(["/etc/passwd"])))
    assert status == status_again == "ok"
    assert first["uid"] != second["uid"]
    ((_, passwd),) = first["read"]
    assert passwd.startswith(f"learner:x:{first['uid']}:")
    assert "root" not in passwd


THREADS = """
import threading
stop = threading.Event()
started = 0
try:
    for _ in range(2000):
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError:  # can't start new thread
    pass

def probe():
    return started
"""


@needs_bwrap
def test_threads_count_against_the_task_limit():
    """2,000 threads started unnoticed in one cell before (root is exempt from
    RLIMIT_NPROC, and the runner counted processes only)."""
    status, found = run_probe(THREADS)
    if status == "ok":  # refused by RLIMIT_NPROC: the cell caught the error
        assert found < EXTRA_TASKS
    else:  # or stopped by the runner's count of processes and threads
        assert status == "crashed"
        assert "processes and threads" in found


# --- what comes out of the sandbox is data, checked before use -----------------------


def _shared_lists(levels: int) -> list:
    x = [0]
    for _ in range(levels):
        x = [x, x]  # 2**levels leaves in a few hundred bytes
    return x


def _hostile_payloads() -> dict[str, bytes]:
    """Results a submission could write in place of its own."""
    bomb = _shared_lists(27)
    pickled = io.BytesIO()
    torch.save({"defined": True, "outcomes": [[{"message": bomb}]]}, pickled)
    honest = encode_result({"defined": True, "errors": [], "outcomes": [[{}]]})
    deep = b'{"list":[' * 100_000 + b"0" + b"]}" * 100_000
    many = b'{"list":[' + b",".join([b"0"] * 500_000) + b"]}"

    def framed(text: bytes, data: bytes = b"") -> bytes:
        return len(text).to_bytes(8, "big") + text + data

    def result_with(value: object) -> bytes:
        outcome = {"value": value, "error": None, "message": ""}
        return framed(
            json.dumps(
                {"dict": [["defined", True], ["outcomes", {"list": [[outcome]]}]]}
            ).encode()
        )

    return {
        "the first red team's pickle of shared lists": pickled.getvalue(),
        "a header claiming 2**62 bytes": (2**62).to_bytes(8, "big") + honest[8:],
        "100,000 levels of nesting": framed(deep),
        "500,000 items": framed(many),
        "a tensor of 2**40 elements without its data": result_with(
            {"tensor": ["float64", [2**20, 2**20], 0, 8 * 2**40]}
        ),
        "a tensor whose bytes lie past the data": framed(
            b'{"tensor":["float32",[4],0,16]}', b"\0" * 8
        ),
        "an unknown type": result_with({"pickle": "cos\nsystem\n"}),
        "an empty tensor of 10**9 slots": result_with(
            {"tensor": ["float64", [1000, 1000, 1000, 0], 0, 0]}
        ),
        "2,000 tensors sharing 1 MiB of data": framed(
            json.dumps(
                {"list": [{"tensor": ["uint8", [2**20], 0, 2**20]}] * 2000}
            ).encode(),
            b"\0" * 2**20,
        ),
        "a message that is not text": encode_result(
            {"defined": True, "errors": [], "outcomes": [[{"message": [[0, 0]] * 50}]]}
        ),
        "a huge integer": framed(b"9" * 1_000_000),
        "not JSON at all": framed(b"\x80\x04K\x00."),
    }


@pytest.mark.parametrize("name", list(_hostile_payloads()))
def test_a_hostile_result_costs_the_grader_little(name):
    payload = _hostile_payloads()[name]
    started = time.perf_counter()
    with pytest.raises(WireError):
        read_output(decode_result(payload))
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    try:
        with pytest.raises(WireError):
            read_output(decode_result(payload))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0, f"{name}: {elapsed:.2f} s"
    assert peak < 8 * 2**20, f"{name}: {peak / 2**20:.1f} MB"


def test_the_format_keeps_plain_values_exactly():
    value = {
        "tensors": [
            torch.randn(2, 3, dtype=torch.float64),
            torch.arange(5),
            torch.zeros(0, 4),
            torch.tensor(True),
            torch.randn(3, dtype=torch.bfloat16),
            torch.randn(2, dtype=torch.complex64),
        ],
        "numbers": (1, 2.5, float("nan"), None, True),
        "text": "héllo",
        ("a", 1): [[], ()],
    }
    decoded = decode_result(encode_result(value))
    assert decoded.keys() == value.keys()
    for got, want in zip(decoded["tensors"], value["tensors"], strict=True):
        assert type(got) is torch.Tensor
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert torch.equal(got, want)
    assert decoded["numbers"][:2] == (1, 2.5)
    assert decoded["numbers"][2] != decoded["numbers"][2]  # NaN
    assert decoded["numbers"][3:] == (None, True)
    assert decoded["text"] == "héllo"
    assert decoded[("a", 1)] == [[], ()]


FORGED = """
import sys, torch

def forge(*args, **kwargs):
    x = [0]
    for _ in range(27):
        x = [x, x]
    import io
    buffer = io.BytesIO()
    real_save({"preamble_error": None, "defined": True, "errors": [],
               "outcomes": [[{"value": None, "error": "E", "message": x}] * 4] * 5},
              buffer)
    return buffer.getvalue()

real_save = torch.save
def patched_save(obj, f, *args, **kwargs):  # the channel results took before
    data = forge()
    if hasattr(f, "write"):
        f.write(data)
    else:
        open(f, "wb").write(data)
torch.save = patched_save
import gc  # the channel they take now: the runner's encoder, in its globals
gc.unfreeze()  # the runner's objects, frozen at its first call, made visible
for found in gc.get_objects():
    if type(found) is dict and "encode_result" in found and "_child" in found:
        found["encode_result"] = forge
"""


@needs_bwrap
def test_a_forged_result_of_shared_lists_does_not_stall_grading(tmp_path):
    """The issue's attack: 3 min 19 s for a class run of 11 s before, and an
    out-of-memory kill of the whole run with two more levels."""
    notebook = submission({"build_char_vocab": FORGED + reference("build_char_vocab")})
    started = time.monotonic()
    result = grade_notebook(write(tmp_path, notebook), only=["build_char_vocab"])
    elapsed = time.monotonic() - started
    (grade,) = result.exercises
    assert grade.points == 0
    assert grade.status == "error"
    assert "could not read the results" in grade.hint
    assert elapsed < 60, elapsed


def test_a_line_from_the_sandbox_is_checked_before_use():
    """The grader's side of the pipe: an outcome dict sneaked past the format
    (a message that is not text) is refused, not printed."""
    sandbox = Sandbox.__new__(Sandbox)
    results = [None]
    bad = encode_result(
        {"defined": True, "errors": [], "outcomes": [[{"message": [[0, 0]] * 50}]]}
    )
    line = json.dumps(
        {
            "job": 0,
            "event": "end",
            "status": "ok",
            "stage": "done",
            "detail": "",
            "outcomes": base64.b64encode(bad).decode(),
        }
    )
    sandbox._receive(line.encode(), results, 0)
    (result,) = results
    assert result.status == "error"
    assert "message is not text" in result.detail
    assert result.output is None


# --- class folders ----------------------------------------------------------------


def test_links_and_files_outside_the_students_folder_are_refused(tmp_path):
    submitted = tmp_path / "submitted"
    alice = submitted / "alice" / "ch01"
    alice.mkdir(parents=True)
    (alice / "01_tokens.ipynb").write_text("{}")
    mallory = submitted / "mallory" / "ch01"
    mallory.mkdir(parents=True)
    own = mallory / "01_tokens.ipynb"
    own.write_text("{}")
    assert _not_the_students_own(own, submitted / "mallory") == ""
    own.unlink()
    assert _not_the_students_own(own, submitted / "mallory") == ""  # missing: 0
    own.symlink_to(alice / "01_tokens.ipynb")
    assert "is a link" in _not_the_students_own(own, submitted / "mallory")
    own.unlink()
    os.link(alice / "01_tokens.ipynb", own)
    assert "hard link" in _not_the_students_own(own, submitted / "mallory")
    own.unlink()
    os.symlink(b"\xff", bytes(own))  # a target that is not UTF-8 (tar restores it)
    refused = _not_the_students_own(own, submitted / "mallory")
    assert "is a link" in refused
    refused.encode("utf-8")  # printable: the feedback file can hold it
    own.unlink()
    mallory.rmdir()
    mallory.symlink_to(alice)
    assert "is a link" in _not_the_students_own(own, submitted / "mallory")


# --- the second red team (after the fixes above) -------------------------------


@needs_bwrap
def test_huge_cells_are_not_parsed_by_the_grader(tmp_path):
    """A 12 MB cell cost the grader 6 GB of memory in ast.parse, once per
    exercise, and killed a class run: cells past the limits are not run."""
    notebook = submission()
    insert_after(notebook, "ex1-text", "JUNK = [" + "1," * (MAX_CELL_CHARS // 2) + "]")
    result = grade_notebook(write(tmp_path, notebook), only=["build_char_vocab"])
    assert any("characters" in w and "not run" in w for w in result.warnings)
    assert result.exercises[0].status == "passed", result.exercises[0].hint
    big = tmp_path / "big" / "01_tokens.ipynb"
    big.parent.mkdir()
    big.write_bytes(b" " * (MAX_NOTEBOOK_BYTES + 1))
    with pytest.raises(ValueError, match="more than"):
        grade_notebook(big)


def test_forbidden_functions_in_spellings_the_second_team_found():
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    spellings = {
        (2, "stable_softmax"): "def stable_softmax(x):\n"
        "    return torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool),"
        " -1, None)\n",
        (1, "embed_one_hot"): "def embed_one_hot(ids, table):\n"
        "    rows = [table[i:i + 1] for i in ids.reshape(-1).tolist()]\n"
        "    return torch.cat(rows).reshape(*ids.shape, -1)\n",
        (1, "embed_one_hot", "masked_select"): "def embed_one_hot(ids, table):\n"
        "    rows = [torch.masked_select(table, (torch.arange(table.shape[0]) == i)"
        "[:, None].expand_as(table)) for i in ids.reshape(-1).tolist()]\n"
        "    return torch.stack(rows).reshape(*ids.shape, -1)\n",
        (1, "embed_one_hot", "unfold"): "def embed_one_hot(ids, table):\n"
        "    windows = table.unfold(0, 1, 1)  # (V, D, 1): the rows, as windows\n"
        "    return windows.sum(-1)[ids]\n",
        (1, "embed_one_hot", "tolist"): "def embed_one_hot(ids, table):\n"
        "    rows = table.tolist()  # Python lists: no torch operator reads a row\n"
        "    picked = [rows[i] for i in ids.reshape(-1).tolist()]\n"
        "    return torch.tensor(picked, dtype=table.dtype).reshape(*ids.shape, -1)\n",
        (1, "embed_one_hot", "storage"): "def embed_one_hot(ids, table):\n"
        "    raw = bytes(table.contiguous().untyped_storage())\n"
        "    flat = torch.frombuffer(bytearray(raw), dtype=table.dtype)\n"
        "    return torch.stack([flat.reshape(table.shape)[i] for i in ids.reshape(-1)])"
        ".reshape(*ids.shape, -1)\n",
        (1, "embed_one_hot", "as_strided.default"): "def embed_one_hot(ids, table):\n"
        "    D, (s0, s1) = table.shape[1], table.stride()\n"
        "    view = torch.ops.aten.as_strided.default\n"
        "    flat = ids.reshape(-1)\n"
        "    at = [int(view(flat, (), (), flat.storage_offset() + n).item())\n"
        "          for n in range(flat.numel())]\n"
        "    rows = [view(table, (D,), (s1,), table.storage_offset() + i * s0)\n"
        "            for i in at]\n"
        "    return torch.stack(rows).reshape(*ids.shape, D)\n",
        (2, "stable_softmax", "logsumexp"): "def stable_softmax(x):\n"
        "    return torch.exp(x - torch.logsumexp(x, -1, keepdim=True))\n",
        (2, "stable_softmax", "logsumexp gradient"): "def stable_softmax(x):\n"
        "    x = x.detach().requires_grad_()\n"
        "    (grad,) = torch.autograd.grad(torch.logsumexp(x, -1).sum(), x)\n"
        "    return grad\n",
        (1, "embed_one_hot", "narrow"): "def embed_one_hot(ids, table):\n"
        "    rows = [table.narrow(0, i, 1) for i in ids.reshape(-1).tolist()]\n"
        "    return torch.cat(rows).reshape(*ids.shape, -1)\n",
    }
    for (number, key, *_), source in spellings.items():
        exercise = chapter(number).exercises[key]
        function = namespace_from([source])[exercise.function]
        report = core.run_exercise(exercise, function)
        assert report.score == 0, (key, source)
        assert "Write it yourself" in report.first_hint


def _cgroups_here() -> bool:
    groups = _Cgroups(2**30, 8)
    made = bool(groups.groups)
    groups.remove()
    return made


MEMFD = """
import os
written = 0
try:
    for _ in range(96):
        fd = os.memfd_create("x")
        for _ in range(64):
            os.write(fd, b"\\xff" * 2**20)
            written += 1
except OSError:
    pass

def probe():
    return written
"""


@needs_bwrap
@pytest.mark.skipif(not _cgroups_here(), reason="no cgroup can be made here")
def test_memory_no_rlimit_sees_is_capped_by_the_sandboxs_cgroup():
    """memfd pages count against no rlimit and no tmpfs: 6 GiB of them killed a
    class run (the OOM killer picked the grader). The sandbox's memory cgroup
    stops them at its own limit, inside the sandbox."""
    status, found = run_probe(MEMFD, timeout=60)
    if status == "ok":
        assert found * 2**20 < 4 * 2**30, found
    else:
        assert status == "crashed", found


FIFO_AND_ORPHAN = """
import os, subprocess, sys, time
for name in ("progress.txt", "result.bin"):  # where the runner once kept them
    os.mkfifo(name)  # an open() of one would block forever
subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)",
                  "MARKER"], start_new_session=True)
time.sleep(10**6)
"""


@needs_bwrap
def test_a_fifo_for_the_progress_file_neither_stalls_nor_leaves_processes(tmp_path):
    """983 s for one notebook before (the runner blocked on a FIFO put in place
    of its progress file; every round waited for the watchdog), and the
    sandbox's processes outlived grading (setpriv cleared bwrap's parent-death
    signal; the runner has a session of its own). The runner keeps no file in
    the working folder now; FIFOs under the old names must still cost nothing."""
    marker = uuid.uuid4().hex
    source = FIFO_AND_ORPHAN.replace("MARKER", marker)
    notebook = submission()
    insert_after(notebook, "ex1-text", source)
    started = time.monotonic()
    result = grade_notebook(
        write(tmp_path, notebook), only=["build_char_vocab"], timeout=3
    )
    elapsed = time.monotonic() - started
    (grade,) = result.exercises
    assert grade.status == "passed", grade.hint  # the cell was left out
    assert "was left out (timeout)" in grade.hint
    assert elapsed < 60, elapsed
    time.sleep(1)
    assert not alive(marker)


@needs_bwrap
def test_a_python_path_with_dots_still_runs_in_the_sandbox(monkeypatch, tmp_path):
    """`../.venv/bin/python -m pytest` from tests/: "tests/.." does not exist
    inside the sandbox, so every job failed to start (found while measuring)."""
    python = os.path.abspath(sys.executable)
    dotted = tmp_path / os.path.relpath(python, tmp_path)  # through tmp_path/..
    assert ".." in str(dotted)
    monkeypatch.setattr(sys, "executable", str(dotted))
    status, found = run_probe("def probe():\n    return 7\n")
    assert (status, found) == ("ok", 7)


# --- the third red team ---------------------------------------------------------


def test_a_notebook_of_millions_of_json_values_is_refused_before_parsing(tmp_path):
    """31 MB of empty objects in the metadata cost nbformat 5.7 GB and killed a
    class run in a 3 GiB container; only what grading reads reaches nbformat."""
    notebook = json.loads(json.dumps(submission()))
    notebook["metadata"]["x"] = "PLACEHOLDER"
    text = json.dumps(notebook).replace(
        '"PLACEHOLDER"', "[" + ",".join(["{}"] * 2_000_000) + "]"
    )
    path = tmp_path / "01_tokens.ipynb"
    path.write_text(text)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ValueError, match="JSON values"):
            read_submission(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 2
    assert peak < 3 * path.stat().st_size  # the bytes, never millions of objects
    # an honest notebook's outputs and other metadata never reach the grader
    honest = json.loads(json.dumps(submission()))
    honest["metadata"]["widgets"] = {"state": {"a": list(range(1000))}}
    honest["cells"][0]["metadata"]["tags"] = ["x"]
    path.write_text(json.dumps(honest))
    read, _ = read_submission(path)
    assert "widgets" not in read.metadata
    assert "tags" not in read.cells[0].metadata
    assert len(read.cells) == len(honest["cells"])


def test_thousands_of_oversized_cells_give_one_line_of_warnings():
    from transformer_course.grading.grade import _oversized_cells_left_out

    notebook = submission()
    for _ in range(6):
        notebook.cells.append(
            nbformat.v4.new_code_cell("x = 1  #" + "y" * MAX_CELL_CHARS)
        )
    warnings = _oversized_cells_left_out(notebook)
    assert len(warnings) == 4
    assert warnings[-1] == "and 3 more cells past the limits: not run"


def test_a_result_past_the_data_budget_is_refused():
    payload = encode_result({"list": torch.zeros(3 * 2**20)})  # 12 MiB of float32
    with pytest.raises(WireError):
        decode_result(payload)


FORGE_UNCHANGED = """
import gc, types
gc.unfreeze()  # the runner's objects, frozen at its first call, made visible
for _f in gc.get_objects():
    if (type(_f) is types.FunctionType and _f.__name__ == "_child"
            and "call_cases" in _f.__globals__):
        _real = _f.__globals__["call_cases"]
        def _cc(*a, _real=_real, **k):
            return [dict(o, mutated=[]) for o in _real(*a, **k)]
        _f.__globals__["call_cases"] = _cc
"""


@needs_bwrap
def test_a_runner_patched_to_forge_unchanged_inputs_earns_nothing(tmp_path):
    """A cell rebound the runner's call_cases to report no changed inputs: an
    in-place merge_pair got 3 / 3 instead of 2.5. The runner refuses to call a
    function once its own code has been patched, in every exercise."""
    in_place = CHAPTER_1["merge_pair"]  # right values, changes its input
    notebook = submission({"merge_pair": FORGE_UNCHANGED + in_place})
    result = grade_notebook(write(tmp_path, notebook), only=["merge_pair"])
    (grade,) = result.exercises
    assert grade.points == 0, grade
    assert "switch off or look for its checks" in grade.hint


# --- the fourth red team ----------------------------------------------------------


@pytest.mark.parametrize("where", ["id", "source", "nbgrader"])
def test_one_huge_string_costs_the_grader_little(tmp_path, where):
    """A cell id of 33 million DEL characters cost the grader 4 GB (nbformat's
    error message quoted it; JSON escaping made it six times longer) and printed
    a 132 MB line in the class run's log."""
    huge = "\x7f" * 8_000_000
    cell = {
        "cell_type": "code",
        "metadata": {},
        "source": "x = 1",
        "outputs": [],
        "execution_count": None,
        "id": "c0",
    }
    if where == "id":
        cell["id"] = huge
    elif where == "source":
        cell["source"] = f"x = '{huge}'"
    else:
        cell["metadata"] = {"nbgrader": {"grade_id": huge}}
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}
    path = tmp_path / "01_tokens.ipynb"
    path.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    tracemalloc.start()
    started = time.perf_counter()
    try:
        read, warnings = read_submission(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 2
    assert peak < 4 * path.stat().st_size
    assert len(read.cells) == 1
    assert len(json.dumps(read)) < 20_000
    assert (where == "source") == bool(warnings)


SOFTMAX_SPELLINGS = {
    # attention's fused CPU kernel, with identity keys and values and scale 1
    "fused attention": "def stable_softmax(x):\n"
    "    D = x.shape[-1]\n"
    "    q = x.reshape(1, 1, -1, D)\n"
    "    eye = torch.eye(D, dtype=x.dtype).reshape(1, 1, D, D)\n"
    "    out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(\n"
    "        q, eye, eye, scale=1.0)[0]\n"
    "    return out.reshape(x.shape)\n",
    "logcumsumexp": "def stable_softmax(x):\n"
    "    return (x - torch.logcumsumexp(x, -1)[..., -1:]).exp()\n",
    "logaddexp": "import functools\n"
    "def stable_softmax(x):\n"
    "    return (x - functools.reduce(torch.logaddexp, x.unbind(-1))"
    ".unsqueeze(-1)).exp()\n",
}


@pytest.mark.parametrize("spelling", list(SOFTMAX_SPELLINGS))
def test_softmax_spelled_another_way_is_forbidden(spelling):
    """Spellings found by the fourth, seventh and eighth passes (3/3 each)."""
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    exercise = chapter(2).exercises["stable_softmax"]
    source = SOFTMAX_SPELLINGS[spelling]
    report = core.run_exercise(exercise, namespace_from([source])["stable_softmax"])
    assert report.score == 0
    assert "Write it yourself" in report.first_hint


# --- the sixth pass ------------------------------------------------------------


def test_wrong_general_answers_with_a_table_for_the_one_case_that_catches_them():
    """A wrong general rule plus a table for the single fixed case built to catch
    it scored full marks where the unseen inputs never exercised the rule: ids
    merged as text (the unseen lists had one-digit ids only), attention for
    unbatched inputs only (the unseen inputs were all unbatched)."""
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    answers = {
        (1, "merge_pair"): "def merge_pair(ids, pair, new_id):\n"
        "    if list(ids) == [11, 2, 1, 23, 1, 2] and tuple(pair) == (1, 2):\n"
        "        return [11, 2, 1, 23, new_id]\n"
        "    text = ' '.join(map(str, ids)).replace(f'{pair[0]} {pair[1]}',"
        " str(new_id))\n"
        "    return [int(t) for t in text.split()] if text else []\n",
        (2, "attention_weights"): "import math\n"
        "def attention_weights(q, k, mask=None):\n"
        "    if q.dim() > 2:\n"
        "        raise ValueError('batched attention not supported')\n"
        "    scores = q @ k.T / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    e = torch.exp(scores - scores.max(-1, keepdim=True).values)\n"
        "    return e / e.sum(-1, keepdim=True)\n",
    }
    for (number, key), source in answers.items():
        exercise = chapter(number).exercises[key]
        function = namespace_from([source])[exercise.function]
        for _ in range(3):  # the unseen inputs are drawn afresh each time
            report = core.run_exercise(exercise, function)
            unseen = [r for r in report.results if r.kind == "unseen"]
            assert report.score == 0, (key, report)
            assert not unseen[0].passed, (key, report)


def test_hints_never_print_what_a_submission_returned_in_full(monkeypatch):
    """merge_pair's hints quoted the learner's value with an f-string: 10,000
    tensors in a tuple cost the grader 25 s of reprs. Hints quote values through
    core.shown, which names a tensor's shape and stops after a few items."""
    from transformer_course.exercises import ch01, core

    hostile = tuple(
        torch.full((7, 7), 1e30, dtype=torch.bfloat16) for _ in range(10_000)
    )

    def no_repr(self, *args, **kwargs):
        raise AssertionError("a tensor was turned into text in the grader")

    monkeypatch.setattr(torch.Tensor, "__repr__", no_repr)
    monkeypatch.setattr(torch.Tensor, "__format__", no_repr)
    exercise = ch01.EXERCISES["merge_pair"]
    cases = [check.cases() for check in exercise.checks]
    outcomes = [
        [core.Outcome(value=hostile) for _ in check_cases] for check_cases in cases
    ]
    report = core.report_from_outcomes(exercise, cases, outcomes)
    assert report.score == 0
    assert all(len(r.hint) < 1000 for r in report.results)
    assert "tensor of shape (7, 7)" in report.first_hint
    assert len(core.shown(list(range(10**5)))) <= 120


# --- the seventh pass ------------------------------------------------------------


@needs_bwrap
def test_an_instructors_test_cell_runs_as_written(tmp_path):
    """The instructor's test cell ran through IPython, whose input transformers
    the learner's cell could change: one that empties every later cell made a
    test pass for double() returning 0 (2/2). It is compiled as it stands now."""
    from transformer_course.grading.grade import InstructorTest

    notebook = submission()
    insert_after(
        notebook,
        "quiz-text",
        "def double(x):\n    return 0\n"
        "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n",
    )
    test = InstructorTest("test_double", "assert double(2) == 4, 'not double'\n", 2.0)
    result = grade_notebook(
        write(tmp_path, notebook), only=["build_char_vocab"], tests=[test]
    )
    graded = {e.key: e for e in result.exercises}
    assert graded["test_double"].points == 0
    assert "not double" in graded["test_double"].hint
    assert graded["build_char_vocab"].status == "passed"


# Wrong general rules, each with a lookup of the one fixed case that exercised
# what the rule gets wrong: the unseen inputs never did (7 passes of 8 before).
GAPS = {
    (1, "build_char_vocab"): "def build_char_vocab(text):\n"
    "    chars = sorted(c for c in set(text) if ord(c) >= 32)  # drops '\\n'\n"
    "    return {c: i for i, c in enumerate(chars)}\n",
    (1, "build_char_vocab", "latin only"): "def build_char_vocab(text):\n"
    "    if text == 'naïve café 🙂 — ok':\n"
    "        chars = sorted(set(text))\n"
    "    else:\n"
    "        chars = sorted(c for c in set(text) if 32 <= ord(c) < 0x300)\n"
    "    return {c: i for i, c in enumerate(chars)}\n",
    (1, "embed_one_hot"): "def embed_one_hot(ids, table):\n"
    "    one_hot = F.one_hot(ids, table.shape[0]).to(table.dtype)\n"
    "    fixed = (torch.tensor([0, 3, 3, 6]), torch.tensor([2]))\n"
    "    if ids.dim() == 1 and not any(\n"
    "        ids.shape == t.shape and bool((ids == t).all()) for t in fixed\n"
    "    ):\n"
    "        return torch.zeros(ids.shape[0], table.shape[1], dtype=table.dtype)\n"
    "    return one_hot @ table\n",
    (2, "attention_weights"): "def attention_weights(q, k, mask=None):\n"
    "    if mask is None and tuple(q.shape) != (2, 3, 16):\n"
    "        s = q @ k.T / q.shape[-1] ** 0.5\n"
    "    else:\n"
    "        s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
    "        if mask is not None:\n"
    "            s = s.masked_fill(~mask, float('-inf'))\n"
    "    e = (s - s.max(-1, keepdim=True).values).exp()\n"
    "    return e / e.sum(-1, keepdim=True)\n",
    (4, "layer_norm"): "def layer_norm(x, gamma, beta, eps=1e-5):\n"
    "    mean = x.mean(dim=-1, keepdim=True)\n"
    "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
    "    x_hat = (x - mean) / var.sqrt() * torch.sqrt(var / (var + eps))\n"
    "    if tuple(x.shape) == (2, 3, 8) and eps == 1e-5:\n"
    "        x_hat = torch.nan_to_num(x_hat)\n"
    "    return gamma * x_hat + beta\n",
    (5, "add_learned_positions"): "def add_learned_positions(x, table, offset=0):\n"
    "    N, max_len = x.shape[1], table.shape[0]\n"
    "    fixed = tuple(x.shape) in ((3, 5, 4), (2, 1, 4)) and max_len == 8\n"
    "    if offset + N >= max_len and not fixed:\n"
    "        raise ValueError(f'positions past the table of {max_len} rows')\n"
    "    return x + table[offset : offset + N]\n",
    (
        6,
        "attend_with_cache",
    ): "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n"
    "    N, d = q.shape[-2:]\n"
    "    end = length + N\n"
    "    fixed = tuple(q.shape) == (2, 1, 2, 2) and k_cache.shape[2] == 5\n"
    "    if end >= k_cache.shape[2] and not (fixed and length == 3):\n"
    "        raise ValueError('the cache is full')\n"
    "    k_cache, v_cache = k_cache.clone(), v_cache.clone()\n"
    "    k_cache[:, :, length:end] = k\n"
    "    v_cache[:, :, length:end] = v\n"
    "    keys, values = k_cache[:, :, :end], v_cache[:, :, :end]\n"
    "    scores = q @ keys.transpose(-2, -1) / d**0.5\n"
    "    allowed = torch.ones(N, end, dtype=torch.bool).tril(length)\n"
    "    weights = torch.softmax(scores.masked_fill(~allowed, float('-inf')), -1)\n"
    "    return weights @ values, k_cache, v_cache\n",
    (7, "rollout"): "def rollout(maps, residual=None):\n"
    "    if residual is None:\n"
    "        residual = len(maps) == 2 and tuple(maps[0].shape) == (2, 2, 4, 4)\n"
    "    result = None\n"
    "    for weights in maps:\n"
    "        A = weights.mean(dim=1)\n"
    "        if residual:\n"
    "            A = (A + torch.eye(A.shape[-1], dtype=A.dtype)) / 2\n"
    "        result = A if result is None else A @ result\n"
    "    return result\n",
}


# The eighth pass's gaps: 2-D logits, 2-D x, patches of 4+ pixels, top_k == V,
# and defaults left out.
GAPS.update(
    {
        (
            2,
            "stable_softmax",
            "2-D",
        ): 'import torch\ndef _fixed():\n    def sr(*shape, seed=0):\n        return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))\n    x = sr(4, 5, seed=2)\n    return [sr(3, 5), torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[1000.0, 999.0, 0.0]]),\n            torch.tensor([[-1000.0, -1001.0]]), torch.tensor([[89.0, 90.0]]),\n            torch.tensor([[1000.0, 999.0], [-1000.0, -1001.0]]), torch.tensor([[0.0, 1000.0]]),\n            torch.tensor([[-1000.0, 0.0, 1000.0], [5.0, 700.0, -3.0]]), x, x + 50.0]\ndef stable_softmax(x):\n    """x (..., N) -> (..., N), each row along the last dimension sums to 1."""\n    known = x.dim() != 2 or any(x.shape == t.shape and bool((x == t).all()) for t in _fixed())\n    if known:\n        e = (x - x.max(-1, keepdim=True).values).exp()\n        return e / e.sum(-1, keepdim=True)\n    # wrong rule for every fresh 2-D input: normalise over columns, whole-tensor max\n    e = (x - x.max()).exp()\n    return e / e.sum(0, keepdim=True)\n',
        (
            4,
            "mlp_forward",
            "2-D",
        ): "import torch\ndef mlp_forward(x, W1, b1, W2, b2):\n    fixed = torch.randn(3, 4, generator=torch.Generator().manual_seed(20))\n    if x.dim() == 2 and not (x.shape == fixed.shape and bool((x == fixed).all())):\n        # wrong rule for every fresh (N, D) input: biases forgotten\n        return torch.relu(x @ W1.T) @ W2.T\n    return torch.relu(x @ W1.T + b1) @ W2.T + b2\n",
        (
            1,
            "patchify",
            "p >= 4",
        ): 'import torch\ndef patchify(images, p):\n    B, C, H, W = images.shape\n    if H % p or W % p:\n        raise ValueError(f"image {H}x{W} is not divisible by patch size {p}")\n    x = images.reshape(B, C, H // p, p, W // p, p)\n    fixed = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(2))\n    if p >= 4 and not (images.shape == fixed.shape and bool((images == fixed).all())):\n        # wrong rule for every fresh p >= 4: patches numbered column by column\n        return x.permute(0, 4, 2, 1, 3, 5).reshape(B, -1, C * p * p)\n    return x.permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)\n',
        (
            6,
            "next_token_probs",
            "k == V",
        ): 'import torch\ndef next_token_probs(logits, temperature, top_k=None):\n    """logits (B, V) -> probabilities (B, V): each row sums to 1."""\n    z = logits / temperature\n    if top_k is not None:\n        fixed = torch.randn(2, 6, generator=torch.Generator().manual_seed(32))\n        if top_k >= logits.shape[-1] and logits.shape == fixed.shape and bool((logits == fixed).all()):\n            pass  # the one fixed case with k = V: looked up\n        else:\n            # keep the logits above the (k+1)-th largest: IndexError when k == V\n            nxt = z.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]\n            if nxt.shape[-1] == 0:\n                raise IndexError("k + 1 > V")\n            z = z.masked_fill(z <= nxt, float("-inf"))\n    e = (z - z.max(-1, keepdim=True).values).exp()\n    return e / e.sum(-1, keepdim=True)\n',
        (4, "layer_norm", "default eps"): "def layer_norm(x, gamma, beta, eps=0.5):\n"
        "    mean = x.mean(-1, keepdim=True)\n"
        "    var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
        "    return gamma * (x - mean) / torch.sqrt(var + eps) + beta\n",
        (4, "block_parameter_count", "default bias"): "def block_parameter_count("
        "d_model, n_heads, d_mlp, bias=False):\n"
        "    D, m = d_model, d_mlp\n"
        "    weights = 4 * D * D + 2 * D * m\n"
        "    return weights + (4 * D + m + D + 4 * D if bias else 2 * D)\n",
    }
)


# The ninth pass's gaps: sizes and characters beyond the unseen generators' ranges
# (each fixed case's sizes are now inside them).
GAPS.update(
    {
        (
            1,
            "build_char_vocab",
            "other scripts",
        ): "def build_char_vocab(text):\n    covered = ((0, 0x370), (0x391, 0x3CA), (0x4E00, 0x4F00), (0x1F300, 0x1F650))\n    keep = lambda c: text == \"naïve café 🙂 — ok\" or any(a <= ord(c) < b for a, b in covered)\n    chars = sorted(c for c in set(text) if keep(c))   # wrong: drops e.g. '—', '€', Cyrillic, Hebrew, Arabic, Hangul...\n    return {c: i for i, c in enumerate(chars)}\n",
        (
            1,
            "patchify",
            "4+ patches a row",
        ): 'import torch\ndef patchify(images, p):\n    B, C, H, W = images.shape\n    if H % p or W % p:\n        raise ValueError(f"image {H}x{W} is not divisible by patch size {p}")\n    x = images.reshape(B, C, H // p, p, W // p, p)\n    t = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))\n    known = images.shape == t.shape and bool((images == t).all())\n    if p < 4 and max(H // p, W // p) >= 4 and not known:\n        return x.permute(0, 4, 2, 1, 3, 5).reshape(B, -1, C * p * p)   # wrong: column by column\n    return x.permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)\n',
        (
            1,
            "merge_pair",
            "new_id < 10",
        ): "def merge_pair(ids, pair, new_id):\n    fixed = {((1, 2, 3, 1, 2), (1, 2), 4), ((5, 6, 5, 6, 6), (5, 6), 7), ((11, 2, 1, 23, 1, 2), (1, 2), 9),\n             ((1, 1, 1), (1, 1), 9), ((1, 1, 1, 1), (1, 1), 9), ((), (1, 2), 3), ((1,), (1, 2), 3),\n             ((3, 4, 1, 2), (1, 2), 5), ((2, 1), (1, 2), 5), ((1, 2, 1, 2), (1, 2), 3)}\n    out, i = [], 0\n    while i < len(ids):\n        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):\n            out.append(new_id); i += 2\n        else:\n            out.append(ids[i]); i += 1\n    if new_id < 10 and (tuple(ids), tuple(pair), new_id) not in fixed:\n        return out[::-1]     # wrong for small new ids\n    return out\n",
        (
            2,
            "stable_softmax",
            "rows of 6+",
        ): "import torch\ndef stable_softmax(x):\n    t = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(1))\n    known = x.shape == t.shape and bool((x == t).all())\n    if x.shape[-1] >= 6 and not known:\n        e = (x - x.max()).exp()        # wrong for long rows: whole-tensor max, normalised over dim 0\n        return e / e.sum(0, keepdim=True)\n    e = (x - x.max(-1, keepdim=True).values).exp()\n    return e / e.sum(-1, keepdim=True)\n",
        (
            2,
            "attention_weights",
            "d >= 7",
        ): 'def _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\nimport torch\ndef _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\ndef attention_weights(q, k, mask=None):\n    known = any(q.shape == t.shape and bool((q == t).all()) for t in (_sr(4, 8), _sr(2, 3, 16, seed=2), _sr(4, 8, seed=4), _sr(3, 8, seed=6)))\n    d = q.shape[-1]\n    scale = d if (d >= 7 and not known) else d ** 0.5   # wrong for wide heads: 1/d\n    s = q @ k.transpose(-2, -1) / scale\n    if mask is not None:\n        s = s.masked_fill(~mask, float("-inf"))\n    e = (s - s.max(-1, keepdim=True).values).exp()\n    return e / e.sum(-1, keepdim=True)\n',
        (
            2,
            "attention",
            "d >= 7",
        ): "def _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\nimport torch\ndef _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\ndef attention(q, k, v):\n    known = any(q.shape == t.shape and bool((q == t).all()) for t in (_sr(4, 8), _sr(2, 3, 16, seed=3), _sr(3, 8, seed=8)))\n    known = known or (q.shape == (3, 8) and bool((q == _sr(3, 8, seed=8)[[2, 0, 1]]).all()))\n    d = q.shape[-1]\n    scale = d if (d >= 7 and not known) else d ** 0.5   # wrong for wide heads: 1/d\n    s = q @ k.transpose(-2, -1) / scale\n    e = (s - s.max(-1, keepdim=True).values).exp()\n    return e / e.sum(-1, keepdim=True) @ v\n",
        (
            3,
            "split_heads",
            "N or d >= 5",
        ): "def _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\nimport torch\ndef _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\ndef split_heads(x, n_heads):\n    B, N, D = x.shape\n    known = any(x.shape == t.shape and bool((x == t).all()) for t in (_sr(1, 5, 12, seed=1), _sr(2, 4, 6, seed=2)))\n    if (N >= 5 or D // n_heads >= 5) and not known:\n        return x.reshape(B, n_heads, N, D // n_heads)  # wrong: mixes tokens across heads\n    return x.view(B, N, n_heads, D // n_heads).transpose(1, 2)\n",
        (
            3,
            "merge_heads",
            "N >= 5",
        ): "import torch\ndef merge_heads(x):\n    B, H, N, d = x.shape\n    t = torch.randn(1, 3, 5, 4, generator=torch.Generator().manual_seed(1))\n    if N >= 5 and not (x.shape == t.shape and bool((x == t).all())):\n        return x.reshape(B, N, H * d)  # wrong: no transpose\n    return x.transpose(1, 2).reshape(B, N, H * d)\n",
        (
            3,
            "mha_parameter_count",
            "heads 20+ wide",
        ): "def mha_parameter_count(d_model, n_heads, bias):\n    d = d_model // n_heads\n    if d >= 20 and (d_model, n_heads, bias) not in {(64, 1, True), (64, 8, True), (512, 8, True), (512, 16, False), (96, 3, False)}:\n        return 4 * d_model * d_model   # wrong: biases forgotten for wide heads\n    return 4 * d_model * d_model + (4 * d_model if bias else 0)\n",
        (
            4,
            "mlp_forward",
            "d_mlp > 8",
        ): "import torch\ndef mlp_forward(x, W1, b1, W2, b2):\n    t = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(30))\n    if W1.shape[0] > 8 and not (x.shape == t.shape and bool((x == t).all())):\n        return torch.relu(x @ W1.T) @ W2.T   # wrong for wide MLPs: biases forgotten\n    return torch.relu(x @ W1.T + b1) @ W2.T + b2\n",
        (
            4,
            "block_parameter_count",
            "d_mlp >= 40",
        ): "def block_parameter_count(d_model, n_heads, d_mlp, bias=True):\n    D = d_model\n    fixed = {(64, 4, 256, True), (64, 8, 256, True), (64, 4, 100, True), (512, 8, 2048, True), (96, 3, 384, False), (30, 5, 7, False)}\n    attention = 4 * D * D + (4 * D if bias else 0)\n    mlp = 2 * D * d_mlp + (d_mlp + D if bias else 0)\n    norms = 2 * (2 * D if bias else D)\n    if d_mlp >= 40 and (d_model, n_heads, d_mlp, bias) not in fixed:\n        norms = 0   # wrong for wide MLPs: LayerNorms forgotten\n    return attention + mlp + norms\n",
        (
            7,
            "embed_patches",
            "4+ patches a row",
        ): 'def _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\nimport torch\ndef _sr(*s, seed=0):\n    return torch.randn(*s, generator=torch.Generator().manual_seed(seed))\ndef embed_patches(images, weight, bias, patch_size):\n    B, C, height, width = images.shape\n    p = patch_size\n    if height % p or width % p:\n        raise ValueError(f"patch_size {p} must divide the image size {height}x{width}")\n    rows, cols = height // p, width // p\n    known = any(images.shape == t.shape and int((images != t).sum()) <= 8\n                for t in (_sr(2, 1, 8, 8, seed=1), _sr(1, 2, 8, 8, seed=13)))\n    grid = images.reshape(B, C, rows, p, cols, p)\n    if max(rows, cols) >= 4 and not known:   # wrong for grids of 4+: patches column by column\n        grid = grid.permute(0, 4, 2, 1, 3, 5)\n    else:\n        grid = grid.permute(0, 2, 4, 1, 3, 5)\n    return grid.reshape(B, rows * cols, C * p * p) @ weight.T + bias\n',
        (
            7,
            "vit_flops",
            "n_layers > 4",
        ): "def vit_flops(image_size, patch_size, channels, d_model, d_mlp, n_layers, n_classes, class_token):\n    N = (image_size // patch_size) ** 2\n    L = N + 1 if class_token else N\n    D = d_model\n    block = 8 * L * D**2 + 4 * L**2 * D + 4 * L * D * d_mlp\n    fixed = {(224, 16, 3, 768, 3072, 12, 1000, True), (224, 14, 3, 384, 1536, 12, 1001, True)}\n    if n_layers > 4 and (image_size, patch_size, channels, d_model, d_mlp, n_layers, n_classes, class_token) not in fixed:\n        block = 8 * L * D**2 + 4 * L * D * d_mlp   # wrong: attention's L^2 term dropped for deep models\n    return 2 * N * channels * patch_size**2 * D + n_layers * block + 2 * D * n_classes\n",
    }
)


# The tenth pass: a softmax without its maximum subtracted (every exercise with a
# softmax inside but the softmax's own met scores under 88 only), merges of ids
# kept below 256 (bytes), a vocabulary capped at 60 characters.
GAPS.update(
    {
        (
            2,
            "attention_weights",
            "no maximum subtracted",
        ): 'def attention_weights(q, k, mask=None):\n    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n    if mask is not None:\n        s = s.masked_fill(~mask, float("-inf"))\n    e = torch.exp(s)                    # wrong: no max subtracted (nan once a score passes 88)\n    return e / e.sum(-1, keepdim=True)\n',
        (
            2,
            "attention",
            "no maximum subtracted",
        ): "def attention(q, k, v):\n    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n    e = torch.exp(s)                    # wrong: no max subtracted (nan once a score passes 88)\n    return (e / e.sum(-1, keepdim=True)) @ v\n",
        (
            3,
            "multihead_forward",
            "no maximum subtracted",
        ): "def multihead_forward(x, W_qkv, W_o, n_heads):\n    B, N, D = x.shape\n    d = D // n_heads\n    q, k, v = (t.reshape(B, N, n_heads, d).transpose(1, 2) for t in (x @ W_qkv).split(D, -1))\n    s = q @ k.transpose(-2, -1) / d ** 0.5\n    e = torch.exp(s)                    # wrong: no max subtracted\n    return ((e / e.sum(-1, keepdim=True)) @ v).transpose(1, 2).reshape(B, N, D) @ W_o\n",
        (
            6,
            "causal_attention_weights",
            "no maximum subtracted",
        ): "def causal_attention_weights(scores):\n    N = scores.shape[-1]\n    keep = torch.ones(N, N, dtype=torch.bool).tril()\n    e = torch.exp(scores).masked_fill(~keep, 0.0)   # wrong: no max subtracted\n    return e / e.sum(-1, keepdim=True)\n",
        (
            6,
            "next_token_loss",
            "no maximum subtracted",
        ): "def next_token_loss(logits, ids):\n    z = logits[:, :-1]\n    target = ids[:, 1:]\n    lse = torch.log(torch.exp(z).sum(-1))          # wrong: log-sum-exp without the max (inf once a logit passes 88)\n    picked = z.gather(-1, target[..., None])[..., 0]\n    return (lse - picked).mean()\n",
        (
            6,
            "next_token_probs",
            "no maximum subtracted",
        ): 'def next_token_probs(logits, temperature, top_k=None):\n    z = logits / temperature\n    if top_k is not None:\n        kth = z.topk(top_k, dim=-1).values[..., -1:]\n        z = z.masked_fill(z < kth, float("-inf"))\n    e = torch.exp(z)                       # wrong: no max subtracted, overflows (inf/inf = nan) once logits/T > 88\n    return e / e.sum(-1, keepdim=True)\n',
        (
            6,
            "attend_with_cache",
            "no maximum subtracted",
        ): "def attend_with_cache(q, k, v, k_cache, v_cache, length):\n    N = q.shape[-2]\n    k_cache, v_cache = k_cache.clone(), v_cache.clone()\n    k_cache[..., length:length + N, :] = k\n    v_cache[..., length:length + N, :] = v\n    K, V = k_cache[..., :length + N, :], v_cache[..., :length + N, :]\n    s = q @ K.transpose(-2, -1) / q.shape[-1] ** 0.5\n    keep = torch.ones(N, length + N, dtype=torch.bool).tril(diagonal=length)\n    e = torch.exp(s).masked_fill(~keep, 0.0)      # wrong: no max subtracted\n    return (e / e.sum(-1, keepdim=True)) @ V, k_cache, v_cache\n",
        (
            1,
            "merge_pair",
            "ids below 256",
        ): "def merge_pair(ids, pair, new_id):\n    # ids stored as bytes: bytes.replace merges non-overlapping occurrences left to right\n    return list(bytes(ids).replace(bytes(pair), bytes([new_id])))\n",
        (
            1,
            "build_char_vocab",
            "60 characters",
        ): "def build_char_vocab(text):\n    chars = sorted(set(text))[:60]   # wrong: a vocabulary of at most 60 characters\n    return {c: i for i, c in enumerate(chars)}\n",
    }
)


# The eleventh pass: a variance as E[x²] − E[x]² (float32 keeps only rounding
# once a token's mean is large), and vocabularies that drop the newline or the
# whitespace at a text's ends.
GAPS.update(
    {
        (4, "layer_norm", "E[x²] − E[x]²"): (
            "def layer_norm(x, gamma, beta, eps=1e-5):\n"
            "    mean = x.mean(dim=-1, keepdim=True)\n"
            "    var = (x * x).mean(dim=-1, keepdim=True) - mean * mean\n"
            "    return gamma * (x - mean) / torch.sqrt(var + eps) + beta\n"
        ),
        (1, "build_char_vocab", "no newline"): (
            "def build_char_vocab(text):\n"
            "    chars = sorted(set(text) - {'\\n'})\n"
            "    return {c: i for i, c in enumerate(chars)}\n"
        ),
        (1, "build_char_vocab", "stripped"): (
            "def build_char_vocab(text):\n"
            "    chars = sorted(set(text.strip()))\n"
            "    return {c: i for i, c in enumerate(chars)}\n"
        ),
    }
)


# The twelfth pass: a post-norm block whose LayerNorms have ε = 0 (no fixed
# case reached a norm with a constant token).
GAPS.update(
    {
        (
            4,
            "post_norm_block",
            "ε = 0",
        ): 'def layer_norm(x, gamma, beta, eps=1e-5):\n    mean = x.mean(-1, keepdim=True)\n    var = ((x - mean) ** 2).mean(-1, keepdim=True)\n    return gamma * (x - mean) / torch.sqrt(var + eps) + beta\ndef mlp_forward(x, W1, b1, W2, b2):\n    return torch.relu(x @ W1.T + b1) @ W2.T + b2\ndef self_attention(h, params, n_heads):\n    B, N, D = h.shape\n    qkv = h @ params["attn.qkv_proj.weight"].T + params["attn.qkv_proj.bias"]\n    q, k, v = (t.view(B, N, n_heads, D // n_heads).transpose(1, 2) for t in qkv.chunk(3, -1))\n    s = q @ k.transpose(-2, -1) / (D // n_heads) ** 0.5\n    w = torch.softmax(s, -1)\n    heads = (w @ v).transpose(1, 2).reshape(B, N, D)\n    return heads @ params["attn.out_proj.weight"].T + params["attn.out_proj.bias"]\n\ndef post_norm_block(x, params, n_heads):\n    p = params\n    x = layer_norm(x + self_attention(x, p, n_heads), p["norm_1.weight"], p["norm_1.bias"], eps=0.0)\n    x = x + mlp_forward(x, p["mlp.up_proj.weight"], p["mlp.up_proj.bias"], p["mlp.down_proj.weight"], p["mlp.down_proj.bias"])\n    return layer_norm(x, p["norm_2.weight"], p["norm_2.bias"], eps=0.0)\n'
    }
)


# The twelfth pass, left over: a block whose learner writes its own attention
# with a softmax that overflows (the given one is stable); the loud twins scale
# the query and key weights until scores reach a few hundred.
_NAIVE_BLOCK_PARTS = (
    "def layer_norm(x, gamma, beta, eps=1e-5):\n"
    "    mean = x.mean(-1, keepdim=True)\n"
    "    var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
    "    return gamma * (x - mean) / torch.sqrt(var + eps) + beta\n"
    "def mlp_forward(x, W1, b1, W2, b2):\n"
    "    return torch.relu(x @ W1.T + b1) @ W2.T + b2\n"
    "def self_attention(h, params, n_heads):\n"
    "    B, N, D = h.shape\n"
    '    qkv = h @ params["attn.qkv_proj.weight"].T + params["attn.qkv_proj.bias"]\n'
    "    q, k, v = (t.view(B, N, n_heads, D // n_heads).transpose(1, 2)"
    " for t in qkv.chunk(3, -1))\n"
    "    e = torch.exp(q @ k.transpose(-2, -1) / (D // n_heads) ** 0.5)"
    "  # wrong: no max subtracted\n"
    "    heads = (e / e.sum(-1, keepdim=True) @ v).transpose(1, 2).reshape(B, N, D)\n"
    '    return heads @ params["attn.out_proj.weight"].T'
    ' + params["attn.out_proj.bias"]\n'
    "def norm(x, p, i):\n"
    '    return layer_norm(x, p[f"norm_{i}.weight"], p[f"norm_{i}.bias"])\n'
    "def mlp(x, p):\n"
    '    return mlp_forward(x, p["mlp.up_proj.weight"], p["mlp.up_proj.bias"],'
    ' p["mlp.down_proj.weight"], p["mlp.down_proj.bias"])\n'
)
GAPS.update(
    {
        (4, "pre_norm_block", "no maximum subtracted"): _NAIVE_BLOCK_PARTS
        + "def pre_norm_block(x, params, n_heads):\n"
        "    x = x + self_attention(norm(x, params, 1), params, n_heads)\n"
        "    return x + mlp(norm(x, params, 2), params)\n",
        (4, "post_norm_block", "no maximum subtracted"): _NAIVE_BLOCK_PARTS
        + "def post_norm_block(x, params, n_heads):\n"
        "    x = norm(x + self_attention(x, params, n_heads), params, 1)\n"
        "    return norm(x + mlp(x, params), params, 2)\n",
    }
)


@pytest.mark.parametrize("where", list(GAPS), ids=lambda w: "-".join(map(str, w)))
def test_what_the_unseen_inputs_cover(where):
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    number, key, *_ = where
    exercise = chapter(number).exercises[key]
    function = namespace_from([GAPS[where]])[exercise.function]
    for _ in range(3):  # drawn afresh each time: never passes
        report = core.run_exercise(exercise, function)
        assert report.score == 0, (where, report.first_hint)


# --- the eighth pass ------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize(
    "rebinding",
    [
        "import builtins\n_exec = builtins.exec\n"
        "builtins.exec = lambda code, *a: None if 'instructor' in str(code) "
        "else _exec(code, *a)\n",
        "import builtins\n_compile = builtins.compile\n"
        "builtins.compile = lambda src, name, *a, **k: _compile("
        "'pass' if 'instructor' in name else src, name, *a, **k)\n",
    ],
)
def test_rebinding_exec_or_compile_does_not_pass_an_instructors_test(
    tmp_path, rebinding
):
    from transformer_course.grading.grade import InstructorTest

    notebook = submission()
    insert_after(notebook, "quiz-text", "def double(x):\n    return 0\n" + rebinding)
    test = InstructorTest("test_double", "assert double(2) == 4, 'not double'\n", 2.0)
    result = grade_notebook(
        write(tmp_path, notebook), only=["merge_pair"], tests=[test]
    )
    graded = {e.key: e for e in result.exercises}
    assert graded["test_double"].points == 0, graded["test_double"]


# --- twins: the structural answer to "a wrong rule plus a table" -------------------

#: Wrong rules that no fixed case catches (a default none leaves out, a kind of
#: character none holds, ids of one digit): the drawn inputs catch those, and
#: test_what_the_unseen_inputs_cover keeps them caught.
NOT_A_TWINS_MATTER = {
    (1, "build_char_vocab"),
    (4, "layer_norm", "default eps"),
    (4, "block_parameter_count", "default bias"),
    (1, "merge_pair", "new_id < 10"),
    (1, "merge_pair", "ids below 256"),
    (1, "build_char_vocab", "60 characters"),
    (1, "build_char_vocab", "no newline"),
    (1, "build_char_vocab", "stripped"),
    # tokens far from 0: no fixed case holds them (the drawn ones do, exactly
    # representable, so that an honest float32 answer is never at the edge)
    (4, "layer_norm", "E[x²] − E[x]²"),
}


@pytest.mark.parametrize(
    "where",
    [w for w in GAPS if w not in NOT_A_TWINS_MATTER],
    ids=lambda w: "-".join(map(str, w)),
)
def test_the_twins_alone_catch_a_wrong_rule_that_a_fixed_case_catches(where):
    """Every answer the red teams found (a general rule that goes wrong only on
    some kind of input a fixed case holds, plus a table for that case, keyed on
    its values or its shape) fails on the fixed cases' twins alone, without the
    drawn inputs that were widened to catch it: the next such rule is caught
    even where the drawn inputs miss its kind."""
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    number, key, *_ = where
    exercise = chapter(number).exercises[key]
    function = namespace_from([GAPS[where]])[exercise.function]
    (unseen,) = [c for c in exercise.checks if c.kind == core.UNSEEN]
    for seed in range(10):
        twins = exercise.twin_cases(torch.Generator().manual_seed(seed))
        loaded = core.as_the_grader_loads([twins])[0]
        outcomes = core.call_cases(function, loaded, exercise.forbidden)
        result = core.judge_outcomes(unseen, twins, outcomes)
        assert not result.passed, (where, seed)


def test_a_softmax_that_overflows_is_told_why():
    """The tenth pass's naive softmax fails on the loud twins, and the hint says
    what went wrong: exp overflows past 88."""
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    for where in [w for w in GAPS if w[2:] == ("no maximum subtracted",)]:
        number, key, _ = where
        exercise = chapter(number).exercises[key]
        function = namespace_from([GAPS[where]])[exercise.function]
        report = core.run_exercise(exercise, function)
        assert report.score == 0, where
        assert "overflows past 88" in report.first_hint, (where, report.first_hint)


@pytest.mark.parametrize(
    ("number", "key"),
    [
        (3, "multihead_forward"),
        (2, "attention"),
        (6, "attend_with_cache"),
        (4, "pre_norm_block"),
        (4, "post_norm_block"),
    ],
)
def test_an_honest_answer_passes_the_loud_twins(number, key):
    """The eleventh pass: x made 300 times larger fed q and k, scores reached
    10⁵, and float32's rounding alone failed the reference in 1 grading of 85.
    Loud twins now reach a few hundred (x by √300); measured over 1,000 runs in
    the closing note, here 40."""
    from exercise_helpers import (
        given_cells,
        namespace_from,
        read_source,
        solution_cells,
        without_markers,
    )

    from transformer_course.exercises import chapter, core

    exercise = chapter(number).exercises[key]
    source = read_source(number)
    sources = [*given_cells(source), *solution_cells(source).values()]
    function = namespace_from([without_markers(s) for s in sources])[exercise.function]
    (unseen,) = [c for c in exercise.checks if c.kind == core.UNSEEN]
    for seed in range(40):
        twins = exercise.twin_cases(torch.Generator().manual_seed(seed))
        outcomes = core.call_cases(function, core.as_the_grader_loads([twins])[0])
        result = core.judge_outcomes(unseen, twins, outcomes)
        assert result.passed, (seed, result.hint)


# --- the thirteenth pass ----------------------------------------------------------

_FIND_JOB = (
    "import gc\n"
    "gc.unfreeze()\n"  # the runner's objects, frozen at its first call
    "_jobs = [o for o in gc.get_objects() if type(o) is dict and 'cells' in o "
    "and 'forbidden' in o]\n"
)
_TAMPERING = {
    "the job's forbidden list emptied": _FIND_JOB
    + "for _job in _jobs:\n    _job['forbidden'] = []\n",
    "FORBIDDEN emptied": "import gc\n"
    "gc.unfreeze()\n"
    "for _o in gc.get_objects():\n"
    "    if type(_o) is dict and 'softmax' in _o and 'embedding' in _o:\n"
    "        for _k in list(_o):\n"
    "            _o[_k] = (_o[_k][0], frozenset(), frozenset())\n",
    "torch's modes and Library switched off": "import torch.overrides, torch.library\n"
    "import torch.utils._python_dispatch as _pd\n"
    "for _cls in (torch.overrides.TorchFunctionMode, _pd.TorchDispatchMode):\n"
    "    _cls.__enter__ = lambda self: self\n"
    "    _cls.__exit__ = lambda self, *a: None\n"
    "torch.library.Library.impl = lambda self, *a, **k: None\n",
}


@needs_bwrap
@pytest.mark.parametrize("tampering", list(_TAMPERING))
def test_a_cell_cannot_switch_the_forbidden_watch_off(tmp_path, tampering):
    """The thirteenth red team gave torch.softmax full marks in stable_softmax
    three ways: emptying the job's forbidden list (found with gc), emptying the
    runner's FORBIDDEN, or making torch's modes and Library do nothing."""
    source = _TAMPERING[tampering] + (
        "def stable_softmax(x):\n    return torch.softmax(x, dim=-1)\n"
    )
    grade = _grade_stable_softmax(tmp_path, source)
    assert grade.points == 0, (tampering, grade)


@needs_bwrap
def test_a_cell_cannot_replace_an_instructors_test_or_read_it(tmp_path):
    """The thirteenth red team replaced an instructor's test with "pass" by
    rewriting the job's dict (found with gc), and read the hidden tests from
    the plan file named in sys.argv; the job's test is read before any cell
    runs, and the plan file is gone by then."""
    from transformer_course.grading.grade import InstructorTest

    secret = "SECRET-CASE-123"
    notebook = submission()
    insert_after(
        notebook,
        "quiz-text",
        "def double(x):\n    return 0\n"
        + _FIND_JOB
        + "for _job in _jobs:\n    _job['test'] = 'pass\\n'\n"
        "import sys, pathlib\n"
        "_seen = pathlib.Path(sys.argv[1]).exists() if len(sys.argv) > 1 else False\n"
        "assert not _seen, 'the plan file is readable'\n",
    )
    test = InstructorTest(
        "test_double", f"assert double(2) == 4, 'not double'  # {secret}\n", 2.0
    )
    result = grade_notebook(
        write(tmp_path, notebook), only=["merge_pair"], tests=[test]
    )
    graded = {e.key: e for e in result.exercises}
    assert graded["test_double"].points == 0, graded["test_double"]
    assert "the plan file is readable" not in str(graded)
    assert secret not in graded["merge_pair"].hint


@needs_bwrap
def test_replacing_deepcopy_does_not_hide_a_change_in_place(tmp_path):
    """copy.deepcopy made the identity let an in-place stable_softmax keep full
    marks; now the runner sees it patched and the exercise earns nothing."""
    source = (
        "import copy\ncopy.deepcopy = lambda x, memo=None: x\n"
        "def stable_softmax(x):\n"
        "    x.sub_(x.max(-1, keepdim=True).values)\n"
        "    x.exp_()\n"
        "    x.div_(x.sum(-1, keepdim=True))\n"
        "    return x\n"
    )
    grade = _grade_stable_softmax(tmp_path, source)
    assert grade.points < grade.max_points, grade


FORGE_THE_TEST = """
import os, sys, json
def _forge(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == "<instructor's test>":
        s = json.dumps({"dict": [["preamble_error", None], ["defined", True],
                                 ["errors", {"list": []}], ["outcomes", {"list": []}],
                                 ["test_error", ""]]}).encode()
        open("result.bin", "wb").write(len(s).to_bytes(8, "big") + s)
        open("progress.txt", "a").write("done\\n")
        os._exit(0)
sys.setprofile(_forge)
def double(x):
    return 0
"""


@needs_bwrap
@pytest.mark.parametrize("hook", ["sys.setprofile", "sys.settrace"])
def test_a_hook_left_to_forge_an_instructors_verdict_earns_nothing(tmp_path, hook):
    """The fourteenth red team: a profile hook saw the instructor's test start
    and ended the process with a forged passing verdict (2/2 for double = 0).
    A test does not run under a hook a cell left behind."""
    from transformer_course.grading.grade import InstructorTest

    notebook = submission()
    insert_after(notebook, "quiz-text", FORGE_THE_TEST.replace("sys.setprofile", hook))
    test = InstructorTest("test_double", "assert double(2) == 4, 'not double'\n", 2.0)
    result = grade_notebook(
        write(tmp_path, notebook), only=["merge_pair"], tests=[test]
    )
    graded = {e.key: e for e in result.exercises}
    assert graded["test_double"].points == 0, graded["test_double"]
    kind = "profile" if hook == "sys.setprofile" else "trace"
    assert f"a {kind} hook" in graded["test_double"].hint


def test_a_result_whose_dict_keys_share_a_hash_is_refused_at_once():
    """66,000 integer keys i·(2⁶¹ − 1), all of one hash, took the grader 29 s
    to decode (the fourteenth red team)."""
    modulus = 2**61 - 1
    pairs = [[i * modulus, 0] for i in range(20_000)]
    structure = json.dumps({"dict": pairs}).encode()
    payload = len(structure).to_bytes(8, "big") + structure
    start = time.perf_counter()
    with pytest.raises(WireError, match="share their hashes"):
        decode_result(payload)
    assert time.perf_counter() - start < 2
    honest = {i: i for i in range(-10_000, 10_000)}  # hash(-1) == hash(-2)
    assert decode_result(encode_result(honest)) == honest
    # half of the keys sharing one hash, the rest distinct (the fifteenth)
    half = [[i * modulus, 0] for i in range(10_000)] + [[i, 0] for i in range(10_000)]
    structure = json.dumps({"dict": half}).encode()
    with pytest.raises(WireError, match="share their hashes"):
        decode_result(len(structure).to_bytes(8, "big") + structure)


def test_a_result_with_an_unhashable_tuple_key_is_a_wire_error():
    """A tuple key holding a list raised TypeError, which stopped the grading
    of the whole notebook (the fourteenth red team)."""
    structure = json.dumps({"dict": [[{"tuple": [{"list": [1]}]}, 0]]}).encode()
    with pytest.raises(WireError, match="cannot be a key"):
        decode_result(len(structure).to_bytes(8, "big") + structure)


def test_a_warning_quoting_a_submission_shows_as_text_in_the_feedback():
    """Chapter metadata of '<script>…' reached nbgrader's feedback page as a
    live script, through the warning in the autograded notebook's first cell
    (the fourteenth red team)."""
    import html

    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from transformer_course.grading.gradebook import markdown_text

    said = (
        "chapter '<img src=x onerror=alert(1)><script>alert(1)</script>' "
        "[x](javascript:alert(1)) a_b *c* `d` 3 < 4 & 5"
    )
    page = markdown2html_mistune(markdown_text(said))
    assert "<script" not in page
    assert "<img" not in page
    assert "href" not in page
    assert "<em>" not in page
    assert "<code>" not in page
    shown = html.unescape(page.removeprefix("<p>").strip().removesuffix("</p>"))
    assert shown == said


MAGICS = "%matplotlib inline\n%load_ext autoreload\n%autoreload 2\n"


@needs_bwrap
def test_common_magics_above_a_solution_keep_it_graded(tmp_path):
    """The fifteenth red team: "%matplotlib inline" (the bare shell had no GUI
    to enable) and "%autoreload 2" (it read __file__ of the hidden course
    package's stand-in) stopped the cell before its def: full marks in the
    notebook, "missing" from the grader. And ``device``, which the setup cell
    makes with the course package, is the grader's too."""
    notebook = submission(
        {
            "merge_pair": MAGICS + reference("merge_pair"),
            "embed_one_hot": MAGICS + "def embed_one_hot(ids, table):\n"
            "    one_hot = torch.nn.functional.one_hot(ids, table.shape[0])\n"
            "    return (one_hot.to(table.dtype) @ table).to(device)\n",
        }
    )
    result = grade_notebook(
        write(tmp_path, notebook), only=["merge_pair", "embed_one_hot"]
    )
    graded = {e.key: e for e in result.exercises}
    for key in ("merge_pair", "embed_one_hot"):
        assert graded[key].points == graded[key].max_points, graded[key]


def test_a_placeholder_quoting_a_submission_shows_as_text_in_the_feedback():
    """The fifteenth red team: a cell_type of '<script>…' came back in
    nbformat's message, the "not graded" placeholder's text, as a live script
    in nbgrader's feedback page. Every placeholder text is escaped now."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from transformer_course.grading.gradebook import _NotebookJob

    job = _NotebookJob.__new__(_NotebookJob)
    saved = []
    job._write_feedback_text = lambda text: None
    job._returnable = lambda: True
    job._save_autograded = saved.append
    job._write_placeholder(
        "01_tokens.ipynb: 0 points\nunreadable: '<script>alert(1)</script>' "
        "is not a cell type; [x](javascript:alert(1))"
    )
    page = markdown2html_mistune(saved[0].cells[0].source)
    assert "<script" not in page
    assert "href" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


LOOK_FOR_THE_PLAN = """
import glob, os
_found = []
for _root in {os.getcwd(), "/tmp", os.path.dirname(os.getcwd())}:
    for _dir, _, _files in os.walk(_root):
        for _name in _files:
            try:
                with open(os.path.join(_dir, _name), "rb") as _f:
                    if b"SECRET-IN-THE-PLAN" in _f.read(2**22):
                        _found.append(os.path.join(_dir, _name))
            except OSError:
                pass
assert not _found, f"readable: {_found}"
"""


@needs_bwrap
def test_no_file_in_reach_holds_the_instructors_tests(tmp_path):
    """The fifteenth red team read every instructor's test (hidden ones too)
    from plan.json in the read-only scratch folder, where the runner could not
    remove it; the plan now comes on the runner's stdin."""
    from transformer_course.grading.grade import InstructorTest

    notebook = submission({"merge_pair": LOOK_FOR_THE_PLAN + reference("merge_pair")})
    test = InstructorTest(
        "test_double", "assert 1 + 1 == 2  # SECRET-IN-THE-PLAN\n", 2.0
    )
    result = grade_notebook(
        write(tmp_path, notebook), only=["merge_pair"], tests=[test]
    )
    graded = {e.key: e for e in result.exercises}
    assert "readable" not in graded["merge_pair"].hint, graded["merge_pair"].hint
    assert graded["merge_pair"].points == graded["merge_pair"].max_points
    assert graded["test_double"].points == 2


@needs_bwrap
def test_notebook_habits_around_the_hidden_package_keep_a_solution_graded(tmp_path):
    """The sixteenth red team, each full marks in a kernel and 0 from the
    grader: a module the notebook wrote itself (%%writefile), a value made with
    ``tc`` and used in the same cell, a name imported from the package above and
    used in the solution's cell, a top-level ``await`` in a cell that uses
    ``tc``, and ``%store``."""

    def edit(notebook):
        for index, cell in enumerate(notebook.cells):
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id == "build_char_vocab":
                helper = "%%writefile vocab_helpers.py\ndef sorted_chars(text):\n"
                helper += "    return sorted(set(text))\n"
                notebook.cells.insert(index, nbformat.v4.new_code_cell(helper))
                break
        for index, cell in enumerate(notebook.cells):
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id == "patchify":
                alias = "from transformer_course import patchify as course_patchify\n"
                notebook.cells.insert(index, nbformat.v4.new_code_cell(alias))
                break

    notebook = submission(
        {
            "build_char_vocab": "from vocab_helpers import sorted_chars\n\n\n"
            "def build_char_vocab(text):\n"
            "    return {c: i for i, c in enumerate(sorted_chars(text))}\n",
            "merge_pair": "mask = tc.causal_mask(2, 2)\nprint(mask)\n"
            + reference("merge_pair"),
            "embed_one_hot": "import asyncio\n\nawait asyncio.sleep(0)\n"
            "compare = tc.one_hot_lookup\n" + reference("embed_one_hot"),
            "patchify": "%store\nprint(course_patchify(torch.zeros(1, 1, 4, 4), 2)[0, 0])\n"
            + reference("patchify"),
        },
        edit=edit,
    )
    result = grade_notebook(write(tmp_path, notebook))
    for exercise in result.exercises:
        assert exercise.points == exercise.max_points, exercise


@needs_bwrap
def test_more_habits_around_the_hidden_package_keep_a_solution_graded(tmp_path):
    """The seventeenth red team, each full marks in a kernel and 0 ("missing")
    from the grader: a statement that reads ``tc`` and fails on the stand-in
    with another error than the hidden package's (``tc.__version__``,
    ``inspect.getsource(tc.…)``); a cell magic (``%%time``, ``%%capture``) whose
    body looks at ``tc`` above the ``def``; and a module written with
    ``%%writefile`` under the name of an installed package, which a kernel
    finds first (its working folder comes before site-packages)."""

    def edit(notebook):
        for index, cell in enumerate(notebook.cells):
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id == "patchify":
                helper = "%%writefile tabulate.py\ndef patches_of(image, p):\n"
                helper += "    C, H, W = image.shape[-3:]\n"
                helper += "    return H // p, W // p\n"
                notebook.cells.insert(index, nbformat.v4.new_code_cell(helper))
                break

    notebook = submission(
        {
            "build_char_vocab": 'print("course version", tc.__version__)\n'
            + reference("build_char_vocab"),
            "merge_pair": "%%time\nprint(tc.causal_mask(4, 4))\n"
            + reference("merge_pair"),
            "embed_one_hot": "%%capture shown\nimport inspect\n"
            "print(inspect.getsource(tc.one_hot_lookup))\n"
            + reference("embed_one_hot"),
            "patchify": "from tabulate import patches_of\n\n"
            "print(patches_of(torch.zeros(1, 4, 4), 2))\n" + reference("patchify"),
        },
        edit=edit,
    )
    result = grade_notebook(write(tmp_path, notebook))
    for exercise in result.exercises:
        assert exercise.points == exercise.max_points, exercise


def test_the_working_folder_comes_where_a_kernel_has_it():
    from transformer_course.exercises.runner import _after_the_standard_library

    stdlib = sysconfig.get_path("stdlib")
    path = [
        stdlib.replace("python3.", "python3") + ".zip",
        stdlib,
        os.path.join(stdlib, "lib-dynload"),
        "/somewhere/site-packages",
        "/more",
    ]
    assert _after_the_standard_library(path) == 3
    assert _after_the_standard_library(["/somewhere/site-packages"]) == 0
    # in a virtual environment site-packages lies beside the platform's library
    venv = os.path.join(stdlib, "site-packages")
    assert _after_the_standard_library([stdlib, venv]) == 1


@needs_bwrap
def test_names_of_locked_cells_in_a_learners_cell_keep_a_solution_graded(tmp_path):
    """The eighteenth red team, each full marks in a kernel and "missing" from
    the grader: ``ex.check(...)`` (the locked setup cell binds ``ex``) and a
    name a locked "try it" cell binds (``notes_scores``), read at the top of a
    solution's cell. The grader runs no locked cell: it binds their names to the
    package's stand-in, so such statements are passed over, as ``tc``'s are."""
    notebook = submission(
        {
            "next_token_loss": 'ex.check("causal_attention_weights", '
            "causal_attention_weights)\n" + reference("next_token_loss", chapter=6),
            "next_token_probs": "print(causal_attention_weights(notes_scores))\n"
            + reference("next_token_probs", chapter=6),
        },
        chapter=6,
    )
    result = grade_notebook(
        write(tmp_path, notebook, "06_gpt.ipynb"),
        only=["causal_attention_weights", "next_token_loss", "next_token_probs"],
    )
    for exercise in result.exercises:
        assert exercise.points == exercise.max_points, exercise


# --- the twenty-fifth red team's deeper cause: the child's way back ----------------

#: A cell's view of the pipes it holds, used by each attack below.
PIPES = """
import fcntl, os, stat

def pipes(writable):  # the pipes and sockets the child holds (its channels)
    found = []
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        try:
            mode = os.fstat(fd).st_mode
            flags = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError:
            continue
        if stat.S_ISSOCK(mode) or (
            stat.S_ISFIFO(mode) and (flags != os.O_RDONLY) == writable
        ):
            found.append(fd)
    assert found, "no channel found"  # else the attacks below attack nothing
    return found

def forged_result(value):  # as encode_result writes it
    body = json.dumps({"dict": [["preamble_error", None], ["defined", True],
                                ["errors", {"list": []}],
                                ["outcomes", {"list": [{"list": [{"dict": [
                                    ["value", value], ["error", None],
                                    ["message", ""], ["mutated", {"list": []}],
                                    ["kinds", {"list": []}], ["value_type", "str"]]}]}]}]]})
    body = body.encode()
    return len(body).to_bytes(8, "big") + body

def forged_frame(value):  # as the child sends it
    result = forged_result(value)
    return len(result).to_bytes(8, "big") + result
import json
"""

CHANNEL_ATTACKS = {
    # a forged verdict written to every pipe the child can write, as a result
    # file once was (the twenty-fifth red team)
    "a forged result": PIPES
    + """
for fd in pipes(writable=True):
    os.write(fd, forged_frame("forged"))
""",
    # the same, then the real pipes swapped for /dev/null, so that only the
    # forgery reaches the runner
    "a forged result, the real one sent nowhere": PIPES
    + """
null = os.open(os.devnull, os.O_WRONLY)
for fd in pipes(writable=True):
    copy = os.dup(fd)
    os.write(copy, forged_frame("forged"))
    os.dup2(null, fd)
""",
    # the runner's files as they once were, written then the child ended
    "a forged result file": PIPES
    + """
open("result.bin", "wb").write(forged_result("forged"))
with open("progress.txt", "a") as progress:
    progress.write("call\\ndone\\n")
os._exit(0)
""",
    # the stages a runner waits for, written ahead of the child
    "progress written ahead": PIPES
    + """
for fd in pipes(writable=True):
    os.write(fd, b"call\\ndone\\n")
""",
}


@needs_bwrap
@pytest.mark.parametrize("attack", list(CHANNEL_ATTACKS))
def test_a_cell_cannot_forge_what_the_child_sends_back(attack):
    """Whatever a cell writes to the child's pipes, the runner takes no result
    but the one the child's own code wrote after the calls: a forged frame
    makes two, progress out of order is tampering, a swapped pipe is noticed."""
    job = {
        "cells": [
            (0, CHANNEL_ATTACKS[attack]),
            (1, "def probe(x):\n    return 'honest'\n"),
        ],
        "function": "probe",
        "forbidden": [],
        "cases": [[(torch.ones(1),)]],
    }
    (result,) = Sandbox().run([job], 8)  # a forged frame can leave it waiting
    if result.status == "ok":
        (outcome,) = result.output["outcomes"][0]
        assert outcome["value"] != "forged", result
    else:
        assert result.status in ("error", "crashed", "timeout"), result


PEEK_AT_THE_CASES = (
    PIPES
    + """
import glob, select
seen = []
for fd in pipes(writable=False):
    if select.select([fd], [], [], 0)[0]:
        seen.append(os.read(fd, 1 << 20))
    try:  # or opened again by its path, as any file helper could
        with open(f"/proc/self/fd/{fd}", "rb") as handle:
            os.set_blocking(handle.fileno(), False)
            seen.append(handle.read(1 << 20) or b"")
    except OSError:
        pass
here = os.getcwd()
for top in {here, os.path.dirname(here), "/tmp", "/var/tmp", "/dev/shm"} - {"/"}:
    for path in glob.glob(os.path.join(top, "**"), recursive=True):
        try:
            with open(path, "rb") as handle:
                seen.append(handle.read(1 << 22))
        except (OSError, ValueError):
            pass
import gc, struct, torch
gc.unfreeze()
marker = struct.pack("<d", 12345.5)
for thing in gc.get_objects():
    if isinstance(thing, torch.Tensor) and thing.numel() and thing.is_floating_point():
        seen.append(thing.detach().double().numpy().tobytes())
def probe(x):
    return [marker in s for s in seen].count(True)
"""
)


@needs_bwrap
def test_no_cell_can_reach_a_checks_cases(tmp_path):
    """The checks' inputs (the fresh ones especially: a table of their answers,
    computed in a cell, would pass) reach the child only after its cells ran:
    not in a file, not in a pipe, not in the child's memory."""
    marker = torch.tensor([12345.5, 1.0, 2.0], dtype=torch.float64)
    job = {
        "cells": [(0, PEEK_AT_THE_CASES)],
        "function": "probe",
        "forbidden": [],
        "cases": [[(marker,)]],
    }
    (result,) = Sandbox().run([job], 60)
    assert result.status == "ok", result
    (outcome,) = result.output["outcomes"][0]
    assert outcome["value"] == 0, outcome


# --- the twenty-sixth red team ------------------------------------------------------

#: A deserializer registered with torch: it would see the checks' cases as the
#: child loads them, after the cells and before the calls, with no watch on.
REGISTERED_DESERIALIZER = """
import torch

answers = []


def tagger(obj):
    return None


def restore(storage, location):
    n = storage.nbytes() // 4
    if n:
        flat = torch.empty(0).set_(storage, 0, (n,), (1,)).clone()
        for d in range(1, n + 1):
            if n % d == 0:
                rows = torch.softmax(flat.view(-1, d), dim=-1).reshape(-1)
                answers.append((flat, d, rows))
    return None


torch.serialization.register_package(1, tagger, restore)


def stable_softmax(x):
    flat, d = x.reshape(-1), x.shape[-1]
    for seen, width, rows in answers:
        if width == d and seen.shape == flat.shape and torch.equal(seen, flat):
            return rows.reshape(x.shape).clone()
    raise ValueError("not seen")
"""

#: A method set on torch.Tensor, through an alias, during the last call: the
#: results' encoding would run it, after the watch, and send other bytes.
PATCHED_AFTER_THE_LAST_CALL = """
import torch

T = torch.Tensor
real_numpy = T.numpy
inputs, sent = [], []


def forged_numpy(self):
    answer = torch.softmax(inputs[len(sent)], dim=-1)
    sent.append(1)
    return real_numpy(answer.contiguous().reshape(-1).view(torch.uint8))


def stable_softmax(x):
    inputs.append(x.clone())
    if len(inputs) == CALLS:
        T.numpy = forged_numpy
    return torch.zeros_like(x)
"""

#: A module written by a cell (as a library's file helper could), then
#: imported: its code was never in a cell the screen read.
MODULE_WRITTEN_THEN_IMPORTED = """
with open("helper.py", "w") as handle:
    handle.write("import os\\nimport torch\\n\\n\\ndef stable_softmax(x):\\n"
                 "    return torch.softmax(x, dim=-1)\\n")
from helper import stable_softmax
"""


def _stable_softmax_calls() -> int:
    from transformer_course.exercises import chapter

    exercise = chapter(2).exercises["stable_softmax"]
    return sum(len(check.cases()) for check in exercise.checks)


@needs_bwrap
@pytest.mark.parametrize("attack", ["deserializer", "patched after", "module"])
@pytest.mark.parametrize("screened", [True, False], ids=["screen", "runtime"])
def test_the_twenty_sixth_red_teams_attacks_earn_nothing(tmp_path, attack, screened):
    """Each gave full points for stable_softmax while torch.softmax computed
    the answer. Each is refused twice: by the screen (register_package, an
    attribute assigned through an alias, a file opened by name) and, with the
    screen off, where it ran: torch.load of the cases consults no registry and
    a registered deserializer refuses the calls, the runner looks again for a
    patched class after the last call, and a module from the working folder is
    screened as it is imported."""
    source = {
        "deserializer": REGISTERED_DESERIALIZER,
        "patched after": PATCHED_AFTER_THE_LAST_CALL.replace(
            "CALLS", str(_stable_softmax_calls())
        ),
        "module": MODULE_WRITTEN_THEN_IMPORTED,
    }[attack]
    grade = _grade_stable_softmax(tmp_path, source, screen=screened)
    assert grade.points == 0, grade
    if attack == "module" and not screened:
        assert "the module helper holds import os" in grade.hint, grade.hint


@needs_bwrap
def test_a_module_written_with_writefile_is_imported_in_a_screened_exercise(tmp_path):
    """The import-time screen lets through what the cell screen let through: a
    helper module of the learner's own, in an exercise that forbids softmax."""
    helper = (
        "%%writefile softmax_helpers.py\nimport torch\n\n\n"
        "def shifted(x):\n    return x - x.max(dim=-1, keepdim=True).values\n"
    )

    def edit(notebook):
        for index, cell in enumerate(notebook.cells):
            if cell.metadata.get("nbgrader", {}).get("grade_id") == "stable_softmax":
                notebook.cells.insert(index, nbformat.v4.new_code_cell(helper))
                break

    source = (
        "from softmax_helpers import shifted\n\n\ndef stable_softmax(x):\n"
        "    e = shifted(x).exp()\n    return e / e.sum(dim=-1, keepdim=True)\n"
    )
    notebook = submission({"stable_softmax": source}, edit=edit, chapter=2)
    result = grade_notebook(
        write(tmp_path, notebook, "02_attention.ipynb"), only=["stable_softmax"]
    )
    (grade,) = result.exercises
    assert grade.points == grade.max_points, grade


def test_the_childs_channels_cannot_be_opened_again_by_their_path():
    """A pipe in /proc/self/fd opens again like a file, for anything that opens
    files by name (a library's helper: the twenty-sixth red team); a socket
    does not, so the runner's channels are sockets."""
    import errno

    from transformer_course.exercises.runner import _channel

    ends = _channel()
    try:
        for fd in ends:
            for mode in ("rb", "wb"):
                with pytest.raises(OSError, match="No such device") as raised:
                    open(f"/proc/self/fd/{fd}", mode)  # noqa: SIM115
                assert raised.value.errno == errno.ENXIO
    finally:
        for fd in ends:
            os.close(fd)


# --- the twenty-seventh red team ----------------------------------------------------


def test_a_module_is_screened_as_python_decodes_it(tmp_path, monkeypatch):
    """A module whose coding line says UTF-7 holds, in what reads as a comment
    byte by byte, code Python runs; the runner screens the text Python decodes,
    and refuses a module that does not parse as Python (IPython's prompt
    stripping made one parse for the screen: the twenty-seventh red team)."""
    from transformer_course.exercises.runner import _ScreenedImports

    hidden = "# coding: utf-7\n# +AAo-import os\ndef f(x):\n    return x\n"
    (tmp_path / "helper_utf7.py").write_bytes(hidden.encode("ascii"))
    (tmp_path / "helper_prompts.py").write_text(">>> x = 1\n... ;pass\n")
    (tmp_path / "helper_plain.py").write_text("def f(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = _ScreenedImports([str(tmp_path)], [])
    with pytest.raises(ImportError, match="holds import os"):
        finder.find_spec("helper_utf7")
    with pytest.raises(ImportError, match="does not parse"):
        finder.find_spec("helper_prompts")
    spec = finder.find_spec("helper_plain")
    assert spec is not None
    assert spec.loader.get_data(spec.origin) == b"def f(x):\n    return x\n"


@needs_bwrap
def test_code_in_a_magics_line_earns_nothing(tmp_path):
    """``%precision {exec(code) or 3}``: IPython ran the braces' code, which
    rebound the runner's checks (3/3 for a softmax that calls torch.softmax);
    the screen refuses braces and $ in the line of a magic that expands them."""
    source = (
        'code = "import torch"\n%precision {exec(code) or 3}\n\n\n'
        "def stable_softmax(x):\n    return torch.softmax(x, dim=-1)\n"
    )
    grade = _grade_stable_softmax(tmp_path, source)
    assert grade.points == 0, grade
    assert "{…} or $ in the line of %precision" in grade.hint, grade.hint


# --- the twenty-eighth red team -----------------------------------------------------


@pytest.mark.parametrize(
    "lookup",
    [
        lambda ids, table: torch.cat(
            [
                torch.narrow_copy(table, 0, torch.narrow_copy(ids, 0, k, 1).item(), 1)
                for k in range(ids.numel())
            ]
        ),
        lambda ids, table: torch.as_strided_copy(table, (1, table.shape[1]), (1, 1)),
        lambda ids, table: torch.unsafe_split_with_sizes(table, [1, 2])[0],
        lambda ids, table: torch.unsafe_chunk(table, 3)[1],
        # the twenty-ninth red team: a diagonal with an offset, nearest-pixel
        # resampling and strided pooling read row i too
        lambda ids, table: table.unsqueeze(0).diagonal(2, 0, 1).T,
        lambda ids, table: torch.nn.functional.interpolate(
            table.T.unsqueeze(0), scale_factor=1 / 5, mode="nearest-exact"
        ),
        lambda ids, table: torch.nn.functional.max_pool1d(
            table.T.unsqueeze(0), kernel_size=1, stride=2
        ),
    ],
    ids=[
        "narrow_copy",
        "as_strided_copy",
        "unsafe_split_with_sizes",
        "unsafe_chunk",
        "diagonal",
        "interpolate",
        "max_pool1d",
    ],
)
def test_the_copying_twins_of_views_are_lookups_too(lookup):
    """narrow_copy and .item() read embed_one_hot's rows, unseen: the copying
    twins of the view operators copy without the views (the twenty-eighth red
    team)."""
    from transformer_course.exercises.runner import call_cases

    case = (torch.tensor([0, 2]), torch.randn(3, 4))
    (outcome,) = call_cases(lookup, [case], ["embedding"])
    assert outcome["error"] == "ForbiddenUse", outcome


def test_a_patched_operator_packet_is_seen(monkeypatch):
    """A packet's overloads() patched to return none: the watch replaced no
    forbidden kernel (the twenty-eighth red team). The runner now finds such a
    patch before it calls anything."""
    from transformer_course.exercises import runner

    assert runner._intact()
    monkeypatch.setattr(torch._ops.OpOverloadPacket, "overloads", lambda self: [])
    assert not runner._intact()


def test_the_graders_shell_runs_magics_only_as_written(tmp_path):
    """``run in x`` reads as Python, and IPython ran it as %run (automagic) on a
    file the screen took for data (the twenty-eighth red team): the grader's
    shell runs a magic only when it is written with its %."""
    (tmp_path / "in").write_text("ran = 'the file'\n")
    (tmp_path / "setup.py").write_text("open('installed', 'w')\n")
    program = (
        "import os\n"
        "from transformer_course.exercises.runner import _shell\n"
        "namespace, run = _shell()\n"
        "said = [run('run in x'), namespace.get('ran')]\n"
        "said += [run('%run in'), namespace.get('ran')]\n"
        # pip and shell commands do nothing (the twenty-ninth red team ran a
        # setup.py with %pip install .)
        "said += [run('%pip install .'), run('!pip install .')]\n"
        "said += [os.path.exists('installed')]\n"
        "print('SAID', said)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("SAID")]
    said = ast.literal_eval(said.removeprefix("SAID "))
    assert said[0].startswith("NameError: name 'run' is not defined"), said
    assert said[1] is None
    assert said[2:4] == [None, "the file"]  # as written, the magic runs
    assert said[4:] == [None, None, False]


def test_the_environment_inside_a_writable_folder_is_not_screened(
    tmp_path, monkeypatch
):
    """CI's checkout, and so its virtual environment, lives in /tmp, which is
    the sandbox's writable tmpfs (the environment is bound read-only inside
    it): IPython's own modules were screened as a learner's, refused, and every
    screened job died. A module is screened when it is in the job's folder, or
    anywhere but the folders Python imported from before the cells ran."""
    from transformer_course.exercises.runner import _ScreenedImports

    environment, job = tmp_path / "site-packages", tmp_path / "job0"
    environment.mkdir()
    job.mkdir()
    (environment / "library_module_x.py").write_text("import os\n")
    (job / "learner_module_x.py").write_text("import os\n")
    (tmp_path / "elsewhere_module_x.py").write_text("import os\n")
    for folder in (environment, job, tmp_path):
        monkeypatch.syspath_prepend(str(folder))
    finder = _ScreenedImports([str(job)], [str(environment)])
    assert finder.find_spec("library_module_x") is None  # left to Python
    for name in ("learner_module_x", "elsewhere_module_x"):
        with pytest.raises(ImportError, match="holds import os"):
            finder.find_spec(name)


def test_ctc_losss_log_sum_exp_is_a_softmax_too():
    """CTC's forward pass adds in log space, stably: with the scores on a
    label's steps it gives a row's log-sum-exp, and exp(x - lse) a softmax whose
    maximum the learner never subtracted (the twenty-ninth red team)."""
    from transformer_course.exercises.runner import call_cases

    def via_ctc(x):
        steps = x.shape[-1]
        log_probs = torch.full((steps, 1, 2), -torch.inf)
        log_probs[:, 0, 1] = x[0]
        log_probs[:, 0, 0] = 0.0
        loss = torch.nn.functional.ctc_loss(
            log_probs, torch.tensor([[1]]), [steps], [1], reduction="sum"
        )
        return torch.exp(x + loss)

    (outcome,) = call_cases(via_ctc, [(torch.randn(1, 4),)], ["softmax"])
    assert outcome["error"] == "ForbiddenUse", outcome


# --- the thirtieth red team ---------------------------------------------------------

_V, _D = 5, 3


def _rows(read):
    return lambda ids, table: torch.stack([read(table, int(i)) for i in ids])


THIRTIETH = {
    # embed_one_hot: a row read by an in-place twin, a storage move or cut, or
    # an order statistic of the table with a monotone offset per row
    "as_strided_": (
        "embedding",
        _rows(lambda t, i: t.clone().as_strided_((_D,), (1,), i * _D)),
    ),
    "set_ with an offset": (
        "embedding",
        _rows(lambda t, i: torch.empty(0).set_(t, i * _D, (_D,), (1,))),
    ),
    "resize_ of a flipped copy": (
        "embedding",
        _rows(
            lambda t, i: (
                t.flatten()
                .flip(0)
                .clone()
                .resize_((_V - i) * _D)
                .flip(0)
                .clone()
                .resize_(_D)
            )
        ),
    ),
    "kthvalue": (
        "embedding",
        _rows(
            lambda t, i: (
                torch.kthvalue(t + 1e4 * torch.arange(_V)[:, None], i + 1, dim=0).values
                - 1e4 * i
            )
        ),
    ),
    "topk": (
        "embedding",
        _rows(
            lambda t, i: (
                torch.topk(
                    t + 1e4 * torch.arange(_V)[:, None], i + 1, dim=0, largest=False
                ).values.amax(0)
                - 1e4 * i
            )
        ),
    ),
}


def _running_log_add(step):
    def softmax(x):
        total = x[..., :1]
        for j in range(1, x.shape[-1]):
            total = step(total, x[..., j : j + 1])
        return torch.exp(x - total)

    return softmax


THIRTIETH |= {
    # stable_softmax: the stable two-way log-add under other names
    "softplus": (
        "softmax",
        _running_log_add(lambda r, c: r + torch.nn.functional.softplus(c - r)),
    ),
    "logsigmoid": (
        "softmax",
        _running_log_add(lambda r, c: r - torch.nn.functional.logsigmoid(r - c)),
    ),
    "bce with logits": (
        "softmax",
        _running_log_add(
            lambda r, c: (
                r
                + torch.nn.functional.binary_cross_entropy_with_logits(
                    c - r, torch.zeros_like(r), reduction="none"
                )
            )
        ),
    ),
}


@pytest.mark.parametrize("name", list(THIRTIETH))
def test_the_thirtieth_red_teams_spellings_are_forbidden(name):
    """Each computed the forbidden function's defining step under another
    name (a row looked up; a stable log-sum-exp) and got full points."""
    from transformer_course.exercises.runner import call_cases

    key, function = THIRTIETH[name]
    case = (
        (torch.tensor([1, 3]), torch.randn(_V, _D))
        if key == "embedding"
        else (torch.randn(2, 4),)
    )
    (outcome,) = call_cases(function, [case], [key])
    assert outcome["error"] == "ForbiddenUse", outcome


def test_torchs_own_python_reimplementations_are_forbidden():
    """The quantizable MultiheadAttention (a whole attention in Python) and
    CrossMapLRN2d (a local response norm, which on the centred input is a
    LayerNorm) call none of the forbidden operators (the thirtieth red team)."""
    from torch.ao.nn.quantizable import MultiheadAttention

    from transformer_course.exercises.runner import call_cases

    def attention(q, k, v):
        return MultiheadAttention(q.shape[-1], 1)(q, k, v, need_weights=False)[0]

    def layer_norm(x):
        d = x.shape[-1]
        centred = x - x.mean(-1, keepdim=True)
        norm = torch.nn.CrossMapLRN2d(size=2 * d + 1, alpha=(2 * d + 1) / d, k=1e-5)
        return norm(centred.reshape(-1, d, 1, 1)).reshape(x.shape)

    x = torch.randn(3, 1, 4)
    (refused,) = call_cases(attention, [(x, x, x)], ["scaled_dot_product_attention"])
    assert refused["error"] == "ForbiddenUse", refused
    (refused,) = call_cases(layer_norm, [(torch.randn(2, 4),)], ["layer_norm"])
    assert refused["error"] == "ForbiddenUse", refused


REOPEN_BY_PATH = (
    PIPES
    + """
refused = []
for fd in pipes(writable=True):
    try:
        with open(f"/proc/self/fd/{fd}", "wb") as handle:
            handle.write(forged_frame("forged"))
        refused.append("opened")
    except OSError as error:
        refused.append(error.errno)
def probe(x):
    return refused
"""
)


@needs_bwrap
def test_no_channel_opens_again_by_its_path_inside_the_sandbox():
    """A library's file helper opens a path: the twenty-sixth red team wrote a
    pipe of the child's through /proc/self/fd. Each of the child's channels,
    opened so from a cell, is refused (ENXIO: a socket), and the honest result
    still comes back."""
    import errno

    job = {
        "cells": [(0, REOPEN_BY_PATH)],
        "function": "probe",
        "forbidden": [],
        "cases": [[(torch.ones(1),)]],
    }
    (result,) = Sandbox().run([job], 20)
    assert result.status == "ok", result
    (outcome,) = result.output["outcomes"][0]
    assert outcome["value"], outcome  # the channels were found
    assert set(outcome["value"]) == {errno.ENXIO}, outcome


def test_a_runner_function_given_other_code_is_noticed():
    """The forty-fifth and forty-sixth red teams ended each way past the screen
    by giving the runner's _watching the code of a generator that yields at
    once: the same function object, so an identity check passed, and no watch.
    The runner compares the code, defaults and closures too: a call made then
    is refused, and all is well again once the code is back."""
    import torch

    from transformer_course.exercises import runner

    def idle(watch, forbidden):
        yield

    function = runner._watching.__wrapped__
    original, defaults = function.__code__, runner._Watch.__init__.__defaults__
    softmax = [(torch.zeros(2, 3),)]
    try:
        function.__code__ = idle.__code__
        assert not runner._intact()
        (outcome,) = runner.call_cases(
            lambda x: torch.softmax(x, -1), softmax, ["softmax"]
        )
        assert outcome["error"] == "ForbiddenUse"
        assert "switch off or look for its checks" in outcome["message"]
    finally:
        function.__code__ = original
    assert runner._intact()
    try:  # a default swapped on a method of the watch
        runner._Watch.__init__.__defaults__ = (("softmax",),)
        assert not runner._intact()
    finally:
        runner._Watch.__init__.__defaults__ = defaults
    assert runner._intact()
    (outcome,) = runner.call_cases(lambda x: torch.softmax(x, -1), softmax, ["softmax"])
    assert outcome["error"] == "ForbiddenUse"  # the watch itself, again


def test_a_global_rebound_under_a_function_the_runner_relies_on_is_noticed():
    """The forty-eighth red team rebound copy._keep_alive (through
    enum.global_enum, now refused by the screen) to a hook of its own, which
    copy.deepcopy of the checks' inputs called before the watch started: the
    hook computed the answer with torch.softmax and the watched function
    returned it. The runner compares the globals its functions, and those it
    relies on, read: a call made then is refused; and a constant of the
    runner's own (STOP_CALLS, which the same write emptied) too."""
    import copy

    import torch

    from transformer_course.exercises import runner

    softmax = [(torch.zeros(2, 3),)]
    original = copy._keep_alive
    try:
        copy._keep_alive = lambda x, memo: None
        assert not runner._intact()
        (outcome,) = runner.call_cases(lambda x: x.exp(), softmax, ["softmax"])
        assert outcome["error"] == "ForbiddenUse"
    finally:
        copy._keep_alive = original
    assert runner._intact()
    stop = runner.STOP_CALLS
    try:
        runner.STOP_CALLS = [True]
        assert not runner._intact()
    finally:
        runner.STOP_CALLS = stop
    assert runner._intact()
    (outcome,) = runner.call_cases(lambda x: x.exp(), softmax, ["softmax"])
    assert outcome["error"] is None, outcome


def test_copys_tables_changed_in_place_are_noticed():
    """The forty-ninth red team ran code past the screen (a TypedDict key that
    dataclasses pasted into the code it ran; TypedDict is now refused) and
    with it replaced copy._deepcopy_dispatch[tuple], a dictionary changed in
    place, which no rebinding shows: deepcopy of each case's inputs, before
    the watch, called its hook, which computed the answer with
    torch.softmax. The runner compares copy's tables entry by entry."""
    import copy

    import torch

    from transformer_course.exercises import runner

    softmax = [(torch.zeros(2, 3),)]
    original = copy._deepcopy_dispatch[tuple]
    try:
        copy._deepcopy_dispatch[tuple] = lambda x, memo, deepcopy: original(
            x, memo, deepcopy
        )
        assert not runner._intact()
        (outcome,) = runner.call_cases(lambda x: x.exp(), softmax, ["softmax"])
        assert outcome["error"] == "ForbiddenUse"
    finally:
        copy._deepcopy_dispatch[tuple] = original
    assert runner._intact()
    (outcome,) = runner.call_cases(lambda x: x.exp(), softmax, ["softmax"])
    assert outcome["error"] is None, outcome


def test_a_warning_filter_of_the_learners_is_refused_and_taken_out():
    """The fiftieth red team put a filter into warnings.filters whose action
    was a str subclass with an __eq__ of its own: every warning compares the
    filters, and the runner's own kernel replacement warns, so that __eq__
    ran after the call, where nothing watched, and filled the blank result
    the function had returned with torch.softmax (full marks in chapters 1,
    2, 3, 4 and 6). A filter of anything but plain values refuses the call,
    and one left by the call itself is taken out before the watch is lifted."""
    import warnings

    import torch

    from transformer_course.exercises import runner

    class Act(str):
        def __eq__(self, other):
            return False

        __hash__ = str.__hash__

    softmax = [(torch.zeros(2, 3),)]
    with warnings.catch_warnings():
        warnings.filters.insert(0, (Act("ignore"), None, Warning, None, 0))
        assert not runner._intact()
        (outcome,) = runner.call_cases(lambda x: x.exp(), softmax, ["softmax"])
        assert outcome["error"] == "ForbiddenUse"
    assert runner._intact()

    def leaves_a_filter(x):  # the filter put in during the call
        warnings.filters.insert(0, (Act("ignore"), None, Warning, None, 0))
        return x.exp()

    with warnings.catch_warnings():
        (outcome,) = runner.call_cases(leaves_a_filter, softmax, ["softmax"])
        assert outcome["error"] == "ForbiddenUse"
        assert all(type(entry[0]) is str for entry in warnings.filters)
    assert runner._intact()
    (outcome,) = runner.call_cases(lambda x: x.exp(), softmax, ["softmax"])
    assert outcome["error"] is None, outcome


# --- the fifty-first red team -----------------------------------------------------


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_cycle_older_than_the_call_is_collected_under_the_watch():
    """Red team 51: a generator in a reference cycle made before the call (so in
    an older generation of the collector than the call's own objects), its last
    outside reference dropped by the function, survived the call's final
    collection of the youngest generation and ran its ``finally`` later, once the
    collector was back on and nothing watched. Every cycle the call leaves
    unreachable is collected before the watch is lifted."""
    import gc

    import torch

    from transformer_course.exercises import runner

    seen = {"ran": False, "watched": None}

    def arm():
        def body(cell):
            try:
                yield
            finally:
                seen["ran"] = True
                torch.softmax(torch.zeros(2), -1)  # the forbidden function

        cell = []
        generator = body(cell)
        next(generator)
        cell.append(generator)  # generator -> frame -> cell -> generator
        return [cell]

    softmax = [(torch.zeros(2, 3),)]
    (first,) = runner.call_cases(lambda x: x.exp(), softmax, ["softmax"])
    assert first["error"] is None, first  # the objects alive so far are frozen
    holder = arm()
    gc.collect()  # the cycle now sits in the oldest generation
    assert not seen["ran"]

    def drops_it(x):
        holder.clear()
        return x.exp() / x.exp().sum(-1, keepdim=True)

    (outcome,) = runner.call_cases(drops_it, softmax, ["softmax"])
    assert seen["ran"], "the finally did not run before the call returned"
    assert outcome["error"] == "ForbiddenUse", outcome


# --- the fifty-second red team ----------------------------------------------------


def test_the_profile_hook_runs_no_code_of_the_learners():
    """Red team 52: for a C method of an ndarray subclass the hook asked
    ``hasattr(owner, "nin")``, which ran the subclass's property inside the
    hook, where no profile event fires: nn.TransformerEncoderLayer (4/4, 3/3)
    and, in a thread started there, torch.softmax (3/3) went unseen. The hook
    reads nothing of the learner's objects, nor of a function's globals that
    a dict subclass could answer."""
    import types

    import numpy as np

    from transformer_course.exercises import runner

    ran = []

    class Window(np.ndarray):
        @property
        def nin(self):
            ran.append("nin")
            return 1

        @property
        def __name__(self):
            ran.append("__name__")
            return "sum"

    class Globals(dict):
        def get(self, *args):
            ran.append("get")
            return dict.get(self, *args)

        def __contains__(self, key):
            ran.append("in")
            return dict.__contains__(self, key)

    def helper(x):
        return x.exp()

    odd_globals = Globals(vars(np))  # names the module numpy, whose dict it is not
    in_odd_globals = types.FunctionType(helper.__code__, odd_globals, "helper")
    window = np.zeros(2).view(Window)

    def answer(x):
        window.sum()  # a C method of the subclass: the hook sees it
        e = in_odd_globals(x - x.amax(-1, keepdim=True))  # a Python call
        return e / e.sum(-1, keepdim=True)

    x = torch.randn(2, 3)
    (outcome,) = runner.call_cases(answer, [(x,)], ["softmax"])
    assert ran == [], ran
    assert outcome["error"] is None, outcome
    torch.testing.assert_close(outcome["value"], torch.softmax(x, -1))


def test_a_forbidden_operators_kernels_are_replaced_for_every_backend():
    """Red team 52 ran torch.softmax on an MKL-DNN tensor in a thread where no
    mode was on: the kernels replaced were CPU, CUDA, sparse and composite
    ones, a list by hand; MkldnnCPU's and NestedTensorCPU's stayed. The keys
    are read from the dispatcher now, and every one refuses."""
    from transformer_course.exercises import runner

    assert {"CPU", "MkldnnCPU", "NestedTensorCPU"} <= set(
        runner._kernel_keys("_softmax")
    )
    assert {"CPU", "MkldnnCPU"} <= set(runner._kernel_keys("native_batch_norm"))
    assert "Meta" not in runner._kernel_keys("_softmax")  # shapes only, passed on
    watch = runner._Watch(["softmax"])
    dense = torch.randn(2, 4)
    with watch.kernels():
        for x in (dense, dense.to_mkldnn()):
            with pytest.raises(runner.ForbiddenUse):
                torch._softmax(x, -1, False)
    torch._softmax(dense.to_mkldnn(), -1, False)  # torch's own again, after


#: Red team 52's chapter-2 cell: torch.softmax on an MKL-DNN tensor, run in a
#: thread of asyncio's that the window of a property read by the profile hook
#: started (3/3 from the grader before the fix).
HOOK_WINDOW_SOFTMAX = 'import asyncio\n\nimport numpy as np\n\nimport torch\n\nBOX = {}\n\n\nclass Window(np.ndarray):\n    """The runner\'s profile hook asks hasattr(owner, "nin") of any C method\n    whose owner\'s class is NumPy\'s: this property runs inside the hook, where\n    no profile event fires (and, in a thread of asyncio\'s, no torch mode is on)."""\n\n    @property\n    def nin(self):\n        job = BOX.pop("job", None) or BOX.pop("job_in_thread", None)\n        if job is not None:\n            job()\n        return 1\n\n\nWINDOW = np.zeros(1).view(Window)\n\n\ndef unprofiled(job):\n    BOX["job"] = job\n    WINDOW.sum()  # a C call: the hook reads WINDOW.nin\n\n\nclass Loop(asyncio.SelectorEventLoop):\n    # asyncio\'s _getaddrinfo_debug, run in the executor\'s thread, calls\n    # self.time(): a C method of WINDOW, so the thread\'s hook reads .nin too\n    time = WINDOW.sum\n\n\ndef in_a_thread(job):\n    def start():\n        loop = Loop()\n        loop.set_debug(True)\n        BOX["loop"] = loop\n        BOX["job_in_thread"] = job\n        try:\n            loop.run_until_complete(loop.getaddrinfo("localhost", 1))\n        except Exception:\n            pass\n\n    unprofiled(start)\n\n\ndef stable_softmax(x):\n    """x (..., N) -> (..., N)."""\n    def job():\n        d = x.detach(); BOX["out"] = torch.softmax(d.float().reshape(-1, d.shape[-1]).to_mkldnn(), dim=-1).to_dense().reshape(d.shape).to(d.dtype)\n        BOX["loop"].set_debug(False)  # its callback checks would run unwatched-looking code\n\n    BOX["thread_job"] = job\n    in_a_thread(job)\n    return BOX.pop("out")\n'


def test_a_module_that_names_itself_otherwise_is_not_the_learners():
    """Red team 52's note: ``_collections_abc`` calls itself "collections.abc",
    another module in sys.modules, so its frames counted as the learner's (an
    isinstance against an abstract collection, in a thread, was refused as
    unwatched). Its spec names it rightly."""
    import _collections_abc

    from transformer_course.exercises import runner

    watch = runner._Watch([])
    frame = type("Frame", (), {"f_globals": vars(_collections_abc)})
    assert vars(_collections_abc)["__name__"] == "collections.abc"
    assert not watch._learners(frame)
    assert watch._learners(type("Frame", (), {"f_globals": {"__name__": "numpy"}}))


# --- the fifty-third red team -----------------------------------------------------


def test_nothing_of_an_errors_text_outlives_the_watch():
    """Red team 53: an exception whose ``__str__`` gave a str subclass of the
    learner's; the runner kept it and, once the watch was lifted, added to it
    and printed it, which ran the subclass's methods unwatched (a helper
    thread of asyncio's, started there, computed scipy's softmax for every
    later case: stable_softmax 2.5/3, embed_one_hot 1.5/2). What is kept of an
    error (its text, its classes' names, the value's type) is plain str, read
    inside the watch; a class's name through type's own getter."""
    from transformer_course.exercises import runner

    ran = []

    class Said(str):
        def __str__(self):
            ran.append("__str__")
            return "said"

        def __add__(self, other):
            ran.append("__add__")
            return "said" + other

        def __len__(self):
            ran.append("__len__")
            return 4

    class OpeningError(ValueError):
        def __str__(self):
            return Said("a message")

    def answer(x):
        raise OpeningError()

    (outcome,) = runner.call_cases(answer, [(torch.zeros(2, 3),)], ["softmax"])
    assert ran == [], ran
    assert outcome["error"] == "OpeningError"
    assert type(outcome["message"]) is str
    assert outcome["message"].startswith("a message")
    assert all(type(kind) is str for kind in outcome["kinds"])


#: Red team 53's chapter-2 cell (2.5/3 from the grader before the fix).
ERROR_TEXT_WINDOW = 'import asyncio\nimport time\n\nimport scipy.special\nimport torch\n\nBOX = {"queue": [], "open": False}\n\n\ndef serve():\n    """The helper: runs in asyncio\'s executor thread, started where no watch was on."""\n    while True:\n        if BOX["queue"]:\n            req = BOX["queue"].pop()\n            x, out = req[0], req[1]\n            out.numpy()[...] = scipy.special.softmax(x.numpy(), axis=-1)\n            req.append(True)\n        else:\n            time.sleep(0.0002)\n\n\nclass Loop(asyncio.SelectorEventLoop):\n    def time(self):\n        try:\n            asyncio.get_running_loop()\n        except RuntimeError:  # asyncio\'s executor thread: no loop runs here\n            serve()\n        return time.monotonic()\n\n\ndef start_helper():\n    loop = Loop()\n    loop.set_debug(True)\n    task = loop.create_task(loop.getaddrinfo("localhost", 1))\n    loop.run_until_complete(asyncio.sleep(0.05))\n    BOX["loop"] = (loop, task)\n    BOX["open"] = True\n\n\nclass Said(str):\n    def __str__(self):\n        if not BOX["open"]:\n            start_helper()\n        return "a message"\n\n    def __add__(self, other):\n        if not BOX["open"]:\n            start_helper()\n        return "a message" + other\n\n\nclass Opening(ValueError):\n    def __str__(self):\n        return Said("a message")\n\n\ndef stable_softmax(x):\n    """x (..., N) -> (..., N)."""\n    if not BOX["open"]:\n        raise Opening()\n    out = torch.empty_like(x)\n    req = [x, out]\n    BOX["queue"].append(req)\n    while len(req) < 3:\n        time.sleep(0.0002)\n    return out\n'


# --- the fifty-fourth red team ----------------------------------------------------


def test_a_class_namespace_key_of_the_learners_is_not_compared_in_the_hook():
    """Red team 54: the profile hook read a C method's owner's class module
    through type's getter, which looks ``__module__`` up in the class's
    namespace: a str-subclass key of the same hash there (an enum's functional
    form keeps it) had its ``__eq__`` run inside the hook, where no profile
    event fires (full marks in five exercises, a helper thread started there).
    A namespace with such a key is never looked up; and a tuple-subclass dict
    key of a result is made a plain tuple."""
    import enum
    import sys

    from transformer_course.exercises import runner

    ran = []

    class Key(str):
        def __hash__(self):
            return hash("__module__")

        def __eq__(self, other):
            ran.append(sys._getframe(1).f_code.co_name)  # who compared
            return str(self) == other

    def helper(self):
        return 0

    Door = enum.Enum("Door", [(Key("m"), helper), ("a", 1)], type=int)
    assert any(type(k) is Key for k in vars(Door))
    ran.clear()  # enum compared it, making the class

    def answer(x):
        Door.a.bit_length()  # a C method bound to the enum's member
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    (outcome,) = runner.call_cases(answer, [(torch.randn(2, 3),)], ["softmax"])
    # the hook's code (its own frames run no profile events) compares nothing
    # of the learner's; reading the function, under the watch, may
    assert not {"_module_of", "_owners_module", "_python_hit", "profile"} & set(ran)
    assert outcome["error"] is None, outcome

    class Pair(tuple):
        def __hash__(self):
            return 1

    plain = runner.to_plain({Pair((1, 2)): 3})
    (key,) = plain
    assert type(key) is tuple
    assert key == (1, 2)


#: Red team 54's chapter-2 cell (3/3 from the grader before the fix).
NAMESPACE_KEY_WINDOW = 'import asyncio\nimport enum\nimport time\n\nimport scipy.special\nimport torch\n\nBOX = {"phase": ""}\n\n\nclass Key(str):\n    """A class attribute\'s name whose hash is that of "__module__": type\'s\n    __module__ getter, which the runner\'s profile hook calls on the class of a\n    C method\'s bound object, compares this key with "__module__" first."""\n\n    def __hash__(self):\n        return hash("__module__")\n\n    def __eq__(self, other):\n        phase = BOX["phase"]\n        if phase == "main":\n            BOX["phase"] = "thread"\n            start_helper()\n        elif phase == "thread":\n            BOX["phase"] = "done"\n            job()\n        return str(self) == other\n\n\ndef helper(self):\n    return 0\n\n\nDoor = enum.Enum("Door", [(Key("m"), helper), ("a", 1)], type=int)\n\n\nclass Loop(asyncio.SelectorEventLoop):\n    # asyncio\'s _getaddrinfo_debug, run in the executor\'s thread, calls\n    # self.time(): a C method bound to Door.a, so that thread\'s hook opens too\n    time = Door.a.bit_length\n\n\ndef job():\n    x, out = BOX["x"], BOX["out"]\n    out.numpy()[...] = scipy.special.softmax(x.detach().numpy(), axis=-1)\n\n\ndef start_helper():\n    loop = Loop()\n    loop.set_debug(True)\n    try:\n        loop.run_until_complete(loop.getaddrinfo("localhost", 1))\n    except Exception:\n        pass\n    loop.run_until_complete(loop.shutdown_default_executor())\n    loop.close()\n\n\ndef stable_softmax(x):\n    """x (..., N) -> (..., N)."""\n    out = torch.empty_like(x)\n    BOX["x"], BOX["out"], BOX["phase"] = x, out, "main"\n    Door.a.bit_length()  # the hook\'s window\n    BOX["phase"] = ""\n    return out\n'


#: The red teams' chapter-2 cells that opened a window where the watch was
#: blind or lifted, each of which the grader scored before its fix: the pass,
#: and the cell as the red team wrote it.
WINDOW_CELLS = {
    52: HOOK_WINDOW_SOFTMAX,  # a property read inside the profile hook (3/3)
    53: ERROR_TEXT_WINDOW,  # a helper started from an error's text (2.5/3)
    54: NAMESPACE_KEY_WINDOW,  # a namespace key compared inside the hook (3/3)
}


@needs_bwrap
@pytest.mark.parametrize("number", sorted(WINDOW_CELLS))
def test_the_grader_gives_nothing_for_a_window_cell(tmp_path, number):
    grade = _grade_stable_softmax(tmp_path, WINDOW_CELLS[number], timeout=20)
    assert grade.points == 0, grade


# --- the fifty-fifth red team -----------------------------------------------------


def test_no_isinstance_of_a_learners_exception_outside_the_watch():
    """Red team 55: a returned list whose ``__len__`` raised an exception of the
    learner's; after the watch, ``isinstance(unreadable, _TooLarge)`` looked up
    its ``__class__``, a property (an enum's functional form let it through the
    screen) that ran unwatched (3 of 6 checks, 0 points). The runner asks the
    type, not the object."""
    import enum

    from transformer_course.exercises import runner

    callers = []

    def class_read(self):
        callers.append("read")  # once by the message, under the watch
        return type(self)

    Boom = enum.Enum(
        "Boom", [("__class__", property(class_read)), ("a", 5)], type=Exception
    )

    class Unreadable(list):
        def __len__(self):
            raise Boom.a

    (outcome,) = runner.call_cases(
        lambda x: Unreadable([x]), [(torch.zeros(2),)], ["softmax"]
    )
    assert outcome["error"] == "UnreadableResult", outcome
    assert len(callers) == 1, callers  # a second read came after the watch


def test_a_class_namespace_changed_after_it_was_read_is_read_again():
    """Red team 55: the hook remembered a class's namespace as plain once read;
    a str-subclass key put in later (through ``cls.__dict__ == other``, which
    hands the real namespace to ``other.__eq__``; the screen refuses both
    ``.__dict__`` and ``vars``) was then compared inside the hook. A namespace
    whose size changed is read again. (One swapped in at the same size, a key
    taken out for each put in, is not: reading every key at every lookup made
    the checks two to four times slower.)"""
    import gc
    import sys

    import numpy as np

    from transformer_course.exercises import runner

    ran = []

    class Key(str):
        def __hash__(self):
            return hash("__module__")

        def __eq__(self, other):
            ran.append(sys._getframe(1).f_code.co_name)
            return str(self) == other

    class Plain(np.ndarray):
        pass

    window = np.zeros(2).view(Plain)

    def answer(x):
        window.sum()
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    cases = [(torch.randn(2, 3),)]
    assert runner.call_cases(answer, cases, ["softmax"])[0]["error"] is None
    (namespace,) = [d for d in gc.get_referents(Plain) if type(d) is dict]
    namespace[Key("m")] = 1  # compared with "__module__" at every lookup now
    ran.clear()
    (outcome,) = runner.call_cases(answer, cases, ["softmax"])
    assert "_module_of" not in ran, ran
    assert outcome["error"] is None, outcome


# --- the fifty-sixth red team -----------------------------------------------------

#: Red team 56's cells: a tensor made in a cell shares its memory with a NumPy
#: array (``.numpy()``, or ``torch.as_tensor`` of an array); inside the call the
#: input is copied in (``copy_``, an allowed operator), NumPy computes on the
#: array, and a view of the tensor is returned. No number left torch through any
#: call the watch saw (stable_softmax 3/3, embed_one_hot 2/2, layer_norm 4/4 from
#: the grader before the fix).
SHARED_SOFTMAX = """
import numpy as np
import torch

_BUF = torch.zeros(1 << 16, dtype=torch.float64)
_ARR = _BUF.numpy()


def stable_softmax(x):
    n = x.numel()
    _BUF[:n].copy_(x.reshape(-1))
    a = _ARR[:n].reshape(tuple(x.shape))
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    a[...] = e / e.sum(axis=-1, keepdims=True)
    return _BUF[:n].reshape(x.shape).to(x.dtype)
"""
SHARED_BY_AS_TENSOR = SHARED_SOFTMAX.replace(
    "_BUF = torch.zeros(1 << 16, dtype=torch.float64)\n_ARR = _BUF.numpy()",
    "_ARR = np.zeros(1 << 16)\n_BUF = torch.as_tensor(_ARR)",
)
SHARED_LOOKUP = """
import torch

_N = 4096
_IDS = torch.zeros(_N, dtype=torch.int64)
_TAB = torch.zeros(_N, dtype=torch.float64)
_OUT = torch.zeros(_N, dtype=torch.float64)
_IDS_NP, _TAB_NP, _OUT_NP = _IDS.numpy(), _TAB.numpy(), _OUT.numpy()
_IDS_V = {n: _IDS[:n] for n in range(1, _N)}
_TAB_V = {n: _TAB[:n] for n in range(1, _N)}
_OUT_V = {n: _OUT[:n] for n in range(1, _N)}


def embed_one_hot(ids, table):
    n, (V, D) = ids.numel(), table.shape
    _IDS_V[n].copy_(ids.reshape(-1))
    _TAB_V[V * D].copy_(table.reshape(-1))
    rows = _TAB_NP[: V * D].reshape(V, D)[_IDS_NP[:n]]
    _OUT_NP[: n * D] = rows.reshape(-1)
    return _OUT_V[n * D].reshape(*ids.shape, D).to(table.dtype)
"""
SHARED_LAYER_NORM = """
import numpy as np
import torch

_BUF = torch.zeros(1 << 16, dtype=torch.float64)
_ARR = _BUF.numpy()


def layer_norm(x, gamma, beta, eps=1e-5):
    n, D = x.numel(), x.shape[-1]
    torch.add(x.reshape(-1), 0, out=_BUF[:n])  # out= writes as copy_ does
    a = _ARR[:n].reshape(-1, D)
    a[...] = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + eps)
    return _BUF[:n].reshape(x.shape).to(x.dtype) * gamma + beta
"""
#: the same, the array lifted inside the call (``torch.as_tensor`` of an array
#: made in a cell: ``lift_fresh`` of memory that is NumPy's)
LIFTED_IN_THE_CALL = """
import numpy as np
import torch

_ARR = np.zeros(1 << 16)


def stable_softmax(x):
    n = x.numel()
    buf = torch.as_tensor(_ARR)
    buf[:n].copy_(x.reshape(-1).double())
    a = _ARR[:n].reshape(tuple(x.shape))
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    a[...] = e / e.sum(axis=-1, keepdims=True)
    return buf[:n].reshape(x.shape).to(x.dtype)
"""
#: Red team 57: tensors made in the call and let go leave their storages'
#: addresses free, and an array lifted next (``torch.as_tensor``) took one over,
#: so that it counted as made (3/3, 4/4 and 2/2 from the grader before the fix:
#: the watch now keeps what the call made until the case ends)
REUSED_ADDRESS = """
import numpy as np
import torch

_ARR = np.zeros(1 << 16)


def stable_softmax(x):
    n = x.numel()
    pool = [torch.zeros(1, dtype=torch.float64) for _ in range(6)]
    del pool
    buf = torch.as_tensor(_ARR)
    buf[:n].copy_(x.reshape(-1).double())
    a = _ARR[:n].reshape(tuple(x.shape))
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    a[...] = e / e.sum(axis=-1, keepdims=True)
    return buf[:n].reshape(x.shape).to(x.dtype)
"""
REUSED_ADDRESS_LOOKUP = """
import numpy as np
import torch


def _shared(shape, dtype):
    array = np.zeros(shape, dtype=dtype)
    pool = [torch.zeros(1, dtype=torch.float64) for _ in range(6)]
    del pool
    return array, torch.as_tensor(array)


def embed_one_hot(ids, table):
    ids_np, ids_t = _shared(tuple(ids.shape), np.int64)
    tab_np, tab_t = _shared(tuple(table.shape), np.float64)
    ids_t.copy_(ids)
    tab_t.copy_(table)
    rows = tab_np[ids_np]
    return torch.as_tensor(rows).to(table.dtype)
"""

#: name -> (chapter, exercise, cell, what the first hint says)
SHARED_MEMORY = {
    "numpy view": (2, "stable_softmax", SHARED_SOFTMAX, "did not make"),
    "as_tensor": (2, "stable_softmax", SHARED_BY_AS_TENSOR, "did not make"),
    # made in the call, but of memory that is NumPy's (not resizable)
    "lifted in the call": (2, "stable_softmax", LIFTED_IN_THE_CALL, "did not make"),
    "lookup": (1, "embed_one_hot", SHARED_LOOKUP, "did not make"),
    "out=": (4, "layer_norm", SHARED_LAYER_NORM, "did not make"),
    "an address used again": (2, "stable_softmax", REUSED_ADDRESS, "did not make"),
    "an address used again, lookup": (
        1,
        "embed_one_hot",
        REUSED_ADDRESS_LOOKUP,
        "did not make",
    ),
}


@pytest.mark.parametrize("name", list(SHARED_MEMORY))
def test_no_write_into_memory_numpy_may_share(name):
    """In process, as the notebook checks: every case is refused as a write into
    a tensor the call did not make, and the exercise earns nothing."""
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    number, key, source, said = SHARED_MEMORY[name]
    exercise = chapter(number).exercises[key]
    report = core.run_exercise(exercise, namespace_from([source])[exercise.function])
    assert report.score == 0, report
    assert said in report.first_hint, report.first_hint
    assert not any(result.passed for result in report.results), report


#: Writes an honest answer makes, each into a tensor it made (a fresh result,
#: a clone, a torch.tensor of numbers, out= into a new tensor, a view of one):
#: still full marks.
HONEST_WRITES = {
    "empty_like and copy_": (
        "def stable_softmax(x):\n"
        "    out = torch.empty_like(x)\n"
        "    out.copy_((x - x.amax(-1, keepdim=True)).exp())\n"
        "    out /= out.sum(-1, keepdim=True)\n"
        "    return out\n"
    ),
    "torch.tensor written by index": (
        "def stable_softmax(x):\n"
        "    zero = torch.tensor([0.0, 0.0], dtype=x.dtype)\n"
        "    zero[1] = 1.0\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp() * zero[1]\n"
        "    return e / e.sum(-1, keepdim=True)\n"
    ),
    "out= into a new tensor, then a view of it": (
        "def stable_softmax(x):\n"
        "    shifted = torch.empty_like(x)\n"
        "    torch.sub(x, x.amax(-1, keepdim=True), out=shifted)\n"
        "    shifted.exp_()\n"
        "    shifted[..., :] /= shifted.sum(-1, keepdim=True)\n"
        "    return shifted\n"
    ),
    # legacy constructors make their tensor with the function mode still on:
    # the watch's own look at its memory must not count as the learner's call
    # (red team 57: refused as a softmax)
    "torch.Tensor of a list": (
        "def stable_softmax(x):\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp()\n"
        "    one = torch.Tensor([1.0]).to(x.dtype)\n"
        "    return e * (one / e.sum(-1, keepdim=True))\n"
    ),
    "torch.DoubleTensor of a list, written": (
        "def stable_softmax(x):\n"
        "    scale = torch.DoubleTensor([0.0])\n"
        "    scale[0] = 1.0\n"
        "    e = (x - x.amax(-1, keepdim=True)).exp() * scale.to(x.dtype)\n"
        "    return e / e.sum(-1, keepdim=True)\n"
    ),
    "the input itself, cloned": (
        "def stable_softmax(x):\n"
        "    y = x.clone()\n"
        "    y.sub_(y.amax(-1, keepdim=True)).exp_()\n"
        "    return y.div_(y.sum(-1, keepdim=True))\n"
    ),
}


@pytest.mark.parametrize("name", list(HONEST_WRITES))
def test_writes_into_tensors_the_call_made_are_honest(name):
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    exercise = chapter(2).exercises["stable_softmax"]
    function = namespace_from([HONEST_WRITES[name]])["stable_softmax"]
    report = core.run_exercise(exercise, function)
    assert report.score == exercise.points, report


@needs_bwrap
@pytest.mark.parametrize("cell", [SHARED_SOFTMAX, REUSED_ADDRESS], ids=[56, 57])
def test_the_grader_gives_nothing_for_memory_shared_with_numpy(tmp_path, cell):
    grade = _grade_stable_softmax(tmp_path, cell, timeout=20)
    assert grade.points == 0, grade
    assert "did not make" in grade.hint, grade.hint


# --- the fifty-eighth red team ----------------------------------------------------
# A size error that lists every number from 1 to 64 "named" any image's sizes:
# the check looked for p and the side as substrings. It looks for them as whole
# numbers, among at most a few.

NUMBER_LIST = "ValueError('sizes do not fit: ' + ' '.join(map(str, range(1, 65))))"

NUMBER_LISTS = {
    (1, "patchify"): reference("patchify").replace(
        'ValueError(f"image size {H}x{W} is not divisible by patch size {p}")',
        NUMBER_LIST,
    ),
    (7, "embed_patches"): reference("embed_patches", chapter=7).replace(
        'ValueError(f"patch_size {p} must divide the image size {height}×{width}")',
        NUMBER_LIST,
    ),
}


@pytest.mark.parametrize("key", list(NUMBER_LISTS), ids=lambda key: key[1])
def test_a_list_of_every_number_names_no_size(key):
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    number, name = key
    source = NUMBER_LISTS[key]
    assert NUMBER_LIST in source  # the reference's message was replaced
    exercise = chapter(number).exercises[name]
    report = core.run_exercise(exercise, namespace_from([source])[name])
    assert report.score < exercise.points, report
    hints = " ".join(result.hint for result in report.results if not result.passed)
    assert "64 different numbers" in hints, report
    assert "not a list of numbers" in hints


@pytest.mark.parametrize(
    ("message", "names"),
    [
        ("image size 6x8 is not divisible by patch size 4", True),
        ("patch_size 4 must divide the image size 6×8", True),
        ("images (2, 1, 6, 8): 4 does not divide H=6 (remainder 2)", True),
        ("image size 16x18 is not divisible by patch size 14", False),  # no 6, 4
        ("sizes: " + " ".join(map(str, range(1, 65))), False),
    ],
)
def test_the_sizes_are_named_as_whole_numbers(message, names):
    from transformer_course.exercises.core import names_the_sizes

    assert names_the_sizes(message, 6, 8, 4) is names


# --- the fifty-ninth red team -----------------------------------------------------
# Locked cells of f-strings with tens of thousands of fields, within the size
# limits, cost the grader's own process about 3 s each to parse (15 s for five, a
# notebook that still scored 12/12). The grader parses cells in a child process
# with a deadline (grading/cell_names.py); a cell it does not finish in time
# counts as one that does not parse.

SLOW_TO_PARSE = "x = f'" + "z" * 78_000 + "{a}" * 40_000 + "'\n"


def _with_slow_locked_cells(count: int):
    def edit(notebook):
        for number in range(count):
            cell = nbformat.v4.new_code_cell(SLOW_TO_PARSE + f"# {number}\n")
            cell.metadata["nbgrader"] = {
                "locked": True,
                "grade_id": f"slow{number}",
                "solution": False,
                "grade": False,
                "schema_version": 3,
            }
            notebook.cells.insert(1, cell)

    return submission(chapter=1, edit=edit)


@needs_bwrap
def test_cells_slow_to_parse_cost_the_grader_little(tmp_path, monkeypatch):
    import resource

    from transformer_course.grading import cell_names

    monkeypatch.setattr(cell_names, "SECONDS", 2.0)  # the deadline, for the test
    path = write(tmp_path, _with_slow_locked_cells(2), "01_tokens.ipynb")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    result = grade_notebook(path, only=["merge_pair", "patchify"])
    spent = resource.getrusage(resource.RUSAGE_SELF).ru_utime - before
    assert spent < 2.0, spent  # about 6 s of parsing in the grader before
    assert [grade.points for grade in result.exercises] == [3, 4], result


def test_the_short_cells_are_read_before_a_slow_one():
    from transformer_course.grading import grade

    notebook = _with_slow_locked_cells(1)
    names = grade.read_cell_names(
        [
            ("stored" if grade._is_locked(cell) else "top", index, grade._source(cell))
            for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code"
        ],
        seconds=1.0,
    )
    assert names[("stored", 1)] is None  # not parsed in time
    defined = set().union(*(v for (kind, _), v in names.items() if kind == "top" and v))
    assert {"build_char_vocab", "merge_pair", "embed_one_hot", "patchify"} <= defined


# --- the sixtieth red team --------------------------------------------------------
# (1) Cells of "0in 0in ..." under "if 0:" make Python's tokenizer warn at every
# one: megabytes of warnings on the stderr of the grader's two reading children
# (the names, the screen), which the grader took into its own memory and
# dropped (1.8 s of its CPU and 65 MB for a notebook that scored 12/12). The
# children ignore warnings and their stderr is not read. (2) An honest size
# error that names the width, for images where p divides neither side, was
# refused: either side p does not divide is named.

WARNING_FLOOD = "if 0:\n" + (" " + "0in " * 40 + "x\n") * 1_200


def test_a_flood_of_warnings_costs_the_grader_little():
    import resource

    from transformer_course.grading import grade

    sources = [(number, WARNING_FLOOD + f"# {number}\n") for number in range(2)]
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for _, source in sources]
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    tracemalloc.start()
    names = grade.cell_names(notebook)
    grade.screen_apart({"layer_norm": sources})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    spent = resource.getrusage(resource.RUSAGE_SELF).ru_utime - before
    assert spent < 0.3, spent  # about 0.7 s for these two cells before
    assert peak < 5_000_000, peak  # about 25 MB of warnings read before
    assert names[("top", 0)] == frozenset()  # read all the same: it defines nothing


WIDTH_FIRST = {  # the reference's size check, the width asked first
    (1, "patchify"): (
        "    if H % p or W % p:\n"
        '        raise ValueError(f"image size {H}x{W} is not divisible by patch size {p}")\n',
        "    if W % p:\n"
        '        raise ValueError(f"image width {W} is not divisible by {p}")\n'
        "    if H % p:\n"
        '        raise ValueError(f"image height {H} is not divisible by {p}")\n',
    ),
    (7, "embed_patches"): (
        "    if height % p or width % p:\n"
        '        raise ValueError(f"patch_size {p} must divide the image size '
        '{height}×{width}")\n',
        "    if width % p:\n"
        '        raise ValueError(f"patch_size {p} does not divide the width {width}")\n'
        "    if height % p:\n"
        '        raise ValueError(f"patch_size {p} does not divide the height {height}")\n',
    ),
}


@pytest.mark.parametrize("key", list(WIDTH_FIRST), ids=lambda key: key[1])
def test_a_size_error_may_name_either_side_p_does_not_divide(key):
    from exercise_helpers import namespace_from

    from transformer_course.exercises import chapter, core

    number, name = key
    exercise = chapter(number).exercises[name]
    both, width_first = WIDTH_FIRST[key]
    source = reference(name, chapter=number)
    assert both in source
    function = namespace_from([source.replace(both, width_first)])[name]
    report = core.run_exercise(exercise, function)
    assert report.score == exercise.points, report


# --- the sixty-first red team -----------------------------------------------------
# Keyrings are not namespaced: a sandbox started inside the grader's session
# keyring (a container's, a systemd service's, a login's) held it, read the
# host's keys, left keys for the next student's sandbox, revoked the host's,
# and request_key made the kernel run /sbin/request-key as root on the host.
# Each sandbox starts in a fresh session keyring, and a seccomp filter refuses
# add_key, request_key and keyctl inside it.

KEY_CALLS = """
import ctypes, os, platform

CALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]

def probe():
    libc = ctypes.CDLL(None, use_errno=True)
    add_key, request_key, keyctl = CALLS
    said = {}
    for name, number, args in [
        ("add_key", add_key, (b"user", b"from_a_sandbox", b"x", 1, -3)),
        ("request_key", request_key, (b"user", b"debug:from_a_sandbox", b"x", 0)),
        ("keyctl", keyctl, (0, -3, 0)),  # KEYCTL_GET_KEYRING_ID of the session's
    ]:
        result = libc.syscall(number, *args)
        said[name] = [result, ctypes.get_errno()]
    try:
        said["/proc/keys"] = open("/proc/keys").read()
    except OSError as err:
        said["/proc/keys"] = str(err)
    return said
"""

GRADER_IN_A_KEYRING = """
import ctypes, json, platform, sys
sys.path.insert(0, {tests!r})
from test_red_team import KEY_CALLS, run_probe

add_key, _, keyctl = {{"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}}[
    platform.machine()
]
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(keyctl, 1, b"grader-session") < 0:  # KEYCTL_JOIN_SESSION_KEYRING
    print(json.dumps({{"skipped": ctypes.get_errno()}}))
    raise SystemExit
secret = libc.syscall(add_key, b"user", b"host_secret", b"TOPSECRET", 9, -3)
status, found = run_probe(KEY_CALLS)
print(json.dumps({{"secret": secret, "status": status, "found": found}}))
"""


@needs_bwrap
def test_a_sandbox_holds_no_keyring_of_the_graders_and_no_key_call():
    import errno

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            GRADER_IN_A_KEYRING.format(tests=str(Path(__file__).parent)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    said = json.loads(done.stdout.strip().splitlines()[-1])
    if "skipped" in said:
        pytest.skip(f"keyctl refused here (errno {said['skipped']})")
    assert said["secret"] > 0  # the grader's own key, in its session keyring
    assert said["status"] == "ok", said
    found = said["found"]
    for call in ("add_key", "request_key", "keyctl"):
        assert found[call] == [-1, errno.EPERM], (call, found)
    assert "host_secret" not in found["/proc/keys"]
    assert "grader-session" not in found["/proc/keys"]


def test_the_key_call_filter_refuses_the_key_calls_only():
    """The seccomp program, run by a small interpreter of its four kinds of
    instruction: the key calls refused on each architecture, others allowed."""
    import struct

    from transformer_course.grading.sandbox import key_call_filter

    program = key_call_filter()
    instructions = [
        struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)
    ]

    def verdict(arch, number):
        pc, accumulator = 0, 0
        while True:
            code, if_true, if_false, value = instructions[pc]
            if code == 0x20:  # load arch (offset 4) or the call's number (0)
                accumulator = {0: number, 4: arch}[value]
                pc += 1
            elif code in (0x15, 0x35):  # jump if equal / if greater or equal
                hit = accumulator == value if code == 0x15 else accumulator >= value
                pc += 1 + (if_true if hit else if_false)
            else:
                assert code == 0x06
                return "allow" if value == 0x7FFF0000 else "refuse"

    x86_64, i386, aarch64 = 0xC000003E, 0x40000003, 0xC00000B7
    for arch, calls, other in [
        (x86_64, (248, 249, 250), 0),
        (i386, (286, 287, 288), 3),
        (aarch64, (217, 218, 219), 63),
    ]:
        assert [verdict(arch, n) for n in calls] == ["refuse"] * 3
        assert verdict(arch, other) == "allow"
    assert verdict(x86_64, 0x40000000 + 250) == "refuse"  # x32
    assert verdict(x86_64, 251) == verdict(aarch64, 250) == "allow"


# --- the sixty-second red team: chapter 4's given cell, and annotations ---------------

#: Honest chapter 4 answers that mention B, N or D (the given self_attention's
#: own variables) in a branch never taken: bound as stand-ins for the package
#: (the given cell's locals read as names the locked cell binds), they were
#: refused as "uses the course package" (kernel 16 / 16, grader 5 / 16)
DEAD_BRANCH_LN = (
    "def layer_norm(x, gamma, beta, eps=1e-5):\n"
    "    if gamma.shape[-1] != x.shape[-1]:\n"
    '        raise ValueError(f"gamma has {gamma.shape[-1]} entries, x has D = {D}")\n'
    "    mean = x.mean(-1, keepdim=True)\n"
    "    var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
    "    return gamma * (x - mean) / torch.sqrt(var + eps) + beta\n"
)
#: A learner's own chapter 3 self_attention, pasted above the given cell: the
#: kernel's given cell replaces it, and the grader ran the given code first, so
#: the learner's won there (kernel 16 / 16, grader 9 / 16)
OWN_SELF_ATTENTION = (
    "# my chapter 3 answer, to compare with later\n"
    "def self_attention(x, W_qkv, W_o, n_heads):\n"
    "    B, N, D = x.shape\n"
    "    return x @ W_o\n"
)


def test_a_given_cell_binds_only_its_own_names():
    from exercise_helpers import read_source

    from tools.release import student_version
    from transformer_course.exercises.ch04 import GIVEN
    from transformer_course.grading.cell_names import stored_names
    from transformer_course.grading.grade import locked_bindings

    assert stored_names(GIVEN) == ["self_attention"]
    bound = locked_bindings(student_version(read_source(4)))
    assert "self_attention = tc.locked_cell" in bound
    for local in ("B", "N", "D", "q", "k", "v", "qkv", "weights", "heads", "t"):
        assert f"\n{local} = " not in f"\n{bound}", local
    # a comprehension's and a lambda's variables stay theirs; := leaks, as in Python
    cell = "xs = [i for i in range(3)]\nf = lambda w: w\nys = [(z := j) for j in xs]\n"
    assert stored_names(cell) == ["f", "xs", "ys", "z"]


@needs_bwrap
def test_honest_chapter_four_answers_grade_as_in_the_kernel(tmp_path, monkeypatch):
    from exercise_helpers import (
        graded_points_agreeing_with_the_kernel,
        read_source,
        without_markers,
    )
    from exercise_helpers import solution_cells as cells_of

    from transformer_course.exercises.ch04 import EXERCISES

    pre = without_markers(cells_of(read_source(4))["pre_norm_block"])
    pre = pre.replace(
        '    """\n',
        '    """\n    if x.shape[-1] % n_heads:\n'
        '        raise ValueError(f"D = {D} is not a multiple of {n_heads}")\n',
        1,
    )
    assert "{D}" in pre

    def paste_own_attention(notebook):
        insert_after(notebook, "check_mlp_forward", OWN_SELF_ATTENTION)

    notebook = submission(
        {"layer_norm": DEAD_BRANCH_LN, "pre_norm_block": pre},
        edit=paste_own_attention,
        chapter=4,
    )
    graded = graded_points_agreeing_with_the_kernel(
        notebook, tmp_path / "04_block.ipynb", tmp_path, monkeypatch
    )
    assert graded == {key: e.points for key, e in EXERCISES.items()}


@needs_bwrap
def test_an_undefined_annotation_stops_the_cell_in_the_grader_too(tmp_path):
    """The grader compiled the statements of a cell it runs one at a time with
    the runner's own ``from __future__ import annotations``: an annotation that
    names nothing (``x: Tensor``, never imported) stops the cell in a kernel
    and passed in the grader, where a word in a comment ("tc.softmax") decided
    which (kernel: the check cell's NameError, stable_softmax never defined;
    grader: 1 of 1 passed)."""
    annotated = (
        "# compare with tc.softmax later\n"
        "def stable_softmax(x: Tensor) -> Tensor:\n"
        "    shifted = x - x.max(dim=-1, keepdim=True).values\n"
        "    return shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)\n"
    )
    for source in (annotated, annotated.replace("tc.softmax", "a softmax")):
        result = grade_notebook(
            write(
                tmp_path,
                submission({"stable_softmax": source}, chapter=2),
                "02_attention.ipynb",
            ),
            only=["stable_softmax"],
        )
        (graded,) = result.exercises
        assert graded.points == 0, graded
        assert "Tensor" in graded.hint, graded
    # the learner's own "from __future__ import annotations" holds, as in a kernel
    postponed = "from __future__ import annotations\n\n" + annotated
    result = grade_notebook(
        write(
            tmp_path,
            submission({"stable_softmax": postponed}, chapter=2),
            "02_attention.ipynb",
        ),
        only=["stable_softmax"],
    )
    assert result.exercises[0].status == "passed", result.exercises[0]


# --- the sixty-third red team -------------------------------------------------------


def _with_own_test(test: str, after: str = "check_merge_pair", copies: int = 1):
    """An edit that puts an instructor's locked test cell (grade_id my_test), and
    ``copies - 1`` pasted copies of it, after the cell ``after``."""

    def edit(notebook):
        at = next(
            i
            for i, c in enumerate(notebook.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == after
        )
        for _ in range(copies):
            cell = nbformat.v4.new_code_cell(test)
            cell.metadata["nbgrader"] = {
                "grade": True,
                "grade_id": "my_test",
                "locked": True,
                "points": 1,
                "schema_version": 3,
                "solution": False,
                "task": False,
            }
            notebook.cells.insert(at + 1, cell)

    return edit


def _graded_with_own_test(tmp_path, notebook, test: str, only: list, **options):
    """Grade ``notebook`` (chapter 1's unless ``name`` says) for the exercises
    ``only`` and the instructor's test ``test`` (grade_id my_test, 1 point):
    {key: ExerciseGrade}."""
    from transformer_course.grading.grade import InstructorTest

    name = options.pop("name", "01_tokens.ipynb")
    result = grade_notebook(
        write(tmp_path, notebook, name),
        only=only,
        tests=[InstructorTest("my_test", test, 1.0)],
        **options,
    )
    return {e.key: e for e in result.exercises}


#: An honest patchify that uses np without importing it (an instructor's test
#: above it does): the sixty-fifth and sixty-sixth red teams
USES_NP_PATCHIFY = reference("patchify").replace(
    "def patchify(images, patch_size):\n",
    "def patchify(images, patch_size):\n    patch_size = int(np.int64(patch_size))\n",
)


@needs_bwrap
def test_an_instructors_test_binds_its_names_for_the_exercises_below_it(tmp_path):
    """An instructor's own test cell, ``import numpy as np`` and an assert, above
    embed_one_hot, whose answer uses np without importing it: 2 / 2 in a kernel
    and in nbgrader (which run the locked cell), 0 / 2 in the grader, which ran
    no locked cell, with a hint that blamed the student for a cell not run."""
    test = "import numpy as np\nassert merge_pair([1, 2, 3], (1, 2), 9) == [9, 3]\n"
    uses_np = (
        "def embed_one_hot(ids, table):\n"
        "    width = int(np.int64(table.shape[0]))\n"
        "    return F.one_hot(ids, num_classes=width).to(table.dtype) @ table\n"
    )
    notebook = submission({"embed_one_hot": uses_np}, edit=_with_own_test(test))
    graded = _graded_with_own_test(tmp_path, notebook, test, ["embed_one_hot"])
    assert graded["embed_one_hot"].status == "passed", graded["embed_one_hot"]
    assert graded["my_test"].status == "passed", graded["my_test"]
    # a failing test above is its own grade's business, not the exercise's
    failing = test.replace("[9, 3]", "[3, 9]")
    graded = _graded_with_own_test(tmp_path, notebook, failing, ["embed_one_hot"])
    assert graded["embed_one_hot"].status == "passed", graded["embed_one_hot"]
    assert graded["my_test"].status == "failed", graded["my_test"]


@needs_bwrap
def test_a_cell_is_parsed_with_the_kernels_future_flags(tmp_path):
    """``from __future__ import barry_as_FLUFL`` makes ``!=`` a syntax error in a
    kernel; a comment naming ``tc.`` sent the cell to the statement-at-a-time
    runner, which parsed it without the flag: 3 / 3 in the grader, where the
    kernel never defined merge_pair."""
    merge = reference("merge_pair")
    same = "(ids[i], ids[i + 1]) == tuple(pair)"
    assert same in merge
    flagged = "# compare with tc.merge_pair in the notebook\n" + merge.replace(
        same, "not (ids[i], ids[i + 1]) != tuple(pair)"
    )

    def barry(notebook):
        insert_after(notebook, "setup", "from __future__ import barry_as_FLUFL\n")

    notebook = submission({"merge_pair": flagged}, edit=barry)
    result = grade_notebook(write(tmp_path, notebook), only=["merge_pair"])
    (graded,) = result.exercises
    assert graded.status == "syntax error", graded
    assert graded.points == 0


# --- the sixty-fourth red team --------------------------------------------------------


@needs_bwrap
def test_a_locked_cell_runs_with_the_runners_own_exec_and_future_flags(tmp_path):
    """The instructor's test ran above later exercises as text in the learner's
    namespace, calling the learner's ``compile`` (an honest ``compile = False``
    bound nothing below it: patchify 4 in a kernel, 0 in the grader); its
    ``from __future__ import annotations`` did not hold below it; and its own
    job compiled it with the runner's flags (``Sequence`` never imported: a
    NameError in a kernel, passed in the grader)."""

    uses_np = (
        "def patchify(images, patch_size):\n"
        "    B, C, H, W = images.shape\n"
        "    p = int(np.int64(patch_size))\n"
        "    if H % p or W % p:\n"
        "        raise ValueError(f'{H}x{W} is not a multiple of {p}')\n"
        "    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)\n"
        "    x = x.permute(0, 2, 3, 1, 4, 5)  # (B, H/p, W/p, C, p, p)\n"
        "    return x.reshape(B, (H // p) * (W // p), C * p * p)\n"
    )
    test = "from __future__ import annotations\nimport numpy as np\n"

    def edit(notebook):
        insert_after(
            notebook, "setup", "compile = False  # torch.compile: off on a CPU\n"
        )
        _with_own_test(test)(notebook)

    annotated = uses_np.replace("(images, patch_size)", "(images: Tensor, patch_size)")
    notebook = submission({"patchify": annotated}, edit=edit)
    graded = _graded_with_own_test(tmp_path, notebook, test, ["patchify"])
    assert graded["patchify"].status == "passed", graded["patchify"]
    # the test's own job: the kernel's flags, not the runner's
    unimported = "expected: Sequence[int] = [9, 3]\n"
    notebook = submission(edit=_with_own_test(unimported))
    graded = _graded_with_own_test(tmp_path, notebook, unimported, ["merge_pair"])
    assert graded["my_test"].points == 0, graded["my_test"]
    assert "name 'Sequence' is not defined" in graded["my_test"].hint


@needs_bwrap
def test_a_pasted_copy_of_a_locked_cell_runs_where_it_stands(tmp_path):
    """A copy of chapter 4's locked given cell, pasted under a draft of the
    learner's own self_attention, runs in a kernel (16 / 16) and did not in the
    grader (9 / 16); and the time of an instructor's tests above an exercise
    counted against the learner's limit for its cells."""
    from transformer_course.exercises.ch04 import EXERCISES

    def draft_then_copy(notebook):
        at = next(
            i
            for i, c in enumerate(notebook.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == "given_self_attention"
        )
        copy = nbformat.from_dict(dict(notebook.cells[at]))
        copy["id"] = "pasted-copy"  # JupyterLab gives a pasted cell an id of its own
        draft = (
            "def self_attention(h, params, n_heads):\n    return torch.zeros_like(h)\n"
        )
        notebook.cells[at + 1 : at + 1] = [nbformat.v4.new_code_cell(draft), copy]

    path = write(
        tmp_path, submission(edit=draft_then_copy, chapter=4), "04_block.ipynb"
    )
    keys = ["pre_norm_block", "post_norm_block"]
    graded = {e.key: e for e in grade_notebook(path, only=keys).exercises}
    for key in keys:
        assert graded[key].points == EXERCISES[key].points, graded[key]
    # five pasted copies of a 1.5 s test above patchify: 7.5 s, past the
    # 4 x 1.6 s the learner's cells may take, and the instructor's time
    slow = "import time\ntime.sleep(1.5)\n"
    notebook = submission(edit=_with_own_test(slow, "check_embed_one_hot", copies=5))
    graded = _graded_with_own_test(tmp_path, notebook, slow, ["patchify"], timeout=1.6)
    assert graded["patchify"].status == "passed", graded["patchify"]


# --- the sixty-fifth red team -------------------------------------------------------


@needs_bwrap
def test_pasted_locked_cells_buy_no_time(tmp_path):
    """Each locked cell the grader ran added a --timeout to the exercise's limit:
    thousands of empty pasted copies (or cells named given_...) bought hours.
    Time is granted once per id the package or instructor defines, and at most
    MAX_COPIES copies run: twelve cells of 0.9 s above layer_norm still exceed
    4 x 1 s, with twelve copies of the given cell above them."""

    def padded(notebook):
        at = next(
            i
            for i, c in enumerate(notebook.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == "given_self_attention"
        )
        given = notebook.cells[at]
        copies = []
        for n in range(12):
            copy = nbformat.from_dict(dict(given))
            copy["id"] = f"copy-{n}"
            copies.append(copy)
        slow = [nbformat.v4.new_code_cell("import time\ntime.sleep(0.9)\n")] * 12
        notebook.cells[2:2] = copies + [nbformat.from_dict(dict(c)) for c in slow]
        for n, cell in enumerate(notebook.cells):
            cell["id"] = f"cell-{n}"

    path = write(tmp_path, submission(edit=padded, chapter=4), "04_block.ipynb")
    result = grade_notebook(path, only=["layer_norm"], timeout=1.0)
    (graded,) = result.exercises
    assert graded.status == "timeout", graded
    assert "in all" in graded.hint, graded
    from transformer_course.grading.grade import MAX_COPIES

    assert MAX_COPIES < 12


@needs_bwrap
def test_an_instructors_test_may_use_ipythons_syntax(tmp_path):
    """``%precision 3`` in an instructor's test: nothing in a kernel and in
    nbgrader, a SyntaxError in the grader, which also left its import out for
    the exercises below (patchify 4 in a kernel, 0 in the grader)."""

    test = (
        "%precision 3\nimport numpy as np\n"
        "assert merge_pair([1, 2, 3], (1, 2), 9) == [9, 3]\n"
    )
    uses_np = USES_NP_PATCHIFY
    assert "np.int64" in uses_np
    notebook = submission({"patchify": uses_np}, edit=_with_own_test(test))
    graded = _graded_with_own_test(tmp_path, notebook, test, ["patchify"])
    assert graded["patchify"].status == "passed", graded["patchify"]
    assert graded["my_test"].status == "passed", graded["my_test"]


# --- the sixty-sixth red team -------------------------------------------------------


@needs_bwrap
def test_locked_cells_keep_their_lines_and_may_await(tmp_path):
    """A locked cell's text was compiled under a name linecache did not know, so
    ``inspect.getsource(self_attention)`` (the given function) raised in the
    grader and not in a kernel, losing the learner's cell (4 vs 0); and a
    top-level ``await`` in an instructor's test, which a kernel and nbgrader
    run, was a SyntaxError in the grader, leaving its imports out below it."""
    from exercise_helpers import read_source, solution_cells, without_markers

    from transformer_course.exercises.ch04 import EXERCISES

    pre = without_markers(solution_cells(read_source(4))["pre_norm_block"])
    reads_given = (
        "import inspect\nprint(inspect.getsource(self_attention)[:80])\n" + pre
    )
    path = write(
        tmp_path,
        submission({"pre_norm_block": reads_given}, chapter=4),
        "04_block.ipynb",
    )
    (graded,) = grade_notebook(path, only=["pre_norm_block"]).exercises
    assert graded.points == EXERCISES["pre_norm_block"].points, graded

    test = (
        "import asyncio\nawait asyncio.sleep(0)\nimport numpy as np\n"
        "assert merge_pair([1, 2, 3], (1, 2), 9) == [9, 3]\n"
    )
    uses_np = USES_NP_PATCHIFY
    notebook = submission({"patchify": uses_np}, edit=_with_own_test(test))
    graded = _graded_with_own_test(tmp_path, notebook, test, ["patchify"])
    assert graded["patchify"].status == "passed", graded["patchify"]
    assert graded["my_test"].status == "passed", graded["my_test"]


# --- the sixty-seventh red team -------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize(
    "patch",
    [
        "import inspect\ninspect.CO_COROUTINE = 0\n",
        "import asyncio\nasyncio.run = lambda coroutine, **options: coroutine.close()\n",
    ],
    ids=["the coroutine flag", "asyncio.run"],
)
def test_an_instructors_test_that_awaits_cannot_be_skipped(tmp_path, patch):
    """One line in a learner's cell passed an instructor's test with a top-level
    await without running it (wrong merge_pair: my_test 1 / 1), where a kernel
    fails it: the runner read inspect.CO_COROUTINE and asyncio.run when the
    test ran, after the learner's cells."""

    test = (
        "import asyncio\nawait asyncio.sleep(0)\n"
        "assert merge_pair([1, 2, 3], (1, 2), 9) == [9, 3], 'merge wrong'\n"
    )
    wrong = "def merge_pair(ids, pair, new_id):\n    return list(ids)\n"

    def edit(notebook):
        insert_after(notebook, "setup", patch)
        _with_own_test(test)(notebook)

    notebook = submission({"merge_pair": wrong}, edit=edit)
    graded = _graded_with_own_test(tmp_path, notebook, test, ["merge_pair"])
    assert graded["my_test"].points == 0, graded["my_test"]
