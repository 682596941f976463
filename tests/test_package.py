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
