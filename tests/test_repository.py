"""The set-up promises of the README hold in the repository itself."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_quick_start():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:bash|sh)?\n(.*?)```", section, flags=re.S)


def test_quick_start_is_exactly_two_commands_and_ci_runs_the_test_one():
    blocks = readme_quick_start()
    commands = [
        line
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert commands == ["make book", "make test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, flags=re.M)


def test_requirements_pin_what_must_be_pinned():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert "torch==2.13.0" in lines
    assert "jupyter-book==1.0.4.post1" in lines
    assert "nbval==0.11.0" in lines
    assert "-e ." in lines


def test_data_and_build_outputs_are_never_tracked():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert not any(
        name.startswith(("_build/", "_vendor/", ".venv/")) for name in tracked
    )
    assert not any(name.endswith("input.txt") for name in tracked)


# import name -> distribution name, where they differ
DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "IPython": "ipython",
    "matplotlib_inline": "matplotlib-inline",
}


def imported_distributions() -> set[str]:
    """Third-party distributions the package imports (top level or in functions)."""
    import ast
    import sys

    found = set()
    for path in (ROOT / "src" / "transformer_course").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "transformer_course":
                    continue
                found.add(DISTRIBUTIONS.get(top, top))
    return found


def test_dependencies_are_declared_where_imported_and_nothing_else():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {
        re.split(r"[<>=!~\[ ]", spec)[0].lower()
        for spec in project["dependencies"]
        + [s for extra in project["optional-dependencies"].values() for s in extra]
    }
    assert imported_distributions() == declared


def test_the_slowest_test_files_are_handed_out_first():
    """``make test``'s two workers end together: pytest-xdist's own order left
    the class-grading file (a quarter of one worker's time) for the end."""
    from collections import OrderedDict

    from work_order import BOOK_FILES, SLOW_FILES, put_the_slowest_first

    for path in SLOW_FILES:  # a renamed file would silently lose its place
        assert (ROOT / path).is_file(), path
    queue = OrderedDict.fromkeys(
        ["tests/test_a.py", *sorted(SLOW_FILES), "tests/test_z.py", BOOK_FILES[0]]
    )
    put_the_slowest_first(queue)
    by_cost = sorted(SLOW_FILES, key=SLOW_FILES.get, reverse=True)
    assert list(queue) == [
        BOOK_FILES[0],
        *by_cost,
        "tests/test_a.py",
        "tests/test_z.py",
    ]
