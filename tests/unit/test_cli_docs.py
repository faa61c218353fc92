"""Each verb with a page of its own (docs/<verb>.md) documents every option it takes."""
from __future__ import annotations

import re

import pytest

from tests.paths import ROOT

PAGES = ("search", "compare", "simulate", "run")


def _options(verb: str) -> list[str]:
    import typer.main

    from tessel_dsl.cli import _load_verbs, app

    _load_verbs()
    command = typer.main.get_command(app).commands[verb]
    return [o for p in command.params for o in p.opts if o.startswith("--")]


@pytest.mark.parametrize("verb", PAGES)
def test_every_option_is_on_the_verbs_page(verb):
    page = (ROOT / "docs" / f"{verb}.md").read_text(encoding="utf-8")
    options = _options(verb)
    assert "--set" in options  # the walk found the verb's own options
    missing = [o for o in options if not re.search(re.escape(o) + r"(?![\w-])", page)]
    assert not missing, f"docs/{verb}.md does not mention {missing}"
