"""Every notebook follows the chapter template (book/template.ipynb).

nbval executes the notebooks themselves; this file checks what can be checked
without running them.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(
    p for folder in ("book", "exercises") for p in (ROOT / folder).glob("*.ipynb")
)
COLAB_INSTALL = 'if "google.colab" in sys.modules:\n    %pip install -q'
# An exercise notebook installs where the import fails: it imports nothing that
# an exercise forbidding a function refuses (sys; see exercises/screen.py).
EXERCISE_INSTALL = (
    "try:\n    import transformer_course as tc\nexcept ModuleNotFoundError:\n"
    "    %pip install -q"
)


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))


def code_cells(notebook):
    return [c for c in notebook["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_installs_imports_and_sets_up(path):
    """`device = tc.setup(seed=0)` where a chapter computes on the device,
    `tc.setup(seed=0)` alone where it does not (the template says which)."""
    first = "".join(code_cells(load(path))[0]["source"])
    assert (
        EXERCISE_INSTALL if path.parent.name == "exercises" else COLAB_INSTALL
    ) in first
    assert "import transformer_course as tc" in first
    assert "tc.setup(seed=" in first


def test_template_shows_the_device():
    first = "".join(code_cells(load(ROOT / "book" / "template.ipynb"))[0]["source"])
    assert "device = tc.setup(seed=" in first


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    """Outputs are made when the book is built; committed notebooks stay clean."""
    for cell in code_cells(load(path)):
        assert cell["outputs"] == [], f"{path.name}: a cell has stored outputs"
        assert cell["execution_count"] is None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_kernel_is_python3(path):
    assert load(path)["metadata"]["kernelspec"]["name"] == "python3"


SOURCES = sorted((ROOT / "exercises" / "source").glob("*.ipynb"))


@pytest.mark.parametrize(
    "path", NOTEBOOKS + SOURCES, ids=lambda p: p.parent.name + "/" + p.name
)
def test_opening_a_notebook_changes_nothing(path):
    """JupyterLab writes the kernel's own kernelspec and language_info into a
    notebook when its kernel starts: metadata that differs marked every notebook
    modified the moment it opened (closing an unedited one asked to save). The
    notebooks carry what ipykernel reports, for the course's Python (3.11.7, as
    on CI; on another version JupyterLab still updates language_info.version)."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    metadata = load(path)["metadata"]
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert metadata["kernelspec"] == {
        "display_name": spec.display_name,
        "language": spec.language,
        "name": "python3",
    }
    reported = {**IPythonKernel.language_info, "version": "3.11.7"}
    assert metadata["language_info"] == reported


def test_every_notebook_is_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = {toc["root"]}
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            listed.add(chapter["file"])
            listed.update(section["file"] for section in chapter.get("sections", []))
    for path in NOTEBOOKS:
        assert path.relative_to(ROOT).with_suffix("").as_posix() in listed, path
    for name in listed:
        assert any((ROOT / f"{name}{ext}").is_file() for ext in (".md", ".ipynb")), name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_numbered_multiline_equations_use_an_equation_environment(path):
    """Sphinx wraps a $$ block holding line breaks in \\begin{split}, where
    MathJax refuses \\tag ("\\tag not allowed in split environment") and
    shows an error box: such equations go in \\begin{equation*}…\\end{equation*}
    (MyST's amsmath extension passes it through untouched). The unstarred
    environment is not used: Sphinx numbers it too, and the equation showed two
    numbers, "(4.6) (2)" (issue 22)."""
    for cell in load(path)["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        for block in re.findall(r"\$\$(.*?)\$\$", source, re.S):
            broken = "\\\\" in block and "\\tag" in block
            assert not broken, f"{path.name}: {block.strip()[:60]!r}"
        numbered_twice = re.findall(
            r"\\begin\{(equation|align|gather|multline)\}", source
        )
        assert not numbered_twice, f"{path.name}: {numbered_twice}"


def test_notebooks_use_no_sphinx_roles_or_targets():
    """JupyterLab shows MyST's roles and targets as typed ("{doc}`…`",
    "(notation)="): links are Markdown links, which the book resolves too."""
    for path in NOTEBOOKS:
        for cell in load(path)["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            source = "".join(cell["source"])
            assert not re.search(r"\{(doc|ref|numref|eq)\}`", source), path.name
            assert not re.search(r"(?m)^\([\w-]+\)=\s*$", source), path.name


def test_links_from_exercises_land_on_their_section():
    """A link from an exercise to a chapter names the section (an anchor made
    from its heading, as the book makes them: myst_heading_anchors), not only
    the chapter, which opened at its top."""
    from myst_parser.mdit_to_docutils.base import default_slugify

    links = []
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        for cell in load(path)["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                links += re.findall(r"\]\((\.\./book/[^)#]+\.ipynb)(#[^)]*)?\)", text)
    assert links
    for target, fragment in links:
        assert fragment, target
        chapter = load(ROOT / "exercises" / target)
        headings = [
            line.lstrip("#").strip()
            for cell in chapter["cells"]
            if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines()
            if line.startswith("#")
        ]
        slugs = {default_slugify(h) for h in headings}
        assert fragment[1:] in slugs, (target, fragment)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"]["myst_heading_anchors"] >= 2


def test_no_escaped_underscore_inside_text_mode_math():
    r"""MathJax shows ``\text{max\_len}`` with its backslash (text mode takes no
    macros): names with underscores go in ``\mathrm{max\_len}``."""
    for path in NOTEBOOKS:
        for cell in load(path)["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                assert not re.search(r"\\text\{[^}]*\\_", text), path.name
