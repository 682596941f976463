"""The book build and its table of contents, for tests/test_book.py and
tests/test_browser.py (the build itself is the ``book_html`` fixture in
tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from tools.book_assets import vendor_assets

ROOT = Path(__file__).resolve().parents[1]


def toc_files() -> list[str]:
    """Every page of _toc.yml, as a path without suffix (``book/intro``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part["chapters"]:
            files.append(chapter["file"])
            files += [section["file"] for section in chapter.get("sections", [])]
    return files


def build_book(out: Path) -> dict:
    """Build the book into ``out`` as ``make book`` does; return what happened."""
    vendor_assets(ROOT / "_vendor")
    command = [
        str(Path(sys.executable).with_name("jupyter-book")),
        "build",
        str(ROOT),
        "--path-output",
        str(out),
        "--all",
        "-W",
        "-n",
        "--keep-going",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    return {
        "returncode": result.returncode,
        "seconds": round(time.perf_counter() - start, 1),
        "log": result.stdout[-6000:] + result.stderr[-6000:],
    }
