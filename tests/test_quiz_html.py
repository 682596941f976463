"""Quizzes as HTML for the book's pages (transformer_course.exercises.quiz_html).

The browser test (tests/test_browser.py) clicks them; these check the markup:
every option in the shown order, nothing that gives the answer away, nothing
loaded from outside, and the book configured to show the HTML.
"""

import base64
import html
import json
import re
import shutil
import subprocess

import pytest
import yaml
from book_helpers import ROOT
from myst_nb.core.render import get_mime_priority

from transformer_course.exercises import CHAPTERS, chapter
from transformer_course.exercises import quiz_html as qh
from transformer_course.exercises.widgets import MultipleChoice, Numeric

QUIZZES = [quiz for number in CHAPTERS for quiz in chapter(number).quizzes.values()]
CHOICES = [quiz for quiz in QUIZZES if isinstance(quiz, MultipleChoice)]
NUMBERS = [quiz for quiz in QUIZZES if isinstance(quiz, Numeric)]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def by_key(quizzes):
    return pytest.mark.parametrize("quiz", quizzes, ids=[q.key for q in quizzes])


def payload_of(page: str, key: str) -> dict:
    encoded = re.search(r'data-key="([^"]+)"', page).group(1)
    return qh.decode_payload(key, encoded)


def without_quiz_text(quiz, page: str) -> str:
    """The markup with the question and the options cut out."""
    for text in [quiz.question, *getattr(quiz, "options", ())]:
        page = page.replace(qh.linked(text), "")
    return page


def test_there_are_quizzes_of_both_kinds():
    assert len(CHOICES) >= 9
    assert len(NUMBERS) >= 4


@by_key(CHOICES)
def test_every_option_is_shown_in_the_shown_order(quiz):
    page = quiz.html()
    labels = re.findall(r'<label class="tc-quiz-option">(.*?)</label>', page)
    texts = [html.unescape(re.sub(r"<[^>]+>", "", label)) for label in labels]
    assert texts == quiz.shown()
    assert qh.linked(quiz.question) in page


@by_key(CHOICES)
def test_the_right_option_looks_like_every_other(quiz):
    page = quiz.html()
    labels = re.findall(r'<label class="tc-quiz-option">.*?</label>', page)
    shapes = {
        re.sub(r"<span>.*?</span>", "", re.sub(r'value="\d+"', "", label))
        for label in labels
    }
    assert len(shapes) == 1  # same markup: only the text and the index differ
    assert [re.search(r'value="(\d+)"', label).group(1) for label in labels] == [
        str(i) for i in range(len(quiz.options))
    ]
    # the payload knows which one is right, under its shown index
    shown = quiz.shown()
    assert payload_of(page, quiz.key)["answer"] == shown.index(
        quiz.options[quiz.answer]
    )


@by_key(QUIZZES)
def test_the_answer_and_explanation_are_not_in_the_text(quiz):
    page = quiz.html()
    assert quiz.explanation not in page
    assert html.escape(quiz.explanation) not in page
    markup = without_quiz_text(quiz, page).split("<style>")[0]
    assert "correct" not in markup.lower()
    assert "answer" not in markup.replace(">answer<", "")  # the number box's label
    raw = base64.b64decode(re.search(r'data-key="([^"]+)"', page).group(1))
    assert b"explanation" not in raw  # mixed, not just base64
    assert payload_of(page, quiz.key)["explanation"] == qh.linked(quiz.explanation)


@by_key(NUMBERS)
def test_a_numeric_quiz_starts_blank_and_carries_its_tolerance(quiz):
    page = quiz.html()
    assert re.findall(r"<input [^>]*>", page) == [
        '<input type="text" name="number" value="" placeholder="a number" '
        'inputmode="decimal">'
    ]
    payload = payload_of(page, quiz.key)
    assert payload["answer"] == quiz.answer
    assert payload["rel_tol"] == quiz.tolerance  # 0 for a count: exact
    assert payload["blank"] == quiz.blank_message("")
    assert payload["invalid"].format(value="'1,2'") == quiz.blank_message("1,2")
    if quiz.unit:  # an answer in another unit: the page says which it wants
        assert payload["in_unit"].format(value="'x'") == quiz.blank_message("x")


