"""The package's own map: every module is named in its docstring."""

import pkgutil
from pathlib import Path

import pytest

import transformer_course as tc

MODULES = sorted(m.name for m in pkgutil.iter_modules(tc.__path__))


def test_modules_are_found():
    assert {"shapes", "runtime", "plotting", "tokens"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_every_module_is_named_in_the_package_docstring(name):
    assert f"``{name}``" in tc.__doc__, (
        f"transformer_course.{name} is missing from the module table in "
        "src/transformer_course/__init__.py"
    )


def test_a_gpt_forward_pass_reads_in_at_most_350_lines():
    """Issue 24: building a GPT and running it, ids to logits, calls at most 350
    lines of the package (docstrings included), besides the one-line shape and
    type checks of ``shapes`` (tools/forward_path.py counts them apart)."""
    import runpy

    tool = runpy.run_path(str(Path(__file__).parents[1] / "tools" / "forward_path.py"))
    called = tool["functions_called"]()
    names = {name for _, _, name in called}
    assert {"forward", "project", "attend", "split_heads", "merge_heads"} <= names
    found = tool["totals"]()
    assert 200 < found["model"] <= 350, found
    assert found["validation"] > 0


def test_the_wheel_holds_every_data_file_the_package_reads(tmp_path):
    """An install from a wheel (Colab's ``pip install``) has the corpus, the
    recorded figures and the quizzes: every file of the package that is not
    Python, built here from a copy of the sources (no network, about 1 s)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parents[1]
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, tmp_path / name)
    package = root / "src" / "transformer_course"
    shutil.copytree(
        package,
        tmp_path / "src" / "transformer_course",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    options = ["-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist")]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *options, str(tmp_path)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    inside = set(zipfile.ZipFile(wheel).namelist())
    data = {
        "transformer_course/" + path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc")
    }
    assert {"transformer_course/exercises/quizzes/ch05.toml"} <= data
    assert data <= inside, sorted(data - inside)
