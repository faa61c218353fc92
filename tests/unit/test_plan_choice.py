"""`tessel plan`'s choice against the simulator's numbers of the alternatives it beat (a small
sample of bench/plan_choice.py): a balanced chain, and the same chain with little room."""
from __future__ import annotations

import pytest

from tessel_dsl.placement import plan_model
from tessel_dsl.placement.costs import Profile, Unit
from tessel_dsl.plan import make_plan
from tessel_dsl.simulator import simulate

GB, MB = 10**9, 10**6


def chain(devices: int, edge_state: float = 0.0) -> Profile:
    """2D layers of 1 ms forward, input and weight gradient, 100 MB of activations and 1 GB of
    weights and Adam state each; embedding and head 0.1 ms and `edge_state` each."""
    def unit(name, kind, ms, state, act=MB):
        params = int(state / 16)
        return Unit(name, (name,), ms / 1e3, 0.0 if kind == "embedding" else ms / 1e3, ms / 1e3, act, 0,
                    4 * params, params, kind)

    return Profile((unit("embed", "embedding", 0.1, edge_state),)
                   + tuple(unit(f"layer{i}", "layer", 1, GB, 100 * MB) for i in range(2 * devices))
                   + (unit("head", "head", 0.1, edge_state),), "set by hand")


def simulated(outcome) -> dict[tuple[str, str], float]:
    """Every row that fits, simulated (SimPy), in ms."""
    out = {}
    for r in outcome.rows:
        if r.fits:
            spec, sched = outcome.schedules[(r.candidate, r.schedule)]
            out[(r.candidate, r.schedule)] = simulate(make_plan(spec, sched)).makespan * spec.units.time_seconds * 1e3
    return out


def test_on_a_balanced_chain_the_choice_is_no_longer_than_1f1b_zbv_or_any_baseline():
    res = plan_model(None, None, devices=2, memory="80GB", microbatches=4, profile=chain(2))
    sim = simulated(res.outcome)
    best = (res.best.candidate, res.best.schedule)
    assert sim[best] == pytest.approx(res.best.ms)
    assert sim[best] <= min(sim.values()) + 1e-9
    assert sim[best] <= sim[("chain", "1f1b")] and sim[best] <= sim[("v-split", "zb-v")]
    on_it = [v for (c, s), v in sim.items() if c == best[0] and s != "tessel"]
    assert on_it and sim[best] <= min(on_it)


def test_with_little_room_the_shortest_that_fits_wins():
    """Embedding and head of 6 GB of weights and Adam state each (a large vocabulary), 9 GB a
    device: the V, the shortest on a chain of equal layers, holds both on device 0 (13 GB) and
    is out; the choice is the shortest of the rest."""
    res = plan_model(None, None, devices=2, memory="9GB", microbatches=4, profile=chain(2, 6 * GB))
    sim = simulated(res.outcome)
    assert sim[(res.best.candidate, res.best.schedule)] <= min(sim.values()) + 1e-9
    v = next(r for r in res.outcome.rows if r.candidate == "v-split")
    assert not v.fits and "weights" in v.reason and res.best.candidate != "v-split"
    roomy = plan_model(None, None, devices=2, memory="80GB", microbatches=4, profile=chain(2, 6 * GB))
    assert roomy.best.ms < res.best.ms  # the room cost time: the choice was bound by memory


def test_effort_reaches_every_candidate_search_and_never_lengthens_the_choice(monkeypatch):
    from tessel_dsl.search import driver

    plain = plan_model(None, None, devices=2, memory="80GB", microbatches=4, profile=chain(2))
    seen = []
    real = driver.search

    def spy(spec, **kw):
        seen.append(kw.get("effort"))
        return real(spec, **kw)

    monkeypatch.setattr(driver, "search", spy)
    more = plan_model(None, None, devices=2, memory="80GB", microbatches=4, profile=chain(2), effort=0.5)
    searched = [r for r in more.outcome.rows if r.schedule == "tessel"]
    assert len(seen) == len(searched) >= 3 and set(seen) == {0.5}
    assert more.best.ms <= plain.best.ms
