"""With no network and no cached data, every chapter still runs (on the course's
own corpus): the promise of README's "Working offline"."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
# the chapters whose data can be missing: those that load the text corpus
TEXT_CHAPTERS = sorted(
    p
    for p in (ROOT / "book").glob("*.ipynb")
    if "tc.load_text(" in p.read_text(encoding="utf-8")
)


def test_some_chapter_loads_text():
    assert TEXT_CHAPTERS


@pytest.mark.parametrize("path", TEXT_CHAPTERS, ids=lambda p: p.name)
def test_chapter_runs_offline_with_an_empty_cache(path, tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_COURSE_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMER_COURSE_DATA", str(tmp_path / "empty-cache"))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(
        env=dict(os.environ)
    )  # raises CellExecutionError on any failing cell
    printed = "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    )
    assert "offline mode and no cached copy" in printed
    assert "corpus: course (" in printed
    assert not (tmp_path / "empty-cache").exists() or not any(
        (tmp_path / "empty-cache").rglob("*.txt")
    )
