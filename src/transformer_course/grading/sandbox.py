"""A sandbox for graded code: bubblewrap on Linux, and what is left without it.

Used by the grader (:mod:`transformer_course.grading.grade`). Each job (one exercise of
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
per stage (each cell, then the calls), read from the child's progress pipe;
output thrown away; results read back in a strict format, every type and size
checked before use (:func:`.exercises.runner.decode_result`, :func:`read_output`):
no pickle crosses from graded code to the grader.

As root, the sandbox's processes run as an unprivileged uid and gid of their own
(setpriv), with only the parts of /etc that Python needs: root-only files are
unreadable, and RLIMIT_NPROC, which does not bind root, caps that uid's
processes and threads.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
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

from ..exercises.runner import (
    WIRE_LIMITS,
    WireError,
    _cut,
    _descendants,
    _prctl,
    decode_result,
    frame,
    locked_ids,
)

__all__ = ["Sandbox", "SandboxResult", "SandboxUnavailable", "bwrap_problem"]

PACKAGE = Path(__file__).resolve().parents[1]
RUNNER = PACKAGE / "exercises" / "runner.py"
INSIDE_RUNNER = "/opt/transformer_course_grader/runner.py"
#: The static screen, beside the runner, which screens modules as a job imports them
SCREEN = PACKAGE / "exercises" / "screen.py"
INSIDE_SCREEN = "/opt/transformer_course_grader/screen.py"
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
#: What of the host's /etc Python, PyTorch and matplotlib use (the dynamic
#: loader's cache, the time zone, fonts): never the whole folder, which holds
#: secrets (/etc/shadow) that root inside a sandbox could read.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "fonts",
    "alternatives",
)
MAX_RESULT_BYTES = WIRE_LIMITS["structure_bytes"] + WIRE_LIMITS["data_bytes"] + 8
STARTUP_SECONDS = 120  # starting Python and importing torch, on a busy machine
WORK_BYTES = 512 * 2**20  # the sandbox's private /tmp, where jobs write
JOB_STAGES = 4  # an exercise may take this many per-cell timeouts in all
EXTRA_TASKS = 64  # processes and threads a sandbox may run (RLIMIT_NPROC and a count)
#: Unprivileged ids for graded code when the grader runs as root: each sandbox
#: takes one no other process has, so RLIMIT_NPROC counts that sandbox alone.
SANDBOX_IDS = range(2**30, 2**31)
# Namespaces and privileges. As a user: a user namespace with every capability
# dropped, so nothing inside can remount, raise its limits or reach the host.
# As root, a user namespace would still be root to the host's files (a
# submission could read /etc/shadow where it is mounted): the sandbox is made
# with root's own rights, and setpriv (util-linux) then runs the runner as an
# unprivileged uid and gid of its own, with no capabilities, no supplementary
# groups and no way back (no_new_privs, an empty bounding set).
_ISOLATION = (
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
)
_AS_USER = ("--unshare-user", "--cap-drop", "ALL")
_AS_ROOT = (
    "--cap-drop",
    "ALL",
    # only for setpriv, which gives them up with root before the runner starts
    *("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"),
    *("--cap-add", "CAP_SETPCAP"),
)


# --- the kernel's keyrings -----------------------------------------------------------
# Keyrings are not namespaced: a sandbox started inside the grader's session
# keyring (a container's, a systemd service's, a login's through pam_keyinit)
# held it, and a possessor may read, write and revoke its keys whatever its uid:
# a submission read the host's secrets there, left keys that the next student's
# sandbox read, and request_key made the kernel run /sbin/request-key as root
# in the host's namespaces (the sixty-first red team). Each sandbox starts in a
# fresh, empty session keyring of its own, and a seccomp filter (bwrap
# --seccomp) refuses the three key system calls to everything inside it.

#: The key system calls (add_key, request_key, keyctl) by the kernel's audit
#: architecture: x86-64 (its x32 calls refused wholesale), i386, AArch64.
_KEY_CALLS = {
    0xC000003E: (248, 249, 250),  # AUDIT_ARCH_X86_64
    0x40000003: (286, 287, 288),  # AUDIT_ARCH_I386
    0xC00000B7: (217, 218, 219),  # AUDIT_ARCH_AARCH64
}
#: keyctl's number by os.uname().machine, for the child before bwrap
_KEYCTL = {"x86_64": _KEY_CALLS[0xC000003E][2], "aarch64": _KEY_CALLS[0xC00000B7][2]}
_X32_BIT = 0x40000000


def _bpf(code: int, jump_true: int, jump_false: int, value: int) -> bytes:
    return (
        int(code).to_bytes(2, "little")
        + bytes([jump_true, jump_false])
        + (value & 0xFFFFFFFF).to_bytes(4, "little")
    )


def key_call_filter() -> bytes:
    """A seccomp program (struct sock_filter[], as bwrap's --seccomp reads it):
    add_key, request_key and keyctl fail with EPERM, every other call is let
    through, on every architecture of :data:`_KEY_CALLS`."""
    load, jump_eq, jump_ge, give = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JEQ, JGE, RET
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, ERRNO(EPERM)
    program = [_bpf(load, 0, 0, 4)]  # seccomp_data.arch
    tails = []
    for arch, calls in _KEY_CALLS.items():
        body = [_bpf(load, 0, 0, 0)]  # seccomp_data.nr
        if arch == 0xC000003E:
            body.append(_bpf(jump_ge, len(calls) + 1, 0, _X32_BIT))  # x32: refused
        for index, number in enumerate(calls):
            body.append(_bpf(jump_eq, len(calls) - index, 0, number))
        body += [_bpf(give, 0, 0, allow), _bpf(give, 0, 0, refuse)]
        tails.append((arch, body))
    # the arch tests, each jumping to its body; an arch not listed is let through
    for index, (arch, _) in enumerate(tails):
        skip = sum(len(b) for _, b in tails[:index]) + (len(tails) - index - 1) + 1
        program.append(_bpf(jump_eq, skip, 0, arch))
    program.append(_bpf(give, 0, 0, allow))
    for _, body in tails:
        program += body
    return b"".join(program)


def _fresh_session_keyring() -> None:
    """In the child, before bwrap starts: join a new, empty, anonymous session
    keyring (keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)), so that nothing of the
    grader's is in the sandbox's possession. Where keyctl is unknown or refused,
    the seccomp filter alone stands."""
    number = _KEYCTL.get(os.uname().machine)
    if number is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).syscall(number, 1, None)


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


def _setpriv(uid: int, gid: int) -> list[str]:
    """The command that drops root for good before the runner starts."""
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@cache
def bwrap_problem() -> str | None:
    """None when bubblewrap can sandbox here; otherwise why not, in one line."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return (
            "bubblewrap (bwrap) is not installed (Debian/Ubuntu: "
            "apt-get install bubblewrap)"
        )
    probe_command = [bwrap, *_ISOLATION, *_AS_USER, "--ro-bind", "/", "/", "true"]
    if _as_root():
        if shutil.which("setpriv") is None:
            return (
                "setpriv (util-linux) is missing: as root, the grader needs it to "
                "run submissions as an unprivileged user"
            )
        probe_command = [
            bwrap,
            *_ISOLATION,
            *_AS_ROOT,
            "--ro-bind",
            "/",
            "/",
            *_setpriv(SANDBOX_IDS[0], SANDBOX_IDS[0]),
            "true",
        ]
    try:
        probe = subprocess.run(probe_command, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap cannot start: {err}"
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip().splitlines()
        return (
            "bubblewrap cannot create namespaces here "
            f"({reason[-1] if reason else f'exit status {probe.returncode}'})"
        )
    return None


def _unused_id() -> int:
    """A uid (and gid) that no process runs as and no account has."""
    import pwd
    import random

    busy = set()
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            with contextlib.suppress(OSError, ValueError):
                if entry.isdigit():
                    busy.add(os.stat(f"/proc/{entry}").st_uid)
    for _ in range(100):
        candidate = random.SystemRandom().choice(SANDBOX_IDS)
        if candidate in busy:
            continue
        try:
            pwd.getpwuid(candidate)
        except KeyError:
            return candidate
    raise SandboxUnavailable("could not find a free user id for the sandbox")


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


CGROUPS = Path("/sys/fs/cgroup")


class _Cgroups:
    """A memory and a pids cgroup (cgroup v1, as root) for one sandbox: a cap on
    the memory of all its processes together (memfd and tmpfs pages included,
    which no rlimit sees) and on its tasks; everything in them is killed at the
    end. Where none can be made (cgroup v2, no rights), nothing: the rlimits and
    the runner's count remain."""

    def __init__(self, memory_bytes: int = 0, tasks: int = 0):
        self.groups: list[Path] = []
        if memory_bytes <= 0 or tasks <= 0:  # none asked for
            return
        if not _as_root() or (CGROUPS / "cgroup.controllers").exists():
            return
        name = f"transformer-course-grade-{os.getpid()}-{time.monotonic_ns()}"
        settings = {
            "memory": [
                ("memory.limit_in_bytes", memory_bytes),
                ("memory.memsw.limit_in_bytes", memory_bytes),  # no swap either
            ],
            "pids": [("pids.max", tasks)],
        }
        try:
            for controller, values in settings.items():
                base = CGROUPS / controller
                if not (base / "cgroup.procs").exists():
                    continue
                group = base / name
                group.mkdir()
                self.groups.append(group)
                for key, value in values:
                    if (group / key).exists():
                        (group / key).write_text(str(value))
        except OSError:
            self.remove()

    def join(self) -> None:
        """Put the calling process in the groups (run in the child, before exec)."""
        for group in self.groups:
            fd = os.open(group / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def remove(self) -> None:
        """Kill every process in the groups, then remove them."""
        for group in self.groups:
            for _ in range(100):
                try:
                    pids = (group / "cgroup.procs").read_text().split()
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.01)
            with contextlib.suppress(OSError):
                group.rmdir()
        self.groups = []


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
        self.last_error = ""  # stderr of the last run, when it stopped early
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
                [
                    os.path.dirname(os.path.abspath(sys.executable)),
                    "/usr/local/bin",
                    "/usr/bin",
                    "/bin",
                ]
            ),
            "HOME": str(work),
            "TMPDIR": str(work),
            "USER": "learner",
            "LOGNAME": "learner",
            "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(work / ".matplotlib"),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TQDM_DISABLE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }

    def _command(
        self,
        scratch: Path,
        identity: tuple[int, int] | None = None,
        seccomp: int | None = None,
    ) -> list[str]:
        """The command that runs the runner, which reads its plan and cases on
        stdin; ``identity`` is the (uid, gid) graded code runs as when the
        grader is root (None otherwise); ``seccomp``, a descriptor bwrap reads
        :func:`key_call_filter` from."""
        python = [os.path.abspath(sys.executable), "-I", "-B"]  # no "..": the
        # folders a relative path passes through may not exist in the sandbox
        if not self.sandboxed:
            runner = scratch / "runner.py"
            shutil.copyfile(RUNNER, runner)
            shutil.copyfile(SCREEN, scratch / "screen.py")
            return [*python, str(runner), "-"]
        # --as-pid-1: the runner is the namespace's init, which its children
        # cannot kill or stop (the kernel drops those signals to PID 1)
        command = [
            shutil.which("bwrap") or "bwrap",
            *_ISOLATION,
            *(() if seccomp is None else ("--seccomp", str(seccomp))),
            *(_AS_USER if identity is None else _AS_ROOT),
            "--as-pid-1",
            "--tmpfs",
            "/",
            # /tmp first: folders bound below may live under it (a clone in /tmp)
            "--perms",
            "01777",
            "--size",
            str(WORK_BYTES),
            "--tmpfs",
            "/tmp",
        ]
        made, bound = {"/", "/tmp"}, set()

        def bind(source: str, target: str) -> None:
            # the folders above a bound one, readable by the sandbox's user (made
            # by bwrap itself they would be root's alone)
            for parent in reversed([str(f) for f in Path(target).parents]):
                inside = any(parent.startswith(b + os.sep) for b in bound)
                if parent not in made | bound and not inside:
                    command.extend(["--perms", "0755", "--dir", parent])
                    made.add(parent)
            command.extend(["--ro-bind", source, target])
            bound.add(target)

        for folder in SYSTEM_FOLDERS:
            if os.path.islink(folder):
                command.extend(["--symlink", os.readlink(folder), folder])
            elif os.path.isdir(folder):
                bind(folder, folder)
        for entry in ETC_ENTRIES:
            path = os.path.join("/etc", entry)
            if os.path.exists(path):
                bind(path, path)
        for name in ("passwd", "group"):
            bind(str(scratch / name), f"/etc/{name}")
        for folder in _python_folders():
            bind(folder, folder)
        # the course package (the answer key) must not be there, even when it is
        # installed inside a folder bound above
        if any(str(PACKAGE).startswith(f + os.sep) for f in _python_folders()):
            command.extend(["--tmpfs", str(PACKAGE)])
        command += [
            "--dev",
            "/dev",
            "--perms",
            "01777",
            "--size",  # /dev/shm would otherwise be half of the host's memory
            str(16 * 2**20),
            "--tmpfs",
            "/dev/shm",
            "--proc",
            "/proc",
        ]
        bind(str(scratch), str(scratch))
        bind(str(RUNNER), INSIDE_RUNNER)
        bind(str(SCREEN), INSIDE_SCREEN)
        command += ["--remount-ro", "/", "--chdir", str(scratch), "--clearenv"]
        for name, value in self._environment(scratch).items():
            command += ["--setenv", name, value]
        if identity is not None:
            python = [*_setpriv(*identity), *python]
        return [*command, "--", *python, INSIDE_RUNNER, "-"]

    def run(
        self,
        jobs: list[dict],
        timeout: float,
        preamble: str = "",
        until: float | None = None,
    ) -> list[SandboxResult | None]:
        """Run jobs, one after the other, in one sandbox; one result per job.

        Each job has ``cells`` [(index, source)], ``function``, ``forbidden`` and
        ``cases`` (one list of argument tuples per check). ``timeout`` is the
        deadline of each stage (the preamble, each cell, the calls), in seconds.
        ``preamble`` is code every job runs before the learner's cells.
        A job gets None when it never started: the sandbox died before it (a
        job that kills the sandbox's own process), or ``until`` (a
        ``time.monotonic()`` time: the caller's budget) came first.
        """
        scratch = Path(tempfile.mkdtemp(prefix="grade-"))
        identity = None
        if self.sandboxed and _as_root():
            uid = _unused_id()
            identity = (uid, uid)
        try:
            return self._run(scratch, jobs, timeout, preamble, identity, until)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _plan(
        self,
        scratch: Path,
        jobs: list[dict],
        timeout: float,
        preamble: str,
        identity: tuple[int, int] | None = None,
    ):
        entries, cases = [], []
        for job in jobs:
            buffer = io.BytesIO()
            torch.save(job["cases"], buffer)
            cases.append(buffer.getvalue())
            entries.append(
                {
                    "cells": job["cells"],
                    "function": job["function"],
                    "test": job.get("test"),
                    "forbidden": list(job.get("forbidden", ())),
                    "shape": [len(check) for check in job["cases"]],
                }
            )
        plan = {
            "preamble": preamble,
            "jobs": entries,
            "timeout": timeout,
            # a cap on one exercise, whatever its number of cells
            "job_limit": timeout * JOB_STAGES,
            "max_tasks": EXTRA_TASKS,
            "work": str(self._work(scratch)),
            "max_result_bytes": MAX_RESULT_BYTES,
            "warm": ["numpy", "matplotlib.pyplot", "IPython.core.interactiveshell"],
            "rlimits": {
                "AS": self.memory_bytes,
                "FSIZE": MAX_RESULT_BYTES,
                "CPU": self.cpu_seconds,
                "CORE": 0,
                # a uid of its own (as root): every task the sandbox runs counts;
                # the grader's own user: what it already runs, and the sandbox's
                "NPROC": EXTRA_TASKS
                if identity is not None
                else _tasks_of_this_user() + EXTRA_TASKS,
            },
        }
        # The plan goes to the runner on its stdin, not as a file: it holds the
        # instructors' tests, and scratch is read-only inside, so a plan.json
        # there could not be removed (the fifteenth red team read it). Each
        # job's cases follow it, read by the runner only once that job's child
        # has started, so no child's cells ever find them (runner.frame).
        stream = b"".join(
            frame(part) for part in [json.dumps(plan).encode("utf-8"), *cases]
        )
        uid, gid = identity if identity is not None else (os.getuid(), os.getgid())
        (scratch / "passwd").write_text(
            f"learner:x:{uid}:{gid}:learner:{self._work(scratch)}:/bin/sh\n"
        )
        (scratch / "group").write_text(f"learner:x:{gid}:\n")
        if identity is not None:  # the runner reads these as the sandbox's user
            for item in [scratch, *scratch.iterdir()]:
                os.chown(item, uid, gid)
            # bwrap, as root without its capabilities, enters it before setpriv
            scratch.chmod(0o711)
        return stream

    def _run(
        self,
        scratch: Path,
        jobs: list[dict],
        timeout: float,
        preamble: str,
        identity: tuple[int, int] | None = None,
        until: float | None = None,
    ):
        stream = self._plan(scratch, jobs, timeout, preamble, identity)
        until = math.inf if until is None else until
        before = _descendants(os.getpid()) if self.reaper else set()
        cgroups = (  # the sandbox's alone: never around the grader's own user
            _Cgroups(self.memory_bytes + WORK_BYTES + 64 * 2**20, EXTRA_TASKS + 4)
            if self.sandboxed
            else _Cgroups()
        )
        # bwrap's stderr, and the runner's until it silences its own: why a
        # sandbox stopped before its jobs (closed after the run, below)
        errors = tempfile.TemporaryFile()  # noqa: SIM115
        seccomp = None
        if self.sandboxed:  # the filter, in a pipe bwrap reads to its end
            seccomp, writer = os.pipe()
            os.write(writer, key_call_filter())
            os.close(writer)

        def before_bwrap() -> None:  # in the child
            if cgroups.groups:
                cgroups.join()
            _fresh_session_keyring()

        try:
            process = subprocess.Popen(
                self._command(scratch, identity, seccomp),  # the plan on stdin
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                env=self._environment(scratch),
                cwd=scratch,
                start_new_session=True,
                preexec_fn=before_bwrap if self.sandboxed else None,
                pass_fds=() if seccomp is None else (seccomp,),
            )
        except BaseException:
            cgroups.remove()
            errors.close()
            raise
        finally:
            if seccomp is not None:
                os.close(seccomp)
        messages: queue.Queue = queue.Queue()

        def send_plan() -> None:  # in a thread: a runner that never reads it
            with contextlib.suppress(OSError):  # cannot block the grader
                process.stdin.write(stream)
            with contextlib.suppress(OSError):
                process.stdin.close()

        threading.Thread(target=send_plan, daemon=True).start()

        def read() -> None:  # lines of bounded length
            while line := process.stdout.readline(2 * MAX_RESULT_BYTES + 4096):
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
                remaining = min(deadline, until) - time.monotonic()
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
                    # a locked cell's time is the instructor's: one stage per id
                    stages = JOB_STAGES + 1 + locked_ids(jobs[running]["cells"])
                    deadline = time.monotonic() + timeout * stages + 10
        finally:
            self._stop(process, before)
            cgroups.remove()
            reader.join(timeout=5)
            errors.seek(0, os.SEEK_END)
            errors.seek(max(0, errors.tell() - 600))
            tail = errors.read().decode("utf-8", "replace")
            errors.close()
        self.last_error = _text(" ".join(tail.split())[-300:], 300) if tail else ""
        if running is not None and results[running] is None:
            why = (
                "the sandbox ran out of time"
                if not finished
                else "the sandbox's own process was killed"
            )
            results[running] = SandboxResult("crashed", why, "start", None)
        return results

    def _receive(self, line: bytes, results: list, running: int | None) -> int | None:
        """Take one line from the runner. Everything in it is untrusted data:
        types and sizes are checked before use (see :func:`read_output`)."""
        try:
            message = json.loads(line)
            number = message["job"]
        except (ValueError, KeyError, TypeError, RecursionError):
            return running
        if type(number) is not int or not 0 <= number < len(results):
            return running
        if message.get("event") == "start":
            return number
        status = message.get("status")
        if status not in STATUSES:
            status = "error"
        detail = _text(message.get("detail"), 300)
        output = None
        if status == "ok":
            try:
                encoded = message.get("outcomes")
                if type(encoded) is not str or len(encoded) > 2 * MAX_RESULT_BYTES:
                    raise WireError("no results")
                output = read_output(decode_result(base64.b64decode(encoded)))
            except Exception as err:  # forged bytes: any error is this exercise's
                status = "error"
                detail = (
                    "could not read the results (return plain tensors, numbers, "
                    f"lists or tuples of them): {_text(err, 200)}"
                )
                output = None
        stage = _parse_stage(_text(message.get("stage"), 100))
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
        if process.stdout is not None:
            process.stdout.close()
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


