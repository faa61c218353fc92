"""`Pipeline.step` makes the host wait for the GPU a fixed number of times, whatever the number of
micro-batches: the losses stay on the device until the step's end, and the batch check reads
nothing from it on the way (tests/sync_count.py counts the calls that would wait, on gloo)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tests import pipeline_cases as pc  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402
from tests import sync_count as sc  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402


def test_a_step_waits_once_for_four_or_eight_micro_batches_with_or_without_loss_weight():
    ns = (4, 8)
    plans = {(n, w): plan_for(ps.vshape(2, n), "1f1b", n) for n in ns for w in (False, True)}
    blocks = {n: blocks_by_name(plans[(n, False)].spec, 4) for n in ns}
    data = {n: pc.padded_batches(2, 2 * n) for n in ns}
    got = run_ranks(sc.counted_steps, 2, plans, blocks, data, timeout=300)
    model = ps.gpt()
    for (n, weighted), _ in plans.items():
        x, y = data[n][1]
        with torch.no_grad():
            if weighted:  # the token mean of the whole batch
                want = float(pc.token_loss(model(x), y))
            else:         # the mean of the micro-batch means
                want = sum(float(ps.gpt_loss(model(a), b)) for a, b in zip(x.chunk(n), y.chunk(n))) / n
        for r in got:
            calls = r[(n, weighted)]["calls"]
            # The loss read at the end of the step, and nothing else on either rank.
            assert len(calls) == 1 and "tolist" in calls[0] and "pipeline.py" in calls[0], (n, weighted, r["rank"], calls)
            assert ps.rel(r[(n, weighted)]["losses"][1], want) <= 1e-5, (n, weighted, r[(n, weighted)]["losses"], want)
