"""The code follows the project's ruff settings (pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff():
    local = Path(sys.executable).with_name("ruff")
    found = str(local) if local.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: pip install -r requirements.txt")
    return found


def test_ruff_check_is_clean():
    targets = ["src", "tests", "book", "exercises", "benchmarks", "conftest.py"]
    result = subprocess.run(
        [ruff(), "check", *targets], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    targets = ["src", "tests", "book", "exercises", "benchmarks", "conftest.py"]
    result = subprocess.run(
        [ruff(), "format", "--check", *targets],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (
        result.stdout + result.stderr + "\nrun: ruff format " + " ".join(targets)
    )
