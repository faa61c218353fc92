"""`Pipeline.save` / `Pipeline.load`: a run resumed in a fresh launch (a new process group, other
initial weights, an optimizer built with other settings) continues exactly as the run that saved
did without stopping, for every shape `Pipeline` runs and a Hugging Face model; a checkpoint resumes
on another number of data-parallel replicas; damaged, foreign and planted checkpoints are refused
with one clear message on every rank, and nothing in them is unpickled beyond DCP's metadata and
plain data."""
from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tests import checkpoint_support as cs  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402
from tests.paths import SPECS

STEPS, SAVE = 4, 2  # save after 2 of 4 steps


def shipped(name: str, **sets):

    from tessel_dsl.lang.parser import parse_file

    spec = SPECS / f"{name}.tsl"
    return ps.searched_plan(parse_file(spec, {k: str(v) for k, v in sets.items()}))


def two_rank_cases() -> list[dict]:
    vplan = plan_for(ps.vshape(2, 2), "1f1b", 2)
    x, y = ps.batches(64, 1, 4, 8)[0]
    interleaved = shipped("interleaved", D=2, C=2, N=2)
    zbv = shipped("zerobubble", D=2, C=2, N=2)
    return [
        cs.gpt_case("V", vplan),
        cs.gpt_case("M", plan_for(ps.mshape(2, 2), "1f1b+", 2)),  # E on both ranks, replicated
        cs.gpt_case("interleaved", interleaved, "sgd", blocks=cs.chain_blocks(interleaved.spec)),
        cs.gpt_case("ZB-V", zbv, blocks=cs.chain_blocks(zbv.spec)),  # device 0 holds the first and last stage
        cs.case("K", plan_for(ps.shapes.kshape(2, microbatches=2, memory=8), "gpipe", 2), cs.seeded(ps.TwoTower),
                ps.F.cross_entropy, ps.TWO_TOWER_BLOCKS, ps.two_tower_batches(STEPS, 4), "sgd"),
        cs.case("diamond", plan_for(ps.diamond_spec(), "gpipe", 2), cs.seeded(ps.Diamond), ps.F.cross_entropy,
                ps.DIAMOND_BLOCKS, [(x, y[:, 0] % 5)] * STEPS),
        cs.case("GPT-2", vplan, cs.gpt2, ps.llama_loss, cs.GPT2_BLOCKS, ps.batches(96, STEPS, 4, 8)),
    ]


def same(got: dict, want: dict, where: str, rel: float = 0.0) -> None:
    """Snapshots equal: bit for bit, or within `rel` of each tensor's norm."""
    for part in ("params", "state", "groups"):
        assert got[part].keys() == want[part].keys(), (where, part)
    assert got["groups"] == want["groups"], where
    for part in ("params", "state"):
        for name, w in want[part].items():
            pairs = [(name, got[part][name], w)] if part == "params" else \
                [(f"{name}.{k}", got[part][name][k], v) for k, v in w.items()]
            if part == "state":
                assert got[part][name].keys() == w.keys(), (where, name)
            for what, a, b in pairs:
                if rel == 0.0:
                    assert torch.equal(a, b), (where, what, float((a.double() - b.double()).abs().max()))
                else:
                    err = float((a.double() - b.double()).norm() / max(float(b.double().norm()), 1e-12))
                    assert err <= rel, (where, what, err)


@pytest.fixture(scope="module")
def saved_on_two(tmp_path_factory):
    """Every two-rank case trained for 4 steps, saved after 2."""
    root = tmp_path_factory.mktemp("ck2")
    cases = two_rank_cases()
    return cases, root, run_ranks(cs.run_cases, 2, cases, root, SAVE, False, timeout=600)


def test_every_shape_resumes_in_a_fresh_launch_as_if_uninterrupted(saved_on_two):
    # The optimizer state is flattened per parameter: unflattened, a V-shape resume lost AdamW's
    # betas (KeyError at the first step) or SGD's momentum, each rank having loaded the other
    # rank's parameter groups.
    cases, root, whole = saved_on_two
    rest = run_ranks(cs.run_cases, 2, cases, root, None, True, timeout=600)
    for rank in range(2):
        for c in cases:
            name, w, r = c["name"], whole[rank][c["name"]], rest[rank][c["name"]]
            where = f"{name}, rank {rank}"
            assert r["start"] == SAVE and len(w["losses"]) == STEPS and len(r["losses"]) == STEPS - SAVE, where
            assert w["marked"]["params"] and all(w["marked"]["state"].values()), where  # state to restore
            same(r["marked"], w["marked"], where + ", just after the load")
            assert r["losses"] == w["losses"][SAVE:], where
            same(r["final"], w["final"], where + ", at the end")
    # What the resumed optimizer was built with, replaced by the checkpoint's groups.
    groups = rest[0]["V"]["final"]["groups"]["embed.weight"]
    assert groups["lr"] == 1e-2 and groups["betas"] == (0.9, 0.95) and groups["weight_decay"] == 0.1
    assert rest[1]["K"]["final"]["groups"]["cls.weight"]["momentum"] == 0.9


