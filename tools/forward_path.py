"""How many lines a reader follows through one forward pass of ``tc.GPT``.

Issue 24's measure of "the code is the lesson": every function and method of
the package that building a GPT and running it on a batch of ids calls, counted
whole (signature, docstring, body), each once. The shape and type checks of
``transformer_course.shapes``, which each ``forward`` calls in one line, are
counted apart: a reader follows the model without opening them.

    python tools/forward_path.py          # the table, then the totals
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from pathlib import Path

import torch

import transformer_course as tc

PACKAGE = Path(tc.__file__).resolve().parent
VALIDATION = {"shapes.py"}


def functions_called() -> dict[tuple[str, int, str], int]:
    """(file, first line, name) -> lines, for every package function that
    building a small GPT and one forward pass call (comprehensions aside)."""
    seen = {}

    def tracer(frame, event, arg):
        code = frame.f_code
        path = Path(code.co_filename).resolve()
        if event == "call" and path.is_relative_to(PACKAGE) and code.co_name[0] != "<":
            seen[(path.name, code.co_firstlineno, code.co_name)] = code
        return None

    torch.manual_seed(0)
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        config = tc.GPTConfig(vocab_size=65, block_size=16, n_layers=2, d_model=16)
        tc.GPT(config)(torch.randint(0, 65, (2, 8)))
    finally:
        sys.settrace(previous)
    return {key: len(inspect.getsourcelines(code)[0]) for key, code in seen.items()}


def totals() -> dict[str, int]:
    """{"model": lines outside the validation helpers, "validation": theirs}."""
    counted = Counter()
    for (file, _, _), lines in functions_called().items():
        counted["validation" if file in VALIDATION else "model"] += lines
    return {"model": counted["model"], "validation": counted["validation"]}


def main() -> None:
    for (file, line, name), lines in sorted(functions_called().items()):
        print(f"{file:16} {line:5}  {name:24} {lines:4}")
    found = totals()
    print(f"model: {found['model']} lines; validation (shapes): {found['validation']}")


if __name__ == "__main__":
    main()
