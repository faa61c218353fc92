"""The bad inputs `Pipeline` refuses before any rank computes (checkpoints are in
test_pipeline_checkpoint.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.bind import Binding  # noqa: E402
from tessel_dsl.executor.block_map import forward_graph, read_blocks  # noqa: E402
from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tessel_dsl.executor.pipeline import Pipeline  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402
from tests.paths import ROOT


def test_a_batch_that_does_not_split_into_n_micro_batches_fails_before_running():
    plan = plan_for(ps.mshape(2, 4), "1f1b+", 4)
    with pytest.raises(ExecutionError, match="batch of 6 rows does not split into the plan's 4 micro-batches"):
        run_ranks(ps.bad_batch, 2, plan, blocks_by_name(plan.spec, 4), 6)


def test_a_target_the_loss_cannot_take_fails_in_the_fake_run_before_any_block_runs():
    plan = plan_for(ps.mshape(2, 4), "1f1b+", 4)
    with pytest.raises(ExecutionError, match=r"loss_fn\) failed on a micro-batch of this shape.*ValueError"):
        run_ranks(ps.bad_batch, 2, plan, blocks_by_name(plan.spec, 4), 8, 5)


def test_devices_times_replicas_must_be_the_world():
    plan = plan_for(ps.mshape(2, 4), "1f1b+", 4)
    with pytest.raises(ExecutionError, match=r"2 devices x 2 replicas = 4 ranks, but the world has 2"):
        run_ranks(ps.bad_world, 2, plan, blocks_by_name(plan.spec, 4), 2)


@pytest.mark.parametrize("change,message", [
    (lambda b: {**b, "F0": ["layers.0", "layers.9"]}, "block 'F0': the model has no submodule 'layers.9'"),
    (lambda b: {**b, "F0": ["layers.0"]}, r"parameters outside every block: \['layers.1"),
    (lambda b: {**b, "F1": b["F1"] + ["layers.0"]}, "'layers.0' is in both"),
    (lambda b: {**b, "X": ["norm"]}, r"blocks \['X'\] are not forward blocks"),
    (lambda b: {k: v for k, v in b.items() if k != "E"}, r"no submodules given for forward block\(s\) \['E'\]"),
])
def test_names_that_do_not_match_the_model_fail_before_any_process_group(change, message):
    plan = plan_for(ps.mshape(2, 4), "1f1b+", 4)
    blocks = change(blocks_by_name(plan.spec, 4))
    with pytest.raises(ExecutionError, match=message):
        Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=blocks)
    assert not torch.distributed.is_initialized()


def test_a_tensor_parallel_plan_for_a_one_device_block_fails_before_any_process_group():
    plan = plan_for(ps.mshape(2, 4), "1f1b+", 4)
    tp = {"F0": ps.gpt_tp()["E"]}
    with pytest.raises(ExecutionError, match=r"tensor-parallel plan for 'F0', which runs on one device \(0\)"):
        Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=blocks_by_name(plan.spec, 4), tp=tp)
    assert not torch.distributed.is_initialized()


def test_the_training_example_runs_under_torchrun_and_writes_a_trace(tmp_path):
    import json
    import os
    import subprocess
    import sys

    root = ROOT
    # torchrun starts the ranks here; the other tests start them with run_ranks.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(root / "examples" / "train_gpt.py"), "--steps", "3", "--hidden", "32", "--layers", "2",
           "--seq", "16", "--rows", "2", "--trace", str(tmp_path / "t.json")]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "step 3/3" in out.stdout and "mean loss of the first 1 steps" in out.stdout
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {e["tid"] for e in events if e.get("ph") == "X"} == {0, 1}


def test_a_mapping_file_beside_the_spec_and_its_errors(tmp_path):
    import json

    plan = plan_for(ps.mshape(2, 4), "1f1b+", 4)
    good = tmp_path / "blocks.json"
    good.write_text(json.dumps(blocks_by_name(plan.spec, 4)))
    bad = dict(blocks_by_name(plan.spec, 4), F0=["layers.0", "layers.7"])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ExecutionError, match="no submodule 'layers.7'"):
        Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=tmp_path / "bad.json")
    (tmp_path / "broken.json").write_text('{"E": ["embed",\n  ]}')
    with pytest.raises(ExecutionError, match=r"broken.json:2:3: "):
        Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=tmp_path / "broken.json")
    (tmp_path / "list.json").write_text('["embed"]')
    with pytest.raises(ExecutionError, match="expected an object of block name"):
        Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=tmp_path / "list.json")
    assert not torch.distributed.is_initialized()
    assert read_blocks(good) == blocks_by_name(plan.spec, 4)


def test_a_join_that_gets_its_inputs_already_combined_fails_in_the_fake_run():
    plan = plan_for(ps.shapes.kshape(2, microbatches=2, memory=8), "gpipe", 2)
    x, y = ps.two_tower_batches(1, 4)[0]
    torch.manual_seed(0)
    blocks = {**ps.TWO_TOWER_BLOCKS, "J": ["fuse.mlp", "cls"]}
    binding = Binding(ps.JoinedTwoTower(), blocks, forward_graph(plan.spec))
    with pytest.raises(ExecutionError, match=r"block 'J' takes inputs from \['F0', 'F1'\], but argument 0 of "
                                             r"its first submodule call depends on the outputs of \['F0', 'F1'\]: "
                                             r"a join must receive each input block's output as a separate argument"):
        binding.trace(x, {}, torch.nn.functional.cross_entropy, (y,), torch.device("cpu"))
    assert not torch.distributed.is_initialized()


def test_placements_with_several_last_blocks_need_a_factory():
    # Two independent pipelines sharing the devices (the X-shape's layout): no one block ends
    # the model's forward.
    from tessel_dsl.executor.models import shapes
    from tessel_dsl.ir import Mode

    spec = shapes._spec("xshape", 2, 4, [("F0", (0,)), ("F1", (1,)), ("G0", (1,)), ("G1", (0,))],
                        [("F0", "F1"), ("G0", "G1")], Mode.TRAIN, 2)
    with pytest.raises(ExecutionError, match=r"must end in one forward block.*has 2 \(\['F1', 'G1'\]|"
                                             r"must end in one forward block.*has 2 \(\['G1', 'F1'\]"):
        Pipeline(plan_for(spec, "gpipe", 2), ps.gpt(), ps.gpt_loss, blocks={})
