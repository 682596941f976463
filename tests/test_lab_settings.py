"""The JupyterLab setting that keeps exercise widgets drawn after a reopen."""

from __future__ import annotations

import json

import pytest

from transformer_course import lab_settings
from transformer_course.exercises.widgets import KERNEL_GONE


def test_the_setting_is_written_into_a_new_environment(tmp_path):
    path = lab_settings.install(tmp_path)
    assert path == tmp_path / "share/jupyter/lab/settings/overrides.json"
    assert json.loads(path.read_text()) == {
        "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
    }


def test_an_environments_other_settings_are_kept(tmp_path):
    path = lab_settings.overrides_path(tmp_path)
    path.parent.mkdir(parents=True)
    theirs = {
        "@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
        "@jupyter-widgets/jupyterlab-manager:plugin": {"other": 1, "saveState": False},
    }
    path.write_text(json.dumps(theirs))
    lab_settings.install(tmp_path)
    assert json.loads(path.read_text()) == {
        "@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
        "@jupyter-widgets/jupyterlab-manager:plugin": {"other": 1, "saveState": True},
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
    }
    lab_settings.install(tmp_path)  # twice: the same
    assert json.loads(path.read_text())[
        "@jupyter-widgets/jupyterlab-manager:plugin"
    ] == {"other": 1, "saveState": True}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_file_that_is_not_settings_is_left_alone(tmp_path, text):
    path = lab_settings.overrides_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(ValueError, match="expected JSON"):
        lab_settings.install(tmp_path)
    assert path.read_text() == text
    assert list(path.parent.iterdir()) == [path]  # no temporary file left


