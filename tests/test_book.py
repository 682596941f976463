"""Build the whole book with warnings as errors, and check it renders offline.

The build executes every notebook afresh (``execute_notebooks: force``) and
fails on any cell error (``raise_on_error``) or Sphinx warning (``-W``).
"""

import html
import json
import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from book_helpers import ROOT, toc_files

from transformer_course.exercises import CHAPTERS, chapter

pytestmark = pytest.mark.book


class Resources(HTMLParser):
    """Every URL a page loads by itself: scripts, stylesheets, images, icons."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "audio", "video") and attrs.get(
            "src"
        ):
            self.urls.append(attrs["src"])
        if (
            tag == "link"
            and attrs.get("href")
            and attrs.get("rel")
            in (
                "stylesheet",
                "icon",
                "preload",
                "modulepreload",
                "shortcut icon",
            )
        ):
            self.urls.append(attrs["href"])


@pytest.fixture(scope="module")
def site(book_html):
    """The built site (tests/conftest.py builds the book once per test run)."""
    return book_html


def test_every_toc_page_is_built(site):
    assert (site / "index.html").is_file()
    for name in toc_files():
        assert (site / f"{name}.html").is_file(), name


def test_no_page_loads_anything_from_outside(site):
    # every page of the site (templates under _static are not pages)
    pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)
    assert len(pages) >= len(toc_files())
    for page in pages:
        parser = Resources()
        parser.feed(page.read_text(encoding="utf-8"))
        for url in parser.urls:
            parts = urlsplit(url)
            assert not parts.scheme, f"{page.name} loads {url}"
            assert not parts.netloc, f"{page.name} loads {url}"
            if url.startswith("data:"):
                continue
            target = (page.parent / parts.path).resolve()
            assert target.is_file(), (
                f"{page.name} loads {url}, which is not in the site"
            )


def test_math_uses_the_vendored_mathjax(site):
    page = (site / "book" / "notation.html").read_text(encoding="utf-8")
    assert re.search(r'src="\.\./_static/vendor/mathjax/tex-chtml\.js', page)
    assert r"\(N\)" in page or "\\(N" in page  # math is left for MathJax to typeset
    fonts = list(
        (site / "_static/vendor/mathjax/output/chtml/fonts/woff-v2").glob("*.woff")
    )
    assert len(fonts) > 10


def test_widget_snapshots_use_the_vendored_manager(site):
    page = (site / "book" / "template.html").read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in page
    assert 'src="../_static/vendor/require.js' in page
    assert 'src="../_static/vendor/require-config.js' in page
    assert 'src="../_static/vendor/html-manager/embed-amd.js' in page
    # the icon fonts the manager asks for, next to it
    assert list((site / "_static/vendor/html-manager").glob("*.woff2"))


def test_notebooks_were_executed_at_build_time(site):
    # committed notebooks carry no outputs, so these come from this build
    page = (site / "book" / "notation.html").read_text(encoding="utf-8")
    assert "row sums of A_rows" in page
    assert "U X (Turner) transposed equals nn.Linear(x): True" in page
    assert list((site / "_images").glob("*.png"))


def test_launch_download_and_repository_buttons(site):
    page = (site / "book" / "notation.html").read_text(encoding="utf-8")
    repo = "github.com/transformer-course/transformer-course"
    assert f"https://colab.research.google.com/github/{repo.split('/', 1)[1]}" in page
    assert "https://mybinder.org/v2/gh/" in page
    assert f"https://{repo}" in page  # repository button
    assert "../_sources/book/notation.ipynb" in page  # download the notebook


# every chapter with exercises: exercises/NN_topic, by its number
EXERCISE_NAMES = {
    int(name.split("/")[1][:2]): name.split("/")[1]
    for name in toc_files()
    if name.startswith("exercises/")
}


def test_every_chapter_with_exercises_has_its_page():
    assert set(EXERCISE_NAMES) == set(CHAPTERS)


@pytest.mark.parametrize("name", sorted(EXERCISE_NAMES.values()))
def test_exercise_pages_show_stubs_not_solutions(site, name):
    page = (site / "exercises" / f"{name}.html").read_text(encoding="utf-8")
    assert "NotImplementedError" in page
    assert "BEGIN SOLUTION" not in page
    assert not (site / "exercises" / "source").exists()
    assert not list(site.rglob("_sources/exercises/source/*"))
    # no line of a reference solution appears in the page's text (code is split
    # into highlighting spans, so compare against the text with tags removed)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "raise NotImplementedError()" in text  # the matching does find code lines
    source = json.loads((ROOT / "exercises" / "source" / f"{name}.ipynb").read_text())
    for cell in source["cells"]:
        cell_source = "".join(cell["source"])
        if "### BEGIN SOLUTION" in cell_source:
            solution = cell_source.split("### BEGIN SOLUTION")[1].split(
                "### END SOLUTION"
            )[0]
            for line in solution.strip().splitlines():
                if sum(c.isalnum() for c in line) < 3:  # ")" or "]": anywhere
                    continue
                assert line.strip() not in text, line


@pytest.mark.parametrize("number", sorted(CHAPTERS))
def test_quizzes_are_html_on_the_page_not_widget_snapshots(site, number):
    name = EXERCISE_NAMES[number]
    page = (site / "exercises" / f"{name}.html").read_text(encoding="utf-8")
    keys = re.findall(r'<form class="tc-quiz" data-quiz="([^"]+)"', page)
    assert keys == list(chapter(number).quizzes)


@pytest.mark.parametrize("number", sorted(CHAPTERS))
def test_exercise_pages_have_no_dead_buttons(site, number):
    """Checks and the progress table need a kernel: on the static page each
    shows its results and says so in place, with no "Check again" button."""
    name = EXERCISE_NAMES[number]
    page = (site / "exercises" / f"{name}.html").read_text(encoding="utf-8")
    # no widget view to draw: the html-manager draws buttons only from these
    assert "widget-view+json" not in page
    notes = page.count('<p class="tc-needs-kernel">')
    assert notes == len(chapter(number).exercises) + 1  # each check, the progress
    assert page.count("not attempted") >= len(chapter(number).exercises)


def test_chapter_one_ran_with_its_figures(site):
    page = (site / "book" / "01_tokens.html").read_text(encoding="utf-8")
    assert "trained 1,792 merges" in page  # printed by a cell at build time
    assert page.count('src="../_images/') >= 5  # its five figures
    assert "../exercises/01_tokens.html" in page  # links its exercises


def test_footer_has_this_copyright(site):
    assert "2026" in (site / "book" / "intro.html").read_text(encoding="utf-8")


def test_citations_link_to_their_entries_on_the_references_page(site):
    """[Turner](#turner2023) keeps its text and links to Turner's entry (with
    the reference as its tooltip); every entry of references.bib is listed."""
    references = (site / "book" / "references.html").read_text()
    entries = set(re.findall(r'<div class="citation" id="([^"]+)"', references))
    bib = (ROOT / "references.bib").read_text()
    assert len(entries) == len(re.findall(r"^@\w+\{", bib, re.M))
    chapter = (site / "book" / "04_block.html").read_text()
    links = re.findall(
        r'<a class="course-citation reference internal" href="references\.html#([^"]+)"'
        r' title="([^"]*)"><span[^>]*>([^<]*)</span>',
        chapter,
    )
    assert len(links) >= 20, len(links)
    for anchor, _title, text in links:
        assert anchor in entries, (anchor, text)
    turner = [title for _, title, text in links if text == "Turner"]
    assert turner
    assert all("An introduction to transformers" in title for title in turner)


def test_each_reference_links_back_to_the_pages_that_cite_it(site):
    """Under each entry of the References page: "Cited in:" and a link to every
    page whose prose cites it, in reading order, and none that does not."""
    references = (site / "book" / "references.html").read_text()
    entries = dict(
        re.findall(
            r'<div class="citation" id="([^"]+)"[^>]*>(.*?)</div>', references, re.S
        )
    )
    links = {
        anchor: re.findall(
            r'<a class="reference internal" href="([^"#]+)#?([^"]*)">',
            entry.split("Cited in:")[-1],
        )
        for anchor, entry in entries.items()
        if "Cited in:" in entry
    }
    cited_in = {anchor: [page for page, _ in found] for anchor, found in links.items()}
    assert len(cited_in) >= len(entries) - 1, set(entries) - set(cited_in)
    for anchor, found in links.items():
        assert found, anchor
        for page, section in found:  # each page named really links to this entry,
            text = (site / "book" / page).read_text()
            assert f'href="references.html#{anchor}"' in text, (anchor, page)
            # from the section the link leads to: the first that cites it
            assert section, (anchor, page)
            start = text.index(f'id="{section}"')
            assert start < text.index(f'href="references.html#{anchor}"'), (
                anchor,
                page,
            )
    # Kneser and Ney: cited in chapter 6 only
    kneser = [a for a in cited_in if "kneser" in entries[a].lower()]
    assert [cited_in[a] for a in kneser] == [["06_gpt.html"]]
    # Turner: cited by the first chapter and by later ones, in reading order
    turner = next(
        a for a in cited_in if "introduction to transformers" in entries[a].lower()
    )
    order = [name.split("/")[-1] + ".html" for name in toc_files()]
    pages = cited_in[turner]
    assert len(pages) >= 8
    assert pages == sorted(pages, key=order.index)


def test_equation_numbers_link_to_their_equations(site):
    """[eq. (5.2)](#eq-5-2) links to the equation tagged 5.2, on its page or
    another (an exercise page links into its chapter)."""
    linked = 0
    for page in sorted((site / "book").glob("*.html")) + sorted(
        (site / "exercises").glob("*.html")
    ):
        text = page.read_text()
        for target in re.findall(
            r'<a class="course-eq reference internal" href="([^"]*)"', text
        ):
            path, anchor = target.split("#")
            there = (page.parent / path).resolve() if path else page
            assert f'<span class="target" id="{anchor}"></span>' in there.read_text(), (
                page.name,
                target,
            )
            linked += 1
    assert linked >= 70, linked


def test_every_figure_says_what_it_shows(site):
    """Each figure a cell draws has alt text (the cell's ``mystnb.image.alt``
    metadata), for screen readers and readers whose images do not load; by
    default it was the image's file path."""
    figures = 0
    for page in sorted((site / "book").glob("*.html")):
        html_text = page.read_text(encoding="utf-8")
        for tag in re.findall(
            r"<img [^>]*src=\"\.\./_images/[^\"]+\"[^>]*>", html_text
        ):
            alt = re.search(r'alt="([^"]*)"', tag)
            assert alt, (page.name, tag[:120])
            assert "_images" not in alt.group(1), (page.name, alt.group(1)[:80])
            assert len(alt.group(1).split()) >= 5, (page.name, alt.group(1))
            figures += 1
    assert figures >= 40


def test_figures_inside_widgets_say_what_they_show(site):
    """A figure drawn in a widget (chapter 2's temperature slider) lives in the
    page's saved widget state, out of reach of the cell's alt metadata: it is an
    HTML image with its own alt text (``tc.plotting.show_figure``), never a bare PNG."""
    described = 0
    for page in sorted((site / "book").glob("*.html")):
        for state in re.findall(
            r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>',
            page.read_text(encoding="utf-8"),
            re.S,
        ):
            for model in json.loads(state)["state"].values():
                for output in model.get("state", {}).get("outputs", []):
                    data = output.get("data", {})
                    assert "image/png" not in data, page.name
                    for tag in re.findall(r"<img [^>]*>", data.get("text/html", "")):
                        alt = re.search(r'alt="([^"]*)"', tag)
                        assert alt, page.name
                        assert len(alt.group(1).split()) >= 5, page.name
                        described += 1
    assert described >= 1


def test_the_first_page_maps_the_model_and_every_chapter_points_to_it(site):
    """Issue 23: the book opens with a picture of the whole model, whose boxes
    link to the chapters that build them, and each chapter opens with a link
    back to its place on that map."""
    intro = (site / "book" / "intro.html").read_text(encoding="utf-8")
    assert 'id="what-a-transformer-is-the-map"' in intro
    svg = re.search(r"<svg .*?</svg>", intro, flags=re.S)
    assert svg, "no map on the first page"
    assert "<title" in svg.group(0)  # said in words to a screen reader
    assert "<desc" in svg.group(0)
    linked = set(re.findall(r'<a href="([0-9]{2}_\w+)\.html"', svg.group(0)))
    chapters = {
        name.split("/")[1]
        for name in toc_files()
        if re.fullmatch(r"book/\d\d_\w+", name)
    }
    assert len(chapters) >= 7
    assert linked == chapters, (linked, chapters)
    for name in chapters:
        page = (site / "book" / f"{name}.html").read_text(encoding="utf-8")
        assert 'href="intro.html#what-a-transformer-is-the-map"' in page, name