@by_key(QUIZZES)
def test_nothing_is_loaded_from_anywhere(quiz):
    page = quiz.html()
    markup = re.sub(r'data-key="[^"]*"', "", page)  # base64 may hold "//"
    # a link to a cited work loads nothing until the reader follows it
    markup = re.sub(r'<a href="[^"]*" target="_blank" rel="noopener">', "<a>", markup)
    assert not re.search(r"https?:|//\w|\bsrc=|\bhref=|@import|url\(", markup)
    assert page.count("<script>") == 1  # inline, self-contained
    assert page.count("<style>") == 1


def test_payloads_round_trip_any_text():
    payload = {"answer": 2, "explanation": "√64 = 8, Kᵀ, ✅ «quotes» \"and\" 'more'"}
    encoded = qh.encode_payload("quiz_x", payload)
    assert qh.decode_payload("quiz_x", encoded) == payload
    assert qh.encode_payload("quiz_y", payload) != encoded  # the key seeds the mix
    with pytest.raises(UnicodeDecodeError):
        qh.decode_payload("quiz_y", encoded)


def test_the_quiz_box_offers_the_widget_and_the_html():
    quiz = chapter(2).quizzes["quiz_axis"]
    box = chapter(2).quiz("quiz_axis")
    bundle = box._repr_mimebundle_()
    assert WIDGET_VIEW in bundle
    assert bundle["text/html"] == quiz.html()
    assert quiz._repr_mimebundle_()["text/html"] == quiz.html()
    # checks and progress carry a static view too, saying they need a kernel
    progress = chapter(2).progress()._repr_mimebundle_()
    assert WIDGET_VIEW in progress
    assert "Progress: " in progress["text/html"]
    assert "run this notebook" in progress["text/html"]


def test_the_book_shows_the_html_and_jupyter_the_widget():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    overrides = config["sphinx"]["config"]["nb_mime_priority_overrides"]
    for builder in ("html", "dirhtml", "singlehtml"):
        order = get_mime_priority(builder, [tuple(o) for o in overrides])
        assert order.index("text/html") < order.index(WIDGET_VIEW), builder
        # a widget without HTML is still a widget
        assert order.index(WIDGET_VIEW) < order.index("text/plain")


NUMBERS_TYPED = [
    "64",
    " 1,050,624 ",
    "38 597 376",
    "38\u202f597\u202f376",
    "38 597,376",
    "6,4",
    "1_000",
    "1e3",
    "-2.5",
    "32 MiB",
    "32mib",
    "32 GiB",
    "",
    "inf",
    "six",
]


