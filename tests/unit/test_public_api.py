"""The API is what docs/api.md lists: `tessel_dsl.__all__`, and the `__all__` of the modules behind it."""
from __future__ import annotations

import importlib
import re

import pytest

import tessel_dsl
from tests.paths import ROOT

# Modules with names for users, beyond the package's own: each has an `__all__`.
PUBLIC_MODULES = ("tessel_dsl.errors", "tessel_dsl.ir", "tessel_dsl.schedule", "tessel_dsl.plan",
                  "tessel_dsl.plan_check", "tessel_dsl.lower", "tessel_dsl.validate", "tessel_dsl.lang.parser",
                  "tessel_dsl.lang.spec_check", "tessel_dsl.search.driver", "tessel_dsl.interop.torch_csv",
                  "tessel_dsl.tools.profiling", "tessel_dsl.simulator", "tessel_dsl.executor",
                  "tessel_dsl.executor.local_ranks")


def _documented() -> set[str]:
    """The names in the first column of docs/api.md's table under "## The names"."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("## The names", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for cell in rows for name in re.findall(r"`(\w+)`", cell)}


def test_the_documented_names_are_the_package_api():
    assert _documented() == set(tessel_dsl.__all__)


def test_every_public_name_resolves():
    for name in tessel_dsl.__all__:
        assert getattr(tessel_dsl, name) is not None, name


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_public_modules_say_what_is_public(module):
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    assert names, f"{module} has no __all__"
    assert not [n for n in names if not hasattr(mod, n)], f"{module}.__all__ names what it does not define"


def test_each_package_name_is_public_where_it_is_defined():
    """A function of the package API is in its own module's `__all__`, not an internal by accident."""
    from tessel_dsl import _LAZY

    for name, module in _LAZY.items():
        assert name in importlib.import_module(module).__all__, f"{name} is missing from {module}.__all__"
