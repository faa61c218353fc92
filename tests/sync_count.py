"""Counting the calls that make the host wait for the GPU, on the CPU.

On a CPU run nothing waits for a GPU, so the test counts the calls that would: reading a tensor's
value on the host (`item`, `tolist`, `float`/`int`/`bool`, `numpy`, `cpu`, `torch.equal`,
`nonzero`), a CUDA synchronize, a tensor built from host data on a device, and a copy to a
device that is not marked non-blocking. Reads of tensors built on the host for a host-only
exchange (`batch_agreement._host_max`, over gloo) are not counted: they never touch the GPU."""
from __future__ import annotations

import contextlib
import traceback

import torch

from . import pipeline_support as ps

READS = [(torch.Tensor, n) for n in ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy",
                                     "cpu", "nonzero")]
READS += [(torch, "equal"), (torch, "nonzero"), (torch.cuda, "synchronize"), (torch.cuda.Event, "synchronize"),
          (torch.cuda.Stream, "synchronize")]


def _names_a_device(args, kwargs) -> bool:
    if kwargs.get("device") is not None:
        return True
    return any(isinstance(a, (torch.device, str)) for a in args)


class HostWaits:
    """While active, records each such call with the first caller outside torch (file:line)."""

    def __init__(self):
        self.calls: list[str] = []
        self.paused = 0

    def _note(self, what: str) -> None:
        if self.paused:
            return
        frames = [f for f in traceback.extract_stack()[:-2] if "/torch/" not in f.filename]
        where = f"{frames[-1].filename.rsplit('/', 2)[-1]}:{frames[-1].lineno}" if frames else "?"
        self.calls.append(f"{what} at {where}")

    @contextlib.contextmanager
    def active(self):
        from tessel_dsl.executor import batch_agreement

        saved = []

        def patch(owner, name, wrap):
            saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, wrap(getattr(owner, name)))

        def counted(what):
            def wrap(fn):
                def inner(*a, **k):
                    self._note(what)
                    return fn(*a, **k)
                return inner
            return wrap

        def when(what, test):
            def wrap(fn):
                def inner(*a, **k):
                    if test(a, k):
                        self._note(what)
                    return fn(*a, **k)
                return inner
            return wrap

        def host_only(fn):
            def inner(*a, **k):
                self.paused += 1
                try:
                    return fn(*a, **k)
                finally:
                    self.paused -= 1
            return inner

        for owner, name in READS:
            patch(owner, name, counted(f"{getattr(owner, '__name__', owner)}.{name}"))
        patch(torch, "tensor", when("torch.tensor on a device", lambda a, k: k.get("device") is not None))
        patch(torch.Tensor, "to", when("blocking Tensor.to a device",
                                       lambda a, k: _names_a_device(a[1:], k) and not k.get("non_blocking")))
        patch(torch.Tensor, "cuda", when("blocking Tensor.cuda", lambda a, k: not k.get("non_blocking")))
        patch(batch_agreement, "_host_max", host_only)
        try:
            yield self
        finally:
            for owner, name, fn in reversed(saved):
                setattr(owner, name, fn)


def counted_steps(plans: dict, blocks: dict, data: dict) -> dict:
    """For each (N, weighted) plan: a Pipeline on this rank, two steps of its batches, and the
    waits counted in the second (the first also traces the batch's shape)."""
    import torch.distributed as dist

    from tessel_dsl.executor.pipeline import Pipeline
    from tests import pipeline_cases as pc

    out = {}
    for (n, weighted), plan in plans.items():
        pipe = Pipeline(plan, ps.gpt(), pc.token_loss if weighted else ps.gpt_loss, blocks=blocks[n],
                        loss_weight=pc.tokens if weighted else None)
        (x0, y0), (x1, y1) = data[n]
        first = pipe.step(x0, y0)
        waits = HostWaits()
        with waits.active():
            loss = pipe.step(x1, y1)
        out[(n, weighted)] = {"calls": waits.calls, "losses": [first, loss], "rank": dist.get_rank()}
    return out
