"""Student notebooks are generated from source notebooks and kept in sync."""

import nbformat
import pytest
from exercise_helpers import ROOT, read_source

from tools import release


def test_strip_solution_keeps_the_indent_and_the_rest():
    source = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n"
    assert release.strip_solution(source) == (
        "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    )


@pytest.mark.parametrize(
    "source",
    [
        "### BEGIN SOLUTION\nx = 1\n",
        "x = 1\n### END SOLUTION\n",
        "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n",
    ],
)
def test_unbalanced_markers_are_errors(source):
    with pytest.raises(ValueError, match="SOLUTION"):
        release.strip_solution(source)


def test_student_version_has_stubs_no_solutions_and_keeps_metadata():
    source = read_source()
    student = release.student_version(source)
    text = nbformat.writes(student)
    assert "BEGIN SOLUTION" not in text
    assert "enumerate(sorted(set(text)))" not in text
    assert text.count("raise NotImplementedError()") == 4
    assert [c.metadata for c in student.cells] == [c.metadata for c in source.cells]


def test_committed_student_notebooks_are_in_sync_with_their_sources(capsys):
    status = release.main(["--root", str(ROOT), "--check"])
    assert status == 0, capsys.readouterr().out + " (run: python tools/release.py)"


def test_check_mode_reports_a_stale_notebook(tmp_path, capsys):
    (tmp_path / "exercises" / "source").mkdir(parents=True)
    nbformat.write(read_source(), tmp_path / "exercises" / "source" / "01_tokens.ipynb")
    (tmp_path / "exercises" / "01_tokens.ipynb").write_text("{}")
    assert release.main(["--root", str(tmp_path), "--check"]) == 1
    assert "out of date" in capsys.readouterr().out
    assert release.main(["--root", str(tmp_path)]) == 0
    assert release.main(["--root", str(tmp_path), "--check"]) == 0
