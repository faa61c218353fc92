"""`bench/search.py --write` replaces only a Search section it wrote itself."""
from __future__ import annotations

import pytest

from tests.helpers import load_bench
from tests.paths import ROOT


def _bench():
    return load_bench("search")


def test_write_replaces_its_own_section_and_keeps_the_others(tmp_path):
    target = tmp_path / "R.md"
    target.write_text("# R\n\n## Simulator\n\nsim text\n\n## Search\n\nold table\n\n## GPU\n\ngpu text\n")
    _bench().write_section(target, "## Search\n\nnew table\n")
    text = target.read_text()
    assert "new table" in text and "old table" not in text
    assert "sim text" in text and "gpu text" in text and text.index("## Search") < text.index("## GPU")


@pytest.mark.parametrize("held", ["### What the search returns at D=4", "<!-- numbers:search-d4 -->"])
def test_write_refuses_a_section_holding_what_it_did_not_write(tmp_path, held):
    target = tmp_path / "R.md"
    before = f"## Search\n\nold table\n\n{held}\n\nkept\n\n## GPU\n"
    target.write_text(before)
    with pytest.raises(SystemExit, match="would delete it"):
        _bench().write_section(target, "## Search\n\nnew table\n")
    assert target.read_text() == before


def test_the_project_results_file_is_refused(tmp_path):
    # bench/results/search.md's Search section holds doc_numbers' blocks and subsections: a copy of
    # it is left exactly as it was.
    copy = tmp_path / "search.md"
    copy.write_text((ROOT / "bench" / "results" / "search.md").read_text())
    before = copy.read_text()
    with pytest.raises(SystemExit, match="would delete it"):
        _bench().write_section(copy, "## Search\n\nnew table\n")
    assert copy.read_text() == before
