"""What JupyterLab needs for the exercise notebooks: results that survive a save.

JupyterLab draws a widget (an exercise's checks, a quiz, the progress table)
from its model in the running kernel. A notebook saved and opened again has no
such model until its cells run again, so every widget would read "Error
displaying widget: model not found". Saving the widgets' state with the
notebook (the widget manager's ``saveState``) is not enough: a notebook opened
again and saved before its cells run (JupyterLab autosaves every two minutes)
is saved with that state gone.

So the course's widgets are saved as what they show. With ``saveState`` on,
each save carries the widgets' current state; a hook of the Jupyter server
(:func:`saved_as_shown`, run before every save) turns each course widget's
output into the HTML its state shows (the latest results, after any "Check
again"), with a line that says to run the cell to check again, and drops the
widget's view: the file holds nothing that needs a kernel to be read. A save
without the state (the notebook reopened, its cells not run again) keeps what
the file already showed.

    python -m transformer_course.lab_settings    # this environment's JupyterLab

This merges ``saveState`` into ``{sys.prefix}/share/jupyter/lab/settings/
overrides.json`` (JupyterLab's defaults for one environment; whatever else the
file holds is kept, and a learner's own settings still win) and enables this
module as a server extension in ``{sys.prefix}/etc/jupyter/
jupyter_server_config.d/transformer_course.json``, which registers the hook.
It also gives nbgrader's Validate 120 s per cell in ``{sys.prefix}/etc/
jupyter/nbgrader_config.json``, so that a check which stops a hanging function
after 30 s is not cut off first. ``make`` runs it when it creates the course's
environment. Used by: the
exercise notebooks of every chapter (``transformer_course.exercises``).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import html
import inspect
import json
import os
import re
import sys
import tempfile
from pathlib import Path

__all__ = [
    "SETTINGS",
    "install",
    "install_server_extension",
    "overrides_path",
    "saved_as_shown",
    "server_config_path",
]

#: plugin id -> the settings the course needs from it
SETTINGS = {
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
    # no "get notified about official Jupyter news?" toast on a learner's first
    # notebook: the course runs offline, and the question is not the course's
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
}

#: The Jupyter server's configuration that loads this module as an extension.
EXTENSION = "transformer_course.lab_settings"
SERVER_CONFIG = {"ServerApp": {"jpserver_extensions": {EXTENSION: True}}}

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
#: The CSS classes that mark the course's widgets (see exercises/widgets.py):
#: results drawn from their state, or (a quiz) the static quiz they carry.
DRAWN_FROM_STATE = frozenset({"tc-widget-check", "tc-widget-progress"})
#: A part of a course widget not saved with what it shows (its note for a kernel
#: that has gone, :data:`.exercises.widgets.KERNEL_GONE`).
NOT_SAVED = "tc-not-saved"
COURSE_CLASSES = DRAWN_FROM_STATE | {"tc-widget-quiz"}
#: Under results saved as they were shown.
#: Under a saved quiz. Its page script is left out: in a reopened notebook it
#: answered clicks and rewrote the saved progress table, while the answers the
#: course keeps (answers.json, the kernel) knew nothing of it.
QUIZ_NOTE = (
    '<p class="tc-needs-kernel"><i>Saved quiz. To answer it, run the notebook\'s '
    "cells from the top (Run ▸ Run All Cells): it needs the notebook's running "
    "kernel, and this cell needs the cells above it. Answers you gave before "
    "come back.</i></p>"
)


def _inert(html_text: str) -> str:
    """``html_text`` without its scripts, and its controls disabled (a form
    with no script to stop it would send the page away); a link to a chapter's
    page on the book's site (``../book/06_gpt.html#eq-6-3``, which JupyterLab
    does not have: a learner round got a 404) points at the chapter's
    notebook, as the notebook's own links do."""
    html_text = re.sub(r"<script\b.*?</script\s*>", "", html_text, flags=re.S | re.I)
    html_text = re.sub(
        r'href="(\.\./book/[\w-]+)\.html(#[^"]*)?"', r'href="\1.ipynb"', html_text
    )
    return re.sub(
        r"<(input|button|select|textarea)\b", r"<\1 disabled", html_text, flags=re.I
    )


SAVED_NOTE = (
    '<p class="tc-needs-kernel"><i>Saved results. To check again, run the '
    "notebook's cells from the top (Run ▸ Run All Cells): checking needs the "
    "notebook's running kernel, and this cell needs the cells above it.</i></p>"
)


