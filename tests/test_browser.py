"""Open every page of the built book in a real browser, as an offline reader would.

Chromium (Debian's, driven by Playwright from PyPI) loads each page from a
server on 127.0.0.1; every request to anywhere else is aborted, and counts as a
failure. A page fails on a JavaScript error, a failed request, raw TeX left in
its text, a broken image, or widgets that never render; on exercise pages every
quiz must answer clicks (no answer, a wrong one, the right one).

A full-page screenshot of each page, a screenshot of each answered quiz, and
one JSON report per page (JS errors, failed requests, load and render times) go
to _build/screenshots/; ``make test`` prints the table at the end.

Skipped, with a one-line reason, when Chromium or Playwright is missing.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from book_helpers import ROOT, toc_files

from transformer_course.exercises import CHAPTERS, chapter, quiz_html
from transformer_course.exercises.widgets import MultipleChoice

pytestmark = [pytest.mark.book, pytest.mark.browser]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"browser test: no Chromium at {CHROMIUM} (apt-get install chromium)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="browser test: Playwright is not installed"
)

SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# Messages that every page logs and that do no harm, with the reason.
HARMLESS = {
    # sphinx-thebe emits its configuration twice on every page (TOOLING.md)
    "Identifier 'THEBE_JS_URL' has already been declared",
    # pydata-sphinx-theme, on a first visit (no light/dark choice stored yet)
    "Got invalid theme mode: . Resetting to auto.",
}
# Pages: every page of the table of contents, and Sphinx's own two.
PAGES = [*toc_files(), "genindex", "search"]

# Text on the page (outside code, outputs and typeset math) that is TeX which
# MathJax did not typeset.
RAW_TEX = re.compile(
    r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\\end\{"
    r"|\\(frac|sqrt|sum|prod|mathbf|mathrm|mathcal|operatorname|text|left|right"
    r"|cdot|times|top|alpha|beta|gamma|sigma|mu|softmax|label|eqref)\b"
)
VISIBLE_TEXT = """() => {
  const skip = "script, style, pre, code, textarea, noscript, svg, mjx-container, \
.highlight, .MathJax";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    if (parent.closest("[hidden]") || !parent.getClientRects().length) continue;
    if (node.textContent.trim()) texts.push(node.textContent);
  }
  return texts;
}"""
MATH_ERRORS = """() => Array.from(document.querySelectorAll("mjx-merror"))
  .map(error => (error.getAttribute("data-mjx-error") || error.textContent).slice(0, 80))"""
BROKEN_IMAGES = """() => Array.from(document.images)
  .filter(image => !image.complete || image.naturalWidth === 0)
  .map(image => image.getAttribute("src"))"""
# Output figures that are not a link to themselves (course.js makes each one a
# link, for a phone's reader to open it at full size).
# (Inline images, src="data:…", are left alone: browsers refuse to open them.)
UNLINKED_FIGURES = """() => Array.from(document.querySelectorAll("div.cell_output img"))
  .filter(image => !image.getAttribute("src").startsWith("data:"))
  .filter(image => {
    // course.js's link, or Sphinx's own for an image of a given size
    const link = image.closest("a");
    return !link || link.href !== image.src;
  })
  .map(image => image.getAttribute("src").slice(0, 100))"""
WIDGETS_RENDERED = """() => Array.from(document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]'))
  .every(view => view.previousElementSibling &&
                 view.previousElementSibling.classList.contains("widget-subarea"))"""
MATHJAX_STARTED = """() => !document.querySelector("script[src*='mathjax' i]") ||
  Boolean(window.MathJax && MathJax.startup && MathJax.startup.promise)"""
MATHJAX_DONE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
}"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request log in the test output
        pass


@pytest.fixture(scope="module")
def server(book_html):
    """The built site, served on 127.0.0.1 (a free port)."""
    handler = functools.partial(QuietHandler, directory=str(book_html))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    SCREENSHOTS.mkdir(parents=True)
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


class PageVisit:
    """One page opened in a fresh browser context, with what went wrong.

    ``open(path)`` goes on to another page in the same tab (the layout survey
    visits every page at each width in one context, which saves a second per
    page over a fresh context each)."""

    def __init__(self, browser, base: str, path: str, width: int = 1280):
        self.base = base
        self.js_errors: list[str] = []
        self.failed_requests: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.context.route("**/*", self._only_loopback)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda error: self._js_error(error.message))
        self.page.on("console", self._console)
        self.page.on("requestfailed", self._request_failed)
        self.page.on("response", self._response)
        try:
            self.open(path)
        except Exception:
            self.close()
            raise

    def open(self, path: str) -> None:
        start = time.perf_counter()
        self.page.goto(self.base + path, wait_until="load")
        self.load_ms = round(1000 * (time.perf_counter() - start))
        # Ready: MathJax has typeset the page and every widget view is drawn.
        self.page.wait_for_function(MATHJAX_STARTED, timeout=20_000)
        self.page.evaluate(MATHJAX_DONE)
        try:
            self.page.wait_for_function(WIDGETS_RENDERED, timeout=20_000)
            self.widgets_rendered = True
        except sync_api.TimeoutError:
            self.widgets_rendered = False
        self.ready_ms = round(1000 * (time.perf_counter() - start))

    def _only_loopback(self, route):
        host = urlsplit(route.request.url).hostname
        if route.request.url.startswith("data:") or host == "127.0.0.1":
            route.continue_()
        else:
            route.abort()  # reported by the requestfailed handler

    def _js_error(self, message: str) -> None:
        if not any(harmless in message for harmless in HARMLESS):
            self.js_errors.append(message)

    def _console(self, message) -> None:
        # failed loads are reported (with their URL) as failed requests
        if message.type == "error" and "Failed to load resource" not in message.text:
            self._js_error(f"console.error: {message.text}")

    def _request_failed(self, request) -> None:
        self.failed_requests.append(f"{request.url} ({request.failure})")

    def _response(self, response) -> None:
        if response.status >= 400:
            self.failed_requests.append(f"{response.url} (HTTP {response.status})")

    def close(self) -> None:
        self.context.close()


def report(name: str, visit: PageVisit, **extra) -> None:
    """Write this page's results next to its screenshot (printed by conftest)."""
    record = {
        "page": name,
        "js_errors": visit.js_errors,
        "failed_requests": sorted(set(visit.failed_requests)),
        "load_ms": visit.load_ms,
        "ready_ms": visit.ready_ms,
        **extra,
    }
    path = SCREENSHOTS / f"{name.replace('/', '-')}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False))


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_cleanly_offline(browser, server, name):
    visit = PageVisit(browser, server, f"{name}.html")
    try:
        page = visit.page
        raw_tex = sorted(
            {
                text.strip()[:80]
                for text in page.evaluate(VISIBLE_TEXT)
                if RAW_TEX.search(text)
            }
        )
        broken = page.evaluate(BROKEN_IMAGES)
        unlinked = page.evaluate(UNLINKED_FIGURES)
        math_errors = page.evaluate(MATH_ERRORS)
        if name not in ("genindex", "search"):  # for the layout test, at 1280 px
            LAYOUTS_SEEN[name, 1280] = page.evaluate(LAYOUT)
        start = time.perf_counter()
        page.screenshot(  # JPEG: a fraction of a full-page PNG's time
            path=SCREENSHOTS / f"{name.replace('/', '-')}.jpeg",
            full_page=True,
            type="jpeg",
            quality=80,
            animations="disabled",
        )
        screenshot_ms = round(1000 * (time.perf_counter() - start))
        report(
            name,
            visit,
            raw_tex=raw_tex,
            broken_images=broken,
            math_errors=math_errors,
            widgets_rendered=visit.widgets_rendered,
            screenshot_ms=screenshot_ms,
        )
        assert not visit.js_errors, f"{name}: JavaScript errors {visit.js_errors}"
        assert not visit.failed_requests, f"{name}: failed {visit.failed_requests}"
        assert not raw_tex, f"{name}: raw TeX on the page: {raw_tex}"
        assert not broken, f"{name}: broken images {broken}"
        assert not unlinked, f"{name}: figures that do not open at full size {unlinked}"
        if re.match(r"book/0\d_", name):  # every chapter has figures, all linked
            assert page.locator("div.cell_output a img").count() > 0
        assert not math_errors, f"{name}: MathJax errors {math_errors}"
        assert visit.widgets_rendered, f"{name}: widget views not rendered in 20 s"
    finally:
        visit.close()


