"""An exercise notebook as a learner meets it: in JupyterLab, in Chromium.

JupyterLab runs from this environment on 127.0.0.1 (no network), with a
notebook copied to a scratch folder; Playwright drives it as a learner would:
open it, run every cell, give a wrong answer and read its hint, give a right
one, answer quizzes (a wrong answer first, then the explanation on request, a
number with Enter), restart the kernel, and reopen the notebook.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"JupyterLab test: no Chromium at {CHROMIUM} (apt-get install chromium)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="JupyterLab test: Playwright is not installed"
)

pytestmark = pytest.mark.browser
NOTEBOOK = "01_tokens.ipynb"
TOKEN = "learner"
WAIT = 90_000  # ms: a kernel's first run imports torch


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a free port, serving a copy of the notebook."""
    base = tmp_path_factory.mktemp("lab")
    root, home = base / "work", base / "home"
    root.mkdir()
    home.mkdir()
    shutil.copy(ROOT / "exercises" / NOTEBOOK, root / NOTEBOOK)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "TRANSFORMER_COURSE_ANSWERS": str(home / "answers.json"),
    }
    log = (base / "server.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--ServerApp.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
            "--LabServerApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        server.kill()
        pytest.fail("JupyterLab did not start: " + (base / "server.log").read_text())
    yield {"url": f"http://127.0.0.1:{port}", "root": root, "home": home}
    server.terminate()
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


@pytest.fixture(scope="module")
def page(lab):
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        # nothing from anywhere but the server
        context.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(lab["url"])
                or route.request.url.startswith(("data:", "blob:"))
                else route.abort()
            ),
        )
        yield context.new_page()
        browser.close()


def open_notebook(page, lab):
    page.goto(f"{lab['url']}/lab/tree/{NOTEBOOK}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=WAIT)
    kernel_idle(page)


def no_kernels_left(lab) -> None:
    """Wait until the server has no running kernel.

    The status bar changes as soon as a shutdown is asked for; reopening the
    notebook before the server has ended the session joins the dying kernel,
    which never becomes idle again.
    """
    request = urllib.request.Request(
        f"{lab['url']}/api/kernels", headers={"Authorization": f"token {TOKEN}"}
    )
    deadline = time.monotonic() + WAIT / 1000
    while time.monotonic() < deadline:
        with urllib.request.urlopen(request, timeout=10) as reply:
            if reply.read().strip() == b"[]":
                return
        time.sleep(0.25)
    pytest.fail("JupyterLab still runs a kernel after it was shut down")


def kernel_idle(page) -> None:
    """Wait until the kernel has started and is idle (the status bar says so)."""
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=WAIT)


def dirty(page) -> bool:
    return page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def run_all(page) -> None:
    """Run every cell, from outputs cleared, and wait for the last one's."""
    menu(page, "Edit", "Clear Outputs of All Cells")
    page.wait_for_selector("text=Progress:", state="detached", timeout=WAIT)
    menu(page, "Run", "Run All Cells")
    page.wait_for_selector("text=Progress:", timeout=WAIT)


def cell(page, grade_id_text: str):
    """The code cell whose source contains ``grade_id_text``."""
    return page.locator(".jp-CodeCell", has_text=grade_id_text).first


def replace_source(page, where, source: str) -> None:
    """Type ``source`` (one line) into a cell, replacing it, and run it."""
    editor = where.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.type(source)
    page.keyboard.press("Shift+Enter")


def unrendered_widgets(page) -> list[str]:
    """The first line of each code cell whose widget JupyterLab cannot draw."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('.jp-CodeCell'))
        .filter(c => c.textContent.includes('model not found'))
        .map(c => c.querySelector('.jp-InputArea').textContent.split('\\n')[0])"""
    )


def check_output(page, key: str):
    return cell(page, f'ex.check("{key}"').locator(".jp-OutputArea-output")


def quiz(page, key: str):
    return cell(page, f'ex.quiz("{key}")').locator(".jp-OutputArea-output")


@pytest.mark.skipif(
    platform.python_version() != "3.11.7",
    reason="the notebooks carry the language_info of the course's Python, 3.11.7",
)
def test_opening_an_exercise_notebook_leaves_it_unmodified(page, lab):
    open_notebook(page, lab)
    time.sleep(2)  # the kernel's info arrives after it is idle
    assert not dirty(page)


