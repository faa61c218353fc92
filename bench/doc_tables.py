"""The lists and tables README.md and docs/ show that the code already holds, written from it.

Markdown between ``<!-- tables:NAME -->`` and ``<!-- /tables:NAME -->`` belongs to this script:

- ``block-options`` (README.md): the block options, from the rows of ``OPTIONS`` in
  ``tessel_dsl/lang/options.py`` (each row's ``doc``);
- ``error-codes`` (README.md): the diagnostic codes, ``CODES`` in ``tessel_dsl/errors.py``;
- ``cli-VERB`` (docs/VERB.md, for each verb with a page of its own): the verb's options table, one
  row per option of its Typer command: the option's names, its metavar, its ``help=`` and its
  default.

So a new block option, error code or command-line option is written once, in the code, and
``tests/unit/test_doc_tables.py`` fails until this script has copied it into the docs:

    python bench/doc_tables.py            # check: exit 1 and name each block that differs
    python bench/doc_tables.py --write    # rewrite the blocks
"""
from __future__ import annotations

import argparse
import functools
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


@functools.lru_cache(maxsize=None)
def _commands() -> dict:
    """The `tessel` verbs, by name, as Click commands (Typer builds them from the functions)."""
    import typer.main

    from tessel_dsl.cli import _load_verbs, app

    _load_verbs()
    return typer.main.get_command(app).commands


def page_verbs() -> list[str]:
    """The verbs with a page of their own, docs/<verb>.md, in command order."""
    return [verb for verb in _commands() if (ROOT / "docs" / f"{verb}.md").exists()]


def _cell(text: str) -> str:
    # A `|` ends a cell in a Markdown table, inside backticks too, unless escaped.
    return " ".join(text.split()).replace("|", "\\|")


def _join(opts: list[str]) -> str:
    # short names first, as `--help` lists them
    return ", ".join(sorted(opts, key=lambda o: len(o) - len(o.lstrip("-"))))


def option_names(param) -> str:
    """`-o, --output PATH`, `--blocking / --non-blocking`: the names and metavar the row shows."""
    names = _join(param.opts)
    if param.secondary_opts:
        names += " / " + _join(param.secondary_opts)
    if param.is_flag:
        return names
    metavar = param.metavar or param.type.name.split()[0].upper()
    return f"{names} {metavar}"


def option_default(param) -> str | None:
    """The default `--help` shows beside the option, or None when it shows none."""
    if param.is_flag or param.required or param.default is None or param.show_default is False:
        return None
    if param.multiple and not param.default:
        return None
    return str(param.default)


def cli_options(verb: str) -> str:
    """The options table of docs/<verb>.md: each option's names and metavar, then its help."""
    lines = ["| option | meaning |", "|---|---|"]
    for param in _commands()[verb].params:
        if param.param_type_name != "option" or param.hidden:
            continue
        meaning = (param.help or "").strip()
        default = option_default(param)
        if default is not None:
            meaning += ("" if meaning.endswith(".") else ".") + f" Default: `{default}`."
        lines.append(f"| `{_cell(option_names(param))}` | {_cell(meaning)} |")
    return "\n".join(lines)


def blocks() -> dict[tuple[str, str], Callable[[], str]]:
    """(file, block name) -> the function that writes the block's text."""
    out: dict[tuple[str, str], Callable[[], str]] = {
        ("README.md", "block-options"): block_options,
        ("README.md", "error-codes"): error_codes,
    }
    for verb in page_verbs():
        out[(f"docs/{verb}.md", f"cli-{verb}")] = functools.partial(cli_options, verb)
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
