"""bench/gpu_order.py's one-GPU plans and bench/replay_jitter.py's replays, on CPU without running
a model: the one-GPU plan keeps exactly the chosen GPU's order, renamed to consecutive stages,
and the jittered replay of a plan against itself is identical draw by draw."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


@pytest.fixture(scope="module")
def v_plans(tmp_path_factory):
    """ZB-V's and GPipe's orders on specs/zerobubble.tsl's V (4 devices, 2 chunks each)."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import make_plan, save_plan
    from tessel_dsl.search import baselines

    spec = parse_file(ROOT / "specs" / "zerobubble.tsl", sets={"C": "2", "N": "8"})
    out = tmp_path_factory.mktemp("plans")
    paths = []
    for name, schedule in (("zbv", baselines.build(spec, "zb-v")), ("gpipe", baselines.build(spec, "gpipe"))):
        save_plan(make_plan(spec, schedule), out / f"{name}.json")
        paths.append(out / f"{name}.json")
    return spec, paths


def test_one_gpu_plan_keeps_that_gpus_order(v_plans, monkeypatch, tmp_path):
    import gpu_order

    from tessel_dsl.plan import load_plan

    spec, paths = v_plans
    monkeypatch.setattr(gpu_order, "OUT", tmp_path)
    gpu_order.make([str(p) for p in paths], device=3)
    for tag, path in zip("ab", paths):
        plan, one = load_plan(path), load_plan(tmp_path / f"{tag}.json")
        # Device 3 holds F3 and F4 (the V's tip): they become stages 0 and 1 of a one-GPU chain.
        rename = {f"{k}3": f"{k}0" for k in "FIW"} | {f"{k}4": f"{k}1" for k in "FIW"}
        want = [(rename[s.block], s.mb) for s in plan.schedule.per_device(spec)[3]]
        got = [(a.block, a.mb) for a in one.programs[0].actions if a.op.name == "COMPUTE"]
        assert got == want and one.spec.devices == 1


def test_jittered_replays_of_one_plan_agree_and_a_slower_busiest_gpu_lengthens_it(v_plans):
    import replay_jitter

    from tessel_dsl.executor.trace import replay, summarize
    from tessel_dsl.plan import load_plan

    spec, paths = v_plans
    plan = load_plan(paths[0])
    times = {b.name: 1e-3 * b.time for b in spec.blocks}
    got = replay_jitter.jitter({"a": plan, "b": load_plan(paths[0])}, times, spread=0.2, draws=5)
    assert got["a"] == got["b"] and len(set(got["a"])) > 1
    base = summarize(replay(plan, times), spec.devices)["iteration"] * 1e3
    # ZB-V keeps every device of this V busy in its steady state: slowing any one by 20 %
    # lengthens the iteration, by at most 20 % of it.
    for d in range(spec.devices):
        assert base < replay_jitter.slowed(plan, times, d, 0.2) <= 1.2 * base + 1e-9
