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


def test_a_period_proof_is_not_counted_as_an_optimal_makespan():
    # The search's `proven` is about the period (minimal among the repetends it considers); a row
    # whose makespan is above its bound is "period only", and only makespans at their bound count
    # as proven optimal in the summary.
    bench = load_bench("search_zoo")

    def row(spec, makespan, proven):
        return {"spec": spec, "devices": 16, "cpu": 1.0, "rc": 0, "period_per_microbatch": 240.0,
                "lower_bound": 184, "memory_bound": 184.0, "makespan": makespan, "makespan_bound": 7064,
                "proven": proven, "time_unit": "1ms", "baseline": "gpipe+", "baseline_makespan": 10592}

    text = bench.table("heldout", [row("a", 8352, True), row("b", 7064, False), row("c", 9000, False)], 120, None)
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert " | period only | " in lines["a"] and " | yes | " in lines["b"] and " | no | " in lines["c"]
    assert "the search's verdict `proven` 1, makespan proven optimal (at that bound) 1 of 3" in text
