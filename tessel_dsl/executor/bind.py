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
under `FakeTensorMode` (no memory, no compute): an argument crosses when it depends on a parameter
(it requires grad there); everything else is recomputed by each rank. Where a block has several
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

    # for each block, where its outputs go: (consumer block, leaf position in the consumer's
    # entry call), consumers in the spec's order -- the tuple it sends every consumer
    sends: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    # each skipped submodule's stand-in leaves, made once: a fill on the device per stand-in and
    # block run would cost a kernel launch each, every micro-batch (`_stand_in`)
    stand_ins: dict[str, list] = field(default_factory=dict, repr=False)

    def passed(self, block: str) -> list[int]:
        """Leaf positions of `block`'s entry call that carry activations of other blocks."""
        e = self.entries[block]
        return [i for i, (m, g) in enumerate(zip(e.metas, e.grad)) if m is not None and g]

    def output_metas(self, block: str) -> tuple[TensorMeta, ...]:
        """What `block` sends its consumers (for a block that feeds some)."""
        return tuple(self.entries[c].metas[i] for c, i in self.sends[block])


def _flatten(value) -> _Leaves:
    leaves, spec = pytree.tree_flatten(value)
    metas = [TensorMeta(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in leaves]
    grad = [bool(isinstance(x, torch.Tensor) and x.requires_grad) for x in leaves]
    return _Leaves(spec, metas, grad, [None if isinstance(x, torch.Tensor) else x for x in leaves])


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
            self._check_order(rec)
            sources = {b: self._sources(b, trace, rec, state) for b in self.order}
        del mode
        for b in self.order:
            trace.sends[b] = [(c, i) for c in self.succs[b] for i, src in zip(trace.passed(c), sources[c]) if src == b]
        return trace

    def _check_order(self, rec: "_Recorder") -> None:
        """Every block reached, each after its input blocks, and all its submodules called before
        any of a block it feeds (a block stops at its consumers' first calls)."""
        missing = [b for b in self.order if b not in rec.entries]
        if missing:
            raise ExecutionError(f"the model's forward never calls the submodules of block(s) {missing}")
        at = {b: i for i, b in enumerate(rec.order)}
        for b in self.order:
            for p in self.preds[b]:
                if at[p] > at[b]:
                    raise ExecutionError(f"the model's forward reaches block {b!r} before its input block {p!r} "
                                         f"(order {rec.order}), but the spec feeds {p!r} into {b!r}")
                if rec.last[p] > rec.first[b]:
                    raise ExecutionError(f"the model's forward calls a submodule of block {p!r} after entering "
                                         f"block {b!r}, which it feeds: {p!r} must be complete when {b!r} begins")

    def _sources(self, block: str, trace: Trace, rec: "_Recorder", state: dict) -> list[str]:
        """The input block each passed argument of `block`'s entry call comes from."""
        passed, preds = trace.passed(block), self.preds[block]
        if not preds:
            if passed:
                raise ExecutionError(f"block {block!r}: its first submodule call takes values computed from other "
                                     f"blocks' parameters, but the spec gives it no input block")
            return []
        if not passed:
            raise ExecutionError(f"block {block!r}: no argument of its first submodule call depends on "
                                 f"an earlier block, so nothing would be passed to it")
        if len(preds) == 1:
            return [preds[0]] * len(passed)
        by_param = {id(p): self._owner_of(n) for n, p in state.items() if p.requires_grad}
        out = []
        for i in passed:
            deps = _depends_on(rec.raw[block][i], by_param) & set(preds)
            if len(deps) != 1:
                what = f"the outputs of {sorted(deps)}" if deps else f"none of its input blocks {list(preds)}"
                raise ExecutionError(
                    f"block {block!r} takes inputs from {list(preds)}, but argument {i} of its first submodule "
                    f"call depends on {what}: a join must receive each input block's output as a separate "
                    f"argument of its first submodule call (or use a model factory)")
            out.append(deps.pop())
        missing = [p for p in preds if p not in out]
        if missing:
            raise ExecutionError(f"block {block!r}: no argument of its first submodule call depends on its input "
                                 f"block(s) {missing}, so nothing would be passed from them")
        return out

    def _owner_of(self, name: str) -> str | None:
        for f, b in self.owner.items():
            if name == f or name.startswith(f + "."):
                return b
        return None

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
        if block != self.sink:
            raise ExecutionError(f"block {block!r} ran to the end of the model's forward without reaching "
                                 f"all of {list(self.succs[block])}")
        if loss_fn is not None:
            return _plain(loss_fn(out, *target))
        return tuple(_plain(x) for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))


class _Recorder:
    """Dispatch during the fake run: everything runs; record outputs and block entries."""

    def __init__(self, binding: Binding):
        self.b = binding
        self.outputs: dict[str, _Leaves] = {}
        self.entries: dict[str, _Leaves] = {}
        self.raw: dict[str, list] = {}       # each block's entry leaves, the fake tensors themselves
        self.order: list[str] = []
        self.first: dict[str, int] = {}      # index of each block's first and last submodule call
        self.last: dict[str, int] = {}
        self.calls = 0

    def call(self, fqn, original, args, kwargs):
        block = self.b.owner[fqn]
        if fqn in self.outputs:
            raise ExecutionError(f"submodule {fqn!r} is called twice in one forward; a bound block "
                                 f"must call each of its submodules once (use a model factory instead)")
        if block not in self.entries:
            self.entries[block] = _flatten((args, kwargs))
            self.raw[block] = pytree.tree_leaves((args, kwargs))
            self.order.append(block)
            self.first[block] = self.calls
        self.last[block] = self.calls
        self.calls += 1
        out = original(*args, **kwargs)
        self.outputs[fqn] = _flatten(out)
        return out


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


def _depends_on(t, by_param: dict[int, str | None]) -> set[str]:
    """The blocks whose parameters tensor `t` (of the fake run) was computed from: its autograd
    graph walked back to the parameters' gradient accumulators."""
    out: set[str] = set()
    if not isinstance(t, torch.Tensor):
        return out
    if t.grad_fn is None:
        owner = by_param.get(id(t))
        return {owner} if owner else out
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if var is not None and by_param.get(id(var)):
            out.add(by_param[id(var)])
        stack.extend(f for f, _ in fn.next_functions)
    return out


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
