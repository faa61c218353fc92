"""`tessel plan --from-run`: a run report's block times re-cost the candidate that ran, and the
iteration it measured beyond its replay gives the spread overhead every spread block is then
costed with (worked by hand on a small profile)."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import TesselError
from tessel_dsl.placement.candidates import candidates
from tessel_dsl.placement.costs import Links, Profile, Unit
from tessel_dsl.placement.from_run import from_report, spread_overhead


def profile() -> Profile:
    ms, MB = 1e-3, 10**6
    embed = Unit("embed", ("embed",), 0.1 * ms, 0.0, 0.5 * ms, 10 * MB, 0, kind="embedding", unsplit_backward=0.5 * ms)
    layers = [Unit(f"layer{i}", (f"layers.{i}",), 1 * ms, 1 * ms, 1 * ms, 10 * MB, 10 * MB, unsplit_backward=2 * ms)
              for i in range(4)]
    norm = Unit("norm", ("norm",), 0.1 * ms, 0.1 * ms, 0.0, 10 * MB, 10 * MB, kind="norm", unsplit_backward=0.1 * ms)
    head = Unit("head", ("head",), 4 * ms, 4 * ms, 4 * ms, 10 * MB, 10 * MB, kind="head", unsplit_backward=8 * ms)
    return Profile((embed, *layers, norm, head), "gpu", (1, 8))


def report(plan="mshape_H", measured=0.130, replayed=0.100, blocks=None) -> dict:
    return {"plan": plan, "microbatches": 8, "measured": {"iteration": measured},
            "simulated": {"iteration": replayed},
            "block_seconds": blocks if blocks is not None else {"F0": 2e-3, "B0": 5e-3, "H": 3e-3, "HB": 4e-3}}


def test_the_spread_overhead_is_the_gap_to_the_replay_per_spread_block_run():
    """30 ms beyond the replay over N = 8 micro-batches, one spread block run forward and backward
    on each device: 16 runs, 1.875 ms each; two spread blocks: 32 runs. A run faster than its
    replay measures none."""
    assert spread_overhead(0.130, 0.100, 8, 1) == pytest.approx(1.875e-3)
    assert spread_overhead(0.130, 0.100, 8, 2) == pytest.approx(0.9375e-3)
    assert spread_overhead(0.090, 0.100, 8, 1) == 0.0
    got = from_report(report(), {"chain": (), "mshape-H": ("H",), "mshape-EH": ("E", "H")})
    assert got.candidate == "mshape-H" and got.spread_executions == 16
    assert got.spread_overhead == pytest.approx(1.875e-3)
    assert from_report(report("chain_split"), {"chain-split": ()}).spread_overhead is None
    # A report that also replays each micro-batch's own block times (`simulated`, whose busy time is
    # the run's) keeps the replay on the medians apart: that is the one block_seconds predicts.
    both = report(replayed=0.125) | {"simulated_block_medians": {"iteration": 0.100}}
    assert from_report(both, {"mshape-H": ("H",)}).spread_overhead == pytest.approx(1.875e-3)


def test_the_candidate_that_ran_takes_its_measured_block_times():
    """mshape-H over 4 devices (the embedding and a layer, then a layer a stage): the run's F0 2 ms
    and B0 5 ms replace the profile's 1.1 / 2.5 ms; its H 3 ms and HB 4 ms gain the 1.5 ms spread
    overhead; a block the run did not time keeps the profile's cost (F1: 1 ms, B1 2 ms)."""
    cands = {c.name: c for c in candidates(profile(), 4, 10**11, 8, links=Links(1e12, 0.0, 1.5e-3),
                                           measured={"mshape-H": report()["block_seconds"]})}
    lines = cands["mshape-H"].text.splitlines()
    assert "forward F0 on 0 time 2ms memory 20MB grad time 5ms" in lines
    assert "forward F1 on 1 time 1ms memory 20MB grad time 2ms" in lines
    assert "forward H on all time 4500us memory 7600KB grad time 5500us" in lines
    # the chain, which did not run, keeps the profile's costs (embedding and a layer: 1.1 / 2.5 ms)
    assert "forward F0 on 0 time 1100us memory 20MB grad time 2500us" in cands["chain"].text.splitlines()


def test_a_report_of_another_plan_is_refused_with_why():
    spread = {"chain": (), "mshape-H": ("H",)}
    with pytest.raises(TesselError, match="none of the candidates"):
        from_report(report("zerobubble_profiled"), spread)
    with pytest.raises(TesselError, match="not a run report"):
        from_report({"plan": "mshape_H"}, spread)
    with pytest.raises(ValueError, match="does not have: F9"):
        candidates(profile(), 4, 10**11, 8, measured={"mshape-H": {"F9": 1e-3}})


