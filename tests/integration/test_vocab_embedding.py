"""The shipped models' vocabulary-sharded embedding, on two gloo ranks: the lookup equals the full
table's, and each rank's table gradient has only its own rows and equals that slice of the
single-process gradient (DTensor's RowwiseParallel builds the whole table's gradient instead)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

VOCAB, DIM = 11, 4  # 11 rows over 2 ranks: an uneven split, 6 and 5


def _reference():
    torch.manual_seed(0)
    table = torch.nn.Embedding(VOCAB, DIM)
    tokens = torch.tensor([[0, 5, 6, 10], [3, 7, 7, 1]])
    weights = torch.randn(2, 4, DIM)
    return table, tokens, weights


def _worker() -> dict:
    """One rank (forked by `run_ranks`, which sets torchrun's environment)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from tessel_dsl.executor.models.common import vocab_parallel_embedding

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,))
    table, tokens, weights = _reference()
    sharded = vocab_parallel_embedding(table, mesh)
    y = sharded(tokens)
    (y * weights).sum().backward()
    grad = sharded.weight.grad
    return {"y": y.detach(), "grad": grad.to_local().detach().clone(), "lo": sharded.lo}


def test_lookup_is_whole_and_gradient_holds_only_local_rows():
    from tessel_dsl.executor.local_ranks import run_ranks

    got = run_ranks(_worker, 2, timeout=120)
    table, tokens, weights = _reference()
    y = table(tokens)
    (y * weights).sum().backward()
    for r, part in enumerate(got):
        assert torch.allclose(part["y"], y.detach(), atol=1e-6), f"rank {r}: lookup differs from the full table's"
    assert [p["grad"].shape[0] for p in got] == [6, 5]  # local rows only, torch.chunk's uneven split
    assert [p["lo"] for p in got] == [0, 6]
    whole = torch.cat([p["grad"] for p in got])
    assert torch.allclose(whole, table.weight.grad, atol=1e-6)
