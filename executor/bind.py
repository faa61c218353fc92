"""Forward blocks bound to the submodules of one `nn.Module` by name.

A mapping beside the spec, ``{"E": ["embed_tokens"], "F0": ["layers.0", "layers.1"], "H": ["norm",
"lm_head"]}``, says which submodules (fully qualified names) make each forward block. A rank never
splits the model's code: it runs the model's own ``forward`` for every block, with the mapped
submodules switched by role --

* the block's own submodules run;
* submodules of blocks upstream of it are skipped: each returns a stand-in of the shape it would
  have returned (zero-stride zeros), so the glue code between submodules (masks, position ids,
  rotary tables) still runs, on values computed from the batch and buffers alone;
* on the first call into the block, the arguments that depend on upstream parameters are replaced
  by the tensors received from the previous block;
* on the first call into a downstream block, those same arguments are captured as the block's
  output and the forward stops.

Which arguments cross a boundary, and every stand-in's shape, come from one run of the whole model
under `FakeTensorMode` (no memory, no compute): an argument crosses when it depends on a parameter
(it requires grad there); everything else is recomputed by each rank. The last block runs the
forward to its end and applies the loss function. A block must read upstream values only through
the arguments of its first submodule call, and each mapped submodule must be called at most once.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.utils import _pytree as pytree

from tessel_dsl.errors import ExecutionError

from tessel_dsl.executor.model_api import TensorMeta

_ACTIVE = threading.local()


class _Stop(Exception):
    """Raised inside the model's forward once the running block is complete."""

    def __init__(self, value: tuple[torch.Tensor, ...]):
        super().__init__("block complete")
        self.value = value


@dataclass
class _Leaves:
    """A flattened call or return value: its tree structure and, per leaf, a TensorMeta (tensors)."""

    spec: Any
    metas: list[TensorMeta | None]
    grad: list[bool] = field(default_factory=list)
    others: list[Any] = field(default_factory=list)  # the non-tensor leaves, as they were


@dataclass
class Trace:
    """What one fake run of the whole model found, for one micro-batch shape."""

    outputs: dict[str, _Leaves]        # every mapped submodule's return value
    entries: dict[str, _Leaves]        # each block's first submodule call (args, kwargs)
    order: list[str]                   # blocks in the order the forward reaches them
    result: _Leaves | None = None      # the model's return value
    loss: TensorMeta | None = None

    def passed(self, block: str) -> list[int]:
        """Leaf positions of `block`'s entry call that carry upstream activations."""
        e = self.entries[block]
        return [i for i, (m, g) in enumerate(zip(e.metas, e.grad)) if m is not None and g]

    def entry_metas(self, block: str) -> tuple[TensorMeta, ...]:
        e = self.entries[block]
        return tuple(e.metas[i] for i in self.passed(block))


