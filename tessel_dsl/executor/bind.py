"""Forward blocks bound to the submodules of one `nn.Module` by name.

A mapping beside the spec, ``{"E": ["embed_tokens"], "F0": ["layers.0", "layers.1"], "H": ["norm",
"lm_head"]}``, says which submodules (fully qualified names) make each forward block. A rank never
splits the model's code: it runs the model's own ``forward`` for every block, with the mapped
submodules switched by role --

* the block's own submodules run;
* submodules of other blocks are skipped: each returns a stand-in of the shape it would have
  returned (zero-stride zeros), so the glue code between submodules (masks, position ids, rotary
  tables) still runs, on values computed from the batch and buffers alone;
* on the first call into the block, the arguments that depend on the parameters of its input
  blocks are replaced by the tensors received from them, and so are the same objects wherever
  a later submodule of the block is handed them (an encoder's output given to every decoder
  layer's cross-attention);
* on the first call into each block it feeds, those same arguments are captured as the block's
  output; once every such block is reached the forward stops.

Which arguments cross a boundary, and every stand-in's shape, come from one run of the whole model
under `FakeTensorMode` (no memory, no compute; `boundary_trace.py`): an argument crosses when it
depends on a parameter (it requires grad there); everything else is recomputed by each rank. Where a block has several
input blocks (a join, as in the K-shape), each such argument must depend on exactly one of them --
found by walking its autograd graph back to the parameters -- so the model must hand the branches
to the join's first submodule as separate arguments (``self.fuse(text, image)``, not
``self.fuse(torch.cat([text, image]))``). A block feeding several blocks (a fan-out) sends each of
them the same tuple: everything any of them takes. The last block (the only one feeding none) runs
the forward to its end and applies the loss function. A block must read values from other blocks
only through the arguments of its first submodule call, each mapped submodule must be called at
most once, and a block's submodules must all be called before those of the blocks it feeds.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.utils import _pytree as pytree

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.boundary_trace import DISPATCH, Trace, hooks_off, trace_model


class _Stop(Exception):
    """Raised inside the model's forward once the running block is complete."""

    def __init__(self, value: tuple[torch.Tensor, ...]):
        super().__init__("block complete")
        self.value = value


class Binding:
    """The block -> submodule mapping over one model, with the dispatch that runs one block."""

    def __init__(self, model: nn.Module, blocks: dict[str, list[str] | tuple[str, ...]],
                 preds: dict[str, tuple[str, ...]]):
        """`preds`: every forward block's input blocks, in the spec's edge order (the order in
        which the runtime hands their outputs over), keyed in a dependency order."""
        self.model = model
        self.device = torch.device("cpu")  # where stand-ins are made: the rank's device
        # Tensor-parallel submodules per block: their hooks turn inputs and outputs into DTensors,
        # which only the block's own run (not a stand-in) may see.
        self.hooked: dict[str, list[nn.Module]] = {}
        self.preds = {b: tuple(p) for b, p in preds.items()}
        self.order = list(self.preds)
        self.succs = {b: tuple(c for c in self.order if b in self.preds[c]) for b in self.order}
        self.sink = next(b for b in self.order if not self.succs[b])
        self.blocks = {b: tuple(f) for b, f in blocks.items()}
        self.owner = {f: b for b, fs in self.blocks.items() for f in fs}
        modules = dict(model.named_modules())
        self.modules = {f: modules[f] for f in self.owner}
        self.originals: dict[str, Callable] = {}
        for fqn, mod in self.modules.items():
            self.originals[fqn] = mod.forward
            mod.forward = self._dispatcher(fqn)

    def unbind(self) -> None:
        """Give the mapped submodules their own forward back."""
        for fqn, mod in self.modules.items():
            orig = self.originals[fqn]
            if getattr(orig, "__self__", None) is mod and getattr(orig, "__func__", None) is type(mod).forward:
                vars(mod).pop("forward", None)  # it was the class's: no instance attribute at all
            else:
                mod.forward = orig

    def _dispatcher(self, fqn: str):
        original = None

        def forward(*args, **kwargs):
            nonlocal original
            original = original or self.originals[fqn]
            run = getattr(DISPATCH, "run", None)
            if run is None:
                return original(*args, **kwargs)
            return run.call(fqn, original, args, kwargs)
        return forward

    def trace(self, args: tuple, kwargs: dict, loss_fn, target, device: torch.device) -> Trace:
        """Run the whole model once on fake tensors and record what each boundary carries
        (`boundary_trace.py`)."""
        hooked = [m for ms in self.hooked.values() for m in ms]
        return trace_model(self.model, self.owner, self.preds, hooked, args, kwargs, loss_fn, target, device)

    def run_block(self, block: str, trace: Trace, received: tuple[torch.Tensor, ...], args, kwargs,
                  loss_fn=None, target=()):
        """Run `block` for one micro-batch: returns the tensors passed on (or the loss/outputs)."""
        run = _BlockRun(self, block, trace, received)
        DISPATCH.run = run
        try:
            with hooks_off([m for b, ms in self.hooked.items() if b != block for m in ms]):
                out = self.model(*args, **kwargs)
        except _Stop as stop:
            return tuple(_plain(t) for t in stop.value)
        finally:
            DISPATCH.run = None
        if block != self.sink:
            raise ExecutionError(f"block {block!r} ran to the end of the model's forward without reaching "
                                 f"all of {list(self.succs[block])}")
        if loss_fn is not None:
            return _plain(loss_fn(out, *target))
        return tuple(_plain(x) for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))