def test_a_learner_works_through_the_notebook(page, lab):
    open_notebook(page, lab)
    run_all(page)
    vocab = check_output(page, "build_char_vocab")
    sync_api.expect(vocab).to_contain_text("not attempted", timeout=WAIT)
    # icons are drawn, not emoji (empty boxes where no emoji font is installed)
    assert vocab.locator("svg[aria-label='not attempted']").count() == 1
    assert "✅" not in page.content()
    assert "❌" not in page.content()

    # a wrong answer, checked again: the hint names its mistake
    replace_source(
        page,
        cell(page, "def build_char_vocab"),
        "build_char_vocab = lambda text: "
        "{c: i for i, c in enumerate(dict.fromkeys(text))}",
    )
    vocab.get_by_role("button", name="Check again").click()
    sync_api.expect(vocab).to_contain_text("sorted order", timeout=WAIT)
    # a right one
    replace_source(
        page,
        cell(page, "build_char_vocab = lambda"),
        "build_char_vocab = lambda text: "
        "{c: i for i, c in enumerate(sorted(set(text)))}",
    )
    vocab.get_by_role("button", name="Check again").click()
    sync_api.expect(vocab).to_contain_text("4 of 4 checks passed", timeout=WAIT)
    sync_api.expect(vocab.locator(".tc-kernel-gone")).to_be_hidden()

    # a quiz: wrong first, the explanation on request, then right
    layout = quiz(page, "quiz_layout")
    layout.get_by_text("(B, D, N)", exact=True).click()
    layout.get_by_role("button", name="Submit").click()
    sync_api.expect(layout).to_contain_text("Not quite", timeout=WAIT)
    explanation = layout.get_by_role("button", name="Show the explanation")
    sync_api.expect(explanation).to_be_visible()
    explanation.click()
    sync_api.expect(
        layout.get_by_role("button", name="Hide the explanation")
    ).to_be_visible()
    layout.get_by_text("(B, N, D)", exact=True).click()
    layout.get_by_role("button", name="Submit").click()
    sync_api.expect(layout).to_contain_text("on try 2", timeout=WAIT)

    # a number, submitted with Enter
    size = quiz(page, "quiz_embedding_size")
    size.locator("input").fill("38,597,376")
    size.locator("input").press("Enter")
    sync_api.expect(size).to_contain_text("Correct", timeout=WAIT)

    # the kernel restarts: running the cells again brings the answers back
    menu(page, "Kernel", "Restart Kernel…")
    page.locator(".jp-Dialog-button", has_text="Restart").click()
    page.wait_for_selector(".jp-Dialog", state="detached", timeout=WAIT)
    kernel_idle(page)
    # the old kernel's buttons do nothing now: the check and the quiz say so
    gone = check_output(page, "build_char_vocab").locator(".tc-kernel-gone")
    sync_api.expect(gone).to_be_visible(timeout=WAIT)
    sync_api.expect(gone).to_contain_text("run the notebook's cells again")
    sync_api.expect(
        quiz(page, "quiz_layout").locator(".tc-kernel-gone")
    ).to_be_visible()
    # ipywidgets marks every part of a widget with a red broken-link icon: one
    # on the quiz's outer box is shown, none on the parts inside it
    icons = quiz(page, "quiz_layout").evaluate(
        """box => [box, ...box.querySelectorAll('.jupyter-widgets-disconnected')]
        .filter(el => el.classList.contains('jupyter-widgets-disconnected'))
        .filter(el => getComputedStyle(el, '::before').display !== 'none'
                      && getComputedStyle(el, '::before').content !== 'none')
        .length"""
    )
    assert icons <= 1, icons
    # ... and its options and buttons look and are inert (a learner round
    # clicked options that still looked alive)
    inert = quiz(page, "quiz_layout").evaluate(
        """box => [...box.querySelectorAll('input, button')]
        .map(el => getComputedStyle(el).pointerEvents)"""
    )
    assert inert, inert
    assert set(inert) == {"none"}, inert
    run_all(page)
    sync_api.expect(
        check_output(page, "build_char_vocab").locator(".tc-kernel-gone")
    ).to_be_hidden(timeout=WAIT)
    layout = quiz(page, "quiz_layout")
    sync_api.expect(layout).to_contain_text("Correct", timeout=WAIT)
    sync_api.expect(layout).to_contain_text("on try 2")
    progress = cell(page, "ex.progress()").locator(".jp-OutputArea-output")
    sync_api.expect(progress).to_contain_text("passed, on try 2", timeout=WAIT)

    # saved, closed and reopened: the course's widgets were saved as what they
    # showed (python -m transformer_course.lab_settings, which make runs, adds
    # the server's pre-save hook), not "model not found"; saved again before
    # any cell runs (as autosave does), they still are; answers come back when
    # the cells run again
    page.keyboard.press("Control+s")
    page.wait_for_timeout(1000)
    for _ in range(2):
        menu(page, "Kernel", "Shut Down Kernel")  # as when JupyterLab is closed
        page.wait_for_selector(
            "text=Python 3 (ipykernel) | Idle", state="detached", timeout=WAIT
        )
        no_kernels_left(lab)
        open_notebook(page, lab)
        page.wait_for_timeout(2000)
        assert not unrendered_widgets(page), unrendered_widgets(page)
        sync_api.expect(check_output(page, "build_char_vocab")).to_contain_text(
            "4 of 4 checks passed", timeout=WAIT
        )
        saved = (lab["root"] / NOTEBOOK).read_text(encoding="utf-8")
        assert "widget-view+json" not in saved
        assert "Saved results" in saved
        page.keyboard.press("Control+s")  # with no widget state to save
        page.wait_for_timeout(1000)
    run_all(page)
    size = quiz(page, "quiz_embedding_size")
    sync_api.expect(size).to_contain_text("Correct", timeout=WAIT)
    assert (lab["home"] / "answers.json").is_file()
