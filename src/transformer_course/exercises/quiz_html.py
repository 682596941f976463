"""Quizzes as self-contained HTML and JavaScript, for pages with no kernel.

A quiz in a running notebook is an ipywidgets box whose Submit button calls
Python (:mod:`.widgets`). On the book's static pages no Python runs, so the same
quiz also renders itself as the HTML below: a ``<form>`` with the question, the
options in the order :meth:`MultipleChoice.shown` gives (or an empty text box for
a number), a Submit button, a feedback line and the explanation in a toggle. A
short inline script grades it in the browser; nothing is loaded from anywhere.

The quiz box offers both views in one mime bundle (``widgets.QuizBox``): Jupyter
shows the widget, and ``_config.yml`` tells myst-nb to prefer ``text/html`` over
the widget view on the built pages (``nb_mime_priority_overrides``).

The answer, the explanation and the verdicts are not written in the page as
text: they travel as ``data-key``, a JSON object XOR-ed with a keystream seeded
from the quiz key and base64-encoded (:func:`encode_payload`). That keeps them
out of the page's text, its search index and a reader's glance; it is not a
secret from anyone who reads the script.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence

__all__ = [
    "CHOOSE_FIRST",
    "CORRECT",
    "NOT_A_NUMBER",
    "ON_TRY",
    "TYPE_FIRST",
    "WRONG",
    "choice_quiz_html",
    "decode_payload",
    "encode_payload",
    "number_quiz_html",
]

# What a quiz says, in the notebook and on the page alike.
CHOOSE_FIRST = "Choose an answer first."
TYPE_FIRST = "Type a number first."
NOT_A_NUMBER = (
    "Type a number, such as 0.5, 12,000 or 1e6 (a comma only separates "
    "thousands: decimals take a point): got {value}."
)
# For a question that names its unit, an answer in another unit.
IN_THE_UNIT = "The question asks for {unit}: type the number of {unit} (got {value})."
CORRECT = "Correct."
WRONG = "Not quite."
# The verdict after the first try (the first try is what a quiz records).
ON_TRY = " (on try {tries}: the first try was not right)"
# On the page the explanation waits in a toggle after a wrong answer.
TRY_AGAIN = "Try again, or open the explanation."
# A wrong number near the answer, or off by a usual factor (a multiply-add
# counted as one FLOP, a power of ten, MiB against MB).
NEAR = (
    "Close: within 10 % of the answer. Check the count (a term or a step too "
    "many or too few, a bias), and give more decimals if you rounded."
)
#: The same for a whole-number answer (a count), where decimals are no advice.
NEAR_WHOLE = (
    "Close: within 10 % of the answer. Check the count: a term or a step too "
    "many or too few, a bias, a first or last item."
)
# The factor itself is not named (dividing by it would give the answer away,
# and the first try is what counts): only whether it is a power of 2 or of 10.
TIMES = (
    "Your number is too large by a power of {base}: check for a factor too many, "
    "or a division left out."
)
FRACTION = (
    "Your number is too small by a power of {base}: check for a missing factor, "
    "or a division too many."
)
FACTORS = (2, 4, 8, 10, 100, 1000, 1024, 1000000)
# The answer rounded (to the digits typed, two or more): no mistake, so not a
# try; said in place of a verdict, as a blank answer is.
ROUNDED = (
    "That is the answer rounded to {digits} significant figures: right as far as "
    "it goes, but it is checked to within {tolerance}. Give more digits (this "
    "was not counted as a try)."
)
ROUNDED_WHOLE = (
    "That is the answer rounded: a count is checked exactly. Give every digit "
    "(this was not counted as a try)."
)
# A wrong answer after a right one: the quiz was passed, and stays passed.
STAYS_PASSED = "You passed this quiz already ({when}), and that stays."
# A wrong answer given again: not another try.
SAME_AGAIN = "You gave this answer before (not counted again)."
#: 2^20 / 10^6: a size in megabytes where mebibytes were asked, or the reverse
MEBI = 1.048576
UNITS = (
    "Your number is off by 1.048576 = 2^20 / 10^6: check megabytes (10^6 bytes) "
    "against mebibytes (MiB, 2^20 bytes), and which one the question asks for."
)


def _base(factor: int) -> int:
    """10 for a power of ten among :data:`FACTORS`, else 2."""
    return 10 if factor % 10 == 0 else 2


def near_miss(
    value: float,
    answer: float,
    mistakes: Sequence[tuple[float, str]] = (),
    rel_tol: float = 0.0,
) -> str:
    """What a wrong number near the answer is told, or "" (the page's script
    says the same: ``nearMiss``): the hint of a usual wrong answer the quiz
    names (``mistakes``, each matched as the answer is, within ``rel_tol``),
    else a word on how far off it is."""
    for wrong, hint in mistakes:
        if abs(value - wrong) <= max(rel_tol * max(abs(value), abs(wrong)), 1e-12):
            return hint
    if value == 0 or answer == 0 or (value < 0) != (answer < 0):
        return ""
    ratio = value / answer
    if abs(ratio / MEBI - 1) <= 1e-3 or abs(ratio * MEBI - 1) <= 1e-3:
        return UNITS
    if abs(ratio - 1) <= 0.1:
        return NEAR_WHOLE if float(answer).is_integer() else NEAR
    for factor in FACTORS:
        if abs(ratio / factor - 1) <= 1e-3:
            return TIMES.format(base=_base(factor))
        if abs(ratio * factor - 1) <= 1e-3:
            return FRACTION.format(base=_base(factor))
    return ""


_DECIMAL = re.compile(
    r"[+-]?(?P<whole>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[+-]?[0-9]+))?"
)


def rounded(
    cleaned: str,
    answer: float,
    rel_tol: float = 0.0,
    mistakes: Sequence[tuple[float, str]] = (),
) -> str:
    """What a wrong answer that is the right one rounded is told, or "" (the
    page's script says the same: ``rounded``). ``cleaned``: the number as typed,
    without its unit and thousands separators ("0.35", "3.5e-1", "5100").

    Rounded means two or more significant figures typed and the answer within
    half a unit of the last one (trailing zeros of a whole number without a
    point are not significant: "5100" is two figures). A usual wrong answer the
    quiz names keeps its own hint."""
    match = _DECIMAL.fullmatch(cleaned)
    if match is None or not any(ch.isdigit() for ch in cleaned):
        return ""
    whole, frac = match["whole"], match["frac"]
    exponent = int(match["exp"] or 0)
    if frac is None:
        kept = whole.rstrip("0")
        digits, last = kept.lstrip("0"), exponent + len(whole) - len(kept)
    else:
        digits, last = (whole + frac).lstrip("0"), exponent - len(frac)
    if len(digits) < 2 or abs(last) > 300:
        return ""
    value = float(cleaned)
    named = any(
        abs(value - wrong) <= max(rel_tol * max(abs(value), abs(wrong)), 1e-12)
        for wrong, _ in mistakes
    )
    if named or abs(value - answer) > 0.5 * 10.0**last * (1 + 1e-9):
        return ""
    if float(answer).is_integer():
        return ROUNDED_WHOLE
    return ROUNDED.format(digits=len(digits), tolerance=f"{100 * rel_tol:g} %")


_MASK = 0xFFFFFFFF


def _keystream(key: str, length: int) -> bytes:
    """``length`` pseudo-random bytes from ``key``: FNV-1a seeds an xorshift32.

    The script on the page computes the same bytes (see ``_SCRIPT``).
    """
    state = 0x811C9DC5
    for byte in key.encode():
        state = ((state ^ byte) * 0x01000193) & _MASK
    state = state or 0x9E3779B9  # xorshift never leaves 0
    out = bytearray()
    for _ in range(length):
        state ^= (state << 13) & _MASK
        state ^= state >> 17
        state ^= (state << 5) & _MASK
        out.append(state & 0xFF)
    return bytes(out)


def encode_payload(key: str, payload: dict) -> str:
    """``payload`` as JSON (UTF-8), XOR-ed with the keystream of ``key``, base64."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    mixed = bytes(a ^ b for a, b in zip(data, _keystream(key, len(data)), strict=True))
    return base64.b64encode(mixed).decode("ascii")


def decode_payload(key: str, encoded: str) -> dict:
    """The inverse of :func:`encode_payload`."""
    mixed = base64.b64decode(encoded)
    data = bytes(a ^ b for a, b in zip(mixed, _keystream(key, len(mixed)), strict=True))
    return json.loads(data.decode())


# Scoped to .tc-quiz; colours follow the book theme (pydata-sphinx-theme
# variables, light and dark) with plain fallbacks elsewhere. In dark mode the
# theme puts HTML outputs on a light box (as it does for widgets); the last rule
# takes the quiz out of it, as the theme does for data frames, so that the quiz
# follows the dark theme.
_STYLE = """\
.tc-quiz{border:1px solid var(--pst-color-border,#d0d7de);border-radius:.4em;\
padding:.7em 1em;margin:.5em 0;max-width:48em}\
.tc-quiz-question{margin:0 0 .5em;font-weight:600}\
.tc-quiz-options{margin:0;padding:0;border:0}\
.tc-quiz-option{display:flex;gap:.6em;align-items:baseline;margin:.25em 0;\
cursor:pointer}\
.tc-quiz-number{display:block}\
.tc-quiz-number input{margin-left:.5em;padding:.2em .4em;width:12em;\
border:1px solid var(--pst-color-border,#8c959f);border-radius:.3em;\
background:var(--pst-color-background,#fff);color:inherit}\
.tc-quiz-submit{margin-top:.6em;padding:.25em 1.2em;cursor:pointer;\
border:1px solid var(--pst-color-border,#8c959f);border-radius:.3em;\
background:var(--pst-color-surface,#f6f8fa);color:var(--pst-color-text-base,inherit)}\
.tc-quiz-submit:hover{border-color:var(--pst-color-primary,#0969da)}\
.tc-quiz-feedback{margin:.6em 0 0}\
.tc-quiz-feedback:empty{display:none}\
.tc-quiz-feedback.tc-quiz-pass b{color:var(--pst-color-success,#1a7f37)}\
.tc-quiz-feedback.tc-quiz-fail b{color:var(--pst-color-danger,#cf222e)}\
.tc-quiz details.toggle-details{margin:.6em 0 0}\
html[data-theme=dark] .bd-content div.cell_output .text_html:has(>form.tc-quiz){\
background-color:transparent;color:inherit;padding:0}\
"""

# Defines window.tcQuiz once per page, then wires every quiz not yet wired (so it
# does not matter which quiz's copy of the script runs first, or how often).
_SCRIPT = """\
(function () {
  if (!window.tcQuiz) {
    var keystream = function (key, n) {
      var state = 0x811c9dc5, bytes = new TextEncoder().encode(key), i;
      for (i = 0; i < bytes.length; i++) {
        state = Math.imul(state ^ bytes[i], 0x01000193) >>> 0;
      }
      state = state || 0x9e3779b9;
      var out = new Uint8Array(n);
      for (i = 0; i < n; i++) {
        state ^= state << 13; state ^= state >>> 17; state ^= state << 5;
        out[i] = state & 255;
      }
      return out;
    };
    var decode = function (form) {
      var raw = atob(form.getAttribute("data-key"));
      var stream = keystream(form.getAttribute("data-quiz"), raw.length);
      var bytes = new Uint8Array(raw.length);
      for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i) ^ stream[i];
      return JSON.parse(new TextDecoder("utf-8").decode(bytes));
    };
    var cleanNumber = function (text, unit) {
      var cleaned = text.trim().replace(/_/g, "");
      if (unit && cleaned.toLowerCase().endsWith(unit.toLowerCase())) {
        cleaned = cleaned.slice(0, cleaned.length - unit.length).trim();
      }
      if (/[, \u00a0\u202f\u2009]/.test(cleaned)) {
        // a comma or a space only as a thousands separator: "6,4" is not 64
        var groups = /^[+-]?\\d{1,3}([, \u00a0\u202f\u2009])\\d{3}(\\1\\d{3})*(\\.\\d*)?$/;
        var match = groups.exec(cleaned);
        if (!match) return null;
        cleaned = cleaned.split(match[1]).join("");
      }
      if (!/^[+-]?(\\d+\\.?\\d*|\\.\\d+)(e[+-]?\\d+)?$/i.test(cleaned)) return null;
      return isFinite(Number(cleaned)) ? cleaned : null;
    };
    var parseNumber = function (text, unit) {
      var cleaned = cleanNumber(text, unit);
      return cleaned === null ? null : Number(cleaned);
    };
    // the answer rounded (two or more figures typed, the answer within half a
    // unit of the last one): said as a blank answer is, not a try
    var rounded = function (cleaned, data) {
      var m = /^[+-]?([0-9]*)(?:\\.([0-9]*))?(?:e([+-]?[0-9]+))?$/i.exec(cleaned);
      if (!m) return "";
      var whole = m[1], frac = m[2], exponent = Number(m[3] || "0"), digits, last;
      if (frac === undefined) {
        var kept = whole.replace(/0+$/, "");
        digits = kept.replace(/^0+/, "");
        last = exponent + whole.length - kept.length;
      } else {
        digits = (whole + frac).replace(/^0+/, "");
        last = exponent - frac.length;
      }
      if (digits.length < 2 || Math.abs(last) > 300) return "";
      var value = Number(cleaned), mistakes = data.mistakes || [];
      for (var k = 0; k < mistakes.length; k++) {
        var size = Math.max(Math.abs(value), Math.abs(mistakes[k][0]));
        if (Math.abs(value - mistakes[k][0]) <= Math.max(data.rel_tol * size, 1e-12)) {
          return "";
        }
      }
      if (Math.abs(value - data.answer) > 0.5 * Math.pow(10, last) * (1 + 1e-9)) return "";
      if (Number.isInteger(data.answer)) return data.rounded_whole;
      return data.rounded.replace("{digits}", String(digits.length))
        .replace("{tolerance}", String(100 * data.rel_tol) + " %");
    };
    var nearMiss = function (value, answer, data) {
      var mistakes = data.mistakes || [];
      for (var m = 0; m < mistakes.length; m++) {
        var off = Math.abs(value - mistakes[m][0]);
        var size = Math.max(Math.abs(value), Math.abs(mistakes[m][0]));
        if (off <= Math.max(data.rel_tol * size, 1e-12)) return mistakes[m][1];
      }
      if (value === 0 || answer === 0 || (value < 0) !== (answer < 0)) return "";
      var ratio = value / answer;
      if (Math.abs(ratio / data.mebi - 1) <= 1e-3 ||
          Math.abs(ratio * data.mebi - 1) <= 1e-3) return data.units;
      if (Math.abs(ratio - 1) <= 0.1) {
        return Number.isInteger(answer) ? data.near_whole : data.near;
      }
      for (var i = 0; i < data.factors.length; i++) {
        var factor = data.factors[i];
        if (Math.abs(ratio / factor - 1) <= 1e-3) {
          return data.times.replace("{base}", factor % 10 === 0 ? "10" : "2");
        }
        if (Math.abs(ratio * factor - 1) <= 1e-3) {
          return data.fraction.replace("{base}", factor % 10 === 0 ? "10" : "2");
        }
      }
      return "";
    };
    var grade = function (form, data) {
      if (form.getAttribute("data-kind") === "choice") {
        var picked = form.querySelector("input[name=choice]:checked");
        if (!picked) return {message: data.blank};
        return {pass: Number(picked.value) === data.answer, same: picked.value};
      }
      var text = form.querySelector("input[name=number]").value;
      if (!text.trim()) return {message: data.blank};
      var cleaned = cleanNumber(text, data.unit);
      if (cleaned === null) {
        var message = data.unit && /[a-z]/i.test(text) ? data.in_unit : data.invalid;
        return {message: message.replace("{value}", "'" + text + "'")};
      }
      var value = Number(cleaned);
      var gap = Math.abs(value - data.answer);
      var scale = Math.max(Math.abs(value), Math.abs(data.answer));
      var pass = gap <= Math.max(data.rel_tol * scale, 1e-12);
      var round = pass ? "" : rounded(cleaned, data);
      if (round) return {message: round};
      return {
        pass: pass, same: String(value),
        near: pass ? "" : nearMiss(value, data.answer, data)
      };
    };
    // the notebook's progress table, where the page has one: this quiz's row
    // and the count follow what was answered on the page
    var showProgress = function (form) {
      var key = form.getAttribute("data-quiz");
      var passedTry = form.getAttribute("data-passed-try");
      var status = passedTry ? "passed" : "failed";
      var said = !passedTry ? "failed"
        : passedTry === "1" ? "passed, on the first try" : "passed, on try " + passedTry;
      var rows = document.querySelectorAll("tr[data-tc-progress]");
      for (var i = 0; i < rows.length; i++) {
        var row = rows[i];
        if (row.getAttribute("data-tc-progress") !== key) continue;
        var table = row.closest("table");
        var cells = row.querySelectorAll("td");
        cells[0].innerHTML = table.getAttribute("data-icon-" + status);
        cells[2].textContent = said;
        row.setAttribute("data-status", status);
        var head = table.previousElementSibling;
        if (head && head.classList.contains("tc-progress-head")) {
          var all = table.querySelectorAll("tr[data-tc-progress]").length;
          var done = table.querySelectorAll('tr[data-status="passed"]').length;
          head.textContent = "Progress: " + done + " of " + all + " passed.";
        }
      }
    };
    var submit = function (event) {
      event.preventDefault();
      var form = event.currentTarget, data = decode(form);
      var feedback = form.querySelector(".tc-quiz-feedback");
      var details = form.querySelector("details");
      var result = grade(form, data);
      feedback.className = "tc-quiz-feedback";
      feedback.textContent = "";
      if (result.message) {
        feedback.textContent = result.message;
        return;
      }
      // the try it passed on stays, whatever is answered after; a wrong answer
      // given before is not another try
      var passed = form.getAttribute("data-passed") === "yes";
      var given = JSON.parse(form.getAttribute("data-wrong") || "[]");
      var again = !result.pass && given.indexOf(result.same) >= 0;
      if (!result.pass && !again) {
        given.push(result.same);
        form.setAttribute("data-wrong", JSON.stringify(given));
      }
      var tries = Number(form.getAttribute("data-tries") || "0") +
        (passed || again ? 0 : 1);
      form.setAttribute("data-tries", String(tries));
      if (result.pass) form.setAttribute("data-passed", "yes");
      var verdict = document.createElement("b");
      verdict.textContent = result.pass ? data.right : data.wrong;
      if (result.pass && tries > 1) {
        verdict.textContent += data.on_try.replace("{tries}", String(tries));
      }
      feedback.appendChild(verdict);
      if (!result.pass) {
        var said = result.near ? result.near + " " + data.again : data.again;
        if (again) said = data.same_again + " " + said;
        var passedTry = form.getAttribute("data-passed-try");
        if (passedTry) {  // a wrong answer after the right one: still passed
          said += " " + data.stays_passed.replace("{when}",
            passedTry === "1" ? "on the first try" : "on try " + passedTry);
        }
        feedback.appendChild(document.createTextNode(" " + said));
      }
      if (result.pass && !form.getAttribute("data-passed-try")) {
        form.setAttribute("data-passed-try", String(tries));
      }
      showProgress(form);
      feedback.classList.add(result.pass ? "tc-quiz-pass" : "tc-quiz-fail");
      var body = details.querySelector(".tc-quiz-explanation");
      body.innerHTML = data.explanation;  // escaped and linked in Python
      details.hidden = false;
      details.open = result.pass;
      if (window.MathJax && MathJax.typesetPromise) MathJax.typesetPromise([body]);
    };
    window.tcQuiz = function () {
      var forms = document.querySelectorAll("form.tc-quiz:not([data-ready])");
      for (var i = 0; i < forms.length; i++) {
        forms[i].setAttribute("data-ready", "");
        forms[i].addEventListener("submit", submit);
      }
    };
  }
  window.tcQuiz();
})();
"""

#: A Markdown link in a quiz's text: ``[Turner](https://arxiv.org/abs/...)``,
#: ``[eq. (4.2)](../book/04_block.ipynb#eq-4-2)``.
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")


def linked(text: str, *, book: bool = True) -> str:
    """``text`` as HTML: escaped, its Markdown links made links (opened in a
    new tab). A link to a chapter, ``../book/04_block.ipynb#eq-4-2``, points at
    the chapter's page and its equation on the book's pages (``.html``), and at
    the chapter notebook in JupyterLab (``book=False``), which has no anchor
    for an equation."""
    parts, last = [], 0
    for match in _LINK.finditer(text):
        words, target = match.groups()
        if target.startswith("../book/"):
            page, _, anchor = target.partition("#")
            if book:
                page = page.removesuffix(".ipynb") + ".html"
                target = f"{page}#{anchor}" if anchor else page
            else:
                target = page
        parts += [
            html.escape(text[last : match.start()]),
            f'<a href="{html.escape(target)}" target="_blank" rel="noopener">'
            f"{html.escape(words)}</a>",
        ]
        last = match.end()
    return "".join([*parts, html.escape(text[last:])])


def unlinked(text: str) -> str:
    """``text`` with its Markdown links as their words alone (plain text)."""
    return _LINK.sub(r"\1", text)


_CHEVRON = (
    '<svg class="tb-icon toggle-chevron-right" width="44" height="44" '
    'viewBox="0 0 24 24" stroke-width="1.5" stroke="currentColor" fill="none" '
    'stroke-linecap="round" stroke-linejoin="round" aria-hidden="true">'
    '<polyline points="9 6 15 12 9 18"/></svg>'
)


def _form(key: str, kind: str, question: str, control: str, payload: dict) -> str:
    """The quiz markup shared by both kinds; ``control`` is the answer input."""
    payload = {
        "right": CORRECT,
        "wrong": WRONG,
        "again": TRY_AGAIN,
        "on_try": ON_TRY,
        "same_again": SAME_AGAIN,
        "stays_passed": STAYS_PASSED,
        **payload,
    }
    # The explanation toggle looks like the book's other toggles
    # (sphinx-togglebutton's classes) and is a plain <details> everywhere else.
    return (
        f'<form class="tc-quiz" data-quiz="{html.escape(key)}" data-kind="{kind}" '
        f'data-key="{encode_payload(key, payload)}" autocomplete="off">'
        f'<p class="tc-quiz-question">{linked(question)}</p>'
        f"{control}"
        '<button type="submit" class="tc-quiz-submit">Submit</button>'
        '<p class="tc-quiz-feedback" role="status" aria-live="polite"></p>'
        '<details class="toggle-details" hidden>'
        f'<summary class="toggle-details__summary">{_CHEVRON}'
        '<span class="toggle-details__summary-text">Explanation</span></summary>'
        '<p class="tc-quiz-explanation"></p></details>'
        "</form>"
        f"<style>{_STYLE}</style>"
        f"<script>{_SCRIPT}</script>"
    )


def choice_quiz_html(
    key: str, question: str, shown: Sequence[str], answer: int, explanation: str
) -> str:
    """A multiple-choice quiz: ``shown`` options in that order, ``shown[answer]``
    right. Every option has the same markup; only the payload knows ``answer``."""
    options = "".join(
        '<label class="tc-quiz-option">'
        f'<input type="radio" name="choice" value="{index}">'
        f"<span>{html.escape(option)}</span></label>"
        for index, option in enumerate(shown)
    )
    control = f'<div class="tc-quiz-options" role="radiogroup">{options}</div>'
    payload = {
        "answer": answer,
        "blank": CHOOSE_FIRST,
        "explanation": linked(explanation),
    }
    return _form(key, "choice", question, control, payload)


def number_quiz_html(
    key: str,
    question: str,
    answer: float,
    rel_tol: float,
    explanation: str,
    unit: str = "",
    mistakes: Sequence[tuple[float, str]] = (),
) -> str:
    """A numeric quiz: a text box that starts empty, right within ``rel_tol``;
    a usual wrong answer among ``mistakes`` gets its own hint."""
    control = (
        '<label class="tc-quiz-number">answer<input type="text" name="number" '
        'value="" placeholder="a number" inputmode="decimal"></label>'
    )
    payload = {
        "answer": answer,
        "rel_tol": rel_tol,
        "blank": TYPE_FIRST,
        "invalid": NOT_A_NUMBER,
        "explanation": linked(explanation),
        "unit": unit,
        "in_unit": IN_THE_UNIT.replace("{unit}", unit),
        "near": NEAR,
        "near_whole": NEAR_WHOLE,
        "rounded": ROUNDED,
        "rounded_whole": ROUNDED_WHOLE,
        "mebi": MEBI,
        "units": UNITS,
        "times": TIMES,
        "fraction": FRACTION,
        "factors": list(FACTORS),
        "mistakes": [[float(wrong), hint] for wrong, hint in mistakes],
    }
    return _form(key, "number", question, control, payload)
