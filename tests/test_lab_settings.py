"""The JupyterLab setting that keeps exercise widgets drawn after a reopen."""

from __future__ import annotations

import json

import pytest

from transformer_course import lab_settings


def test_the_setting_is_written_into_a_new_environment(tmp_path):
    path = lab_settings.install(tmp_path)
    assert path == tmp_path / "share/jupyter/lab/settings/overrides.json"
    assert json.loads(path.read_text()) == {
        "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}
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
