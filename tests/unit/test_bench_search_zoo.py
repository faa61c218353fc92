"""bench/search_zoo.py: the zoo's halves are the README's rule, and --write replaces one half's
table in its section, leaving the other half and the other sections alone."""
from __future__ import annotations

from tests.helpers import load_bench
from tests.paths import ROOT


def test_halves_alternate_in_byte_order_of_names():
    zoo = ROOT / "bench" / "specs" / "zoo"
    names = sorted(p.name for half in ("tune", "heldout") for p in (zoo / half).glob("*.tsl"))
    assert len(names) >= 20
    assert sorted(p.name for p in (zoo / "tune").glob("*.tsl")) == names[0::2]
    assert sorted(p.name for p in (zoo / "heldout").glob("*.tsl")) == names[1::2]


def test_write_replaces_one_half_and_keeps_the_rest(tmp_path):
    bench = load_bench("search_zoo")
    target = tmp_path / "R.md"
    target.write_text("# R\n\n## Simulator\n\nsim text\n\n## GPU\n\ngpu text\n")
    bench.write(target, "tune", "### Half: tune\n\ntune v1\n")
    bench.write(target, "heldout", "### Half: heldout\n\nheldout v1\n")
    bench.write(target, "tune", "### Half: tune\n\ntune v2\n")
    text = target.read_text()
    assert "tune v2" in text and "tune v1" not in text and "heldout v1" in text
    assert "sim text" in text and "gpu text" in text
    assert text.count(bench.SECTION) == 1 and text.index(bench.SECTION) > text.index("## GPU")
    assert text.index("### Half: tune") < text.index("### Half: heldout")