def _flatten(value) -> _Leaves:
    leaves, spec = pytree.tree_flatten(value)
    metas = [TensorMeta(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in leaves]
    grad = [bool(isinstance(x, torch.Tensor) and x.requires_grad) for x in leaves]
    return _Leaves(spec, metas, grad, [None if isinstance(x, torch.Tensor) else x for x in leaves])


class Binding:
    """The block -> submodule mapping over one model, with the dispatch that runs one block."""

    def __init__(self, model: nn.Module, blocks: dict[str, list[str] | tuple[str, ...]], chain: list[str]):
        self.model = model
        self.device = torch.device("cpu")  # where stand-ins are made: the rank's device
        # Tensor-parallel submodules per block: their hooks turn inputs and outputs into DTensors,
        # which only the block's own run (not a stand-in) may see.
        self.hooked: dict[str, list[nn.Module]] = {}
        self.chain = list(chain)
        self.blocks = {b: tuple(f) for b, f in blocks.items()}
        self.owner = {f: b for b, fs in self.blocks.items() for f in fs}
        self.index = {b: i for i, b in enumerate(self.chain)}
        modules = dict(model.named_modules())
        self.modules = {f: modules[f] for f in self.owner}
        self.originals: dict[str, Callable] = {}
        for fqn, mod in self.modules.items():
            self.originals[fqn] = mod.forward
            mod.forward = self._dispatcher(fqn)

    def _dispatcher(self, fqn: str):
        original = None

        def forward(*args, **kwargs):
            nonlocal original
            original = original or self.originals[fqn]
            run = getattr(_ACTIVE, "run", None)
            if run is None:
                return original(*args, **kwargs)
            return run.call(fqn, original, args, kwargs)
        return forward

    def trace(self, args: tuple, kwargs: dict, loss_fn, target, device: torch.device) -> Trace:
        """Run the whole model once on fake tensors and record what each boundary carries."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.func import functional_call

        rec = _Recorder(self)
        with _hooks_off([m for ms in self.hooked.values() for m in ms]), FakeTensorMode(allow_non_fake_inputs=False) as mode:
            def fake(t, grad=False):
                if not isinstance(t, torch.Tensor):
                    return t
                x = torch.empty(t.shape, dtype=t.dtype, device=device)
                return x.requires_grad_(grad and t.is_floating_point())

            state = {n: fake(p, True) for n, p in self.model.named_parameters(remove_duplicate=False)}
            state.update({n: fake(b) for n, b in self.model.named_buffers(remove_duplicate=False)})
            fargs, fkwargs, ftarget = pytree.tree_map(fake, (args, kwargs, target))
            _ACTIVE.run = rec
            try:
                with torch.enable_grad():
                    out = functional_call(self.model, state, fargs, fkwargs, strict=False, tie_weights=False)
                    loss = loss_fn(out, *ftarget) if loss_fn is not None else None
            except ExecutionError:
                raise
            except Exception as e:  # the user's forward or loss, run on fake tensors
                raise ExecutionError(f"the model's forward (or loss_fn) failed on a micro-batch of this shape, "
                                     f"run on fake tensors to find what each block passes on: "
                                     f"{type(e).__name__}: {e}") from e
            finally:
                _ACTIVE.run = None
            trace = Trace(rec.outputs, rec.entries, rec.order, _flatten(out))
            if loss is not None:
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise ExecutionError("loss_fn must return a one-element tensor")
                trace.loss = TensorMeta(tuple(loss.shape), loss.dtype)
        del mode
        missing = [b for b in self.chain if b not in trace.entries]
        if missing:
            raise ExecutionError(f"the model's forward never calls the submodules of block(s) {missing}")
        if trace.order != self.chain:
            raise ExecutionError(f"the model's forward reaches the blocks in the order {trace.order}, "
                                 f"but the spec chains them as {self.chain}")
        for b in self.chain[1:]:
            if not trace.passed(b):
                raise ExecutionError(f"block {b!r}: no argument of its first submodule call depends on "
                                     f"an earlier block, so nothing would be passed to it")
        return trace

    def run_block(self, block: str, trace: Trace, received: tuple[torch.Tensor, ...], args, kwargs,
                  loss_fn=None, target=()):
        """Run `block` for one micro-batch: returns the tensors passed on (or the loss/outputs)."""
        run = _BlockRun(self, block, trace, received)
        _ACTIVE.run = run
        try:
            with _hooks_off([m for b, ms in self.hooked.items() if b != block for m in ms]):
                out = self.model(*args, **kwargs)
        except _Stop as stop:
            return tuple(_plain(t) for t in stop.value)
        finally:
            _ACTIVE.run = None
        if self.index[block] != len(self.chain) - 1:
            raise ExecutionError(f"block {block!r} ran to the end of the model's forward")
        if loss_fn is not None:
            return _plain(loss_fn(out, *target))
        return tuple(_plain(x) for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))


class _Recorder:
    """Dispatch during the fake run: everything runs; record outputs and block entries."""

    def __init__(self, binding: Binding):
        self.b = binding
        self.outputs: dict[str, _Leaves] = {}
        self.entries: dict[str, _Leaves] = {}
        self.order: list[str] = []

    def call(self, fqn, original, args, kwargs):
        block = self.b.owner[fqn]
        if fqn in self.outputs:
            raise ExecutionError(f"submodule {fqn!r} is called twice in one forward; a bound block "
                                 f"must call each of its submodules once (use a model factory instead)")
        if block not in self.entries:
            self.entries[block] = _flatten((args, kwargs))
            self.order.append(block)
        out = original(*args, **kwargs)
        self.outputs[fqn] = _flatten(out)
        return out


class _BlockRun:
    """Dispatch while one block runs for real (see the module docstring for the roles)."""

    def __init__(self, binding: Binding, block: str, trace: Trace, received: tuple[torch.Tensor, ...]):
        self.b, self.block, self.trace, self.received = binding, block, trace, received
        self.me = binding.index[block]
        self.entered = False

    def call(self, fqn, original, args, kwargs):
        there = self.b.index[self.b.owner[fqn]]
        if there < self.me:
            return _stand_in(self.trace.outputs[fqn], self.b.device)
        if there > self.me:
            leaves = pytree.tree_leaves((args, kwargs))
            raise _Stop(tuple(leaves[i] for i in self.trace.passed(self.b.owner[fqn])))
        if not self.entered:
            self.entered = True
            if self.me > 0:
                leaves, spec = pytree.tree_flatten((args, kwargs))
                for i, t in zip(self.trace.passed(self.block), self.received):
                    leaves[i] = t
                args, kwargs = pytree.tree_unflatten(leaves, spec)
        return original(*args, **kwargs)


def _stand_in(leaves: _Leaves, device: torch.device):
    """A value shaped like a skipped submodule's output: zero-stride zeros, no memory."""
    vals = [torch.zeros((), dtype=m.dtype, device=device).expand(m.shape) if m is not None else o
            for m, o in zip(leaves.metas, leaves.others)]
    return pytree.tree_unflatten(vals, leaves.spec)


def _plain(t):
    """A DTensor (a tensor-parallel block's output, or its loss) as the full plain tensor."""
    full = getattr(t, "full_tensor", None)
    return full() if full is not None else t


class _hooks_off:
    """The fake run sees the model as one process would: tensor-parallel hooks (which turn
    inputs and outputs into DTensors) are set aside while it runs."""

    NAMES = ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
             "_forward_hooks_with_kwargs", "_forward_hooks_always_called")

    def __init__(self, modules: list[nn.Module]):
        self.modules, self.saved = modules, []

    def __enter__(self):
        from collections import OrderedDict

        for m in self.modules:
            self.saved.append({n: getattr(m, n) for n in self.NAMES})
            for n in self.NAMES:
                setattr(m, n, OrderedDict())

    def __exit__(self, *exc):
        for m, hooks in zip(self.modules, self.saved):
            for n, h in hooks.items():
                setattr(m, n, h)
        self.saved.clear()
