"""Properties over random schedules: a lowered plan never deadlocks, whatever the links cost,
and with free links in non-blocking mode it reproduces the planned start times exactly."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tessel_dsl.ir import Block, Edge, Kind, Link, Spec
from tessel_dsl.lower import lower
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.compact import compact
from tessel_dsl.simulator import simulate


def spec_with_joint(devices: int) -> Spec:
    """Chain F0..F{D-1} -> J(all) -> B{D-1}..B0 with uneven costs."""
    alld = tuple(range(devices))
    blocks = [Block(f"F{i}", Kind.FORWARD, (i,), 1 + i % 2, 1) for i in range(devices)]
    blocks += [Block("J", Kind.OTHER, alld, 1, 0)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (i,), 2 + i % 3, -1, forward=f"F{i}") for i in range(devices)]
    edges = [Edge(f"F{i}", f"F{i + 1}") for i in range(devices - 1)]
    edges += [Edge(f"F{devices - 1}", "J"), Edge("J", f"B{devices - 1}")]
    edges += [Edge(f"B{i + 1}", f"B{i}") for i in range(devices - 1)]
    return Spec("prop", devices, 10**6, tuple(blocks), tuple(edges))


@st.composite
def random_schedule(draw):
    d = draw(st.integers(2, 4))
    n = draw(st.integers(1, 5))
    spec = spec_with_joint(d)
    # A random topological interleaving of the micro-batches gives consistent per-device orders.
    pending = {mb: list(spec.topo_order) for mb in range(n)}
    order: list[tuple[str, int]] = []
    while pending:
        mb = draw(st.sampled_from(sorted(pending)))
        order.append((pending[mb].pop(0), mb))
        if not pending[mb]:
            del pending[mb]
    rows: list[list[tuple[str, int]]] = [[] for _ in range(d)]
    for name, mb in order:
        for dev in spec.block(name).devices:
            rows[dev].append((name, mb))
    return spec, Schedule(n, compact(spec, orders=rows), name="random")


@settings(max_examples=60, deadline=None)
@given(random_schedule(), st.booleans(), st.floats(0, 3), st.floats(0, 4))
def test_lowered_plans_never_deadlock(case, blocking, latency, bandwidth):
    spec, sch = case
    report = simulate((spec, lower(spec, sch, blocking=blocking), sch), link=Link(latency, bandwidth))
    assert report.deadlock is None
    assert report.makespan >= sch.makespan(spec)


@settings(max_examples=60, deadline=None)
@given(random_schedule())
def test_free_links_reproduce_the_plan(case):
    spec, sch = case
    report = simulate((spec, lower(spec, sch), sch))
    assert report.ok and report.drift_max == 0
    assert report.makespan == sch.makespan(spec)
    assert report.peak_memory == sch.peak_memory(spec)
