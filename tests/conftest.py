"""Fixtures shared by test files: the book, built once per test run.

``make test`` runs two pytest workers (``-n 2 --dist loadfile``), each with its
own session, and both tests/test_book.py and tests/test_browser.py need the
built book. Two things keep it to one build:

- the scheduler below sends both files to the same worker, one after the other,
  so that the other worker never sits idle waiting for the build, and hands
  them out first: the build is the longest unit of the run (about 270 s of
  one core), and xdist otherwise orders units by their number of tests, which
  put it half-way through the run, on its critical path;
- whatever the scheduling, the first worker to ask builds the book into a folder
  the workers share (the run's temporary root), and a file lock makes any other
  wait for that build and reuse it, or its failure, instead of building again.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import pytest
from book_helpers import ROOT, build_book
from work_order import BOOK_FILES, put_the_slowest_first

SCREENSHOTS = ROOT / "_build" / "screenshots"


def _shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this run sees (the plain base temp without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    """The built site's html folder; the book is built once for all workers.

    ``BOOK_HTML=path/to/_build/html`` checks a site built earlier instead (no
    build, so not a test of the current notebooks).
    """
    if os.environ.get("BOOK_HTML"):
        return Path(os.environ["BOOK_HTML"]).resolve()
    shared = _shared_folder(tmp_path_factory)
    out = shared / "book"
    record = shared / "book-build.json"
    with (shared / "book-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not record.is_file():
            record.write_text(json.dumps(build_book(out)))
        result = json.loads(record.read_text())
    assert result["returncode"] == 0, result["log"]
    return out / "_build" / "html"


def pytest_sessionstart(session):
    session.config._started = time.time()


def pytest_terminal_summary(terminalreporter, config):
    """The browser test's results per page, when it ran in this session."""
    started = getattr(config, "_started", time.time())
    paths = SCREENSHOTS.glob("*.json") if SCREENSHOTS.is_dir() else []
    reports = sorted(
        (
            json.loads(path.read_text())
            for path in paths
            if path.stat().st_mtime >= started
        ),
        key=lambda record: record["page"],
    )
    if not reports:
        return
    write = terminalreporter.write_line
    write(f"browser test: screenshots and reports in {SCREENSHOTS}")
    write(
        f"{'page':28} {'JS errors':>9} {'failed requests':>15} {'load ms':>8} "
        f"{'ready ms':>8}"
    )
    for record in reports:
        write(
            f"{record['page']:28} {len(record['js_errors']):>9} "
            f"{len(record['failed_requests']):>15} {record['load_ms']:>8} "
            f"{record['ready_ms']:>8}"
        )
    layout = SCREENSHOTS / "layout" / "layout.json"
    if layout.is_file() and layout.stat().st_mtime >= started:
        _write_layout_table(write, json.loads(layout.read_text()))


#: The layout table's columns: (heading, what it counts in a page's layout record)
LAYOUT_COLUMNS = (
    ("eqs", lambda r: r["equations"]),
    ("cut", lambda r: len(r["clipped_equations"])),
    ("scroll", lambda r: len(r["scrolled_equations"])),
    ("2 nos", lambda r: len(r["double_numbers"])),
    ("code", lambda r: r["code"]),
    ("hidden", lambda r: len(r["clipped_code"])),
    ("scroll", lambda r: len(r["scrolled_code"])),
    ("tables", lambda r: r["tables"]),
    ("cut", lambda r: len(r["clipped_tables"])),
    ("wide img", lambda r: len(r["wide_images"])),
    ("page px", lambda r: r["page_overflow_px"]),
)


def _write_layout_table(write, layout: dict):
    """Per page and width (the browser test's layouts): display equations and how
    many are cut off, scroll in their own box or carry two numbers; code blocks,
    hidden or scrolling lines; tables cut off; images wider than the column; how
    far the page itself overflows the window."""
    write("browser test: what does not fit, per page and width (layout/layout.json)")
    head = " ".join(f"{name:>{max(len(name), 4)}}" for name, _ in LAYOUT_COLUMNS)
    write(f"{'page@width':32} {head}")
    for key in sorted(layout, key=lambda k: (k.split("@")[0], int(k.split("@")[1]))):
        cells = " ".join(
            f"{count(layout[key]):>{max(len(name), 4)}}"
            for name, count in LAYOUT_COLUMNS
        )
        write(f"{key:32} {cells}")


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pragma: no cover - pytest-xdist is in requirements.txt
    pass
else:

    class BookFilesTogether(LoadFileScheduling):
        """``--dist loadfile``, with the files that use the built book as one,
        handed out first, then the slowest files (:data:`SLOW_FILES`), longest
        first, then the rest as pytest-xdist orders them."""

        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return BOOK_FILES[0] if scope in BOOK_FILES else scope

        def _assign_work_unit(self, node) -> None:
            put_the_slowest_first(self.workqueue)
            super()._assign_work_unit(node)

    @pytest.hookimpl(optionalhook=True)  # fine under -p no:xdist too
    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") == "loadfile":
            return BookFilesTogether(config, log)
        return None
