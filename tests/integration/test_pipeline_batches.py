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