@pytest.mark.skipif(
    shutil.which("node") is None, reason="no node to run the page's script"
)
def test_the_page_reads_a_typed_number_as_the_notebook_does():
    """The book's quizzes parse in JavaScript what the notebook's parse in
    Python: the same numbers, the same refusals, the quiz's unit."""
    from transformer_course.exercises.widgets import parse_number

    match = re.search(
        r"(var cleanNumber = function \(text, unit\) \{.*?\n    \};\n"
        r"    var parseNumber = function \(text, unit\) \{.*?\n    \};)",
        qh._SCRIPT,
        re.S,
    )
    assert match, "cleanNumber and parseNumber not found in the page's script"
    program = (
        f"{match.group(1)}\n"
        f"var typed = {json.dumps(NUMBERS_TYPED)};\n"
        "console.log(JSON.stringify(typed.map(function (t) { return parseNumber(t, 'MiB'); })));\n"
    )
    result = subprocess.run(
        ["node", "-e", program], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == [parse_number(t, "MiB") for t in NUMBERS_TYPED]


def test_the_progress_table_shortens_long_quiz_titles_at_a_word():
    """The learner saw quiz titles cut mid-word ("…N = 1024 tok…"): a long
    title now ends at a whole word, and the whole title is the cell's tooltip."""
    import html as html_module
    import re

    ex = chapter(2)
    table = ex.progress()._repr_mimebundle_()["text/html"]
    cells = re.findall(
        r'<td style="text-align: left" title="([^"]*)">([^<]*)</td>', table
    )
    longest = max(ex.quizzes.values(), key=lambda q: len(q.question))
    assert len(longest.question) > 80  # the test needs a long one
    (shown,) = [
        shown
        for title, shown in cells
        if html_module.unescape(title) == f"Quiz: {longest.question}"
    ]
    shown = html_module.unescape(shown)
    assert shown.endswith(" …")
    assert f"Quiz: {longest.question}".startswith(shown.removesuffix(" …"))
    words = [w.rstrip(",;:(") for w in f"Quiz: {longest.question}".split()]
    assert shown.removesuffix(" …").split()[-1] in words  # a whole word


NEAR_PAIRS = [
    (105, 100),  # within 10 %
    (89, 100),  # not quite
    (200, 100),  # a factor of 2
    (50, 100),  # half
    (38_597_376 * 2, 38_597_376),  # a multiply-add counted twice
    (32 * 1024, 32),  # KiB for MiB
    (0.001, 1.0),
    (-100, 100),  # the sign
    (0, 100),
    (37, 100),  # nowhere near
    (1e6 * 3.5, 3.5),
    (33.55, 32),  # MB where MiB was asked
    (30.52, 32),  # MiB where MB was asked
    (6.5, 6.2832),  # within 10 % of an answer that is no whole number
]


def test_a_near_miss_gets_the_same_hint_on_the_page_and_in_the_notebook():
    match = re.search(
        r"var nearMiss = (function \(value, answer, data\) \{.*?\n    \});",
        qh._SCRIPT,
        re.S,
    )
    assert match, "nearMiss not found in the page's script"
    data = {
        "near": qh.NEAR,
        "near_whole": qh.NEAR_WHOLE,
        "mebi": qh.MEBI,
        "units": qh.UNITS,
        "times": qh.TIMES,
        "fraction": qh.FRACTION,
        "factors": list(qh.FACTORS),
    }
    program = (
        f"var nearMiss = {match.group(1)};\n"
        f"var pairs = {json.dumps(NEAR_PAIRS)};\n"
        f"var data = {json.dumps(data)};\n"
        "console.log(JSON.stringify(pairs.map(function (p) "
        "{ return nearMiss(p[0], p[1], data); })));\n"
    )
    result = subprocess.run(
        ["node", "-e", program], capture_output=True, text=True, check=True
    )
    expected = [qh.near_miss(value, answer) for value, answer in NEAR_PAIRS]
    assert json.loads(result.stdout) == expected
    assert expected[0] == qh.NEAR_WHOLE  # a count: no advice about decimals
    assert expected[-1] == qh.NEAR
    assert "decimals" in qh.NEAR
    assert "decimals" not in qh.NEAR_WHOLE
    assert expected[1] == ""
    assert expected[2] == qh.TIMES.format(base=2)
    assert expected[3] == qh.FRACTION.format(base=2)
    assert expected[5] == qh.TIMES.format(base=2)
    assert expected[6] == qh.FRACTION.format(base=10)
    assert expected[7:10] == ["", "", ""]
    assert expected[10] == qh.TIMES.format(base=10)
    # the hint never names the factor: dividing by it would give the answer
    for hint in expected:
        assert not re.search(r"\b(4|8|100|1000|1024|1000000)\b", hint), hint


#: (value, answer, relative tolerance) for the near-miss tests, and the wrong
#: numbers a quiz is built around, with their hints
NEAR_MISS_CASES = [(100.0, 628.3, 2e-3), (100.1, 628.3, 2e-3), (4.0, 5.0, 0.0)]
NEAR_MISS_CASES += [(4.001, 5.0, 0.0), (3.0, 5.0, 0.0), (628.3 * 2, 628.3, 2e-3)]
NAMED_MISTAKES = [(100.0, "forgot 2π"), (4.0, "forgot the class token")]


def test_a_usual_wrong_answer_gets_its_own_hint_in_the_notebook():
    """A numeric quiz may name the wrong numbers its question is built around
    (the patches without the class token, 1/ω without 2π), each with a hint,
    matched as the answer is."""
    from transformer_course.exercises import chapter

    hints = [qh.near_miss(v, a, NAMED_MISTAKES, tol) for v, a, tol in NEAR_MISS_CASES]
    assert hints[:3] == ["forgot 2π", "forgot 2π", "forgot the class token"]
    assert hints[3:5] == ["", ""]  # a count is matched exactly
    assert hints[5] == qh.TIMES.format(base=2)
    tokens = chapter(7).quizzes["quiz_tokens"]
    assert "class token" in tokens.near("4")
    assert "data-key=" in tokens.html()  # the hint travels in the page's payload
    with pytest.raises(ValueError, match="a mistake is"):
        type(tokens)(**{**vars(tokens), "mistakes": [{"value": 5, "hint": "right"}]})


@pytest.mark.skipif(
    shutil.which("node") is None, reason="no node to run the page's script"
)
def test_the_page_names_a_usual_wrong_answer_as_the_notebook_does():
    match = re.search(
        r"var nearMiss = (function \(value, answer, data\) \{.*?\n    \});",
        qh._SCRIPT,
        re.S,
    )
    data = {"near": qh.NEAR, "near_whole": qh.NEAR_WHOLE, "mebi": qh.MEBI}
    data |= {"units": qh.UNITS, "times": qh.TIMES, "fraction": qh.FRACTION}
    data |= {"factors": list(qh.FACTORS), "mistakes": NAMED_MISTAKES}
    program = (
        f"var nearMiss = {match.group(1)};\n"
        f"var cases = {json.dumps(NEAR_MISS_CASES)};\n"
        f"var data = {json.dumps(data)};\n"
        "console.log(JSON.stringify(cases.map(function (c) "
        "{ data.rel_tol = c[2]; return nearMiss(c[0], c[1], data); })));\n"
    )
    result = subprocess.run(
        ["node", "-e", program], capture_output=True, text=True, check=True
    )
    expected = [
        qh.near_miss(v, a, NAMED_MISTAKES, tol) for v, a, tol in NEAR_MISS_CASES
    ]
    assert json.loads(result.stdout) == expected
    assert expected[0] == "forgot 2π"  # the page's hints are the named ones


def test_the_notebook_s_numeric_quiz_tells_a_near_miss():
    from transformer_course.exercises.widgets import Numeric

    quiz = Numeric(key="q", question="How many?", explanation="x", answer=38_597_376)
    assert quiz.near("77,194,752") == qh.TIMES.format(base=2)
    assert quiz.near("38,597,376") == ""  # right: nothing to hint
    assert quiz.near("a lot") == ""
    assert quiz.near("12") == ""


def test_megabytes_for_mebibytes_are_named_as_such():
    """A near miss by 2^20 / 10^6 is the units, not a term forgotten."""
    assert qh.near_miss(33.55, 32) == qh.UNITS
    assert qh.near_miss(30.52, 32) == qh.UNITS
    assert qh.near_miss(33.0, 32) == qh.NEAR_WHOLE


#: (typed, answer, relative tolerance, named mistakes) for the rounding tests
ROUNDED_CASES = [
    ("0.35", 0.347, 2e-3, []),  # two figures: rounded
    ("3.5e-1", 0.347, 2e-3, []),
    ("-0.35", -0.347, 2e-3, []),
    ("630", 628.3185, 2e-3, []),  # "630": two figures, the last in the tens
    ("4.2", 4.1744, 2e-3, []),
    ("5100", 5050, 0.0, []),  # a count rounded
    ("0.3", 0.347, 2e-3, []),  # one figure: a guess, not a rounding
    ("0.350", 0.347, 2e-3, []),  # three figures, the last wrong
    ("0.34", 0.347, 2e-3, []),  # not the answer rounded (0.35)
    ("0.35", -0.347, 2e-3, []),
    ("5000", 5050, 0.0, []),
    ("4950", 5050, 0.0, [(4950.0, "counted one too few")]),  # named: its hint
    ("5e400", 5.0, 2e-3, []),
    ("00.0035", 0.00347, 2e-3, []),
]


def test_a_rounded_answer_is_told_so_on_the_page_and_in_the_notebook():
    """A JupyterLab learner round: "0.35" for 0.347 was told to check the count,
    and cost a try."""
    expected = [qh.rounded(t, a, tol, m) for t, a, tol, m in ROUNDED_CASES]
    two = qh.ROUNDED.format(digits=2, tolerance="0.2 %")
    assert expected == [two] * 5 + [qh.ROUNDED_WHOLE] + [""] * 7 + [two]
    if shutil.which("node") is None:
        return
    match = re.search(
        r"var rounded = (function \(cleaned, data\) \{.*?\n    \});", qh._SCRIPT, re.S
    )
    assert match, "rounded not found in the page's script"
    data = {"rounded": qh.ROUNDED, "rounded_whole": qh.ROUNDED_WHOLE}
    program = (
        f"var rounded = {match.group(1)};\n"
        f"var cases = {json.dumps(ROUNDED_CASES)};\n"
        f"var data = {json.dumps(data)};\n"
        "console.log(JSON.stringify(cases.map(function (c) { data.answer = c[1]; "
        "data.rel_tol = c[2]; data.mistakes = c[3]; return rounded(c[0], data); })));\n"
    )
    result = subprocess.run(
        ["node", "-e", program], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == expected


def test_a_rounded_answer_costs_no_try_in_the_notebook():
    from transformer_course.exercises import chapter, widgets

    widgets.TRIES.pop("quiz_notes_softmax", None)
    widgets.PROGRESS.pop("quiz_notes_softmax", None)
    box = chapter(6).quiz("quiz_notes_softmax")
    box.control.value = "0.35"
    box.submit.click()
    assert "rounded to 2 significant figures" in box.feedback.value
    assert "quiz_notes_softmax" not in widgets.TRIES
    box.control.value = "0.347"
    box.submit.click()
    assert "Correct" in box.feedback.value
    assert widgets.TRIES["quiz_notes_softmax"] == (1, True)


def test_the_same_wrong_answer_twice_is_one_try():
    """JupyterLab learner rounds: the same wrong option submitted twice counted
    as two tries, and so did one given again after another."""
    from transformer_course.exercises import chapter, widgets

    widgets.TRIES.pop("quiz_layout", None)
    widgets.PROGRESS.pop("quiz_layout", None)
    widgets.WRONG_GIVEN.pop("quiz_layout", None)
    box = chapter(1).quiz("quiz_layout")
    answers = ("(B, D, N)", "(B, D, N)", "(D, N)", "(B, D, N)", "(B, N, D)")
    for answer, tries in zip(answers, (1, 1, 2, 2, 3), strict=True):
        box.control.value = answer
        box.submit.click()  # a wrong answer given before is no new try
        assert widgets.TRIES["quiz_layout"] == (tries, False), answer
    assert "on try 3" in box.feedback.value
    numbers = chapter(6).quiz("quiz_passes")
    widgets.TRIES.pop("quiz_passes", None)
    widgets.PROGRESS.pop("quiz_passes", None)
    for typed in ("4950", "4,950", "5050"):  # the same number, written two ways
        numbers.control.value = typed
        numbers.submit.click()
    assert "on try 2" in numbers.feedback.value
    assert qh.SAME_AGAIN not in numbers.feedback.value
    numbers.control.value = "1"
    numbers.submit.click()  # after passing: wrong, but the pass stays, and says so
    assert "passed this quiz already (on try 2)" in html.unescape(
        numbers.feedback.value
    )
    numbers.submit.click()
    assert qh.SAME_AGAIN in html.unescape(numbers.feedback.value)
    assert widgets.TRIES["quiz_passes"] == (2, False)
