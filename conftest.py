"""Test-wide settings, shared by unit tests (tests/) and notebooks (book/, exercises/).

Notebook kernels inherit this process's environment, so what is set here
applies to them too.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SHARED_DATA = ROOT.parent / "shared" / "data"

# Threads: the suite runs two pytest workers on two cores (`-n 2`). Two threads
# per process on two shared cores ran 10-20x slower in our trials, so every
# process (and every notebook kernel) uses one thread.
os.environ.setdefault("TRANSFORMER_COURSE_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# tqdm writes progress bars to stderr; keep test logs quiet.
os.environ.setdefault("TQDM_DISABLE", "1")
# A pre-seeded download cache: ../shared/data holds tinyshakespeare/input.txt.
if SHARED_DATA.is_dir():
    os.environ.setdefault("TRANSFORMER_COURSE_DATA", str(SHARED_DATA))

import torch  # noqa: E402  (after the thread variables are set)

torch.set_num_threads(int(os.environ["TRANSFORMER_COURSE_THREADS"]))
