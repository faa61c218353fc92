"""Profile a model's units on one example micro-batch: forward, input-gradient, weight-gradient and
unsplit backward time, the loss on the head's output, activation bytes, parameter bytes.

Each submodule is called once in a whole forward to capture the arguments it really gets (hidden
states, rotary tables, masks), then re-run alone on copies of them, timed with the executor's
profiler clock (`tessel_dsl.executor.measure`: CUDA events on a GPU, a steady clock on the CPU;
median of `repeats` after `warmup`). An argument that required a gradient in the whole forward
(it depends on earlier parameters) is what the unit differentiates for its input gradient; the
rest are recomputed by every stage. Activation bytes count, as the executor's profiler does, the
distinct storages autograd saves plus the outputs, parameters excluded.

The backward is timed as the executor runs it: the input gradient and the weight gradient by the
executor's own split (`executor.split_backward`: the weight pass starts from the gradients the
input pass kept, so I + W is one backward's work, not one and a half), and the unsplit backward
as one `torch.autograd.backward`. Parameters already hold a gradient while they are timed, as
from a pipeline's second micro-batch on, so each weight gradient includes its accumulation into
`.grad` -- for a large embedding, a table-sized read and write every micro-batch.
"""
from __future__ import annotations

import statistics
import time

import torch
from torch import nn
from torch.utils import _pytree as pytree

from tessel_dsl.errors import TesselError
from tessel_dsl.executor.measure import _Timer
from tessel_dsl.executor.split_backward import backward_input
from tessel_dsl.placement.costs import Profile, Unit
from tessel_dsl.placement.discover import discover, tied_sizes, tied_units


def _as_call(batch) -> tuple[tuple, dict]:
    if isinstance(batch, dict):
        return (), dict(batch)
    if isinstance(batch, tuple):
        return batch, {}
    return (batch,), {}


