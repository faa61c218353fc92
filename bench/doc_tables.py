"""The lists and tables README.md and docs/ show that the code already holds, written from it.

Markdown between ``<!-- tables:NAME -->`` and ``<!-- /tables:NAME -->`` belongs to this script:

- ``block-options`` (README.md): the block options, from the rows of ``OPTIONS`` in
  ``tessel_dsl/lang/options.py`` (each row's ``doc``);
- ``error-codes`` (README.md): the diagnostic codes, ``CODES`` in ``tessel_dsl/errors.py``.

So a new block option or error code is written once, in the code, and
``tests/unit/test_doc_tables.py`` fails until this script has copied it into the docs:

    python bench/doc_tables.py            # check: exit 1 and name each block that differs
    python bench/doc_tables.py --write    # rewrite the blocks
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

def block_options() -> str:
    from tessel_dsl.lang.options import OPTIONS

    return "\n".join(f"- **`{o.words} {o.metavar}`** {o.doc}" for o in OPTIONS)


def error_codes() -> str:
    from tessel_dsl.errors import codes_table

    return codes_table()


def blocks() -> dict[tuple[str, str], Callable[[], str]]:
    """(file, block name) -> the function that writes the block's text."""
    out: dict[tuple[str, str], Callable[[], str]] = {
        ("README.md", "block-options"): block_options,
        ("README.md", "error-codes"): error_codes,
    }
    return out


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- tables:{re.escape(name)} -->\n)(.*?)(\n<!-- /tables:{re.escape(name)} -->)", re.S)


def current(path: Path, name: str) -> str | None:
    m = _pattern(name).search(path.read_text(encoding="utf-8"))
    return m.group(2) if m else None


def stale() -> list[str]:
    """The blocks whose text differs from what the code says (or that are missing)."""
    out = []
    for (file, name), make in blocks().items():
        have = current(ROOT / file, name)
        if have is None:
            out.append(f"{file}: no block '{name}' (<!-- tables:{name} --> ... <!-- /tables:{name} -->)")
        elif have != make():
            out.append(f"{file}: block '{name}' differs from the code")
    return out


def write() -> list[str]:
    changed = []
    for (file, name), make in blocks().items():
        path = ROOT / file
        text = path.read_text(encoding="utf-8")
        new, n = _pattern(name).subn(lambda m: m.group(1) + make() + m.group(3), text)
        if n != 1:
            raise SystemExit(f"{file}: needs exactly one block '{name}' (<!-- tables:{name} --> ... "
                             f"<!-- /tables:{name} -->), found {n}")
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(f"{file}: {name}")
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the blocks from the code")
    args = ap.parse_args(argv)
    if args.write:
        for line in write() or ["nothing to change"]:
            print(line)
        return 0
    problems = stale()
    for line in problems:
        print(line)
    if problems:
        print("run: python bench/doc_tables.py --write")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
