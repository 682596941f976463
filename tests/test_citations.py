"""Every citation is a link to the References page (issue 22).

Chapters cite a work as a Markdown link to its key in references.bib,
``[Turner](#turner2023) §2.3``: the book links it to the work's entry on the
References page (_ext/course_citations.py), and Jupyter shows the same text.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from book_helpers import ROOT

SOURCES = sorted(
    [path.relative_to(ROOT).as_posix() for path in (ROOT / "book").glob("*.ipynb")]
    + [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "exercises" / "source").glob("*.ipynb")
    ]
    + ["book/intro.md", "book/references.md"]
)
KEYS = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "references.bib").read_text(), re.M))

# What is not prose: code, math, links, headings, HTML.
NOT_PROSE = re.compile(
    r"```.*?```"
    r"|\$\$.*?\$\$"
    r"|\\begin\{(\w+\*?)\}.*?\\end\{\1\}"
    r"|(?<!\\)\$[^$\n]+?(?<!\\)\$"
    r"|`[^`\n]*`"
    r"|!?\[[^\]\n]*\]\([^)\n]*\)"
    r"|^#{1,6} [^\n]*$"
    r"|<[^>\n]+>",
    re.S | re.M,
)
#: How the chapters name the works they cite.
CITED_AS = re.compile(
    r"\bTurner\b|\b[A-Z][a-z]+ et al\.|\blecture notes\b|\bhandwritten notes\b"
)


def markdown(path: str) -> list[str]:
    if path.endswith(".md"):
        return [(ROOT / path).read_text()]
    notebook = nbformat.read(ROOT / path, as_version=4)
    return [c.source for c in notebook.cells if c.cell_type == "markdown"]


def test_the_bibliography_holds_the_courses_spine():
    assert {"turner2023", "vaswani2017", "xiong2020", "dosovitskiy2021"} <= KEYS
    turner = re.search(
        r"@misc\{turner2023,.*?\n\}", (ROOT / "references.bib").read_text(), re.S
    )
    assert "arxiv.org/abs/2304.10557" in turner.group(0)


@pytest.mark.parametrize("path", SOURCES)
def test_every_citation_is_a_link_to_a_key_of_the_bibliography(path):
    unlinked, unknown = [], []
    for text in markdown(path):
        for link in re.finditer(r"\]\(#([^)\s]+)\)", text):
            target = link.group(1)
            if re.fullmatch(r"[a-z]+(\d{4})?", target) and target not in KEYS:
                unknown.append(target)
        prose = NOT_PROSE.sub(" ", text)
        unlinked += [m.group(0) for m in CITED_AS.finditer(prose)]
    assert not unknown, f"{path}: links to keys not in references.bib: {unknown}"
    assert not unlinked, f"{path}: citations that are not links: {unlinked}"


def test_every_work_in_the_bibliography_is_cited():
    cited = set()
    for path in SOURCES:
        for text in markdown(path):
            cited |= set(re.findall(r"\]\(#([a-z]+\d{0,4})\)", text))
    assert KEYS - cited == set(), f"never cited: {sorted(KEYS - cited)}"