STATUSES = ("ok", "timeout", "overtime", "crashed", "error")
OUTCOME_KEYS = {"value", "error", "message", "mutated", "kinds", "value_type"}


def _text(value: object, limit: int) -> str:
    """``value`` if it is a string (cut to ``limit``), else "": nothing else from
    the sandbox is ever turned into text (``str()`` of a hostile object can cost
    minutes or gigabytes)."""
    if isinstance(value, Exception):  # one of ours, or the decoder's
        value = value.args[0] if value.args else ""
    return value[:limit] if type(value) is str else ""


def read_output(raw: object) -> dict:
    """A job's decoded result, checked against its schema: ``preamble_error``
    and ``test_error`` (text or None; the latter for an instructor's test cell),
    ``defined`` (bool), ``errors`` ([cell index, text] pairs) and
    ``outcomes`` (a list per check of outcome dicts: ``value`` plain data,
    ``error`` and ``value_type`` text or None, ``message`` text, ``mutated``
    argument indices, ``kinds`` class names). Raises :class:`WireError`."""

    def optional_text(value: object, limit: int) -> str | None:
        if value is not None and type(value) is not str:
            raise WireError("text expected in the result")
        return None if value is None else value[:limit]

    if type(raw) is not dict or not {"defined", "outcomes"} <= raw.keys():
        raise WireError("the result is not a job's result")
    if type(raw["defined"]) is not bool:
        raise WireError("'defined' is not true or false")
    errors = raw.get("errors", [])
    if type(errors) is not list or not all(
        type(e) is list and len(e) == 2 and type(e[0]) is int and type(e[1]) is str
        for e in errors
    ):
        raise WireError("'errors' is not a list of [cell, message] pairs")
    outcomes = raw["outcomes"]
    if type(outcomes) is not list or not all(type(o) is list for o in outcomes):
        raise WireError("'outcomes' is not a list per check")
    checked = []
    for per_check in outcomes:
        row = []
        for outcome in per_check:
            if type(outcome) is not dict or not outcome.keys() <= OUTCOME_KEYS:
                raise WireError("an outcome is not an outcome")
            mutated = outcome.get("mutated", [])
            kinds = outcome.get("kinds", [])
            if type(mutated) is not list or not all(type(i) is int for i in mutated):
                raise WireError("'mutated' is not a list of argument indices")
            if type(kinds) is not list or not all(type(k) is str for k in kinds):
                raise WireError("'kinds' is not a list of class names")
            message = outcome.get("message", "")
            if type(message) is not str:
                raise WireError("an outcome's message is not text")
            row.append(
                {
                    "value": outcome.get("value"),
                    "error": optional_text(outcome.get("error"), 100),
                    "message": _cut(message),
                    "mutated": mutated[:64],
                    "kinds": [k[:100] for k in kinds[:20]],
                    "value_type": optional_text(outcome.get("value_type"), 100),
                }
            )
        checked.append(row)
    return {
        "preamble_error": optional_text(raw.get("preamble_error"), 300),
        # an instructor's test cell: "" when it ran without an error
        "test_error": optional_text(raw.get("test_error"), 300),
        "defined": raw["defined"],
        "errors": [[i, m[:300]] for i, m in errors[:1000]],
        "outcomes": checked,
    }


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
