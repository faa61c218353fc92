"""k-copy repetends of a memory-bound chain from the small cyclic model (search/chaincycle.py):
the periods it settles against values worked out by hand, the schedules it gives checked by the
validator, the simulator and a hand count of memory, and its determinism."""
from __future__ import annotations

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import make_plan
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.chaincycle import applies, chain_period_search, solve_chain_period
from tessel_dsl.search.copies import SEP
from tessel_dsl.search.driver import search
from tessel_dsl.simulator import simulate
from tessel_dsl.validate import validate
from tests.paths import ROOT


def _periodic(spec, starts: dict[str, int], copies: int, period: int, n: int) -> Schedule:
    """Micro-batch ``copies * m + j`` runs block ``b`` at ``starts["b@j"] + m * period``."""
    slots = []
    for mb in range(n):
        m, j = divmod(mb, copies)
        slots += [Slot(starts[f"{b.name}{SEP}{j}"] + m * period, b.name, mb) for b in spec.blocks]
    return Schedule(n, tuple(sorted(slots)), name="periodic")


def _held(spec, sched: Schedule, device: int) -> int:
    """Most micro-batches holding memory on `device` at once, counted from the slots: one holds
    from the start of its forward there to the start of its backward there."""
    fwd = {s.mb: s.start for s in sched.slots if spec.block(s.block).devices == (device,)
           and spec.block(s.block).memory > 0}
    bwd = {s.mb: s.start for s in sched.slots if spec.block(s.block).devices == (device,)
           and spec.block(s.block).memory < 0}
    return max(sum(1 for mb in fwd if fwd[mb] <= t < bwd[mb]) for t in fwd.values())


def test_uneven_chain_periods_match_the_hand_bounds():
    # Forward 1, 2, 1, 3 and backward twice that: one micro-batch's round trip through device 0
    # (F0 .. F3, B3 .. B0, nothing waiting) is 1+2+1+3 + 6+2+4+2 = 21, and device 0 holds two
    # micro-batches (memory 2, one unit each). So k copies need a period of at least 21 k / 2
    # (membound.py's holding argument), and no one-copy repetend is shorter than 12
    # (docs/search.md). Two copies reach the bound: 21, 10.5 per micro-batch.
    spec = parse_file(ROOT / "bench/specs/uneven_chain.tsl")
    assert applies(spec)
    round_trip = sum(b.time for b in spec.blocks)
    assert round_trip == 21 and spec.capacity(0) // spec.block("F0").memory == 2
    assert solve_chain_period(spec, 1, 12)[0] == "feasible"
    assert solve_chain_period(spec, 1, 11)[0] == "infeasible"
    assert solve_chain_period(spec, 2, 21)[0] == "feasible"
    assert solve_chain_period(spec, 2, 20)[0] == "infeasible"
    assert chain_period_search(spec, 2, 18, 24)[0::2] == (21, True)


def test_constructed_schedule_is_valid_by_independent_checks():
    spec = parse_file(ROOT / "bench/specs/uneven_chain.tsl")
    status, starts = solve_chain_period(spec, 2, 21)
    assert status == "feasible"
    sched = _periodic(spec, starts, 2, 21, 24)
    validate(spec, sched)
    for d in range(spec.devices):  # hand count: never more held than the memory allows
        held_each = next(b.memory for b in spec.blocks if b.devices == (d,) and b.memory > 0)
        assert _held(spec, sched, d) * held_each <= spec.capacity(d)
    assert _held(spec, sched, 0) == 2  # device 0 is full in the steady state (the bound is tight)
    # The steady state repeats two micro-batches every 21: the 12th and 22nd micro-batches' F0.
    f0 = {s.mb: s.start for s in sched.slots if s.block == "F0"}
    assert f0[22] - f0[12] == 5 * 21
    report = simulate(make_plan(spec, sched))  # the SimPy simulator runs the lowered programs
    assert report.ok and report.makespan == sched.makespan(spec)
    assert max(report.peak_memory) <= spec.capacity(0)


def test_the_model_is_deterministic():
    spec = parse_file(ROOT / "bench/specs/uneven_chain.tsl")
    assert solve_chain_period(spec, 2, 22) == solve_chain_period(spec, 2, 22)


def test_specs_that_are_not_chains_are_declined():
    assert not applies(parse_file(ROOT / "specs/kshape.tsl"))  # two branches
    assert not applies(parse_file(ROOT / "bench/specs/real/tpmshape16.tsl"))  # stages on pairs of devices
    assert not applies(parse_file(ROOT / "specs/interleaved.tsl"))  # two stages per device


def test_search_uses_two_copies_when_they_shorten_the_makespan():
    # The 8-GPU memory-bound chain at N = 96: no one-copy repetend is shorter than 66 ms
    # (membound.py); two copies repeat every 111 ms, proven minimal for two, which beats the
    # steady state of memory-capped 1F1B (the best baseline here) over 96 micro-batches.
    from tessel_dsl.search.baselines import build

    spec = parse_file(ROOT / "bench/specs/real/memchain.tsl")
    r = search(spec, microbatches=96)
    validate(spec, r.schedule)
    assert r.info.repetend_copies == 2 and r.info.period == 111 and r.info.period_proven
    assert r.info.copies == 2
    assert r.schedule.makespan(spec) < build(spec, "1f1b-capped", 96).makespan(spec)
