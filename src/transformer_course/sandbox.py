"""A sandbox for graded code: bubblewrap on Linux, and what is left without it.

Used by the grader (:mod:`transformer_course.grade`). Each job (one exercise of
one submission) runs :mod:`transformer_course.exercises.runner` as a script in a
fresh process:

* **with bubblewrap** (``bwrap``; Debian/Ubuntu package ``bubblewrap``): its own
  PID namespace, so every process it starts dies with it; no network; a root
  made only of read-only system folders and the Python environment, with the
  course package (the answer key) and everything else (home, the course folder,
  other submissions) absent; the only writable place a private, size-limited
  ``/tmp``;
* **without** (``unsafe=True``, the grader's ``--unsafe``): the same runner in
  a plain process. The grader becomes a child subreaper (Linux), so processes
  that the submission detaches are re-parented to it and killed after the job;
  elsewhere only the process group is killed. Nothing hides files or the
  package: see the README's grading section.

Both ways: limits on address space (memory), file size and CPU time (set by the
runner before any submitted code runs); a deadline
per stage (each cell, then the calls), read from the runner's progress file;
output thrown away; results read back only from the scratch folder, size-checked,
with ``torch.load(weights_only=True)`` (tensors and plain data only).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import queue
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from .exercises.runner import _descendants, _prctl

__all__ = ["Sandbox", "SandboxResult", "SandboxUnavailable", "bwrap_problem"]

RUNNER = Path(__file__).resolve().parent / "exercises" / "runner.py"
PACKAGE = Path(__file__).resolve().parent
INSIDE_RUNNER = "/opt/transformer_course_grader/runner.py"
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
MAX_RESULT_BYTES = 64 * 2**20
STARTUP_SECONDS = 120  # starting Python and importing torch, on a busy machine
WORK_BYTES = 512 * 2**20  # the sandbox's private /tmp, where jobs write
JOB_STAGES = 4  # an exercise may take this many per-cell timeouts in all
EXTRA_TASKS = 64  # processes and threads a sandbox may add (RLIMIT_NPROC)
# Namespaces and privileges: a user namespace with every capability dropped (as
# root too), so nothing inside can remount, raise its limits or reach the host.
_ISOLATION = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
)


class SandboxUnavailable(RuntimeError):  # noqa: N818  (a state, not a bug)
    """bubblewrap is missing or cannot run here, and unsafe grading was not asked for."""


@dataclass
class SandboxResult:
    """How a job ended.

    ``status`` is "ok", "timeout" (one stage ran too long), "overtime" (the
    stages together did), "crashed" or "error"; ``stage`` is the last
    stage the runner reached ("preamble", ("cell", index), "call", "done");
    ``output`` is what the runner saved (None unless it finished).
    """

    status: str
    detail: str
    stage: object
    output: dict | None


@cache
def bwrap_problem() -> str | None:
    """None when bubblewrap can sandbox here; otherwise why not, in one line."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return (
            "bubblewrap (bwrap) is not installed (Debian/Ubuntu: "
            "apt-get install bubblewrap)"
        )
    try:
        probe = subprocess.run(
            [bwrap, *_ISOLATION, "--ro-bind", "/", "/", "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap cannot start: {err}"
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip().splitlines()
        return (
            "bubblewrap cannot create namespaces here "
            f"({reason[-1] if reason else f'exit status {probe.returncode}'})"
        )
    return None


def _python_folders() -> list[str]:
    """The folders the interpreter and its packages live in (read-only inside)."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    user = site.getusersitepackages()
    if isinstance(user, str) and os.path.isdir(user):
        folders.add(user)
    real = {os.path.realpath(f) for f in folders if os.path.isdir(f)}
    # keep the outermost folders only
    return sorted(f for f in real if not any(f.startswith(o + os.sep) for o in real))


def _become_subreaper() -> bool:
    """Make this process adopt orphaned descendants (Linux); True on success."""
    return _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER


def _tasks_of_this_user() -> int:
    """Processes and threads running as this user (RLIMIT_NPROC counts them all)."""
    uid, total = os.getuid(), 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 4096
    for entry in entries:
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            fields = dict(
                line.split(":", 1) for line in status.splitlines() if ":" in line
            )
            if int(fields.get("Uid", "-1").split()[0]) == uid:
                total += int(fields.get("Threads", "1").strip() or 1)
    return total


class Sandbox:
    """Runs runner jobs; see the module docstring.

    Args:
        unsafe: run without bubblewrap (refused otherwise when it is missing).
        memory_bytes: address-space limit of the job (RLIMIT_AS).
        cpu_seconds: CPU-time limit of the job (RLIMIT_CPU), a backstop to the
            wall-clock deadlines.
    """

    def __init__(
        self,
        unsafe: bool = False,
        memory_bytes: int = 3 * 2**30,
        cpu_seconds: int = 600,
    ):
        self.problem = bwrap_problem()
        if self.problem is not None and not unsafe:
            raise SandboxUnavailable(
                f"cannot sandbox graded code: {self.problem}; install it, or pass "
                "--unsafe to grade without a sandbox (trusted submissions only)"
            )
        self.sandboxed = self.problem is None
        self.memory_bytes = memory_bytes
        self.cpu_seconds = cpu_seconds
        self.reaper = False if self.sandboxed else _become_subreaper()

    @property
    def description(self) -> str:
        if self.sandboxed:
            return "bubblewrap sandbox"
        how = "child subreaper" if self.reaper else "process group only"
        return f"UNSAFE: no sandbox ({self.problem}); {how}"

    def _work(self, scratch: Path) -> Path:
        """Where jobs write: a size-limited private tmpfs in the sandbox, the
        (read-only there) scratch folder otherwise."""
        return Path("/tmp") if self.sandboxed else scratch

    def _environment(self, scratch: Path) -> dict[str, str]:
        work = self._work(scratch)
        return {
            "PATH": os.pathsep.join(
                [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
            ),
            "HOME": str(work),
            "TMPDIR": str(work),
            "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(work / ".matplotlib"),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TQDM_DISABLE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }

    def _command(self, scratch: Path, plan: Path) -> list[str]:
        python = [sys.executable, "-I", "-B"]
        if not self.sandboxed:
            runner = scratch / "runner.py"
            shutil.copyfile(RUNNER, runner)
            return [*python, str(runner), str(plan)]
        # --as-pid-1: the runner is the namespace's init, which its children
        # cannot kill or stop (the kernel drops those signals to PID 1)
        command = [
            shutil.which("bwrap") or "bwrap",
            *_ISOLATION,
            "--as-pid-1",
            "--tmpfs",
            "/",
            # /tmp first: folders bound below may live under it (a clone in /tmp)
            "--size",
            str(WORK_BYTES),
            "--tmpfs",
            "/tmp",
        ]
        for folder in SYSTEM_FOLDERS:
            if os.path.islink(folder):
                command += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                command += ["--ro-bind", folder, folder]
        for folder in _python_folders():
            command += ["--ro-bind", folder, folder]
        # the course package (the answer key) must not be there, even when it is
        # installed inside a folder bound above
        if any(str(PACKAGE).startswith(f + os.sep) for f in _python_folders()):
            command += ["--tmpfs", str(PACKAGE)]
        command += [
            "--dev",
            "/dev",
            "--size",  # /dev/shm would otherwise be half of the host's memory
            str(16 * 2**20),
            "--tmpfs",
            "/dev/shm",
            "--proc",
            "/proc",
            "--ro-bind",
            str(scratch),
            str(scratch),
            "--ro-bind",
            str(RUNNER),
            INSIDE_RUNNER,
            "--remount-ro",
            "/",
            "--chdir",
            str(scratch),
            "--clearenv",
        ]
        for name, value in self._environment(scratch).items():
            command += ["--setenv", name, value]
        return [*command, "--", *python, INSIDE_RUNNER, str(plan)]

    def run(
        self, jobs: list[dict], timeout: float, preamble: str = ""
    ) -> list[SandboxResult | None]:
        """Run jobs, one after the other, in one sandbox; one result per job.

        Each job has ``cells`` [(index, source)], ``function``, ``forbidden`` and
        ``cases`` (one list of argument tuples per check). ``timeout`` is the
        deadline of each stage (the preamble, each cell, the calls), in seconds.
        ``preamble`` is code every job runs before the learner's cells.
        A job gets None when it never started: the sandbox died before it (a
        job that kills the sandbox's own process); run it again.
        """
        scratch = Path(tempfile.mkdtemp(prefix="grade-"))
        try:
            return self._run(scratch, jobs, timeout, preamble)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _plan(self, scratch: Path, jobs: list[dict], timeout: float, preamble: str):
        entries = []
        for number, job in enumerate(jobs):
            cases_path = scratch / f"cases{number}.pt"
            torch.save(job["cases"], cases_path)
            entries.append(
                {
                    "cells": job["cells"],
                    "function": job["function"],
                    "forbidden": list(job.get("forbidden", ())),
                    "cases": str(cases_path),
                }
            )
        plan = {
            "preamble": preamble,
            "jobs": entries,
            "timeout": timeout,
            # a cap on one exercise, whatever its number of cells
            "job_limit": timeout * JOB_STAGES,
            "max_processes": EXTRA_TASKS,
            "work": str(self._work(scratch)),
            "max_result_bytes": MAX_RESULT_BYTES,
            "warm": ["numpy", "matplotlib.pyplot", "IPython.core.interactiveshell"],
            "rlimits": {
                "AS": self.memory_bytes,
                "FSIZE": MAX_RESULT_BYTES,
                "CPU": self.cpu_seconds,
                "CORE": 0,
                "NPROC": _tasks_of_this_user() + EXTRA_TASKS,
            },
        }
        path = scratch / "plan.json"
        path.write_text(json.dumps(plan), encoding="utf-8")
        return path

    def _run(self, scratch: Path, jobs: list[dict], timeout: float, preamble: str):
        plan = self._plan(scratch, jobs, timeout, preamble)
        before = _descendants(os.getpid()) if self.reaper else set()
        process = subprocess.Popen(
            self._command(scratch, plan),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self._environment(scratch),
            cwd=scratch,
            start_new_session=True,
        )
        messages: queue.Queue = queue.Queue()

        def read() -> None:
            for line in process.stdout:
                messages.put(line)
            messages.put(None)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        # a watchdog, in case the runner itself stops (a job can SIGSTOP it): the
        # start, then each job, gets the time all its stages may take, plus slack
        deadline = time.monotonic() + STARTUP_SECONDS
        results: list[SandboxResult | None] = [None] * len(jobs)
        running: int | None = None
        finished = False
        try:
            while not finished:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    line = messages.get(timeout=min(remaining, 0.5))
                except queue.Empty:
                    continue
                if line is None:
                    finished = True
                    break
                running = self._receive(line, results, running)
                if running is not None:
                    deadline = time.monotonic() + timeout * (JOB_STAGES + 1) + 10
        finally:
            self._stop(process, before)
            reader.join(timeout=5)
        if running is not None and results[running] is None:
            why = (
                "the sandbox ran out of time"
                if not finished
                else "the sandbox's own process was killed"
            )
            results[running] = SandboxResult("crashed", why, "start", None)
        return results

    def _receive(self, line: bytes, results: list, running: int | None) -> int | None:
        try:
            message = json.loads(line)
            number = int(message["job"])
        except (ValueError, KeyError, TypeError):
            return running
        if not 0 <= number < len(results):
            return running
        if message.get("event") == "start":
            return number
        output, status = None, message.get("status", "error")
        detail = str(message.get("detail", ""))[:300]
        if status == "ok":
            try:
                blob = base64.b64decode(message["outcomes"])
                if len(blob) > MAX_RESULT_BYTES:
                    raise ValueError(f"{len(blob):,} bytes of results")
                output = torch.load(io.BytesIO(blob), weights_only=True)
                if not isinstance(output, dict):
                    raise ValueError(f"expected a dict, got {type(output).__name__}")
            except Exception as err:
                status = "error"
                detail = (
                    "could not read the results (return plain tensors, numbers, "
                    f"lists or tuples of them): {type(err).__name__}: {err}"
                )
                output = None
        stage = _parse_stage(str(message.get("stage", "")))
        if status in ("timeout", "crashed"):
            detail = f"{_describe(stage)}: {detail}"
        results[number] = SandboxResult(status, detail[:300], stage, output)
        return None

    def _stop(self, process: subprocess.Popen, before: set[int]) -> None:
        """Kill the sandbox and everything in it, and reap them."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
        if not self.reaper:
            return
        # without a sandbox, orphans re-parented to us: kill and reap them
        for _ in range(50):
            strays = _descendants(os.getpid()) - before
            if not strays:
                return
            for pid in strays:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            for pid in strays:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
            time.sleep(0.02)


def _parse_stage(stage: str) -> object:
    if stage.startswith("cell "):
        with contextlib.suppress(ValueError):
            return ("cell", int(stage.split()[1]))
    return stage


def _describe(stage: object) -> str:
    if isinstance(stage, tuple):
        return f"cell {stage[1] + 1} of the notebook"
    return {
        "start": "starting",
        "preamble": "the grader's setup",
        "call": "calling your function on the checks' inputs",
    }.get(stage, str(stage))
