"""torch CSV export/import: stage mapping, text forms, round trips, and PyTorch's own runtime.

The runtime tests were checked with torch 2.13 (`_PipelineScheduleRuntime._load_csv`).
"""
from __future__ import annotations

import pytest

from tessel_dsl.interop.torch_csv import (
    TorchCsvError,
    compute_rows,
    export_torch_csv,
    read_torch_csv,
    schedule_from_csv,
    stage_map,
)
from tessel_dsl.ir import Block, Edge, Kind, Mode, Spec
from tessel_dsl.plan import make_plan
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.compact import compact
from tests.paths import ROOT, SPECS


def chain(ranks: list[int], split: bool = False, memory: int = 100, mode: Mode = Mode.TRAIN) -> Spec:
    """Stages F0..F{S-1} on `ranks`, backward B (or I + W) per stage, costs 1 / 2 (1 + 1)."""
    s = len(ranks)
    blocks = [Block(f"F{k}", Kind.FORWARD, (r,), 1, 1) for k, r in enumerate(ranks)]
    edges = [Edge(f"F{k}", f"F{k + 1}") for k in range(s - 1)]
    if mode is Mode.TRAIN and not split:
        blocks += [Block(f"B{k}", Kind.BACKWARD, (r,), 2, -1, forward=f"F{k}") for k, r in enumerate(ranks)]
        edges += [Edge(f"F{s - 1}", f"B{s - 1}")] + [Edge(f"B{k + 1}", f"B{k}") for k in range(s - 1)]
    elif mode is Mode.TRAIN:
        blocks += [Block(f"I{k}", Kind.INPUT_GRAD, (r,), 1, 0, forward=f"F{k}") for k, r in enumerate(ranks)]
        blocks += [Block(f"W{k}", Kind.WEIGHT_GRAD, (r,), 1, -1, forward=f"F{k}") for k, r in enumerate(ranks)]
        edges += [Edge(f"F{s - 1}", f"I{s - 1}")] + [Edge(f"I{k + 1}", f"I{k}") for k in range(s - 1)]
        edges += [Edge(f"I{k}", f"W{k}") for k in range(s)]
    return Spec("chain", max(ranks) + 1, memory, tuple(blocks), tuple(edges), 4, mode)


def greedy(spec: Spec, n: int, late_w: bool = False) -> Schedule:
    """A list schedule: each idle device starts its ready block with the highest priority
    (backward first, then the oldest micro-batch; W last when `late_w`, zero-bubble style)."""
    rank = {Kind.FORWARD: 2, Kind.BACKWARD: 0, Kind.INPUT_GRAD: 0, Kind.WEIGHT_GRAD: 3 if late_w else 1}
    end: dict[tuple[str, int], int] = {}
    free = [0] * spec.devices
    orders: list[list[tuple[str, int]]] = [[] for _ in range(spec.devices)]
    todo = {(b.name, mb) for b in spec.blocks for mb in range(n)}
    t = 0
    while todo:
        for d in range(spec.devices):
            if free[d] > t:
                continue
            ready = [k for k in todo if spec.block(k[0]).devices == (d,)
                     and all(end.get((p, k[1]), t + 1) <= t for p in spec.preds[k[0]])]
            if ready:
                k = min(ready, key=lambda k: (rank[spec.block(k[0]).kind], k[1], k[0]))
                todo.discard(k)
                orders[d].append(k)
                free[d] = end[k] = t + spec.block(k[0]).time
        t += 1
    return Schedule(n, compact(spec, orders=orders), name="greedy")


# ----------------------------------------------------------------------------- stage mapping

def test_chain_maps_stages_in_chain_order():
    smap = stage_map(chain([0, 1, 1, 0]))
    assert smap.stages == ("F0", "F1", "F2", "F3")
    assert smap.ranks == (0, 1, 1, 0)
    assert smap.actions["B2"] == (2, "B")
    assert not smap.split_backward


def test_split_backward_maps_to_i_and_w():
    smap = stage_map(chain([0, 1], split=True))
    assert smap.actions["I1"] == (1, "I") and smap.actions["W0"] == (0, "W")
    assert smap.split_backward


