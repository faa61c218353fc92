"""A spread embedding as `tp_plans` shards it, on two gloo ranks: the lookup and each rank's rows
of the weight gradient equal one process's, and the backward never builds a gradient of the whole
table (DTensor's RowwiseParallel does, then keeps its rows)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402

VOCAB, DIM = 11, 4  # an uneven split over 2 ranks: 6 and 5 rows


def _model():
    torch.manual_seed(0)
    return torch.nn.ModuleDict({"embed": torch.nn.Embedding(VOCAB, DIM)})


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.tensor([[0, 5, 6, 10], [3, 7, 7, 1]]), torch.randn(2, 4, DIM, generator=g)


def _rank():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module
    from torch.utils._python_dispatch import TorchDispatchMode

    from tessel_dsl.placement.tp import tp_plans

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,))
    model = _model()
    spread = SimpleNamespace(spec=SimpleNamespace(block=lambda b: SimpleNamespace(devices=(0, 1))))
    style = tp_plans(spread, {"E": ["embed"]}, model)["E"]["embed"]
    # Applied as Pipeline applies a `tp=` entry: a ParallelStyle in place, a function by replacing.
    if isinstance(style, ParallelStyle):
        parallelize_module(model, mesh, {"embed": style})
    else:
        model["embed"] = style(model["embed"], mesh)

    class Grads(TorchDispatchMode):
        shapes: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.embedding_dense_backward.default:
                self.shapes.append(tuple(out.shape))
            return out

    tokens, weights = _batch()
    y = model["embed"](tokens)
    with Grads():
        (y * weights).sum().backward()
    names = [n for n, _ in model.named_parameters()]
    return {"y": y.detach(), "grad": model["embed"].weight.grad.to_local(), "built": Grads.shapes,
            "names": names, "rank": dist.get_rank()}


def test_each_rank_builds_only_its_rows_gradient():
    got = run_ranks(_rank, 2, timeout=120)
    model = _model()
    tokens, weights = _batch()
    y = model["embed"](tokens)
    (y * weights).sum().backward()
    rows = [6, 5]
    for r in got:
        k = r["rank"]
        assert r["names"] == ["embed.weight"]  # the parameter keeps its name
        assert torch.allclose(r["y"], y.detach(), atol=1e-6)
        assert r["built"] and all(s == (rows[k], DIM) for s in r["built"]), (k, r["built"])
        lo = sum(rows[:k])
        assert torch.allclose(r["grad"], model["embed"].weight.grad[lo:lo + rows[k]], atol=1e-6)