def overrides_path(prefix: str | os.PathLike = sys.prefix) -> Path:
    """Where JupyterLab reads an environment's default settings."""
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def install(prefix: str | os.PathLike = sys.prefix) -> Path:
    """Merge :data:`SETTINGS` into the environment's ``overrides.json``.

    Raises:
        ValueError: the file exists and is not a JSON object (it is left as
            it was).
    """
    path = overrides_path(prefix)
    current: dict = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        try:
            current = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}: expected JSON settings, got text that does not parse "
                f"({error}); left as it was"
            ) from None
        if not isinstance(current, dict):
            raise ValueError(
                f"{path}: expected JSON settings (an object), got "
                f"{type(current).__name__}; left as it was"
            )
    merged = dict(current)
    for plugin, settings in SETTINGS.items():
        merged[plugin] = {**merged.get(plugin, {}), **settings}
    if merged == current and path.exists():
        return path
    return _write_json(path, merged)


def _write_json(path: Path, data: dict) -> Path:
    """``data`` into ``path``, written whole, then renamed: a crash never
    leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
    ) as file:
        json.dump(data, file, indent=2)
        file.write("\n")
    os.replace(file.name, path)
    return path


def server_config_path(prefix: str | os.PathLike = sys.prefix) -> Path:
    """Where the Jupyter server reads an environment's extension settings."""
    return (
        Path(prefix)
        / "etc"
        / "jupyter"
        / "jupyter_server_config.d"
        / "transformer_course.json"
    )


def install_server_extension(prefix: str | os.PathLike = sys.prefix) -> Path:
    """Enable this module as the Jupyter server's extension (its pre-save hook)."""
    path = server_config_path(prefix)
    text = json.dumps(SERVER_CONFIG, indent=2) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
    ) as file:
        file.write(text)
    os.replace(file.name, path)
    return path


#: nbgrader's Validate (the toolbar button, ``nbgrader validate``) gives each
#: cell 30 s; a check stops a function that does not return after 30 s and says
#: so, and Validate cut that cell off first (CellTimeoutError, a traceback
#: through the course's files) where the check's own verdict was due.
VALIDATE_TIMEOUT = 120
NBGRADER_CONFIG = {"Execute": {"timeout": VALIDATE_TIMEOUT}}


def nbgrader_config_path(prefix: str | os.PathLike = sys.prefix) -> Path:
    """Where nbgrader (Validate's server extension too) reads an environment's
    settings, beside the folder's own ``nbgrader_config.py``."""
    return Path(prefix) / "etc" / "jupyter" / "nbgrader_config.json"


def install_nbgrader_config(prefix: str | os.PathLike = sys.prefix) -> Path:
    """Merge :data:`NBGRADER_CONFIG` into the environment's
    ``nbgrader_config.json``: Validate waits long enough for a check's verdict.
    Whatever else the file holds is kept; a longer timeout already there too."""
    path = nbgrader_config_path(prefix)
    current: dict = {}
    if path.is_file():
        try:
            current = json.loads(path.read_text(encoding="utf-8") or "{}")
        except json.JSONDecodeError as error:
            raise SystemExit(f"{path} is not JSON ({error}): left as it is") from None
    execute = dict(current.get("Execute") or {})
    timeout = execute.get("timeout")
    if (
        isinstance(timeout, int)
        and not isinstance(timeout, bool)
        and (timeout >= VALIDATE_TIMEOUT or timeout < 0)
    ):
        return path  # already long enough (or, below 0, no limit at all)
    execute["timeout"] = VALIDATE_TIMEOUT
    return _write_json(path, {**current, "Execute": execute})


# --- the server extension: widgets saved as they are shown -----------------------


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": EXTENSION}]


def _load_jupyter_server_extension(serverapp) -> None:
    serverapp.contents_manager.register_pre_save_hook(saved_as_shown)


def _text(value) -> str:
    """A notebook's multi-line string (a list of lines, or one string)."""
    return "".join(value) if isinstance(value, list) else str(value)


def _drawn(model_id: str, state: dict, depth: int = 0) -> str:
    """The HTML a widget's saved state shows: an HTML widget's value, a box's
    children in order; nothing for a button or anything else."""
    entry = state.get(model_id)
    if depth > 20 or not isinstance(entry, dict):
        return ""
    widget = entry.get("state") or {}
    name = str(entry.get("model_name", ""))
    classes = widget.get("_dom_classes")
    if isinstance(classes, list) and NOT_SAVED in classes:
        return ""
    if name in ("HTMLModel", "HTMLMathModel"):
        return str(widget.get("value", ""))
    children = widget.get("children")
    if isinstance(children, list):
        return "".join(
            _drawn(str(child).removeprefix("IPY_MODEL_"), state, depth + 1)
            for child in children
        )
    return ""