def test_declaration_order_does_not_decide_stage_numbers():
    spec = chain([0, 1])
    shuffled = Spec(spec.name, 2, 100, tuple(reversed(spec.blocks)), spec.edges, 4)
    assert stage_map(shuffled).stages == ("F0", "F1")


@pytest.mark.parametrize("mutate, why", [
    (lambda s: _with(s, blocks=s.blocks + (Block("E", Kind.FORWARD, (0, 1), 1, 0),),
                     edges=s.edges + (Edge("E", "F0"),)), "devices 0,1 at once"),
    (lambda s: _with(s, edges=s.edges + (Edge("F0", "F2"),)), "feeds both F1 and F2"),
    (lambda s: _with(s, blocks=s.blocks + (Block("G", Kind.FORWARD, (1,), 1, 1),)), "2 separate chains"),
    (lambda s: _with(s, blocks=s.blocks + (Block("X", Kind.OTHER, (0,), 1, 0),),
                     edges=s.edges + (Edge("F0", "X"),)), "neither forward nor backward"),
    (lambda s: _with(s, edges=s.edges + (Edge("F0", "B2"),)), "from stage 0 to stage 2"),
    (lambda s: _with(s, blocks=tuple(b for b in s.blocks if b.name != "B1"),
                     edges=tuple(e for e in s.edges if "B1" not in (e.src, e.dst)) + (Edge("B2", "B0"),)),
     "stage 1 (F1) has backward nothing"),
])
def test_inexpressible_specs_say_why(mutate, why):
    with pytest.raises(TorchCsvError, match="cannot be expressed") as info:
        stage_map(mutate(chain([0, 1, 2])))
    assert why in str(info.value)


def test_backward_on_another_device_is_refused():
    spec = chain([0, 1])
    blocks = tuple(Block("B0", Kind.BACKWARD, (1,), 2, -1, forward="F0") if b.name == "B0" else b for b in spec.blocks)
    with pytest.raises(TorchCsvError, match="B0 runs on device 1 but its stage"):
        stage_map(_with(spec, blocks=blocks))


def test_missing_backward_order_is_refused():
    spec = chain([0, 1], split=True)
    edges = tuple(e for e in spec.edges if (e.src, e.dst) != ("I1", "I0")) + (Edge("F0", "I0"),)
    with pytest.raises(TorchCsvError, match="I0 does not depend on I1"):
        stage_map(_with(spec, edges=edges))


def _with(spec: Spec, **changes) -> Spec:
    from dataclasses import replace

    return replace(spec, **changes)


# ----------------------------------------------------------------------------- export text

def test_compute_only_rows_follow_start_order():
    spec = chain([0, 1])
    plan = make_plan(spec, greedy(spec, 2))
    assert export_torch_csv(plan) == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"


def test_comms_rows_carry_sends_receives_and_reduce_grad():
    spec = chain([0, 1])
    plan = make_plan(spec, greedy(spec, 3))
    rows = [r.split(",") for r in export_torch_csv(plan, comms=True).splitlines()]
    for rank, compute in enumerate(compute_rows(spec, plan.schedule)):  # same compute order, plus REDUCE_GRAD
        assert [a for a in rows[rank] if "SEND" not in a and "RECV" not in a] == compute + [f"{rank}REDUCE_GRAD"]
    assert rows[1][-1] in ("1REDUCE_GRAD", "1SEND_B2") and rows[1].count("1REDUCE_GRAD") == 1
    for rank, row in enumerate(rows):
        pos = {a: i for i, a in enumerate(row)}
        for a, i in pos.items():
            if "SEND_" in a:   # after the compute that produced it
                stage, mb = a.split("SEND_")[0], a[-1]
                assert pos[f"{stage}{a.split('SEND_')[1][0]}{mb}"] < i
            if "RECV_" in a:   # before the compute that reads it
                stage, mb = a.split("RECV_")[0], a[-1]
                assert i < pos[f"{stage}{a.split('RECV_')[1][0]}{mb}"]
    # every pair of ranks posts its sends and receives in the same order
    sends_f = [a[-1] for a in rows[0] if "SEND_F" in a]
    assert sends_f == [a[-1] for a in rows[1] if "RECV_F" in a] == ["0", "1", "2"]
    assert [a[-1] for a in rows[1] if "SEND_B" in a] == [a[-1] for a in rows[0] if "RECV_B" in a]