def test_every_built_page_is_visited(book_html):
    built = {
        str(path.relative_to(book_html).with_suffix(""))
        for path in book_html.rglob("*.html")
        if "_static" not in path.parts
    }
    assert built == {*PAGES, "index"}


def test_the_front_door_leads_to_the_introduction(browser, server):
    visit = PageVisit(browser, server, "index.html")
    try:
        visit.page.wait_for_url("**/book/intro.html", timeout=10_000)
        assert not visit.js_errors
        assert not visit.failed_requests
    finally:
        visit.close()


EXERCISE_PAGES = [name for name in toc_files() if name.startswith("exercises/")]


def chapter_of(name: str) -> int:
    """exercises/02_attention -> 2"""
    return int(Path(name).name.split("_", 1)[0])


def expect_text(locator, text: str) -> None:
    sync_api.expect(locator).to_contain_text(text, timeout=5_000)


@pytest.mark.parametrize("name", EXERCISE_PAGES)
def test_quizzes_answer_clicks_without_a_kernel(browser, server, name):
    """Each quiz on the page: Submit with no answer, a wrong answer, the right one.

    The right answer comes from the quiz definitions in Python, so this also
    checks that the page's script decodes what :mod:`.quiz_html` encoded.
    """
    assert chapter_of(name) in CHAPTERS
    quizzes = chapter(chapter_of(name)).quizzes
    visit = PageVisit(browser, server, f"{name}.html")
    try:
        forms = visit.page.locator("form.tc-quiz")
        keys = [forms.nth(i).get_attribute("data-quiz") for i in range(forms.count())]
        assert keys == list(quizzes), "every quiz is on the page, as HTML, in order"
        for index, key in enumerate(keys):
            quiz, form = quizzes[key], forms.nth(index)
            feedback = form.locator(".tc-quiz-feedback")
            explanation = form.locator("details")
            submit = form.locator("button.tc-quiz-submit")
            submit.click()
            expect_text(feedback, quiz.blank_message(None))
            assert explanation.is_hidden()
            if isinstance(quiz, MultipleChoice):
                shown = quiz.shown()
                right = shown.index(quiz.options[quiz.answer])
                options = form.locator("label.tc-quiz-option")
                assert [options.nth(i).inner_text() for i in range(len(shown))] == shown
                options.nth((right + 1) % len(shown)).click()
                submit.click()
                expect_text(feedback, "Not quite")
                assert explanation.is_visible()  # offered, closed
                assert explanation.get_attribute("open") is None
                options.nth(right).click()
            else:
                box = form.locator("input[name=number]")
                assert box.input_value() == ""  # starts blank, like the widget
                box.fill("a lot")
                submit.click()
                expect_text(feedback, quiz.blank_message("a lot").split(":")[0])
                box.fill(str(quiz.answer * 2 + 1))
                submit.click()
                expect_text(feedback, "Not quite")
                box.fill(f"{quiz.answer:,}")  # with commas, as a learner types it
            submit.click()
            expect_text(feedback, "Correct")
            sync_api.expect(explanation).to_have_attribute("open", "")
            expect_text(explanation, quiz_html.unlinked(quiz.explanation))
            # its citations are links, to the work or the chapter's equation
            cited = re.findall(r"\]\(([^)\s]+)\)", quiz.explanation)
            hrefs = [
                explanation.locator("a").nth(i).get_attribute("href")
                for i in range(explanation.locator("a").count())
            ]
            assert hrefs == [
                re.sub(r"^(\.\./book/\w+)\.ipynb", r"\1.html", c) for c in cited
            ]
            form.screenshot(
                path=SCREENSHOTS / f"{name.replace('/', '-')}.{key}.png",
                animations="disabled",
            )
        # the progress table follows the quizzes answered on the page: each
        # passed on its second try; the code exercises need a kernel
        for key in keys:
            row = visit.page.locator(f'tr[data-tc-progress="{key}"]').first
            expect_text(row, "passed, on try 2")
        table = visit.page.locator("table.tc-progress").first
        total = table.locator("tr[data-tc-progress]").count()
        assert total > len(keys)  # the code exercises are listed too
        expect_text(
            visit.page.locator(".tc-progress-head").first,
            f"Progress: {len(keys)} of {total} passed.",
        )
        assert not visit.js_errors, visit.js_errors
    finally:
        visit.close()