def test_plan_model_from_a_run():
    """The same through `plan_model`: the overhead measured (1.875 ms) is what it costed with; a
    spread overhead given by the user wins over the run's."""
    from tessel_dsl.placement.api import plan_model

    res = plan_model(None, None, devices=4, memory="100GB", microbatches=8, profile=profile(), from_run=report(),
                     baselines=False)
    assert res.run.candidate == "mshape-H" and res.spread_overhead == pytest.approx(1.875e-3)
    res = plan_model(None, None, devices=4, memory="100GB", microbatches=8, profile=profile(), from_run=report(),
                     baselines=False, spread_overhead=0.0)
    assert res.spread_overhead == 0.0


def test_the_cli_plans_from_a_run_report(tmp_path, capsys):
    """`tessel plan --profile P --from-run R`: says what it re-costed and the overhead it used; a
    report that is not JSON is a clear error, not a traceback."""
    import json

    from tests.helpers import run_cli

    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(profile().to_json()))
    rep = tmp_path / "run.json"
    rep.write_text(json.dumps(report()))
    code, out, err = run_cli(capsys, "plan", "--profile", str(prof), "--devices", "4", "--memory", "100GB",
                             "-n", "8", "--from-run", str(rep), "-o", str(tmp_path / "plan.json"))
    assert code == 0, err
    assert "mshape-H: costed with the block times" in out and "(iteration 130.0 ms, replayed 100.0 ms)" in out
    assert "spread blocks costed 1.88 ms longer each way" in out
    rep.write_text("{not json")
    code, out, err = run_cli(capsys, "plan", "--profile", str(prof), "--devices", "4", "--from-run", str(rep))
    assert code != 0 and "cannot read" in err and "Traceback" not in err


def test_several_runs_each_recost_the_candidate_that_ran():
    """Two reports, of mshape-H and of mshape-EH: each candidate takes its own run's block times
    (so neither is left at the profile's, which the choice would favour), the larger of the two
    spread overheads (1.875 ms against 30 ms / 32 runs = 0.9375 ms) is used, and a later report of
    the same candidate replaces the earlier one."""
    from tessel_dsl.placement.api import plan_model

    eh = report("mshape_EH", blocks={"E": 1e-3, "EB": 2e-3, "F0": 3e-3, "B0": 6e-3, "H": 3e-3, "HB": 4e-3})
    res = plan_model(None, None, devices=4, memory="100GB", microbatches=8, profile=profile(),
                     from_run=[report(), eh], baselines=False)
    assert [r.candidate for r in res.runs] == ["mshape-H", "mshape-EH"] and res.run.candidate == "mshape-EH"
    assert res.spread_overhead == pytest.approx(1.875e-3)
    cands = {c.name: c for c in candidates(profile(), 4, 10**11, 8, links=Links(1e12, 0.0, 1.875e-3),
                                           measured={r.candidate: r.block_seconds for r in res.runs})}
    assert "block times measured by a run of it" in cands["mshape-H"].text.splitlines()[0]
    assert "block times measured by a run of it" in cands["mshape-EH"].text.splitlines()[0]
    assert "forward F0 on 0 time 3ms memory 20MB grad time 6ms" in cands["mshape-EH"].text.splitlines()
    later = report(blocks={"F0": 4e-3, "B0": 7e-3, "H": 3e-3, "HB": 4e-3}, measured=0.100)

    def h_ms(runs):  # mshape-H's Tessel row; the spread overhead is the first report's either way
        got = plan_model(None, None, devices=4, memory="100GB", microbatches=8, profile=profile(), from_run=runs,
                         baselines=False)
        assert got.spread_overhead == pytest.approx(1.875e-3)  # `later` measured none
        return next(r.ms for r in got.outcome.rows if r.candidate == "mshape-H" and r.schedule == "tessel")

    # `later` times F0 / B0 on device 0 at 4 / 7 ms against report()'s 2 / 5, with the same spread
    # overhead: given after report(), it is the one mshape-H is costed with, so mshape-H is longer
    # than in `res`, where report() alone costed it.
    in_res = next(r.ms for r in res.outcome.rows if r.candidate == "mshape-H" and r.schedule == "tessel")
    assert h_ms([report(), later]) > in_res


def test_the_cli_takes_several_runs(tmp_path, capsys):
    import json

    from tests.helpers import run_cli

    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(profile().to_json()))
    a, b = tmp_path / "h.json", tmp_path / "eh.json"
    a.write_text(json.dumps(report()))
    b.write_text(json.dumps(report("mshape_EH", blocks={"E": 1e-3, "EB": 2e-3, "H": 3e-3, "HB": 4e-3})))
    code, out, err = run_cli(capsys, "plan", "--profile", str(prof), "--devices", "4", "--memory", "100GB",
                             "-n", "8", "--from-run", str(a), "--from-run", str(b), "-o", str(tmp_path / "plan.json"))
    assert code == 0, err
    assert f"mshape-H: costed with the block times {a} measured" in out
    assert f"mshape-EH: costed with the block times {b} measured" in out