def _capture(model: nn.Module, names: list[str], args, kwargs) -> dict[str, tuple]:
    """Each named submodule's (args, kwargs) in one forward with gradients on."""
    got: dict[str, tuple] = {}
    handles = []
    for n in names:
        def hook(m, a, k, n=n):
            if n in got:
                raise TesselError(f"submodule {n!r} is called twice in one forward; a unit must be called once")
            got[n] = (a, k)
        handles.append(model.get_submodule(n).register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.enable_grad():
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return got


def _storage_bytes(tensors, skip: set[int]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


class _Alone:
    """One submodule re-run on copies of the arguments it got."""

    def __init__(self, module: nn.Module, call: tuple):
        self.module = module
        leaves, self.tree = pytree.tree_flatten(call)
        fresh = []
        self.inputs: list[torch.Tensor] = []
        for x in leaves:
            if isinstance(x, torch.Tensor):
                grad = x.requires_grad and x.is_floating_point()
                x = x.detach().clone().requires_grad_(grad)
                if grad:
                    self.inputs.append(x)
            fresh.append(x)
        self.args, self.kwargs = pytree.tree_unflatten(fresh, self.tree)
        self.params = [p for p in module.parameters() if p.requires_grad]

    def forward(self) -> list[torch.Tensor]:
        out = self.module(*self.args, **self.kwargs)
        return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]

    def activation_bytes(self) -> int:
        saved: list[torch.Tensor] = []

        def pack(t):
            saved.append(t)
            return t

        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            outs = self.forward()
        skip = {p.untyped_storage().data_ptr() for p in self.module.parameters()}
        skip |= {t.untyped_storage().data_ptr() for t in self.inputs}
        return _storage_bytes(saved + outs, skip)

    def times(self, clock, repeats: int, warmup: int) -> tuple[float, float, float, float]:
        """Median forward, input-gradient, weight-gradient and unsplit-backward time."""
        def fwd():
            with torch.enable_grad():
                self.forward()

        for _ in range(warmup):
            fwd()
        f = statistics.median(clock(fwd) for _ in range(repeats))
        kept = [p.grad for p in self.params]
        for p in self.params:  # accumulate, as every micro-batch after a step's first does
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        try:
            return (f, *self._backward_times(clock, repeats, warmup))
        finally:
            for p, g in zip(self.params, kept):
                p.grad = g
            for t in self.inputs:
                t.grad = None

    def _backward_times(self, clock, repeats: int, warmup: int) -> tuple[float, float, float]:
        ig, wg, whole = [], [], []
        for i in range(warmup + repeats):
            outs, grads = self._seeded()
            if not outs:
                return 0.0, 0.0, 0.0
            pending = []
            t_i = clock(lambda o=outs, g=grads: pending.append(backward_input(o, g, self.inputs, self.params)[1]))
            t_w = clock(lambda: pending[0].run())
            outs, grads = self._seeded()
            for t in self.inputs:  # a received input arrives without a gradient
                t.grad = None
            t_b = clock(lambda o=outs, g=grads: torch.autograd.backward(o, g))
            if i >= warmup:
                ig.append(t_i if self.inputs else 0.0)
                wg.append(t_w)
                whole.append(t_b)
        return statistics.median(ig), statistics.median(wg), statistics.median(whole)

    def _seeded(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        with torch.enable_grad():
            outs = [o for o in self.forward() if o.is_floating_point() and o.requires_grad]
        return outs, [torch.randn_like(o) for o in outs]

    def loss_times(self, clock, repeats: int, warmup: int) -> tuple[float, float]:
        """A cross entropy over the unit's output taken as logits (the last dimension the
        classes), forward and backward: what the block holding the head runs besides the head."""
        with torch.no_grad():
            outs = [o for o in self.forward() if o.is_floating_point()]
        if not outs or outs[0].dim() < 2 or outs[0].shape[-1] < 2:
            return 0.0, 0.0
        logits = outs[0].detach().requires_grad_(True)
        gen = torch.Generator(device="cpu").manual_seed(0)
        labels = torch.randint(logits.shape[-1], logits.shape[:-1], generator=gen).to(logits.device)

        def loss():
            return nn.functional.cross_entropy(logits.float().flatten(0, -2), labels.flatten())

        for _ in range(warmup):
            torch.autograd.grad(loss(), logits)
        f = statistics.median(clock(loss) for _ in range(repeats))
        b = []
        for _ in range(repeats):
            with torch.enable_grad():
                value = loss()
            b.append(clock(lambda v=value: torch.autograd.grad(v, logits)))
        return f, statistics.median(b)


def profile_model(model: nn.Module, example_batch, *, device: str | torch.device | None = None,
                  repeats: int = 5, warmup: int = 2,
                  units: list[list[str]] | None = None, clock=None) -> Profile:
    """Profile `model`'s units on `example_batch`, one micro-batch of what `model.forward` takes (a
    tensor, a tuple of arguments or a dict of keyword arguments). The model is moved to `device`
    (default: the GPU when there is one, else the CPU); the same code runs on either.

    `units` names the units' submodules yourself (each a list of names, in forward order); by
    default they are found from the module tree (`tessel_dsl.placement.discover`).

    `clock(fn)` runs `fn` once and returns what it cost (default: its seconds on the device); a
    clock that counts work instead (FLOPs, operators) gives a profile in that measure.
    """
    t0 = time.perf_counter()
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    model.to(dev)
    batch = pytree.tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, example_batch)
    args, kwargs = _as_call(batch)
    config = getattr(model, "config", None)
    cache = getattr(config, "use_cache", False)
    if cache:
        # a key/value cache object in the arguments would chain every re-run's graph to the last
        config.use_cache = False
    try:
        return _profile(model, dev, batch, args, kwargs, units, repeats, warmup, t0, clock)
    finally:
        if cache:
            config.use_cache = True


def _profile(model, dev, batch, args, kwargs, units, repeats, warmup, t0, clock) -> Profile:
    if units is None:
        found = discover(model, args, kwargs)
    else:
        found = [(f"unit{i}", "layer", tuple(u)) for i, u in enumerate(units)]
    names = [f for _, _, mods in found for f in mods]
    calls = _capture(model, names, args, kwargs)
    missing = [n for n in names if n not in calls]
    if missing:
        raise TesselError(f"the forward never calls {missing}")
    clock = clock or _Timer(dev).once
    out: list[Unit] = []
    for name, kind, mods in found:
        fw = ig = wg = whole = lf = lb = 0.0
        act = inp = pbytes = params = 0
        for k, f in enumerate(mods):
            run = _Alone(model.get_submodule(f), calls[f])
            a, b, c, d = run.times(clock, repeats, warmup)
            fw, ig, wg, whole = fw + a, ig + b, wg + c, whole + d
            if kind == "head" and k == len(mods) - 1:
                lf, lb = run.loss_times(clock, repeats, warmup)
            act += run.activation_bytes()
            if k == 0:
                inp = sum(t.numel() * t.element_size() for t in run.inputs)
            ps = list(run.module.parameters())
            pbytes += sum(p.numel() * p.element_size() for p in ps)
            params += sum(p.numel() for p in ps)
        out.append(Unit(name, mods, fw, ig, wg, act, inp, pbytes, params, kind, whole, lf, lb))
    shape = next((tuple(t.shape) for t in pytree.tree_leaves(batch) if isinstance(t, torch.Tensor)), ())
    tied = tied_units(model, found)
    sizes = tied_sizes(model, found, tied)
    label = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return Profile(tuple(out), label, shape, time.perf_counter() - t0, tuple(tied), tuple(sizes))
