"""Each verb with a page of its own (docs/<verb>.md) documents every option it takes, in the options
table `python bench/doc_tables.py --write` writes from the options' own `help=`."""
from __future__ import annotations

import re

import pytest

from tests.helpers import load_bench
from tests.paths import ROOT

PAGES = ("search", "compare", "simulate", "run", "plan")


def _commands() -> dict:
    import typer.main

    from tessel_dsl.cli import _load_verbs, app

    _load_verbs()
    return typer.main.get_command(app).commands


def _options(verb: str) -> list:
    return [p for p in _commands()[verb].params if p.param_type_name == "option" and not p.hidden]


def test_the_pages_are_the_verbs_with_a_page_of_their_own():
    assert sorted(v for v in _commands() if (ROOT / "docs" / f"{v}.md").exists()) == sorted(PAGES)
    assert sorted(load_bench("doc_tables").page_verbs()) == sorted(PAGES)


@pytest.mark.parametrize("verb", PAGES)
def test_every_option_is_in_the_verbs_table_with_its_help(verb):
    tables = load_bench("doc_tables")
    block = tables.current(ROOT / "docs" / f"{verb}.md", f"cli-{verb}")
    assert block is not None, f"docs/{verb}.md has no options table; run: python bench/doc_tables.py --write"
    rows = block.splitlines()[2:]
    options = _options(verb)
    assert "--json" in [o for p in options for o in p.opts]  # the walk found the verb's own options
    undocumented = [p.opts[0] for p in options if not (p.help or "").strip()]
    assert not undocumented, f"give {undocumented} a help= text in tessel_dsl/cli/{verb}.py"
    missing = []
    for p in options:
        names = [*p.opts, *p.secondary_opts]
        row = next((r for r in rows if all(re.search(re.escape(n) + r"(?![\w-])", r.split("|")[1]) for n in names)),
                   None)
        if row is None or " ".join(p.help.split()) not in row.replace("\\|", "|"):
            missing.append(p.opts[0])
    assert not missing, (f"docs/{verb}.md's options table lacks {missing} or their help; "
                         "run: python bench/doc_tables.py --write")
    assert len(rows) == len(options)


def test_a_row_shows_names_metavar_help_and_default():
    tables = load_bench("doc_tables")
    rows = tables.cli_options("search").splitlines()
    assert rows[:2] == ["| option | meaning |", "|---|---|"]
    assert "| `-n, --microbatches N` | How many micro-batches to schedule" in "\n".join(rows)
    solver = next(r for r in rows if "--solver" in r)
    # `|` escaped so that it stays inside the cell; the default as `--help` shows it
    assert solver.startswith("| `--solver auto\\|cpsat\\|z3` | ") and solver.endswith(" Default: `auto`. |")
    assert any(r.startswith("| `--json` | Print the summary as JSON") for r in rows)  # a flag: no metavar
    blocking = next(r for r in tables.cli_options("simulate").splitlines() if "blocking" in r)
    assert blocking.startswith("| `--blocking / --non-blocking` | ")
