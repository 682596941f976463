"""Test-wide settings, shared by unit tests (tests/) and notebooks (book/, exercises/).

Notebook kernels inherit this process's environment, so what is set here
applies to them too.
"""

import os
from pathlib import Path

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

import pytest
import torch  # after the thread variables are set

torch.set_num_threads(int(os.environ["TRANSFORMER_COURSE_THREADS"]))


def _book_pages() -> set[str]:
    """The notebooks of the book's table of contents, as ``book/04_block.ipynb``."""
    import yaml

    toc = yaml.safe_load((Path(__file__).parent / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part["chapters"]:
            pages += [
                chapter["file"],
                *(s["file"] for s in chapter.get("sections", [])),
            ]
    return {f"{page}.ipynb" for page in pages}


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they do
def pytest_collection_modifyitems(config, items):
    """Run each of the book's notebooks once, not twice.

    The book build (tests/test_book.py) executes every notebook of _toc.yml top
    to bottom in a fresh kernel, and a cell's error fails the build
    (``raise_on_error``) with the notebook, cell and traceback in its log: what
    nbval checks of these notebooks (``--nbval-lax``, no stored outputs) and
    more. When this run builds the book, its nbval items for those notebooks
    are deselected, which saves some four minutes of two cores; ``pytest
    book/04_block.ipynb``, ``-m "not book"`` or ``BOOK_HTML=...`` still run them
    under nbval.
    """
    builds_book = not os.environ.get("BOOK_HTML") and any(
        item.nodeid.startswith("tests/test_book.py::") for item in items
    )
    if not builds_book:
        return
    pages = _book_pages()
    run_by_build = [item for item in items if item.nodeid.split("::", 1)[0] in pages]
    if run_by_build:
        config.hook.pytest_deselected(items=run_by_build)
        items[:] = [item for item in items if item not in run_by_build]
        config._notebooks_run_by_the_build = sorted(
            {item.nodeid.split("::", 1)[0] for item in run_by_build}
        )


def pytest_terminal_summary(terminalreporter, config):
    notebooks = getattr(config, "_notebooks_run_by_the_build", None)
    if notebooks:
        terminalreporter.write_line(
            f"{len(notebooks)} notebooks ran in the book build (tests/test_book.py), "
            "not also under nbval: " + ", ".join(notebooks)
        )
