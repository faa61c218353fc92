"""`Pipeline` trains a user's own model with a plan: 20 optimizer steps on gloo ranks give the
losses of one process accumulating gradients over the same micro-batches (fp32, 1e-5 relative),
for the shipped GPT and for a Hugging Face Llama, with and without data-parallel replicas."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402

STEPS, N, ROWS, SEQ = 20, 4, 2, 8  # rows per micro-batch


def check(plan, build, loss_fn, blocks, vocab, replicas=1, on_meta=False, tp=None, data=None):
    n = plan.schedule.microbatches
    data = data or ps.batches(vocab, STEPS, ROWS * n * replicas, SEQ)
    want = ps.reference(build, loss_fn, data, n * replicas)
    got = run_ranks(ps.pipelined, plan.spec.devices * replicas, plan, build, loss_fn, blocks, data, replicas,
                    on_meta, tp, timeout=300)
    for r in got:
        errs = [ps.rel(a, b) for a, b in zip(r["losses"], want)]
        assert len(r["losses"]) == STEPS and max(errs) <= 1e-5, (r["rank"], errs)
    assert want[-1] < want[0]  # it trains
    return got


def test_gpt_mshape_two_ranks_from_meta_device():
    plan = ps.searched_plan(ps.mshape(2, N))
    blocks = blocks_by_name(plan.spec, 4)
    got = check(plan, ps.gpt, ps.gpt_loss, blocks, 512, on_meta=True)
    # Each rank materialised only its blocks: rank 0 holds E and F0, rank 1 E and F1.
    assert got[0]["local"] and all(n.startswith(("embed", "pos", "layers.0", "layers.1")) for n in got[0]["local"])
    assert "layers.3.fc1.weight" in got[0]["meta"] and "layers.0.fc1.weight" in got[1]["meta"]
    assert "embed.weight" not in got[1]["meta"]


def test_gpt_mshape_with_dtensor_sharded_embedding_and_head_two_by_two():
    # Data parallel x pipeline x tensor parallel: the gradients of sharded (E, H) and plain
    # (stage) parameters are both averaged over the replicas.
    # Two micro-batches per replica keep four ranks on two cores quick.
    plan = ps.searched_plan(ps.shapes.mshape(2, microbatches=2, head=True))
    got = check(plan, ps.gpt, ps.gpt_loss, blocks_by_name(plan.spec, 4), 512, replicas=2, tp=ps.gpt_tp)
    for r in got:  # each of a replica's two ranks holds half of the vocabulary's rows
        assert r["shapes"]["embed.weight"] == (256, 32) and r["shapes"]["head.weight"] == (256, 32)
        assert r["shapes"]["pos.weight"] == (8, 32)


def test_gpt_with_dtensor_blocks_on_device_pairs_of_four():
    # E sharded over devices {1, 2} and H over {2, 3}: each over a mesh of its own pair (rank 0 is
    # in neither), on sub-groups every rank created in one order.
    from tests.executor_support import plan_for

    spec = ps.shapes.mshape(4, microbatches=2, head=True, embed_on=(1, 2), head_on=(2, 3), memory=8)
    plan = plan_for(spec, "1f1b+", 2)
    got = check(plan, ps.gpt, ps.gpt_loss, blocks_by_name(spec, 4), 512, tp=ps.gpt_tp)
    shapes = {r["rank"]: r["shapes"] for r in got}
    assert "embed.weight" not in shapes[0] and "head.weight" not in shapes[1]
    assert shapes[1]["embed.weight"] == shapes[2]["embed.weight"] == (256, 32)
    assert shapes[2]["head.weight"] == shapes[3]["head.weight"] == (256, 32)


def test_a_two_branch_model_bound_by_name_on_the_kshape():
    # F0 (text tower, device 0) and F1 (image tower, device 1) join in J (both devices): J
    # receives each tower's output as its own argument of `fuse(text, image)`.
    from tests.executor_support import plan_for

    plan = plan_for(ps.shapes.kshape(2, microbatches=2, memory=8), "gpipe", 2)
    data = ps.two_tower_batches(STEPS, ROWS * 2)
    got = check(plan, ps.two_tower, ps.F.cross_entropy, ps.TWO_TOWER_BLOCKS, None, data=data)
    local = {r["rank"]: r["local"] for r in got}
    assert any(n.startswith("text.") for n in local[0]) and not any(n.startswith("image.") for n in local[0])
    assert any(n.startswith("image.") for n in local[1]) and not any(n.startswith("text.") for n in local[1])


def test_a_fan_out_and_a_join_bound_by_name():
    # F0 feeds F1 (another device) and F2 (its own): it sends both the same tensor, and the
    # gradients coming back from both add up; J joins F1 and F2.
    from tests.executor_support import plan_for

    plan = plan_for(ps.diamond_spec(), "gpipe", 2)
    x, y = ps.batches(64, 1, ROWS * 2, SEQ)[0]
    data = [(x, y[:, 0] % 5)] * STEPS
    check(plan, ps.diamond, ps.F.cross_entropy, ps.DIAMOND_BLOCKS, None, data=data)


@pytest.mark.parametrize("shape", ["vshape", "mshape"])
def test_hugging_face_llama(shape):
    pytest.importorskip("transformers")
    plan = ps.searched_plan(getattr(ps, shape)(2, N))
    check(plan, ps.llama, ps.llama_loss, ps.llama_blocks(plan.spec), ps.LLAMA["vocab_size"])


def test_an_inference_plan_returns_the_models_output_on_the_last_blocks_rank():
    from tessel_dsl.ir import Mode
    from tests.executor_support import plan_for

    spec = ps.shapes.vshape(2, mode=Mode.INFER, microbatches=N)
    x, _ = ps.batches(512, 1, ROWS * N, SEQ)[0]
    got = run_ranks(ps.inferred, 2, plan_for(spec, "gpipe", N), blocks_by_name(spec, 4), x)
    with torch.no_grad():
        want = ps.gpt()(x)
    assert got[0] is None and got[1].shape == want.shape
    assert float((got[1] - want).norm() / want.norm()) <= 1e-5
