"""A CI-sized sample of bench/fuzz.py: generated and mutated specs and mutated plans give clear
errors or results, never a traceback, never an input over the time limit."""
from __future__ import annotations

from tests.helpers import load_bench


def _fuzz():
    return load_bench("fuzz")


def test_fuzz_sample_has_no_tracebacks_and_no_slow_inputs():
    fuzz = _fuzz()
    res = fuzz.run(specs=240, plans=120, seed=7)
    stats = res["stats"]
    assert stats["spec"]["inputs"] == 240 and stats["plan"]["inputs"] == 120
    for kind in ("spec", "plan"):
        assert stats[kind]["traceback"] == 0, res["examples"]
        assert stats[kind]["over_limit"] == 0, res["examples"]
    # Both outcomes occur, so the sample exercises acceptance as well as rejection.
    assert stats["spec"]["accepted"] > 0 and stats["spec"]["error"] > 0
    assert res["peak_rss_mb"] < 1024


def test_a_fuzz_input_is_reproducible_from_its_index():
    fuzz = _fuzz()
    assert fuzz.make_input("spec", 7, 11) == fuzz.make_input("spec", 7, 11)
    assert fuzz.make_input("plan", 7, 3) == fuzz.make_input("plan", 7, 3)