def test_the_readmes_lines_hide_the_instructors_tools_from_students(tmp_path):
    """The two commands of the README's step 5, at the user level of a fresh
    configuration folder: nbgrader's instructor panels disabled and locked."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    lines = re.findall(r"^\s*(jupyter labextension (?:disable|lock) .*)$", readme, re.M)
    assert [line.split()[2] for line in lines] == ["disable", "lock"]
    instructor = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"}
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path)}
    jupyter = Path(sys.executable).parent / "jupyter"
    for line in lines:
        words = line.replace("--level=sys_prefix", "--level=user").split()
        assert set(words[4:]) == instructor
        subprocess.run([str(jupyter), *words[1:]], env=env, check=True, cwd=tmp_path)
    config = json.loads((tmp_path / "labconfig/page_config.json").read_text())
    assert {k for k, v in config["disabledExtensions"].items() if v} == instructor
    assert {k for k, v in config["lockedExtensions"].items() if v} == instructor
    listed = subprocess.run(
        [str(jupyter), "labextension", "list"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    disabled = (listed.stdout + listed.stderr).split("Disabled extensions:")[1]
    assert instructor <= set(disabled.split())
    # what students use stays on
    assert "@jupyter/nbgrader:assignment-list" not in disabled
    assert "@jupyter/nbgrader:validate-assignment" not in disabled


# --- widgets saved as they are shown (the server's pre-save hook) ----------------

VIEW = lab_settings.WIDGET_VIEW
STATE = lab_settings.WIDGET_STATE


def _widget_output(model_id: str, html_fallback: str = "<p>at display</p>") -> dict:
    return {
        "output_type": "execute_result",
        "execution_count": 1,
        "metadata": {},
        "data": {
            VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
            "text/html": html_fallback,
            "text/plain": "at display",
        },
    }


def _state(check_html: str = "<b>5 of 5 checks passed</b>") -> dict:
    return {
        "check": {
            "model_name": "VBoxModel",
            "state": {
                "_dom_classes": ["tc-widget-check"],
                "children": ["IPY_MODEL_results", "IPY_MODEL_button", "IPY_MODEL_gone"],
            },
        },
        "results": {"model_name": "HTMLModel", "state": {"value": check_html}},
        "gone": {  # the note for a kernel that has gone: not saved
            "model_name": "HTMLModel",
            "state": {"value": KERNEL_GONE, "_dom_classes": [lab_settings.NOT_SAVED]},
        },
        "button": {
            "model_name": "ButtonModel",
            "state": {"description": "Check again"},
        },
        "quiz": {
            "model_name": "VBoxModel",
            "state": {"_dom_classes": ["tc-widget-quiz"], "children": []},
        },
        "theirs": {"model_name": "IntSliderModel", "state": {"value": 3}},
    }


def _notebook(outputs: list[dict], state: dict | None) -> dict:
    metadata = {}
    if state is not None:
        metadata["widgets"] = {STATE: {"state": state, "version_major": 2}}
    cells = [
        {
            "cell_type": "code",
            "id": f"c{i}",
            "metadata": {},
            "source": "",
            "outputs": [o],
        }
        for i, o in enumerate(outputs)
    ]
    return {"type": "notebook", "content": {"cells": cells, "metadata": metadata}}


def test_a_check_is_saved_as_its_latest_results_and_a_quiz_as_its_static_quiz():
    model = _notebook(
        [_widget_output("check"), _widget_output("quiz", "<div>the quiz</div>")],
        _state(),
    )
    lab_settings.saved_as_shown(model, path="x.ipynb")
    check, quiz = (c["outputs"][0] for c in model["content"]["cells"])
    assert VIEW not in check["data"]
    assert check["data"]["text/html"].startswith("<b>5 of 5 checks passed</b>")
    assert "Saved results" in check["data"]["text/html"]
    assert "Check again" not in check["data"]["text/html"]  # the button is not drawn
    assert "tc-kernel-gone" not in check["data"]["text/html"]  # nor the note
    assert check["data"]["text/plain"].startswith("5 of 5 checks passed\nSaved results")
    assert check["metadata"]["transformer_course"] == {"saved_from": "check"}
    assert quiz["data"] == {
        "text/html": "<div>the quiz</div>" + lab_settings.QUIZ_NOTE,
        "text/plain": "at display",
    }
    assert "widgets" not in model["content"]["metadata"]  # nothing left to use it


def test_other_widgets_and_files_are_left_as_they_are():
    model = _notebook([_widget_output("theirs"), _widget_output("check")], _state())
    lab_settings.saved_as_shown(model, path="x.ipynb")
    theirs, check = (c["outputs"][0] for c in model["content"]["cells"])
    assert VIEW in theirs["data"]
    assert VIEW not in check["data"]
    assert "widgets" in model["content"]["metadata"]  # the slider still needs it
    text = {"type": "file", "content": "anything"}
    lab_settings.saved_as_shown(text, path="notes.txt")
    assert text == {"type": "file", "content": "anything"}


def test_a_save_without_the_state_keeps_what_the_file_showed():
    """Reopened and saved before its cells ran (autosave): the widget's state
    is gone, so the output the file already holds for it is kept."""
    before = _notebook([_widget_output("check")], _state("<b>3 of 5 checks passed</b>"))
    lab_settings.saved_as_shown(before, path="x.ipynb")

    class Contents:
        def get(self, path, content=True, type=None):
            assert path == "x.ipynb"
            return before

    model = _notebook([_widget_output("check")], state=None)
    lab_settings.saved_as_shown(model, path="x.ipynb", contents_manager=Contents())
    (output,) = model["content"]["cells"][0]["outputs"]
    assert output["data"] == before["content"]["cells"][0]["outputs"][0]["data"]
    assert "3 of 5 checks passed" in output["data"]["text/html"]
    # a widget the file never saved as shown, with no state: kept as it is
    unknown = _notebook([_widget_output("somebody")], state=None)
    lab_settings.saved_as_shown(unknown, path="x.ipynb", contents_manager=Contents())
    assert VIEW in unknown["content"]["cells"][0]["outputs"][0]["data"]


@pytest.mark.parametrize("kind", ["FileContentsManager", "AsyncFileContentsManager"])
def test_a_save_after_a_restart_keeps_the_results_the_file_holds(tmp_path, kind):
    """A learner's round: Run All, save, restart the kernel, save again. The
    widgets' state is gone, so the hook reads the file: JupyterLab's own
    contents manager is asynchronous, its ``get`` a coroutine the hook did
    not await, and every saved result became "model not found"."""
    import nbformat
    from jupyter_server.services.contents import filemanager

    before = _notebook([_widget_output("check")], _state("<b>3 of 5 checks passed</b>"))
    lab_settings.saved_as_shown(before, path="x.ipynb")
    on_disk = nbformat.v4.new_notebook(metadata=before["content"]["metadata"])
    on_disk.cells = [
        nbformat.v4.new_code_cell(
            id=cell["id"], outputs=[nbformat.from_dict(o) for o in cell["outputs"]]
        )
        for cell in before["content"]["cells"]
    ]
    nbformat.write(on_disk, tmp_path / "x.ipynb")
    manager = getattr(filemanager, kind)(root_dir=str(tmp_path))
    model = _notebook([_widget_output("check")], state=None)
    lab_settings.saved_as_shown(model, path="x.ipynb", contents_manager=manager)
    (output,) = model["content"]["cells"][0]["outputs"]
    assert "3 of 5 checks passed" in output["data"]["text/html"]
    assert VIEW not in output["data"]


def test_the_server_loads_the_hook(tmp_path):
    path = lab_settings.install_server_extension(tmp_path)
    assert (
        path == tmp_path / "etc/jupyter/jupyter_server_config.d/transformer_course.json"
    )
    assert json.loads(path.read_text()) == {
        "ServerApp": {"jpserver_extensions": {"transformer_course.lab_settings": True}}
    }
    assert lab_settings.install_server_extension(tmp_path) == path  # twice: the same
    (point,) = lab_settings._jupyter_server_extension_points()
    assert point == {"module": "transformer_course.lab_settings"}
    registered = []

    class App:
        class contents_manager:  # noqa: N801
            register_pre_save_hook = registered.append

    lab_settings._load_jupyter_server_extension(App())
    assert registered == [lab_settings.saved_as_shown]


def test_validate_waits_for_a_checks_verdict(tmp_path, monkeypatch):
    """A function that never returns: the check stops it after 30 s and says
    so, and Validate, 30 s per cell by default, cut the cell off first
    (CellTimeoutError and a traceback). The environment's nbgrader settings give
    Validate 120 s, read as Validate's server extension reads them; a file
    with other settings keeps them."""
    from nbgrader.apps.baseapp import NbGrader

    config_dir = tmp_path / "etc" / "jupyter"
    config_dir.mkdir(parents=True)
    (config_dir / "nbgrader_config.json").write_text(
        json.dumps({"CourseDirectory": {"course_id": "mine"}})
    )
    path = lab_settings.install_nbgrader_config(tmp_path)
    # as nbgrader's validate handler loads its settings: from Jupyter's config
    # folders, {sys.prefix}/etc/jupyter among them (here, tmp_path's)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(config_dir))
    app = NbGrader()
    assert str(config_dir) in app.config_file_paths
    app.load_config_file()
    assert app.config.Execute.timeout == lab_settings.VALIDATE_TIMEOUT
    assert app.config.Execute.timeout > 30 + 30  # the check's limit, and then some
    assert json.loads(path.read_text())["CourseDirectory"] == {"course_id": "mine"}


def test_a_saved_quiz_is_a_picture_of_itself():
    """A reopened notebook's saved quiz answered clicks through its page script
    and rewrote the saved progress table, which the answers the course keeps
    knew nothing of: saved, it has no script and its controls are disabled."""
    page_quiz = (
        '<form><input type="radio" name="a"><button type="submit">Submit</button>'
        "</form><script>document.forms[0].onsubmit = grade;</script>"
    )
    model = _notebook([_widget_output("quiz", page_quiz)], _state())
    lab_settings.saved_as_shown(model, path="x.ipynb")
    html_text = model["content"]["cells"][0]["outputs"][0]["data"]["text/html"]
    assert "<script" not in html_text
    assert '<input disabled type="radio"' in html_text
    assert '<button disabled type="submit">' in html_text
    assert "To answer it, run the notebook's cells from the top" in html_text


def test_a_saved_quizs_chapter_link_opens_the_chapter_notebook():
    """A quiz saved as shown keeps its links; one to an equation on the book's
    site (../book/06_gpt.html#eq-6-3, no such file in JupyterLab: a learner
    round got a 404) points at the chapter's notebook, as the notebook's own
    Markdown links do. Links elsewhere are left alone."""
    saved = lab_settings._inert(
        '<a href="../book/06_gpt.html#eq-6-3">eq. (6.3)</a> '
        '<a href="https://arxiv.org/abs/2304.10557">Turner</a>'
    )
    assert 'href="../book/06_gpt.ipynb"' in saved
    assert ".html" not in saved.split("arxiv")[0]
    assert 'href="https://arxiv.org/abs/2304.10557"' in saved
