"""`RankRunner.step` reads nothing back from the device for the losses it collects, and takes loss
seeds as device tensors (`Pipeline`'s `loss_weight`), on the one-device spec of
test_runtime_grads.py run in-process."""
from __future__ import annotations

import pytest
import torch

from tessel_dsl.executor.runtime import RankRunner
from tessel_dsl.lower import lower
from tessel_dsl.plan import Plan
from tessel_dsl.search.baselines import build
from tests import sync_count as sc
from tests.unit.test_runtime_grads import Model, spec


def runner_for(split: bool, n: int) -> tuple[RankRunner, Model]:
    s = spec(split, n)
    sched = build(s, "gpipe", n)
    model = Model()
    return RankRunner(Plan(s, sched, lower(s, sched)), model, 0, torch.device("cpu"), timeout=5.0), model


@pytest.mark.parametrize("n", [2, 6])
def test_collected_losses_stay_tensors_and_nothing_waits_for_them(n):
    runner, model = runner_for(True, n)
    waits = sc.HostWaits()
    with waits.active():
        result = runner.step(0, collect=True, wait=False)
    # M, a forward-only sink, is an output the plain executor hands back on the host; nothing else.
    assert [c for c in waits.calls if not c.startswith("Tensor.cpu at runtime.py")] == []
    assert sorted(result.losses) == list(range(n))
    for mb, loss in result.losses.items():
        m = model.modules
        with torch.no_grad():
            h, ints, skip = m["X"](*model.data("X", mb))
            want, _ = m["L"](m["S"](m["A"](h, ints, skip)), m["B"](h, ints, skip), h, ints, skip, *model.data("L", mb))
        assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and not loss.requires_grad
        torch.testing.assert_close(loss, want)


def test_tensor_seeds_give_the_gradients_of_number_seeds():
    # Seeds 1/N as float64 device tensors (as Pipeline's loss_weight makes them) and as numbers.
    n = 3
    runner, model = runner_for(False, n)
    runner.seeds = [torch.tensor(1.0 / n, dtype=torch.float64)] * n
    runner.step(0)
    got = model.grads()
    want = model.reference(n)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)
