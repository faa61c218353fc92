"""The simulator's size limit: a run over `MAX_SIMULATED_INSTANCES` block instances is refused with
the reason before any work that grows with its size (re-extension, lowering, checking)."""
from __future__ import annotations

import sys

import pytest

import tessel_dsl.simulator as simulator
from tessel_dsl.errors import SimulationError
from tessel_dsl.limits import MAX_SIMULATED_INSTANCES
from tessel_dsl.lower import lower
from tessel_dsl.plan import make_plan, save_plan
from tests.helpers import one_f_one_b, run_cli, vshape


def test_a_plan_over_the_limit_is_refused_and_one_at_it_runs(monkeypatch):
    spec = vshape(4, 4)  # 8 blocks
    monkeypatch.setattr(simulator, "MAX_SIMULATED_INSTANCES", 8 * 6)
    ok = simulator.simulate(make_plan(spec, one_f_one_b(spec, 6)))
    assert ok.ok and ok.microbatches == 6
    plan = make_plan(spec, one_f_one_b(spec, 7))
    with pytest.raises(SimulationError, match=r"56 block instances.*limit of 48.*at most 6 micro-batches"):
        simulator.simulate(plan)
    # Programs without a schedule are counted by their computes.
    sched = one_f_one_b(spec, 7)
    with pytest.raises(SimulationError, match="at most 6 micro-batches"):
        simulator.simulate((spec, lower(spec, sched)))


def test_simulate_n_refuses_before_re_extending(capsys, tmp_path, monkeypatch):
    spec = vshape(4, 4)
    path = tmp_path / "v.json"
    save_plan(make_plan(spec, one_f_one_b(spec, 8)), path)

    def never(*_a, **_k):
        raise AssertionError("re-extended a plan the simulator refuses")

    import tessel_dsl.search.finish  # noqa: F401 (the package re-exports a function of that name)

    monkeypatch.setattr(sys.modules["tessel_dsl.search.finish"], "reextend", never)
    n = MAX_SIMULATED_INSTANCES // 8 + 1
    code, _, err = run_cli(capsys, "simulate", str(path), "-n", str(n))
    assert code == 1 and "more than the simulator's limit" in " ".join(err.split())
