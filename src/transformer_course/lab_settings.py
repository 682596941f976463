"""The JupyterLab setting the exercise notebooks need: widgets saved with them.

JupyterLab draws a widget (an exercise's checks, a quiz, the progress table)
from its model in the running kernel. A notebook saved and opened again has no
such model until its cells run again, so every widget would read "Error
displaying widget: model not found". With the widget manager's ``saveState``
on, JupyterLab writes the widgets' state into the notebook as it saves it, and
draws them from there when the notebook is opened again: the last results stay
visible, and the cell's plain-text fallback says to run it to use them again.

    python -m transformer_course.lab_settings    # this environment's JupyterLab

The setting is merged into ``{sys.prefix}/share/jupyter/lab/settings/
overrides.json``, JupyterLab's defaults for one environment; whatever else the
file holds is kept, and a learner's own settings still win. ``make`` runs it
when it creates the course's environment. Used by: the exercise notebooks of
every chapter (``transformer_course.exercises``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

__all__ = ["SETTINGS", "install", "overrides_path"]

#: plugin id -> the settings the course needs from it
SETTINGS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}


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
    path.parent.mkdir(parents=True, exist_ok=True)
    # written whole, then renamed: a crash never leaves half a file
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
    ) as file:
        json.dump(merged, file, indent=2)
        file.write("\n")
    os.replace(file.name, path)
    return path


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


if __name__ == "__main__":
    main()
