"""One list of diagnostic codes (`tessel_dsl.errors.CODES`): every code the package raises is in it,
every entry is raised somewhere, and the README's error table is exactly that list."""
from __future__ import annotations

import ast

from tessel_dsl.errors import CODES, codes_table
from tessel_dsl.lang.options import OPTIONS
from tests.paths import ROOT

SOURCES = list((ROOT / "tessel_dsl").rglob("*.py"))
# Where a code arrives as a variable: the evaluator's error() wrapper builds the Diagnostic, and
# check() reports a block option's own check under the code its row gives.
PASS_THROUGH = {("values.py", "Diagnostic"), ("spec_check.py", "Diagnostic")}


def _raised_codes() -> tuple[dict[str, list[str]], list[str]]:
    """code -> where it is raised; and calls whose code is not a string literal."""
    found: dict[str, list[str]] = {}
    odd: list[str] = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            # Diagnostic(code, ...) and the evaluator's ev.error(code, message, loc)
            first = node.args[0]
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if name != "Diagnostic" and not (name == "error" and len(node.args) == 3 and literal):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if literal:
                found.setdefault(first.value, []).append(where)
            elif (path.name, name) not in PASS_THROUGH:
                odd.append(where)
    for option in OPTIONS:  # the block option table raises its codes through the evaluator and check()
        for code in option.codes():
            found.setdefault(code, []).append(f"lang/options.py: {option.words}")
    return found, odd


def test_every_raised_code_is_listed_and_every_listed_code_is_raised():
    found, odd = _raised_codes()
    assert not odd, f"diagnostic codes must be string literals (so this test can see them): {odd}"
    unlisted = {c: w for c, w in found.items() if c not in CODES}
    assert not unlisted, f"add these codes to tessel_dsl.errors.CODES (and the README): {unlisted}"
    assert set(CODES) - set(found) == set(), "CODES lists codes nothing raises"


def test_readme_error_table_is_the_code_list():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert codes_table() in readme, ("the README's error table differs from tessel_dsl.errors.CODES; "
                                     "run: python bench/doc_tables.py --write")
