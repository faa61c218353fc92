"""`Pipeline` on an M-shape whose embedding and LM head are spread over both ranks, sharded by the
DTensor plans `tp_plans` gives (as `tessel plan`'s mshape-EH choice runs): after one step each
rank's rows of the embedding and head gradients, and every other gradient it holds, equal one
process's over the same micro-batches (1e-5 relative). Gradients, not losses: AdamW normalises a
gradient's scale away, so an embedding gradient summed over the ranks that share its block would
barely move the losses the training tests compare."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.models import shapes  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402

N, ROWS, SEQ, LAYERS, VOCAB, RANKS = 4, 2, 8, 4, 512, 2


def _rank_grads(plan, data) -> dict:
    from tessel_dsl.executor.pipeline import Pipeline
    from tessel_dsl.placement.tp import tp_plans

    model, blocks = ps.gpt(), blocks_by_name(plan.spec, LAYERS)
    pipe = Pipeline(plan, model, ps.gpt_loss, blocks=blocks, tp=tp_plans(plan, blocks, model))
    pipe.step(*data)
    return {n: getattr(p.grad, "_local_tensor", p.grad).detach().clone() for n, p in pipe.named_parameters()}


def test_spread_embedding_and_head_gradients_after_one_step():
    plan = ps.searched_plan(shapes.mshape(RANKS, microbatches=N, head=True))
    data = ps.batches(VOCAB, 1, ROWS * N, SEQ)[0]
    model = ps.gpt()
    for xs, ys in zip(data[0].chunk(N), data[1].chunk(N)):
        (ps.gpt_loss(model(xs), ys) / N).backward()
    want = {n: p.grad for n, p in model.named_parameters()}
    got = run_ranks(_rank_grads, RANKS, plan, data, timeout=300)
    rows = VOCAB // RANKS
    for rank, grads in enumerate(got):
        assert grads["embed.weight"].shape[0] == rows and grads["head.weight"].shape[0] == rows, rank
        for n, g in grads.items():
            ref = want[n][rank * rows:(rank + 1) * rows] if n in ("embed.weight", "head.weight") else want[n]
            err = float((g - ref).norm() / ref.norm())
            assert err <= 1e-5, (rank, n, err)
    # Between them the ranks hold every parameter: each stage's on its own rank, E's and H's on both.
    assert set().union(*got) == set(want)