# --- nothing cut off, at four widths (issue 22) ----------------------------------------

#: A wide screen, a laptop, a small laptop, a phone.
WIDTHS = (1920, 1280, 1024, 390)
LAYOUT = """() => {
  const article = document.querySelector("article.bd-article");
  const column = article.getBoundingClientRect();
  const ownScrollBox = element => {
    for (let node = element; node && node !== article; node = node.parentElement) {
      const style = getComputedStyle(node);
      if (["auto", "scroll"].includes(style.overflowX)) return true;
    }
    return false;
  };
  const wider = element => element.scrollWidth > element.clientWidth + 1;
  const outside = box => box.left < column.left - 1 || box.right > column.right + 1;
  const label = element => element.textContent.trim().replace(/\\s+/g, " ").slice(0, 60);
  const found = {equations: 0, clipped_equations: [], scrolled_equations: [],
                 double_numbers: [],
                 code: 0, scrolled_code: [], clipped_code: [], uncued_code: [],
                 tables: 0,
                 clipped_tables: [], wide_images: [], broken_names: [],
                 wide_inline_math: []};
  for (const math of article.querySelectorAll("mjx-container[display='true']")) {
    found.equations += 1;
    const inner = math.firstElementChild.getBoundingClientRect();
    const box = math.getBoundingClientRect();
    const overflows = wider(math) || inner.left < box.left - 1 || outside(box);
    if (overflows && !(ownScrollBox(math) && !outside(box) && inner.left >= box.left - 1)) {
      found.clipped_equations.push(label(math));
    } else if (overflows) {
      found.scrolled_equations.push(label(math));
    }
    const wrapper = math.closest("div.math");
    const sphinxNumber = wrapper && wrapper.querySelector(".eqno");
    const texNumber = math.querySelector("mjx-mlabeledtr, mjx-labels");
    if (sphinxNumber && texNumber) found.double_numbers.push(label(wrapper));
  }
  for (const pre of article.querySelectorAll("div.highlight pre")) {
    found.code += 1;
    if (wider(pre)) {
      const longest = pre.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "");
      const input = Boolean(pre.closest(".cell_input"));
      (ownScrollBox(pre) ? found.scrolled_code : found.clipped_code).push(
        (input ? "code: " : "output: ") + longest.slice(0, 60));
      // course.js fades the edge with more beyond it: at the start, the right
      if (!pre.classList.contains("tc-more-right") && pre.scrollLeft === 0) {
        found.uncued_code.push(longest.slice(0, 60));
      }
    }
  }
  for (const table of article.querySelectorAll("table")) {
    found.tables += 1;
    if ((wider(table) || outside(table.getBoundingClientRect())) && !ownScrollBox(table)) {
      found.clipped_tables.push(label(table));
    }
  }
  // inline math cannot break over lines, and the theme hides what overflows:
  // one wider than the column, or past its edge, is cut off (a long one
  // belongs in a display)
  for (const math of article.querySelectorAll("mjx-container:not([display='true'])")) {
    const box = math.getBoundingClientRect();
    if ((box.width > column.width + 1 || outside(box)) && !ownScrollBox(math)) {
      found.wide_inline_math.push(label(math));
    }
  }
  // a name in a table breaks only at a <wbr> (course.js): no piece of it
  // between two of them spans two lines
  for (const code of article.querySelectorAll("table code.literal")) {
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(walker.currentNode);
      const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (lines.size > 1) found.broken_names.push(label(code));
    }
  }
  for (const image of article.querySelectorAll("img")) {
    if (outside(image.getBoundingClientRect()) && !ownScrollBox(image)) {
      found.wide_images.push(image.getAttribute("src"));
    }
  }
  found.search_controls = [...document.querySelectorAll(".search-button-field, .search-button")]
    .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== "hidden")
    .length;
  found.page_overflow_px = document.documentElement.scrollWidth - document.documentElement.clientWidth;
  found.column_px = Math.round(column.width);
  return found;
}"""