def test_a_two_rank_checkpoint_resumes_on_two_replicas(saved_on_two):
    # DCP reshards: each replica's ranks read the pipeline ranks' parameters and state; with the
    # batch split over the replicas the losses are those of the run that saved (equal-sized
    # micro-batches, so the mean of their means is the same) up to rounding. AdamW turns the
    # rounding of a gradient that is zero in exact arithmetic (an attention key's bias) into a
    # step of up to lr, hence 1e-3 on the parameters two steps later.
    cases, root, whole = saved_on_two
    picked = [c for c in cases if c["name"] in ("V", "GPT-2")]
    rest = run_ranks(cs.run_cases, 4, picked, root, None, True, 2, timeout=600)
    for rank in range(4):
        for c in picked:
            r = rest[rank][c["name"]]
            w = whole[r["pp_rank"]][c["name"]]
            where = f"{c['name']}, rank {rank} of 2 x 2"
            same(r["marked"], w["marked"], where + ", just after the load")
            assert r["losses"] == pytest.approx(w["losses"][SAVE:], rel=1e-6, abs=0), where
            same(r["final"], w["final"], where + ", at the end", rel=1e-3)


def test_a_two_by_two_checkpoint_with_sharded_blocks_resumes_on_two_by_two_and_on_one_replica(tmp_path):
    # 2 pipeline x 2 data-parallel ranks with DTensor-sharded E and H: the checkpoint holds
    # shards, plain stage parameters (one copy per replica) and AdamW state.
    plan = ps.searched_plan(ps.shapes.mshape(2, microbatches=2, head=True))
    cases = [cs.gpt_case("M-tp", plan, rows=8)]
    whole = run_ranks(cs.run_cases, 4, cases, tmp_path, SAVE, False, 2, timeout=600)
    again = run_ranks(cs.run_cases, 4, cases, tmp_path, None, True, 2, timeout=600)
    for rank in range(4):
        w, r = whole[rank]["M-tp"], again[rank]["M-tp"]
        same(r["marked"], w["marked"], f"rank {rank}, just after the load")
        assert r["losses"] == w["losses"][SAVE:]
        same(r["final"], w["final"], f"rank {rank}, at the end")
    assert whole[0]["M-tp"]["marked"]["params"]["embed.weight"].shape == (256, 32)  # a shard
    one = run_ranks(cs.run_cases, 2, cases, tmp_path, None, True, 1, timeout=600)
    for rank in range(2):
        w, r = whole[rank]["M-tp"], one[rank]["M-tp"]
        same(r["marked"], w["marked"], f"rank {rank} of one replica, just after the load")
        assert r["losses"] == pytest.approx(w["losses"][SAVE:], rel=1e-6, abs=0)
        same(r["final"], w["final"], f"rank {rank} of one replica, at the end", rel=1e-3)


REFUSALS = {
    "missing directory": r"nowhere: no such checkpoint directory$",
    "a file": r"a-file: not a checkpoint directory",
    "no info file": r"noinfo: not a Tessel checkpoint: it has no tessel-plan.json",
    "info not json": r"badjson/tessel-plan.json: unreadable \(Expecting property name",
    "info a list": r"list/tessel-plan.json: not a Tessel checkpoint's info",
    "forged fingerprint": r"other: written for plan 'vshape' with blocks .*not this plan \('vshape', 1f1b\)",
    "other schedule": r"good: written for plan 'vshape' .*not this plan \('vshape', gpipe\) and mapping",
    "earlier format": r"old: its optimizer state was saved by an earlier version.*load the model alone",
    "no optimizer state": r"wide: holds no optimizer state$",
    "no metadata": r"nometa: the checkpoint's .metadata file is missing",
    "truncated metadata": r"halfmeta/.metadata: unreadable \(UnpicklingError",
    "missing data file": r"nodata: loading the checkpoint failed: rank 1: a data file is missing \(__1_0.distcp\)$",
    "truncated data file": r"halfdata: loading the checkpoint failed: rank 0: RuntimeError: PytorchStreamReader "
                           r"failed reading zip archive: failed finding central directory \(a damaged data file\?\)$",
    "other sizes": r"wide: loading the checkpoint failed: rank 0: Size mismatch between saved torch.Size\(\[512, 48\]\) "
                   r"and current: torch.Size\(\[512, 32\]\) for model.embed.weight \(the checkpoint is of a model of "
                   r"other sizes\); ranks 0, 1 failed$",
    "other optimizer": r"good: loading the checkpoint failed: rank 0: Missing key in checkpoint state_dict: "
                       r"optim.param_groups.embed.weight.momentum: the checkpoint is of another model or optimizer",
    "planted payload": r"planted/.metadata: refused, it names pathlib.Path.touch, which DCP metadata never holds: "
                       r"loading it would run code from the checkpoint. Load only checkpoints you wrote yourself "
                       r"with trusted=True$",
    "save onto a file": r"a-file: cannot save a checkpoint there: it is a file, not a directory$",
    "empty batch": r"^ExecutionError: a batch of 0 rows does not split into the plan's 2 micro-batches of at least "
                   r"one row",
}


