"""The loss `Pipeline.step` trains: by default the mean of the micro-batch losses; with
`loss_weight` (a micro-batch's token count, say) the weighted mean, which for a token-mean
`loss_fn` is the token mean of the whole batch over every replica."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tests import pipeline_cases as pc  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402

STEPS = 3


def test_with_padding_the_mean_of_micro_batch_means_is_not_the_token_mean():
    data = pc.padded_batches(1, 8)
    by_mb = pc.reference(ps.gpt, pc.token_loss, data, 4)["losses"][0]
    by_token = pc.token_mean_reference(ps.gpt, data)["losses"][0]
    assert abs(by_mb - by_token) > 1e-3


def test_micro_batches_weighted_by_token_count_give_the_token_mean_two_by_two():
    # 2 pipeline x 2 data-parallel ranks, 2 micro-batches each: four micro-batches of 2 rows
    # with 8, 7, 6, 5 (and so on) tokens.
    plan = ps.searched_plan(ps.vshape(2, 2))
    data = pc.padded_batches(STEPS, 8)
    want = pc.token_mean_reference(ps.gpt, data)
    got = run_ranks(pc.token_weighted, 4, plan, ps.gpt, blocks_by_name(plan.spec, 4), data, 2, timeout=300)
    pc.compare(got, want)