def test_v_style_layout_sends_nothing_between_stages_on_one_rank():
    spec = chain([0, 1, 1, 0])
    text = export_torch_csv(make_plan(spec, greedy(spec, 2)), comms=True)
    assert "1SEND_F" not in text and "2RECV_F" not in text  # stages 1 and 2 share rank 1
    assert "0SEND_F0" in text and "3RECV_F0" in text


def test_inference_plan_exports_forwards_only():
    spec = chain([0, 1], mode=Mode.INFER)
    rows = export_torch_csv(make_plan(spec, greedy(spec, 2)), comms=True).splitlines()
    assert rows[0].split(",") == ["0F0", "0SEND_F0", "0F1", "0SEND_F1"]
    assert sorted(rows[1].split(",")) == ["1F0", "1F1", "1RECV_F0", "1RECV_F1"]
    assert "B" not in "".join(rows) and "REDUCE_GRAD" not in "".join(rows)


def test_export_writes_file_and_never_a_partial_one(tmp_path):
    spec = chain([0, 1])
    plan = make_plan(spec, greedy(spec, 2))
    out = tmp_path / "s.csv"
    export_torch_csv(plan, out)
    assert out.read_text().startswith("0F0,")
    bad = _with(spec, blocks=spec.blocks + (Block("E", Kind.FORWARD, (0, 1), 1, 0),))
    with pytest.raises(TorchCsvError):
        export_torch_csv(type(plan)(bad, plan.schedule), tmp_path / "never.csv")
    assert not (tmp_path / "never.csv").exists() and len(list(tmp_path.iterdir())) == 1


# ----------------------------------------------------------------------------- import

@pytest.mark.parametrize("ranks, split", [([0, 1], False), ([0, 1, 1, 0], False), ([0, 1], True)])
def test_export_import_round_trip(tmp_path, ranks, split):
    spec = chain(ranks, split=split)
    sched = greedy(spec, 4, late_w=split)
    path = tmp_path / "s.csv"
    export_torch_csv(make_plan(spec, sched), path)
    back = schedule_from_csv(spec, path)
    assert back.microbatches == 4 and back.name == "s"
    assert back.slots == sched.slots  # compaction of a compact schedule is itself
    path_c = tmp_path / "c.csv"
    export_torch_csv(make_plan(spec, sched), path_c, comms=True)
    assert schedule_from_csv(spec, path_c).slots == sched.slots


def test_import_of_torch_own_gpipe_text(tmp_path):
    path = tmp_path / "gpipe.csv"
    path.write_text("0F0,0F1,,,0B0,0B1\n,1F0,1F1,1B0,1B1\n")
    sched = schedule_from_csv(chain([0, 1]), path)
    start = {(s.block, s.mb): s.start for s in sched.slots}
    assert start[("F1", 0)] == 1 and start[("B1", 1)] == 5 and sched.makespan(chain([0, 1])) == 9