def test_damaged_foreign_and_planted_checkpoints_and_an_empty_batch_are_refused_with_a_message(tmp_path):
    import re

    plan = plan_for(ps.vshape(2, 2), "1f1b", 2)
    got = run_ranks(cs.refusals, 2, plan, plan_for(ps.vshape(2, 2), "gpipe", 2), tmp_path, timeout=600)
    assert got[0] == got[1]  # every rank refuses alike (and none is left waiting in a collective)
    out = got[0]
    assert out.pop("good") == out.pop("good, trusted") == "1"  # the step saved
    assert out.pop("payload ran") == "False"
    # DCP's own loader runs the payload: Path.touch returns None, which is no metadata.
    assert out.pop("payload ran when trusted") == "True"
    assert out.pop("planted payload, trusted").endswith("planted/.metadata: holds a NoneType, not DCP metadata")
    assert out.keys() == REFUSALS.keys()
    for case, pattern in REFUSALS.items():
        assert out[case].startswith("ExecutionError: "), (case, out[case])
        assert re.search(pattern, out[case]), (case, out[case])
        assert "Traceback" not in out[case] and "\n" not in out[case], (case, out[case])


def test_the_safe_metadata_reader_refuses_a_planted_payload_that_plain_unpickling_runs(tmp_path):
    from tessel_dsl.executor.checkpoint_safe import UnsafeCheckpoint, read_metadata

    marker = tmp_path / "ran"
    planted = pickle.dumps(cs.Payload(str(marker)))
    with pytest.raises(UnsafeCheckpoint, match="names pathlib.Path.touch"):
        read_metadata(planted)
    assert not marker.exists()
    pickle.loads(planted)  # what DCP's own reader does with it
    assert marker.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_safe_planner_loads_plain_values_and_refuses_a_planted_one(tmp_path):
    # Non-tensor values (an optimizer group's betas, say) are pickles too; DCP's default planner
    # loads them with weights_only=False.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from tessel_dsl.executor.checkpoint_safe import SafePlanner, SafeReader, UnsafeCheckpoint

    marker = tmp_path / "ran"
    dcp.save({"a": {"betas": (0.9, 0.95), "lr": 1e-2, "w": torch.ones(3)}}, checkpoint_id=str(tmp_path / "good"),
             no_dist=True)
    dcp.save({"a": {"betas": cs.Payload(str(marker)), "w": torch.ones(3)}}, checkpoint_id=str(tmp_path / "bad"),
             no_dist=True)
    state = {"a": {"betas": None, "lr": None, "w": torch.zeros(3)}}
    dcp.load(state, storage_reader=SafeReader(str(tmp_path / "good")), planner=SafePlanner(), no_dist=True)
    assert state["a"]["betas"] == (0.9, 0.95) and state["a"]["lr"] == 1e-2 and torch.equal(state["a"]["w"], torch.ones(3))
    with pytest.raises(CheckpointException) as err:  # DCP gathers each rank's error
        dcp.load({"a": {"betas": None, "w": torch.zeros(3)}}, storage_reader=SafeReader(str(tmp_path / "bad")),
                 planner=SafePlanner(), no_dist=True)
    failure = err.value.failures[0][0]
    assert isinstance(failure, UnsafeCheckpoint), err.value
    assert str(failure) == ("value 'a.betas' is not plain data (WeightsUnpickler error: Unsupported global: "
                                   "GLOBAL getattr was not an allowed global by default)")
    assert not marker.exists()
    dcp.load({"a": {"betas": None, "w": torch.zeros(3)}}, checkpoint_id=str(tmp_path / "bad"), no_dist=True)
    assert marker.exists()  # DCP's default planner runs it

