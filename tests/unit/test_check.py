"""`check()` on specs built directly from the IR: every problem found, each with its code."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import Location, SpecError
from tessel_dsl.ir import Block, Edge, Expectation, Kind, Link, Spec
from tessel_dsl.lang.spec_check import check, diagnose


def fwd(name, dev, time=1, mem=1):
    return Block(name, Kind.FORWARD, (dev,) if isinstance(dev, int) else tuple(dev), time, mem)


def bwd(name, of, dev, time=3, mem=-1, kind=Kind.BACKWARD):
    return Block(name, kind, (dev,), time, mem, of)


def vshape(d=2, memory=4, **kw):
    blocks = [fwd(f"F{i}", i) for i in range(d)] + [bwd(f"B{i}", f"F{i}", i) for i in reversed(range(d))]
    names = [f"F{i}" for i in range(d)] + [f"B{i}" for i in reversed(range(d))]
    edges = [Edge(a, b) for a, b in zip(names, names[1:])]
    return Spec("v", d, memory, tuple(blocks), tuple(edges), **kw)


def codes(spec):
    return [d.code for d in diagnose(spec)]


def test_sound_spec_is_returned_unchanged():
    spec = vshape()
    assert check(spec) is spec
    assert diagnose(spec) == []


@pytest.mark.parametrize("change,expected", [
    (dict(devices=0), ["bad-devices", "device-range", "device-range", "device-range", "device-range"]),
    (dict(memory=-1), ["bad-memory"]),
    (dict(microbatches=0), ["bad-microbatches"]),
    (dict(blocks=(), edges=()), ["no-blocks"]),
])
def test_header_problems(change, expected):
    spec = vshape()
    spec = Spec(**{**{f: getattr(spec, f) for f in ("name", "devices", "memory", "blocks", "edges",
                                                     "microbatches")}, **change})
    assert codes(spec) == expected


def test_block_problems_are_all_reported():
    blocks = (fwd("A", 0), fwd("A", 1), Block("C", Kind.FORWARD, (), 1, 0), fwd("D", 7),
              fwd("E", (1, 1)), fwd("G", 0, time=0), bwd("H", None, 0), bwd("I", "G9", 0),
              bwd("J", "H", 0, kind=Kind.WEIGHT_GRAD))
    spec = Spec("s", 2, 10, blocks, ())
    assert codes(spec) == ["duplicate-name", "empty-devices", "device-range", "duplicate-device",
                           "non-positive-time", "missing-forward", "missing-forward", "missing-forward"]
    with pytest.raises(SpecError) as info:
        check(spec)
    assert len(info.value.diagnostics) == 8
    assert "device 7, but devices are 0..1" in str(info.value)


def test_unknown_edge_ends_suggest_a_name():
    spec = Spec("s", 1, 4, (fwd("Forward", 0),), (Edge("Forward", "Froward", span=Location("f", 3, 4)),))
    (d,) = diagnose(spec)
    assert d.code == "unknown-name" and "did you mean Forward?" in d.message
    assert d.location == Location("f", 3, 4)


@pytest.mark.parametrize("edges,cycle", [
    ([("A", "A")], "A -> A"),
    ([("A", "B"), ("B", "A")], "A -> B -> A"),
    ([("A", "B"), ("B", "C"), ("C", "B")], "B -> C -> B"),
])
def test_cycles_are_named(edges, cycle):
    spec = Spec("s", 1, 9, (fwd("A", 0), fwd("B", 0), fwd("C", 0)), tuple(Edge(a, b) for a, b in edges))
    (d,) = diagnose(spec)
    assert d.code == "cycle" and d.message == f"dependency cycle: {cycle}"


def test_memory_infeasible_names_device_and_excess():
    spec = vshape(d=2, memory=0)
    found = diagnose(spec)
    assert [d.code for d in found] == ["memory-infeasible", "memory-infeasible"]
    assert "needs 1 memory on device 0" in found[0].message and "over by 1" in found[0].message


def test_memory_peak_counts_the_running_sum():
    blocks = (fwd("A", 0, mem=2), fwd("C", 0, mem=-1), fwd("D", 0, mem=2))
    spec = Spec("s", 1, 3, blocks, (Edge("A", "C"), Edge("C", "D")))
    assert codes(spec) == []
    spec = Spec("s", 1, 2, blocks, (Edge("A", "C"), Edge("C", "D")))
    assert codes(spec) == ["memory-infeasible"]


def test_expectations_are_checked():
    spec = vshape(expectations=(Expectation("speed", "<=", 1.0), Expectation("bubble", "~", 0.1),
                                Expectation("period", "==", "fast"), Expectation("period", "==", "lower_bound")))
    assert codes(spec) == ["unknown-metric", "bad-expect", "bad-expect"]


@pytest.mark.parametrize("link", [Link(latency=-1.0), Link(bandwidth=-5.0), Link(bandwidth=float("nan")),
                                  Link(latency=float("inf")), Link(bandwidth="fast")])
def test_bad_link_built_in_python_is_rejected(link):
    spec = vshape(link=link)
    assert codes(spec) == ["bad-link"]
    with pytest.raises(SpecError, match="link"):
        check(spec)


def test_free_and_costed_links_pass():
    for link in (Link(), Link(latency=0.5), Link(latency=1.0, bandwidth=1e-3)):
        assert check(vshape(link=link)).link == link