#: (page, width) -> what LAYOUT found, as the page test measured it at 1280 px
LAYOUTS_SEEN: dict[tuple[str, int], dict] = {}


@pytest.fixture(scope="module")
def layouts(browser, server):
    """Each page at each width: what does not fit, and a screenshot of each page
    at each width (JPEG, in layout/): the whole page at a phone's width, the
    first screen at 1920 and 1024 px (the page test keeps the 1280 px ones)."""
    found = {}
    (SCREENSHOTS / "layout").mkdir(parents=True, exist_ok=True)
    pages = [name for name in PAGES if name not in ("genindex", "search")]
    for width in WIDTHS:
        # the page test measured each page it opened at 1280 px: not again here
        to_visit = [name for name in pages if (name, width) not in LAYOUTS_SEEN]
        found |= {
            (name, width): LAYOUTS_SEEN[name, width]
            for name in pages
            if name not in to_visit
        }
        if not to_visit:
            continue
        visit = PageVisit(browser, server, f"{to_visit[0]}.html", width=width)
        try:
            for index, name in enumerate(to_visit):
                if index:
                    visit.open(f"{name}.html")
                found[name, width] = visit.page.evaluate(LAYOUT)
                stem = name.replace("/", "-")
                if width == 1280:  # the page test keeps a full 1280 px screenshot
                    continue
                visit.page.screenshot(  # JPEG: a tenth of a PNG's time and size
                    path=SCREENSHOTS / "layout" / f"{stem}@{width}.jpeg",
                    full_page=width == 390,  # a phone's whole page; others: one screen
                    type="jpeg",
                    quality=70,
                    animations="disabled",
                )
        finally:
            visit.close()
    path = SCREENSHOTS / "layout" / "layout.json"  # beside, not among, the page reports
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        json.dumps(
            {f"{n}@{w}": v for (n, w), v in found.items()}, indent=1, ensure_ascii=False
        )
    )
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_is_cut_off_at_any_width(layouts, width):
    """No equation, table, image or code line lost off the column's edge: each
    fits, or scrolls inside its own box (code that scrolls fades at the edge
    with more beyond it, a phone's only cue); one number per equation; no inline
    formula wider than the column; a name in a table broken only after a dot or
    an underscore or inside CamelCase; the page itself never scrolls sideways."""
    problems = {}
    for (name, at), found in layouts.items():
        if at != width:
            continue
        bad = {
            key: found[key]
            for key in (
                "clipped_equations",
                "double_numbers",
                "clipped_code",
                "uncued_code",
                "clipped_tables",
                "wide_images",
                "broken_names",
                "wide_inline_math",
            )
            if found[key]
        }
        if found["page_overflow_px"] > 0:
            bad["page_overflow_px"] = found["page_overflow_px"]
        if bad:
            problems[name] = bad
    assert not problems, problems


def test_every_equation_fits_without_scrolling_even_on_a_phone(layouts):
    """Long equations are broken over lines (``aligned``, one relation per
    line), so that none needs its scroll box, down to a phone's 390 px."""
    scrolled = {
        where: found["scrolled_equations"]
        for where, found in layouts.items()
        if found["scrolled_equations"]
    }
    assert not scrolled, scrolled


def test_from_1024_px_up_the_books_code_fits_its_column(layouts):
    """From a laptop's width up, no code cell of a chapter needs sideways
    scrolling: notebook code is formatted to 88 columns, which the column holds
    (an output, a printed table, may scroll in its own box)."""
    wide = {
        (name, width): [c for c in found["scrolled_code"] if c.startswith("code: ")]
        for (name, width), found in layouts.items()
        if width >= 1024 and name.startswith("book/")
    }
    wide = {where: lines for where, lines in wide.items() if lines}
    assert not wide, wide


def test_each_page_shows_one_search_box(layouts):
    """The theme put a search box in the header and another atop the sidebar
    (two on every page, from a laptop's width up): the header's alone stays."""
    counts = {
        where: found["search_controls"]
        for where, found in layouts.items()
        if found["search_controls"] != 1
    }
    assert not counts, counts
