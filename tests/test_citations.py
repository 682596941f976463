"""Every citation links to the References page, every equation number to its
equation (issue 22).

Chapters cite a work as a Markdown link to its key in references.bib,
``[Turner](#turner2023) §2.3``, and an equation by its number,
``[eq. (4.4)](#eq-4-4)``: the book links them to the work's entry on the
References page and to the equation tagged 4.4 (_ext/course_links.py);
Jupyter shows the same text.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from book_helpers import ROOT

SOURCES = sorted(
    [path.relative_to(ROOT).as_posix() for path in (ROOT / "book").glob("*.ipynb")]
    + ["book/intro.md", "book/references.md"]
)
#: Exercise notebooks are read in JupyterLab, which follows no link to an
#: anchor of the book (#turner2023 is on the book's References page): they link
#: a work itself (its URL in references.bib), the References page for the notes
#: that are not public, and an equation's chapter section.
EXERCISES = sorted(
    path.relative_to(ROOT).as_posix()
    for path in (ROOT / "exercises" / "source").glob("*.ipynb")
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


#: The equations the book numbers, by anchor (``\\tag{4.4}`` -> ``eq-4-4``).
TAGS = {
    "eq-" + re.sub(r"[^0-9A-Za-z]+", "-", tag).strip("-")
    for path in SOURCES
    if path.startswith("book/")
    for text in markdown(path)
    for tag in re.findall(r"\\tag\{([^}]*)\}", text)
}


def test_the_tagged_equations_are_found():
    assert {"eq-1-1", "eq-4-4", "eq-T1-T2", "eq-7-1"} <= TAGS


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
            if target.startswith("eq-") and target not in TAGS:
                unknown.append(target)
        prose = NOT_PROSE.sub(" ", text)
        unlinked += [m.group(0) for m in CITED_AS.finditer(prose)]
        unlinked += re.findall(r"\beqs?\. \(?(?:\d\.\d|T\d)", prose)
    assert not unknown, f"{path}: links to no key of references.bib, no tag: {unknown}"
    assert not unlinked, (
        f"{path}: citations or equations that are not links: {unlinked}"
    )


def _sections_of_tags() -> dict[str, str]:
    """Each tagged equation's chapter section, as a link from exercises/ reads
    it: ``4.1`` -> ``../book/04_block.ipynb#41-the-mlp-...``."""
    from mdit_py_plugins.anchors.index import slugify

    found = {}
    for path in SOURCES:
        if not path.endswith(".ipynb"):
            continue
        heading = None
        for text in markdown(path):
            for line in text.splitlines():
                if match := re.match(r"#{1,3} (.*)", line):
                    heading = slugify(match.group(1))
                for tag in re.findall(r"\\tag\{([^}]*)\}", line):
                    found[tag] = f"../{path}#{heading}"
    return found


URLS = set(re.findall(r"url = \{([^}]+)\}", (ROOT / "references.bib").read_text()))


@pytest.mark.parametrize("path", EXERCISES)
def test_exercise_notebooks_link_what_they_cite_in_a_way_jupyterlab_follows(path):
    sections = _sections_of_tags()
    anchors, unlinked, wrong = [], [], []
    for text in markdown(path):
        anchors += re.findall(r"\]\((#[^)]*)\)", text)
        prose = NOT_PROSE.sub(" ", text)
        unlinked += [m.group(0) for m in CITED_AS.finditer(prose)]
        unlinked += re.findall(r"\beqs?\. \(?(?:\d\.\d|T\d)", prose)
        for words, target in re.findall(r"\[([^\]\n]*)\]\(([^)\s]+)\)", text):
            if equation := re.fullmatch(r"[Ee]q\. \(([^)]+)\)", words):
                if sections.get(equation.group(1)) != target:
                    wrong.append((words, target))
            elif CITED_AS.search(words):
                public = target in URLS
                notes = target == "../book/references.md" and "notes" in words
                if not (public or notes):
                    wrong.append((words, target))
    assert not anchors, f"{path}: links to anchors of the book: {anchors}"
    assert not unlinked, (
        f"{path}: citations or equations that are not links: {unlinked}"
    )
    assert not wrong, f"{path}: links to the wrong place: {wrong}"


def test_every_work_in_the_bibliography_is_cited():
    cited = set()
    for path in SOURCES:
        for text in markdown(path):
            cited |= set(re.findall(r"\]\(#([a-z]+\d{0,4})\)", text))
    assert KEYS - cited == set(), f"never cited: {sorted(KEYS - cited)}"


def _quiz_texts() -> list[tuple[str, str]]:
    from transformer_course.exercises import CHAPTERS, chapter

    return [
        (f"{number}:{key}", text)
        for number in CHAPTERS
        for key, quiz in chapter(number).quizzes.items()
        for text in (quiz.question, quiz.explanation, *getattr(quiz, "options", ()))
    ]


def test_quizzes_link_what_they_cite():
    """A quiz cites as the exercise notebooks do, with Markdown links that the
    quiz renders: a work by its URL, an equation by its chapter and anchor."""
    chapters = {p.stem[:2]: p.name for p in (ROOT / "book").glob("0*.ipynb")}
    unlinked, wrong, links = [], [], 0
    for where, text in _quiz_texts():
        prose = re.sub(r"\[[^\]\n]*\]\([^)\s]*\)", " ", text)
        unlinked += [(where, m.group(0)) for m in CITED_AS.finditer(prose)]
        unlinked += [(where, e) for e in re.findall(r"\beqs?\. \(\d\.\d\)", prose)]
        for words, target in re.findall(r"\[([^\]\n]*)\]\(([^)\s]+)\)", text):
            links += 1
            if equation := re.fullmatch(r"[Ee]q\. \((\d)\.(\d)\)", words):
                number, part = equation.groups()
                want = f"../book/{chapters[f'0{number}']}#eq-{number}-{part}"
                if target != want or f"eq-{number}-{part}" not in TAGS:
                    wrong.append((where, words, target))
            elif target not in URLS:
                wrong.append((where, words, target))
    assert not unlinked, f"citations that are not links: {unlinked}"
    assert not wrong, f"links to the wrong place: {wrong}"
    assert links >= 20


def test_a_quizs_links_work_on_the_page_and_in_jupyterlab():
    from transformer_course.exercises import chapter, quiz_html

    quiz = chapter(4).quizzes["quiz_crossover"]
    page = quiz.html()
    assert "eq. (4.2)" in quiz.explanation
    # the explanation is in the page's encoded payload, linked to the built page
    assert (
        quiz_html.linked(quiz.explanation).count(
            '<a href="../book/04_block.html#eq-4-2" target="_blank"'
        )
        == 1
    )
    assert "[eq. (4.2)]" not in page
    # in JupyterLab, the chapter notebook (no anchor there for an equation)
    lab = quiz_html.linked(quiz.explanation, book=False)
    assert '<a href="../book/04_block.ipynb" target="_blank"' in lab
    assert quiz_html.unlinked("see [Turner](https://x.org) §2") == "see Turner §2"
    assert quiz_html.linked("a <b> & [w](https://x.org/?a=1&b=2)") == (
        'a &lt;b&gt; &amp; <a href="https://x.org/?a=1&amp;b=2" target="_blank" '
        'rel="noopener">w</a>'
    )
