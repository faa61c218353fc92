"""The package's imports go one way along the data flow, with no cycles.

Layers, lowest first (docs/architecture.md draws them):

    0  core        errors, units, fileio, ir, analysis, schedule, validate, program, serialize, lower, plan
    1  lang        .tsl text -> Spec            search   Spec -> Schedule (and the baselines)
    2  views       timelines, traces, tables    interop  torch CSV, profiled .tsl
    3  simulator   SimPy run of the programs    executor torch.distributed run of the programs
    4  tools, cli  workflows that join every layer

A module may import its own layer or lower ones, never higher. Within a layer, the two halves
don't import each other where the data flow says they are independent (lang / search,
simulator / executor). No two modules import each other, directly or round a loop, even inside
one package. Function-level imports count too (a lazy import is still a dependency), and so do
imports made only for type checkers.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

REPO = ROOT

CORE = ("errors", "units", "fileio", "limits", "ir", "analysis", "schedule", "validate", "program", "serialize", "lower",
        "plan", "plan_check", "spec_rules")
GROUPS = {"lang": 1, "search": 1, "views": 2, "interop": 2, "simulator": 3, "executor": 3, "tools": 4, "placement": 4,
          "cli": 4}
INDEPENDENT = ({"lang", "search"}, {"simulator", "executor"})


def _modules() -> dict[str, Path]:
    found = {}
    for path in (REPO / "tessel_dsl").rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("").parts
        if rel[-1] == "__init__":
            rel = rel[:-1]
        found[".".join(rel)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every tessel_dsl module that `name` imports, at any depth of its code: inside functions,
    and under ``if TYPE_CHECKING:`` too (an import made only for a type checker still ties the
    two modules together for a reader and for the next change)."""
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in MODULES else target)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _group(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "core"  # the package's own __init__: public names, imported lazily
    return parts[1] if parts[1] in GROUPS else "core"


def _layer(module: str) -> int:
    return GROUPS.get(_group(module), 0)


def test_the_layout_is_what_the_test_knows():
    """Every module sits in a known group: a new top-level module must be placed on purpose."""
    strays = [m for m in MODULES if _group(m) == "core" and m != "tessel_dsl" and m.split(".")[1] not in CORE]
    assert not strays, f"modules outside every layer (add them to a group or to CORE): {strays}"


def test_the_search_package_names_each_of_its_modules():
    """`tessel_dsl/search/__init__.py`'s docstring is the package's map: a module added or removed
    must be added to or removed from it too."""
    import re

    folder = REPO / "tessel_dsl" / "search"
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    have = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    have |= {p.name + "/" for p in folder.iterdir() if (p / "__init__.py").exists()}
    listed = set(re.findall(r"^(\w+/?) {2,}\S", doc, re.M))
    assert not have - listed, f"modules missing from tessel_dsl/search/__init__.py's docstring: {sorted(have - listed)}"
    assert not listed - have, f"tessel_dsl/search/__init__.py's docstring names modules that are gone: {sorted(listed - have)}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or round a loop: the strongly connected
    components (Tarjan) of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles():
    """No two modules import each other, in any package, whatever their layers."""
    assert not _cycles(GRAPH), f"import cycles: {_cycles(GRAPH)}"


@pytest.mark.parametrize("module, back_to", [
    ("tessel_dsl.search.kcopy", "tessel_dsl.search.driver"),           # the driver calls kcopy
    ("tessel_dsl.lang.blocks", "tessel_dsl.lang.evaluate"),            # the evaluator calls blocks
    ("tessel_dsl.lang.memory", "tessel_dsl.lang.evaluate"),            # ... and memory
])
def test_the_cycle_check_sees_a_cycle_within_a_package(module, back_to):
    """The cycles these modules once had (an import for type hints back to their caller) are found
    again if one comes back, though both ends sit in one package and one layer."""
    assert module in GRAPH[back_to] or any(module in GRAPH[m] for m in GRAPH[back_to])
    graph = {m: set(t) for m, t in GRAPH.items()}
    graph[module].add(back_to)
    assert any({module, back_to} <= set(c) for c in _cycles(graph))


def test_a_type_checking_import_counts(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tessel_dsl.ir import Spec\n")
    assert _imports("tessel_dsl.search.m", source) == {"tessel_dsl.ir"}


def test_imports_go_one_way():
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m, targets in GRAPH.items() for t in sorted(targets)
              if m != "tessel_dsl" and _layer(t) > _layer(m)]
    sideways = [f"{m} imports {t}" for m, targets in GRAPH.items() for t in sorted(targets)
                if {_group(m), _group(t)} in INDEPENDENT]
    assert not upward + sideways, "\n".join(upward + sideways)


@pytest.mark.parametrize("bad, good", [("tessel_dsl.ir", "tessel_dsl.lang.parser")])
def test_the_checker_sees_an_upward_import(bad, good):
    """The walk is not vacuous: the parser really is found importing the IR, one layer down."""
    assert bad in GRAPH[good]
    assert _layer(good) > _layer(bad)