def _plain(html_text: str) -> str:
    """Crude plain text of the course's own HTML (its results and notes)."""
    block = r"</?(br|p|li|tr|h\d|div|table|ul|ol)\b[^>]*>"
    text = re.sub(block, "\n", html_text)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _course_classes(model_id: str, state: dict) -> set[str]:
    entry = state.get(model_id)
    classes = (entry or {}).get("state", {}).get("_dom_classes", [])
    return set(classes) & COURSE_CLASSES if isinstance(classes, list) else set()


def _file_now(path: str, contents_manager) -> dict:
    """The notebook ``path`` holds now, as a dict. Read from disk where the
    manager keeps its files there: JupyterLab's server has an asynchronous
    contents manager, whose ``get`` is a coroutine that a pre-save hook, called
    synchronously, cannot await (a learner's save after a kernel restart lost
    every saved result so); else through ``get``, a coroutine run to its end
    in a thread of its own."""
    import nbformat

    os_path = getattr(contents_manager, "_get_os_path", None)
    if callable(os_path):
        return nbformat.read(os_path(path), as_version=4)
    model = contents_manager.get(path, content=True, type="notebook")
    if inspect.isawaitable(model):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            model = pool.submit(asyncio.run, model).result(timeout=30)
    return model.get("content") or {}


def _saved_before(path: str, contents_manager) -> dict:
    """(cell id, model id) -> the output data the file on disk holds for a
    widget saved as shown; empty where there is no such file."""
    try:
        previous = _file_now(path, contents_manager)
    except Exception:  # no file yet, or one that does not read
        return {}
    found = {}
    for cell in previous.get("cells", []):
        for output in cell.get("outputs", []) or []:
            mark = (output.get("metadata") or {}).get("transformer_course") or {}
            if "saved_from" in mark:
                found[(cell.get("id"), mark["saved_from"])] = output.get("data", {})
    return found


def saved_as_shown(model: dict, path: str = "", contents_manager=None, **kwargs):
    """The pre-save hook: each course widget of a notebook saved as the HTML it
    shows, its view dropped (see the module docstring). Other notebooks, other
    files and other widgets are left as they are; the widgets' saved state is
    dropped once no widget view is left to use it."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    notebook = model["content"]
    metadata = notebook.setdefault("metadata", {})
    state = ((metadata.get("widgets") or {}).get(WIDGET_STATE) or {}).get("state")
    state = state if isinstance(state, dict) else {}
    before = None  # read only when needed
    views_left = False
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) or []:
            data = output.get("data") or {}
            view = data.get(WIDGET_VIEW)
            if not isinstance(view, dict):
                continue
            model_id = str(view.get("model_id", ""))
            classes = _course_classes(model_id, state)
            shown = _drawn(model_id, state) if classes & DRAWN_FROM_STATE else ""
            if not classes and model_id not in state:
                # no state: a course widget if the file saved it as shown before
                if before is None:
                    before = (
                        _saved_before(path, contents_manager)
                        if contents_manager
                        else {}
                    )
                saved = before.get((cell.get("id"), model_id))
                if saved is None:
                    views_left = True
                    continue
                output["data"] = saved
            elif not classes:
                views_left = True  # somebody else's widget: kept as it is
                continue
            elif shown:
                output["data"] = {
                    "text/html": shown + SAVED_NOTE,
                    "text/plain": _plain(shown + SAVED_NOTE),
                }
            else:  # a quiz: the static quiz it carries, as a picture of it
                kept = {k: v for k, v in data.items() if k != WIDGET_VIEW}
                if "text/html" in kept:
                    kept["text/html"] = _inert(_text(kept["text/html"])) + QUIZ_NOTE
                output["data"] = kept
            output.setdefault("metadata", {})["transformer_course"] = {
                "saved_from": model_id
            }
    if not views_left:
        metadata.pop("widgets", None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.lab_settings",
        description="Make this environment's JupyterLab save widgets with "
        "notebooks, so that exercise results show after reopening.",
    )
    parser.add_argument(
        "--prefix", default=sys.prefix, help="the environment (default: this one)"
    )
    args = parser.parse_args(argv)
    print(f"JupyterLab saves widgets with notebooks: {install(args.prefix)}")
    print(
        "the Jupyter server saves the course's widgets as they are shown: "
        f"{install_server_extension(args.prefix)}"
    )
    print(
        f"nbgrader's Validate gives a cell {VALIDATE_TIMEOUT} s, so a check can "
        f"give its verdict: {install_nbgrader_config(args.prefix)}"
    )


if __name__ == "__main__":
    main()
