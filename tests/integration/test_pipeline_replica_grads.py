"""Data-parallel `Pipeline`: after one step every rank's gradient is the mean over both replicas,
compared with one process's gradient over all their micro-batches (1e-5 relative). Gradients,
not losses: AdamW normalises a gradient's scale away, so a sum where a mean belongs barely moves
the losses the training tests compare."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.models import shapes  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402

N, REPLICAS, ROWS, SEQ, LAYERS = 2, 2, 2, 8, 4


def _plan():
    return ps.searched_plan(shapes.vshape(1, microbatches=N))


def _rank_grads(plan, data) -> dict:
    from tessel_dsl.executor.pipeline import Pipeline

    x, y = data
    pipe = Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=blocks_by_name(plan.spec, LAYERS), replicas=REPLICAS)
    k = pipe.replica
    pipe.step(x.chunk(REPLICAS)[k], y.chunk(REPLICAS)[k])
    return {n: p.grad.detach().clone() for n, p in pipe.named_parameters()}


def test_replicas_average_their_gradients():
    plan = _plan()
    data = ps.batches(512, 1, ROWS * N * REPLICAS, SEQ)[0]
    model = ps.gpt()
    micro = N * REPLICAS
    for xs, ys in zip(data[0].chunk(micro), data[1].chunk(micro)):
        (ps.gpt_loss(model(xs), ys) / micro).backward()
    want = {n: p.grad for n, p in model.named_parameters()}
    got = run_ranks(_rank_grads, REPLICAS, plan, data, timeout=300)
    for rank, grads in enumerate(got):
        assert set(grads) == set(want), rank
        for n, g in grads.items():
            err = float((g - want[n]).norm() / want[n].norm())
            assert err <= 1e-5, (rank, n, err)