class _BlockRun:
    """Dispatch while one block runs for real (see the module docstring for the roles)."""

    def __init__(self, binding: Binding, block: str, trace: Trace, received: tuple[torch.Tensor, ...]):
        self.b, self.block, self.trace = binding, block, trace
        # `received` holds every input block's whole output tuple, in the spec's edge order; a
        # block feeding several takes along what its other consumers need too
        it = iter(received)
        self.inputs = {}
        for p in binding.preds[block]:
            for c, i in trace.sends[p]:
                value = next(it)
                if c == block:
                    self.inputs[i] = value
        self.captured: dict[tuple[str, int], torch.Tensor] = {}
        self.reached: set[str] = set()
        self.entered = False
        # the first call's replaced arguments, by identity: the same object handed to a later
        # submodule of the block (an encoder's output to every cross-attention) is replaced too
        self.swap: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def call(self, fqn, original, args, kwargs):
        there = self.b.owner[fqn]
        if there == self.block:
            if not self.entered:
                self.entered = True
                leaves = pytree.tree_leaves((args, kwargs))
                for i, t in self.inputs.items():
                    self.swap[id(leaves[i])] = (leaves[i], t)
            if self.swap:
                args, kwargs = self._swapped(args, kwargs)
            return original(*args, **kwargs)
        if there in self.b.succs[self.block] and there not in self.reached:
            self.reached.add(there)
            leaves = pytree.tree_leaves((args, kwargs))
            self.captured.update({(c, i): leaves[i] for c, i in self.trace.sends[self.block] if c == there})
            if self.reached == set(self.b.succs[self.block]):
                raise _Stop(tuple(self.captured[k] for k in self.trace.sends[self.block]))
        return _stand_in(self.trace, fqn, self.b.device)

    def _swapped(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """`args` and `kwargs` with every swapped object replaced by its received tensor. Where
        each is a tensor or a scalar (a layer called on the hidden states), they are looked at
        directly; anything else is flattened as a tree."""
        swap = self.swap
        if all(_flat(x) for x in args) and all(_flat(v) for v in kwargs.values()):
            if any(id(x) in swap for x in args):
                args = tuple(swap[id(x)][1] if id(x) in swap else x for x in args)
            if any(id(v) in swap for v in kwargs.values()):
                kwargs = {k: swap[id(v)][1] if id(v) in swap else v for k, v in kwargs.items()}
            return args, kwargs
        leaves, spec = pytree.tree_flatten((args, kwargs))
        if any(id(x) in swap for x in leaves):
            leaves = [swap[id(x)][1] if id(x) in swap else x for x in leaves]
            args, kwargs = pytree.tree_unflatten(leaves, spec)
        return args, kwargs


_SCALARS = (int, float, bool, str, type(None))


def _flat(x) -> bool:
    """Whether `x` is a leaf of every tree it can be in (a tensor or a plain scalar)."""
    return isinstance(x, torch.Tensor) or type(x) in _SCALARS


def _stand_in(trace: Trace, fqn: str, device: torch.device):
    """A value shaped like skipped submodule `fqn`'s output: zero-stride zeros, no memory. The
    zeros are made once per trace and reused while unchanged (a model that writes into one in
    place, which only a one-element stand-in allows, gets fresh zeros the next time); the
    containers around them are built anew on every call, as the model may change those. Made
    under inference mode, they carry no version to check, and are made anew every time."""
    leaves = trace.outputs[fqn]
    vals = trace.stand_ins.get(fqn)
    if vals is None or any(isinstance(v, torch.Tensor) and (v.is_inference() or v._version) for v in vals):
        vals = [torch.zeros((), dtype=m.dtype, device=device).expand(m.shape) if m is not None else o
                for m, o in zip(leaves.metas, leaves.others)]
        trace.stand_ins[fqn] = vals
    if leaves.spec.is_leaf():  # one tensor: no container to build
        return vals[0]
    return pytree.tree_unflatten(list(vals), leaves.spec)


def _plain(t):
    """A DTensor (a tensor-parallel block's output, or its loss) as the full plain tensor."""
    full = getattr(t, "full_tensor", None)
    return full() if full is not None else t