def test_full_backward_in_csv_becomes_i_then_w(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("0F0,0B0\n1F0,1B0\n")
    sched = schedule_from_csv(chain([0, 1], split=True), path)
    order = [s.block for s in sorted(sched.slots) if s.block.endswith("1")]
    assert order == ["F1", "I1", "W1"]


@pytest.mark.parametrize("text, where, message", [
    ("0F0,0X1\n1F0\n", ":1:5:", "'0X1' is not a PyTorch pipeline action"),
    ("0F0,0B0\n1F0, 1Q\n", ":2:6:", "'1Q' is not"),
    ("0F0,0B0\n1F,1B0\n", ":2:1:", "has no micro-batch number"),
    ("0F0,0B0\n", "", "1 rank rows but spec 'chain' has 2 devices"),
    ("0F0,0B0\n1F0,1B0,0F1\n", ":2:9:", "stage 0 (F0) runs on device 0 in the spec, but this action is on rank 1"),
    ("0F0,0B0\n1F0,5B0\n", ":2:5:", "stage 5 does not exist"),
    ("0B0,0F0\n1F0,1B0\n", "", "not a valid schedule"),
    ("0F0,0B0\n1F0,1B0,1F2,1B2\n", "", "micro-batch 1 never appears"),
    ("", "", "empty schedule"),
])
def test_malformed_csv_is_reported_with_location(tmp_path, text, where, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TorchCsvError) as info:
        schedule_from_csv(chain([0, 1]), path)
    assert message in str(info.value)
    assert f"bad.csv{where}" in str(info.value)


def test_missing_file_is_a_tessel_error(tmp_path):
    with pytest.raises(TorchCsvError, match="cannot read"):
        schedule_from_csv(chain([0, 1]), tmp_path / "nope.csv")


def test_reader_skips_comm_and_fsdp_actions_and_expands_overlap():
    rows = read_torch_csv("0UNSHARD,0F0,0SEND_F0,(0F1;0B0)OVERLAP_F_B,0REDUCE_GRAD\n")
    assert [(a.stage, a.letter, a.mb) for a in rows[0]] == [(0, "F", 0), (0, "F", 1), (0, "B", 0)]


@pytest.mark.parametrize("name, why", [
    ("mshape", "block E runs on devices 0,1,2,3 at once"),
    ("nnshape", "block E1 runs on devices 0,1,2,3 at once"),
    ("kshape", "runs on devices 0,1,2,3 at once"),
    ("xshape", "2 separate chains"),
])
def test_shipped_specs_pytorch_cannot_express(name, why):
    from tessel_dsl.lang.parser import parse_file

    with pytest.raises(TorchCsvError, match="cannot be expressed") as info:
        stage_map(parse_file(SPECS / f"{name}.tsl"))
    assert why in str(info.value)


# ----------------------------------------------------------------------------- command line

def _cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "tessel_dsl.cli", *args], capture_output=True, text=True,
                          cwd=ROOT)


def test_cli_export_import_round_trip(tmp_path):
    from tessel_dsl.plan import load_plan, save_plan

    spec = chain([0, 1, 1, 0])
    sched = greedy(spec, 4)
    save_plan(make_plan(spec, sched), tmp_path / "plan.json")
    out = _cli("export", str(tmp_path / "plan.json"))
    assert out.returncode == 0 and out.stdout.splitlines()[0].startswith("0F0,0F1,")
    res = _cli("export", str(tmp_path / "plan.json"), "--comms", "-o", str(tmp_path / "s.csv"))
    assert res.returncode == 0, res.stderr
    assert "3RECV_F0" in (tmp_path / "s.csv").read_text()
    res = _cli("import", str(tmp_path / "s.csv"), "--spec", str(tmp_path / "plan.json"), "-o", str(tmp_path / "back.json"))
    assert res.returncode == 0, res.stderr
    back = load_plan(tmp_path / "back.json")
    assert back.schedule.slots == sched.slots and back.search.method == "import"


def test_cli_errors_are_red_lines_not_tracebacks(tmp_path):
    from tessel_dsl.plan import save_plan

    spec = chain([0, 1])
    save_plan(make_plan(spec, greedy(spec, 2)), tmp_path / "plan.json")
    (tmp_path / "bad.csv").write_text("0F0,0B0\n1F0,1Bx\n")
    res = _cli("import", str(tmp_path / "bad.csv"), "--spec", str(tmp_path / "plan.json"), "-o", str(tmp_path / "o.json"))
    assert res.returncode == 1 and "bad.csv:2:5" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "o.json").exists()
    res = _cli("export", str(tmp_path / "plan.json"), "--format", "torch-csv")  # one format: no option
    assert res.returncode == 2
