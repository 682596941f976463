"""Headings read as plain text wherever a notebook is shown.

JupyterLab's table of contents, Colab's outline and the book's sidebar show a
heading's text as it is written: TeX in a heading (``$\\sqrt{d_k}$``) reaches
the learner raw. Symbols every font has (√, ×, N) say the same.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from book_helpers import ROOT

NOTEBOOKS = sorted(
    path.relative_to(ROOT).as_posix()
    for folder in ("book", "exercises")
    for path in (ROOT / folder).glob("*.ipynb")
)


def headings(path: str) -> list[str]:
    notebook = nbformat.read(ROOT / path, as_version=4)
    return [
        line
        for cell in notebook.cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if re.match(r"#{1,6} ", line)
    ]


def test_the_notebooks_are_found():
    assert "book/02_attention.ipynb" in NOTEBOOKS
    assert "exercises/02_attention.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_no_heading_holds_tex(path):
    found = headings(path)
    assert found, f"{path}: no headings at all"
    with_tex = [h for h in found if "$" in h or "\\" in h]
    assert not with_tex, f"{path}: headings with TeX, shown raw in a table of contents"
