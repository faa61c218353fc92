"""`tessel run --replicas R` (executor.run(..., replicas=R)): R data-parallel copies of a plan on
R x D gloo ranks. Replica k trains on micro-batches k*N .. k*N+N-1 and the gradients are averaged
over replicas, so every rank's gradient equals one process stepping over all R*N micro-batches."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl import executor  # noqa: E402
from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.models import gpt, shapes  # noqa: E402
from tessel_dsl.executor.models.common import reference_step  # noqa: E402
from tests.executor_support import assemble, plan_for, rel_err  # noqa: E402


def test_two_by_two_averages_gradients_over_replicas():
    spec = shapes.mshape(2, microbatches=2)
    plan = plan_for(spec, "1f1b+", 2)
    report = executor.run(plan, "tessel_dsl.executor.models.gpt:factory", replicas=2, collect=True, grads=True,
                          timeout=60)
    ref = gpt.reference(spec)
    loss0, _ = reference_step(ref, 2)        # replica 0's micro-batches: the reported loss
    _, grads = reference_step(ref, 4)        # both replicas' micro-batches: the averaged gradient
    assert abs(report.loss - loss0) <= 1e-5 * abs(loss0)
    assert {n for n, *_ in report.grads} == set(grads)
    for name, g in grads.items():
        for part in assemble(report.grads, name, g.shape):
            mask = ~torch.isnan(part)
            assert rel_err(part[mask], g[mask]) <= 1e-5, name


def test_ranks_must_be_devices_times_replicas():
    plan = plan_for(shapes.mshape(2, microbatches=2), "1f1b+", 2)
    with pytest.raises(ExecutionError, match=r"2 devices x 2 replica\(s\) = 4 ranks, but --nproc is 2"):
        executor.run(plan, "tessel_dsl.executor.models.gpt:factory", replicas=2, nproc=2)
