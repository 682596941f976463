"""Make the student version of an exercise notebook from its source notebook.

Source notebooks (``exercises/source/NN_topic.ipynb``) hold the reference
solutions between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, the nbgrader
way; nbgrader's ``generate_assignment`` reads them as they are. This module makes
the same replacement nbgrader makes, without nbgrader, for the committed student
notebooks (``exercises/NN_topic.ipynb``) that the book shows::

    python tools/release.py          # rewrite all
    python tools/release.py --check  # exit 1 if out of date
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

__all__ = ["strip_solution", "student_version"]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"


def strip_solution(source: str, stub: str = CODE_STUB) -> str:
    """Replace each BEGIN/END SOLUTION region by ``stub``, at the region's indent."""
    lines, out, inside = source.splitlines(), [], False
    for line in lines:
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"nested {BEGIN!r}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + s for s in stub.splitlines()]
        elif stripped == END:
            if not inside:
                raise ValueError(f"{END!r} without {BEGIN!r}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN!r} without {END!r}")
    return "\n".join(out)


def student_version(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with every solution region replaced by a stub; outputs cleared."""
    notebook = copy.deepcopy(source)
    for cell in notebook.cells:
        text = cell.source
        if BEGIN in text:
            stub = CODE_STUB if cell.cell_type == "code" else TEXT_STUB
            cell.source = strip_solution(text, stub)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return notebook


def _pairs(root: Path):
    for source in sorted((root / "exercises" / "source").glob("*.ipynb")):
        yield source, root / "exercises" / source.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument(
        "--check", action="store_true", help="only report stale notebooks"
    )
    args = parser.parse_args(argv)
    stale = []
    for source, target in _pairs(args.root):
        made = (
            nbformat.writes(student_version(nbformat.read(source, as_version=4))) + "\n"
        )
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current != made:
            stale.append(target)
            if not args.check:
                target.write_text(made, encoding="utf-8")
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
