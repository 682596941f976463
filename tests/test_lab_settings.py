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
