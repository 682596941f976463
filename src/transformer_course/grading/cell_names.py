"""The names a submission's cells define, read in a child process with a deadline.

The grader needs two facts of the cells before it runs anything: which cell
defines an exercise's function (at its top level), and which names the locked
cells bind (the grader runs no locked cell, and stands in for those names). Both
come from parsing the cells, and parsing is not cheap for every text: an
f-string of tens of thousands of ``{a}`` fields takes Python 3.11 about 3 s per
200,000 characters, so five such cells, within the grader's size limits, cost
its own process 15 s a notebook (the fifty-ninth red team). The parses run here,
as a script, in a child process with :data:`SECONDS` and :data:`BYTES`
(:func:`read_cell_names`); a cell not parsed in time counts as one that does not
parse, which the grader already handles (it looks for ``def name(`` instead).

Needs nothing but the standard library: the file runs on its own.
"""

from __future__ import annotations

import ast
import contextlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BYTES", "SECONDS", "read_cell_names", "stored_names", "top_level_names"]

#: How long the child may parse one notebook's cells, all of them together (an
#: honest notebook takes milliseconds; ordinary code about 2 s per MB, and the
#: grader reads at most 1,000,000 characters of code), and the memory it may use.
SECONDS = 5.0
BYTES = 2 << 30

#: The kinds of question: the names a cell defines at its top level (``def``, an
#: assignment); every name a cell's top-level statements store, as a locked cell
#: binds them for the cells after it.
KINDS = ("top", "stored")


def without_magics(source: str) -> str:
    """The cell with each line of IPython (``%pip``, ``!ls``) made a ``pass``."""
    return "\n".join(
        "pass" if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )


def _parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def top_level_names(source: str) -> list[str] | None:
    """The functions and variables a cell defines at its top level, sorted (None
    if it does not parse, its lines of IPython read as ``pass``)."""
    tree = _parsed(without_magics(source))
    if tree is None:
        return None
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return sorted(names)


def stored_names(source: str) -> list[str] | None:
    """Every name a cell's top-level statements bind in the notebook's namespace,
    inside them too (a loop's variable, a ``case`` pattern's), with the
    functions and classes it defines, sorted (None if it does not parse: a cell
    of IPython, such as the setup cell's ``%pip``, binds nothing the grader
    stands in for). Not a function's, a class's, a lambda's or a
    comprehension's own variables, which a kernel never sees: the given
    ``self_attention``'s ``B, N, D`` bound as stand-ins made an honest
    ``f"D = {D}"`` in a branch never taken read as the course package (the
    sixty-second red team)."""
    tree = _parsed(source)
    if tree is None:
        return None
    names: set[str] = set()
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    comprehensions = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, scopes):
            continue  # its body binds its own names, not the notebook's
        if isinstance(node, comprehensions):
            # only := inside binds outside (PEP 572); the loop variables do not
            names.update(
                sub.target.id
                for sub in ast.walk(node)
                if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name)
            )
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.MatchAs | ast.MatchStar):  # not except's "as":
            # Python deletes that name at the end of its clause
            if node.name:
                names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        stack.extend(ast.iter_child_nodes(node))
    return sorted(names)


ASK = {"top": top_level_names, "stored": stored_names}


def read_cell_names(
    questions: Sequence[tuple[str, int, str]], seconds: float | None = None
) -> dict[tuple[str, int], frozenset[str] | None]:
    """``{(kind, cell index): names, or None}`` for each ``(kind, index, source)``
    of ``questions`` (kind one of :data:`KINDS`), parsed in a child process
    with ``seconds`` (default :data:`SECONDS`) and :data:`BYTES`. A cell the child did not answer in time
    (or answered with anything but a list of names) is None, as a cell that
    does not parse."""
    answers: dict[tuple[str, int], frozenset[str] | None] = {
        (kind, index): None for kind, index, _ in questions
    }
    if not questions:
        return answers

    def limit_memory() -> None:  # in the child, before it runs
        with contextlib.suppress(ValueError, OSError, AttributeError, ImportError):
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (BYTES, BYTES))

    # the shortest cells first: an honest notebook's are short, and a long one
    # that takes the whole deadline leaves the others answered
    ordered = sorted(questions, key=lambda question: len(question[2]))
    try:
        said = subprocess.run(
            [sys.executable, "-I", "-W", "ignore", str(Path(__file__))],
            input=json.dumps([list(question) for question in ordered]),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a child's warnings: never read (red team 60)
            text=True,
            timeout=SECONDS if seconds is None else seconds,
            preexec_fn=limit_memory if sys.platform != "win32" else None,
            check=False,
        ).stdout
    except subprocess.TimeoutExpired as stopped:  # what it said before the deadline
        said = stopped.stdout or ""
        said = said.decode(errors="replace") if isinstance(said, bytes) else said
    for line in said.splitlines():
        try:
            kind, index, names = json.loads(line)
        except (ValueError, TypeError):
            continue
        if (kind, index) in answers and isinstance(names, list):
            answers[kind, index] = frozenset(n for n in names if isinstance(n, str))
    return answers


def _main() -> None:
    """``python cell_names.py``: reads ``[[kind, index, source], ...]`` as JSON
    on stdin and writes one line ``[kind, index, names or null]`` per question,
    each as soon as it is answered (what was written before a deadline counts)."""
    for kind, index, source in json.load(sys.stdin):
        names = ASK[kind](str(source)) if kind in ASK else None
        print(json.dumps([kind, index, names]), flush=True)


if __name__ == "__main__":
    _main()
