"""Test-wide settings, shared by unit tests (tests/) and notebooks (book/, exercises/).

Notebook kernels inherit this process's environment, so what is set here
applies to them too.
"""

import os

# Threads: the suite runs two pytest workers on two cores (`-n 2`). Two threads
# per process on two shared cores ran 10-20x slower in our trials, so every
# process (and every notebook kernel) uses one thread.
os.environ.setdefault("TRANSFORMER_COURSE_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# Quizzes keep submitted answers in ~/.transformer_course/answers.json for the
# learner: never read or written by tests, notebooks under nbval or the book build.
os.environ["TRANSFORMER_COURSE_ANSWERS"] = "none"
# tqdm writes progress bars to stderr; keep test logs quiet.
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # after the thread variables are set

torch.set_num_threads(int(os.environ["TRANSFORMER_COURSE_THREADS"]))
