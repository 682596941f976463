"""The package's own map: every module is named in its docstring."""

import pkgutil

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
