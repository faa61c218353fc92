"""Executor runtime: plan checks, blocking and split-backward execution, the replay that predicts
a run, the Chrome trace, the torchrun entry point, and what the GPU side may import."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl import executor  # noqa: E402
from tessel_dsl.errors import ExecutionError, PlanError  # noqa: E402
from tessel_dsl.executor.launch import check_plan  # noqa: E402
from tessel_dsl.executor.models import shapes  # noqa: E402
from tessel_dsl.executor.trace import block_durations, chrome_trace, replay, summarize  # noqa: E402
from tessel_dsl.ir import Block, Edge, Kind, Spec  # noqa: E402
from tessel_dsl.plan import Plan, save_plan  # noqa: E402
from tessel_dsl.program import Program  # noqa: E402
from tessel_dsl.schedule import Schedule, Slot  # noqa: E402
from tests.executor_support import check_training, plan_for  # noqa: E402
from tests.paths import ROOT, SPECS


def two_stage_plan(text0: str, text1: str, blocking: bool = False) -> Plan:
    spec = shapes.vshape(2, microbatches=1)
    sched = Schedule(1, (Slot(0, "F0", 0), Slot(1, "F1", 0), Slot(2, "B1", 0), Slot(5, "B0", 0)))
    progs = (Program.from_text(0, text0, blocking), Program.from_text(1, text1, blocking))
    return Plan(spec, sched, progs)


# -- replay and trace ----------------------------------------------------------------------------

def test_replay_follows_the_programs_with_free_transfers():
    plan = two_stage_plan("F0:0 SEND F0:0>1 RECV B1:0<1 WAIT B1:0<1 B0:0",
                          "RECV F0:0<0 WAIT F0:0<0 F1:0 B1:0 SEND B1:0>0")
    events = replay(plan, {"F0": 1.0, "F1": 1.0, "B1": 3.0, "B0": 3.0})
    got = {(d, a): (s, e) for d, a, s, e in events if " " not in a}
    assert got == {(0, "F0:0"): (0.0, 1.0), (1, "F1:0"): (1.0, 2.0), (1, "B1:0"): (2.0, 5.0), (0, "B0:0"): (5.0, 8.0)}
    s = summarize(events, 2)
    assert s["iteration"] == 8.0 and s["busy"] == [4.0, 4.0] and s["wait"] == [4.0, 4.0]


def test_replay_blocking_send_waits_for_the_receiver():
    plan = two_stage_plan("F0:0 SEND F0:0>1 B0:0", "F1:0 RECV F0:0<0 B1:0", blocking=True)
    # Not a dependency-correct plan, only a rendezvous check: the send completes when dev1 gets
    # to its RECV after a 5-second F1.
    events = replay(plan, {"F0": 1.0, "F1": 5.0, "B1": 1.0, "B0": 1.0})
    starts = {(d, a): s for d, a, s, _e in events}
    assert starts[(0, "B0:0")] == 5.0 and starts[(1, "B1:0")] == 5.0


def test_waiting_inside_a_multi_device_block_is_wait_not_busy():
    # E runs on both devices; dev0 reaches it at 0 s, dev1 only at 3 s (its F1 ran first), and
    # both leave at 4 s: E itself took 1 s, dev0 spent 3 s blocked in E's collective.
    events = [(0, "E:0", 0.0, 4.0), (1, "F1:0", 0.0, 3.0), (1, "E:0", 3.0, 4.0),
              (0, "E:1", 4.0, 5.5), (1, "E:1", 4.0, 6.0)]
    plan = Plan(shapes.mshape(2, microbatches=2), Schedule(2, ()), ())
    assert block_durations(events, plan) == {"E": 1.25, "F1": 3.0}
    s = summarize(events, 2)
    assert s["iteration"] == 6.0 and s["busy"] == [2.5, 5.5] and s["wait"] == [3.5, 0.5]


def test_replay_reports_a_deadlock():
    plan = two_stage_plan("RECV B1:0<1 WAIT B1:0<1 F0:0 SEND F0:0>1 B0:0",
                          "RECV F0:0<0 WAIT F0:0<0 F1:0 B1:0 SEND B1:0>0")
    with pytest.raises(ExecutionError, match="deadlock"):
        replay(plan, {})


def test_chrome_trace_has_one_thread_per_device():
    events = [(0, "F0:0", 0.0, 0.001), (1, "WAIT F0:0<0", 0.0, 0.001), (1, "F1:0", 0.001, 0.002)]
    trace = chrome_trace(events)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["tid"], e["name"], e["cat"]) for e in xs] == [(0, "F0:0", "compute"), (1, "WAIT F0:0<0", "comm"),
                                                             (1, "F1:0", "compute")]
    assert xs[2]["ts"] == pytest.approx(1000.0) and xs[2]["dur"] == pytest.approx(1000.0)
    json.dumps(trace)


# -- plan checks ---------------------------------------------------------------------------------

def test_a_plan_without_programs_is_rejected():
    spec = shapes.vshape(2, microbatches=1)
    plan = plan_for(spec, "1f1b", 1)
    with pytest.raises(PlanError, match="no programs"):
        check_plan(Plan(spec, plan.schedule, ()))


def test_nproc_must_match_the_plan():
    with pytest.raises(ExecutionError, match="--nproc is 3"):
        executor.run(plan_for(shapes.vshape(2, microbatches=1), "1f1b", 1), "tessel_dsl.executor.models.chain:factory", nproc=3)


def test_blocking_request_must_match_the_lowering():
    with pytest.raises(ExecutionError, match="lowered for non-blocking"):
        executor.run(plan_for(shapes.vshape(2, microbatches=1), "1f1b", 1), "tessel_dsl.executor.models.chain:factory",
                     blocking=True)


def test_compute_on_a_foreign_device_is_rejected():
    plan = two_stage_plan("F1:0", "F0:0")
    with pytest.raises(PlanError, match="not placed on it"):
        check_plan(plan)


# -- execution modes ---------------------------------------------------------------------------

def test_blocking_plan_gives_the_same_gradients():
    spec = shapes.mshape(2, microbatches=4, head=True)
    plan = plan_for(spec, "1f1b+", 4, blocking=True)
    assert all(p.blocking for p in plan.programs)
    report = executor.run(plan, "tessel_dsl.executor.models.gpt:factory", collect=True, grads=True, timeout=60, blocking=True)
    check_training(report, "tessel_dsl.executor.models.gpt", spec, {})


def test_priming_iteration_leaves_the_results_unchanged(monkeypatch):
    """The blocking priming pass (on by default on GPUs) must not leak into the measured step."""
    monkeypatch.setenv("TESSEL_PRIME", "1")
    spec = shapes.mshape(2, microbatches=4, head=True)
    plan = plan_for(spec, "1f1b+", 4)
    assert not any(p.blocking for p in plan.programs)
    report = executor.run(plan, "tessel_dsl.executor.models.gpt:factory", collect=True, grads=True, timeout=60)
    check_training(report, "tessel_dsl.executor.models.gpt", spec, {})


def split_backward_spec(d: int = 2) -> Spec:
    blocks = [Block(f"F{i}", Kind.FORWARD, (i,), 1, 1) for i in range(d)]
    blocks += [Block(f"I{i}", Kind.INPUT_GRAD, (i,), 1, 0, forward=f"F{i}") for i in reversed(range(d))]
    blocks += [Block(f"W{i}", Kind.WEIGHT_GRAD, (i,), 1, -1, forward=f"F{i}") for i in reversed(range(d))]
    edges = [Edge(f"F{i}", f"F{i + 1}") for i in range(d - 1)] + [Edge(f"F{d - 1}", f"I{d - 1}")]
    edges += [Edge(f"I{i + 1}", f"I{i}") for i in range(d - 1)] + [Edge(f"I{i}", f"W{i}") for i in range(d)]
    return Spec("zb", d, 4, tuple(blocks), tuple(edges), 4)


def test_split_backward_input_then_weight_gradients():
    spec = split_backward_spec(2)
    report = executor.run(plan_for(spec, "gpipe", 4), "tessel_dsl.executor.models.chain:factory", collect=True, grads=True,
                          timeout=60)
    check_training(report, "tessel_dsl.executor.models.chain", spec, {})


@pytest.mark.parametrize("post", ["lead", "ahead"])
def test_every_receive_posting_trains_like_one_process(monkeypatch, post):
    """The default ("due") runs in every other test; the other two post the same receives at
    other points of the program, which must not change a single gradient."""
    monkeypatch.setenv("TESSEL_RECV_POST", post)
    from tessel_dsl.executor.runtime import early_receives

    spec = split_backward_spec(3)
    plan = plan_for(spec, "zb-h1", 4)
    assert any(early_receives(p.actions) for p in plan.programs)  # "lead" does start some early
    report = executor.run(plan, "tessel_dsl.executor.models.chain:factory", collect=True, grads=True, timeout=60)
    check_training(report, "tessel_dsl.executor.models.chain", spec, {})
    assert report.transport == "nccl"  # on the CPU `auto` keeps the process group's (gloo) transfers


def test_report_numbers_and_trace_file(tmp_path):
    spec = shapes.vshape(2, microbatches=4)
    report = executor.run(plan_for(spec, "1f1b", 4), "tessel_dsl.executor.models.chain:factory", steps=2, warmup=1, timeout=60)
    s = report.summary()
    assert len(s["iterations"]) == 2 and s["measured"]["iteration"] > 0
    for d in range(2):
        m = s["measured"]
        assert m["busy"][d] + m["wait"][d] == pytest.approx(m["iteration"])
        assert s["simulated"]["iteration"] <= m["iteration"] * 1.0001
    assert set(s["block_seconds"]) == {"F0", "F1", "B0", "B1"} and min(s["block_seconds"].values()) > 0
    computes = [e for e in report.timelines[0] if " " not in e[1]]
    assert sorted(e[1] for e in computes if e[0] == 0) == sorted(f"{b}:{m}" for b in ("F0", "B0") for m in range(4))
    from tessel_dsl.executor.trace import write_trace

    write_trace(tmp_path / "t.json", report.timelines[0])
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


# -- process boundaries --------------------------------------------------------------------------

BLOCKED = ("lark", "z3", "simpy", "rich", "typer", "ortools")


def test_the_gpu_side_imports_only_torch_and_the_plan(tmp_path):
    """Run a plan with lark/z3/simpy/rich/typer made unimportable, in fresh interpreters."""
    for name in BLOCKED:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('{name} is blocked in this test')\n")
    spec = shapes.mshape(2, microbatches=2, head=True)
    save_plan(plan_for(spec, "1f1b+", 2), tmp_path / "plan.json")
    script = textwrap.dedent(f"""
        import sys
        import tessel_dsl.executor as executor
        rep = executor.run({str(tmp_path / 'plan.json')!r}, "tessel_dsl.executor.models.gpt:factory", timeout=60, collect=True)
        assert len(rep.losses) == 2
        bad = [m for m in {BLOCKED!r} if m in sys.modules]
        assert not bad, bad
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", TESSEL_START="spawn")
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_tessel_run_cli_on_a_spec_and_on_bad_input(tmp_path, capsys):
    """`tessel run` through the command line's entry point, in this process (its ranks are forked
    from it, as from a `tessel` process; test_torchrun_entry_point and the process-boundary tests
    above start fresh interpreters)."""
    from tessel_dsl.cli import main

    args = ["run", str(SPECS / "mshape.tsl"), "--set", "D=2", "--set", "N=4", "--model",
            "tessel_dsl.executor.models.gpt:factory", "--json", "--steps", "1", "--warmup", "0",
            "--trace", str(tmp_path / "t.json")]
    with pytest.raises(SystemExit) as done:
        main(args)
    out = capsys.readouterr()
    assert done.value.code in (0, None), out.err[-2000:]
    s = json.loads(out.out)
    assert s["devices"] == 2 and s["microbatches"] == 4 and s["loss"] > 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    with pytest.raises(SystemExit) as bad:
        main(args[:6] + ["--model", "nope"])
    out = capsys.readouterr()
    assert bad.value.code == 1 and "MODULE:FACTORY" in out.err and "Traceback" not in out.err


def test_link_options_only_apply_to_nccl(monkeypatch):
    from tessel_dsl.executor.groups import _link_options

    assert _link_options("gloo") is None
    monkeypatch.setenv("TESSEL_P2P_MAX_CTAS", "0")
    assert _link_options("nccl") is None  # 0: NCCL's own choice
    if not torch.distributed.is_nccl_available():
        monkeypatch.setenv("TESSEL_P2P_MAX_CTAS", "2")
        assert _link_options("nccl") is None  # a build without NCCL has no options to set
    else:
        monkeypatch.setenv("TESSEL_P2P_MAX_CTAS", "2")
        assert _link_options("nccl").config.max_ctas == 2


def test_tessel_run_report_lists_block_times():
    from tessel_dsl.cli.app import console
    from tessel_dsl.cli.run import render

    spec = shapes.vshape(2, microbatches=2)
    report = executor.run(plan_for(spec, "1f1b", 2), "tessel_dsl.executor.models.chain:factory", steps=1, warmup=0, timeout=60)
    with console.capture() as cap:
        render(report.summary())
    text = cap.get()
    assert "dev1" in text and "block times (median ms): B0 " in text and ", F1 " in text
