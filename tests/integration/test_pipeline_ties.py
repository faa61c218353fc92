"""Parameters used by blocks on different ranks (a tied embedding and LM head, T5's shared
embedding): each rank of such a block holds the parameter and the parts of its gradient are
summed over them before the optimizer step. Checked against one process: every step's loss and
every parameter after the last step (each rank's copy of a tied one)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tessel_dsl.executor.block_map import forward_graph  # noqa: E402
from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.ties import find_ties  # noqa: E402
from tests import pipeline_cases as pc  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402

STEPS = 3


def _check(plan, build, blocks, data, loss_fn, replicas=1, on_meta=False):
    n = plan.schedule.microbatches
    want = pc.reference(build, loss_fn, data, n * replicas)
    got = run_ranks(pc.pipelined, plan.spec.devices * replicas, plan, build, loss_fn, blocks, data, replicas,
                    on_meta, timeout=300)
    pc.compare(got, want)
    return got


@pytest.mark.parametrize("shape", ["vshape", "mshape"])
def test_gpt2_with_its_head_tied_to_the_embedding(shape):
    plan = ps.searched_plan(getattr(ps, shape)(2, 2))
    blocks = pc.gpt2_blocks(plan.spec)
    tie, = find_ties(plan.spec, pc.gpt2(), list(forward_graph(plan.spec)), blocks)
    # V: the embedding's F0 on device 0, the head's F1 on device 1: both parts summed. M: E on
    # both devices, the head's F1 on device 1, which so holds both parts: only its copy counts.
    assert tie.names == ("transformer.wte.weight", "lm_head.weight") and tie.ranks == (0, 1)
    assert tie.count == ((0, 1) if shape == "vshape" else (1,))
    got = _check(plan, pc.gpt2, blocks, ps.batches(96, STEPS, 4, 8), pc.lm_loss, on_meta=shape == "mshape")
    if shape == "vshape":  # each rank names the tied parameter after its own submodule
        assert "lm_head.weight" in got[1]["params"] and "transformer.wte.weight" in got[0]["params"]


def test_t5_shared_embedding_two_ranks():
    plan = ps.searched_plan(ps.vshape(2, 2))
    _check(plan, pc.t5, pc.T5_BLOCKS, pc.t5_batches(STEPS, 4), pc.seq2seq_loss)


def test_t5_shared_embedding_two_pipeline_by_two_data_parallel_ranks():
    plan = ps.searched_plan(ps.vshape(2, 2))
    _check(plan, pc.t5, pc.T5_BLOCKS, pc.t5_batches(STEPS, 8), pc.seq2seq_loss, replicas=2)


def test_qwen2_with_tied_word_embeddings_built_on_meta():
    # Tied embedding and head, rotary tables rebuilt from the config: both at once.
    plan = ps.searched_plan(ps.vshape(2, 2))
    _check(plan, pc.qwen2_tied, pc.decoder_blocks(plan.spec), ps.batches(96, STEPS, 4, 8), pc.lm_loss,
           on_meta=True)
