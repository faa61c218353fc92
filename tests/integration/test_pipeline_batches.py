"""What `Pipeline.step` checks of the batches it is given: every rank of a pipeline must get the
same one (a per-rank sampler would train wrong without an error)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tessel_dsl.executor.preflight import batch_hash  # noqa: E402
from tests import pipeline_cases as pc  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402


def test_ranks_of_one_pipeline_given_different_batches_are_named():
    plan = plan_for(ps.vshape(2, 2), "1f1b", 2)
    data = ps.batches(512, 2, 4, 8, distinct=2)
    with pytest.raises(ExecutionError, match=r"step 0: the ranks of one pipeline \(replica 0, ranks \[0, 1\]\) were "
                                             r"given different batches: rank 0 got one, rank 1 got another"):
        run_ranks(pc.per_rank_batches, 2, plan, blocks_by_name(plan.spec, 4), data)
    # The same batch on both ranks trains.
    got = run_ranks(pc.per_rank_batches, 2, plan, blocks_by_name(plan.spec, 4), data[:1])
    assert got[0] == got[1]


def test_the_batch_fingerprint_sees_one_changed_element_a_swap_and_the_shape():
    x = torch.randint(0, 512, (4, 8))
    y = torch.randn(4, 3)
    base = batch_hash([x, y, "mean"])
    assert torch.equal(base, batch_hash([x.clone(), y.clone(), "mean"]))
    changed = x.clone()
    changed[3, 7] += 1
    swapped = x.clone()
    swapped[[0, 1]] = x[[1, 0]]
    tiny = y.clone()
    tiny[0, 0] = torch.nextafter(tiny[0, 0], torch.tensor(1e9))
    for other in ([changed, y, "mean"], [swapped, y, "mean"], [x, tiny, "mean"], [x.reshape(8, 4), y, "mean"],
                  [x, y, "sum"], [x.int(), y, "mean"]):
        assert not torch.equal(base, batch_hash(other))


def refused(plan, blocks, data, replicas: int = 1) -> dict:
    """Rank r steps on batch r of `data`; returns the error it stopped with (None if it did not)
    and whether it started its program."""
    import torch.distributed as dist

    from tessel_dsl.executor.pipeline import Pipeline

    pipe = Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=blocks, replicas=replicas)
    ran, step = [], pipe.runner.step
    pipe.runner.step = lambda *a, **k: ran.append(1) or step(*a, **k)
    x, y = data[dist.get_rank()]
    try:
        pipe.step(x, y)
    except ExecutionError as e:
        return {"error": str(e), "ran": bool(ran)}
    return {"error": None, "ran": bool(ran)}


def test_batches_of_other_shapes_are_refused_before_any_block_runs():
    # Ranks that disagree on the shape would exchange messages of other sizes: stopped first.
    plan = plan_for(ps.vshape(2, 2), "1f1b", 2)
    data = [ps.batches(512, 1, 4, 8)[0], ps.batches(512, 1, 4, 6)[0]]
    got = run_ranks(refused, 2, plan, blocks_by_name(plan.spec, 4), data)
    for r in got:
        assert not r["ran"]
        assert r["error"].startswith("step 0: the ranks of one pipeline (replica 0, ranks [0, 1]) were given "
                                     "different batches: rank 0 got one, rank 1 got another"), r["error"]


def test_the_replica_whose_ranks_agree_stops_too_naming_the_other():
    # Replica 0's ranks get different contents (same shapes), replica 1's the same batch: the
    # contents are compared at the end of the step, and every rank stops there.
    plan = plan_for(ps.vshape(2, 2), "1f1b", 2)
    a, b = ps.batches(512, 2, 4, 8, distinct=2)
    got = run_ranks(refused, 4, plan, blocks_by_name(plan.spec, 4), [a, b, b, b], 2)
    for r in got[:2]:
        assert r["error"].startswith("step 0: the ranks of one pipeline (replica 0, ranks [0, 1]) were given "
                                     "different batches: rank 0 got one, rank 1 got another"), r["error"]
    for r in got[2:]:
        assert r["error"].startswith("step 0: the ranks of another pipeline than this one (replica 1)"), r["error"]
