"""The corpus ships with the package: with no network and an empty home folder,
from this checkout or from a wheel built from it (what ``pip install`` of the
repository, e.g. on Colab, installs), ``tc.load_text`` returns tiny Shakespeare
and writes nothing. The promise of README's "Data and working offline"."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CORPUS = "transformer_course/corpus/tinyshakespeare.txt.xz"

# Run in a fresh interpreter: an audit hook refuses every connection and name
# look-up, and the script first proves that the block works.
SCRIPT = r"""
import hashlib, socket, sys

def no_network(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
        raise OSError(f"network blocked by the test ({event})")

sys.addaudithook(no_network)
try:
    socket.create_connection(("127.0.0.1", 9), timeout=1)
except OSError as err:
    assert "network blocked by the test" in str(err), err
else:
    raise AssertionError("the network block does not work")

import transformer_course as tc

text = tc.load_text("tinyshakespeare")
print(tc.__file__)
print(len(text), hashlib.sha256(text.encode()).hexdigest())
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the checkout (the checkout stays clean)."""
    pytest.importorskip("setuptools", reason="building a wheel needs setuptools")
    project = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "pyproject.toml", project)
    shutil.copy(ROOT / "README.md", project)
    shutil.copytree(
        ROOT / "src" / "transformer_course",
        project / "src" / "transformer_course",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import build_meta; build_meta.build_wheel('dist')",
        ],
        cwd=project,
        capture_output=True,
        check=True,
    )
    (built,) = (project / "dist").glob("transformer_course-*.whl")
    return built


def test_the_wheel_carries_the_corpus(wheel):
    shipped = (ROOT / "src" / CORPUS).read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(CORPUS) == shipped


@pytest.mark.parametrize("install", ["checkout", "wheel"])
def test_corpus_loads_with_no_network_and_an_empty_home(install, tmp_path, request):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env |= {"HOME": str(home), "MPLCONFIGDIR": str(tmp_path / "matplotlib")}
    expected_package = ROOT / "src" / "transformer_course"
    if install == "wheel":
        site = tmp_path / "site"
        with zipfile.ZipFile(request.getfixturevalue("wheel")) as archive:
            archive.extractall(site)
        env["PYTHONPATH"] = str(site)
        expected_package = site / "transformer_course"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    location, checked = result.stdout.splitlines()
    assert Path(location).parent == expected_package  # the install under test
    assert checked == f"1115394 {SHA256}"
    assert list(home.iterdir()) == []  # no cache, no download folder
