"""What crosses each block boundary of a bound model (`bind.py`), found by one fake run.

The whole model runs once under `FakeTensorMode` (no memory, no compute) with every mapped
submodule's call recorded: each block's first submodule call (its entry), every submodule's
return value, and the order in which the forward reaches the blocks. An argument of a block's
entry crosses the boundary when it depends on a parameter (it requires grad there); where a
block has several input blocks, each such argument's autograd graph is walked back to the
parameters to find the one block it comes from. The `Trace` this gives is what a block run
needs: which leaves to replace by received tensors, which to send, and every skipped
submodule's shape for its stand-in.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.model_api import TensorMeta

# The run (this module's recorder, or a block run in `bind.py`) the mapped submodules' forwards
# dispatch to; None outside one, where they run as they are.
DISPATCH = threading.local()


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
    # block run would cost a kernel launch each, every micro-batch (`bind._stand_in`)
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


def trace_model(model: nn.Module, owner: dict[str, str], preds: dict[str, tuple[str, ...]],
                hooked: list[nn.Module], args: tuple, kwargs: dict, loss_fn, target,
                device: torch.device) -> Trace:
    """Run the whole model once on fake tensors and record what each boundary carries.

    `owner`: the block of every mapped submodule (by fully qualified name); `preds`: every
    forward block's input blocks in the spec's edge order, keyed in a dependency order;
    `hooked`: the tensor-parallel submodules, whose hooks are set aside for the run."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call

    order = list(preds)
    succs = {b: tuple(c for c in order if b in preds[c]) for b in order}
    rec = _Recorder(owner)
    with hooks_off(hooked), FakeTensorMode(allow_non_fake_inputs=False) as mode:
        def fake(t, grad=False):
            if not isinstance(t, torch.Tensor):
                return t
            x = torch.empty(t.shape, dtype=t.dtype, device=device)
            return x.requires_grad_(grad and t.is_floating_point())

        state = {n: fake(p, True) for n, p in model.named_parameters(remove_duplicate=False)}
        state.update({n: fake(b) for n, b in model.named_buffers(remove_duplicate=False)})
        fargs, fkwargs, ftarget = pytree.tree_map(fake, (args, kwargs, target))
        DISPATCH.run = rec
        try:
            with torch.enable_grad():
                out = functional_call(model, state, fargs, fkwargs, strict=False, tie_weights=False)
                loss = loss_fn(out, *ftarget) if loss_fn is not None else None
        except ExecutionError:
            raise
        except Exception as e:  # the user's forward or loss, run on fake tensors
            raise ExecutionError(f"the model's forward (or loss_fn) failed on a micro-batch of this shape, "
                                 f"run on fake tensors to find what each block passes on: "
                                 f"{type(e).__name__}: {e}") from e
        finally:
            DISPATCH.run = None
        trace = Trace(rec.outputs, rec.entries, rec.order, _flatten(out))
        if loss is not None:
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ExecutionError("loss_fn must return a one-element tensor")
            trace.loss = TensorMeta(tuple(loss.shape), loss.dtype)
        _check_order(order, preds, rec)
        sources = {b: _sources(b, preds[b], owner, trace, rec, state) for b in order}
    del mode
    for b in order:
        trace.sends[b] = [(c, i) for c in succs[b] for i, src in zip(trace.passed(c), sources[c]) if src == b]
    return trace


def _check_order(order: list[str], preds: dict[str, tuple[str, ...]], rec: _Recorder) -> None:
    """Every block reached, each after its input blocks, and all its submodules called before
    any of a block it feeds (a block stops at its consumers' first calls)."""
    missing = [b for b in order if b not in rec.entries]
    if missing:
        raise ExecutionError(f"the model's forward never calls the submodules of block(s) {missing}")
    at = {b: i for i, b in enumerate(rec.order)}
    for b in order:
        for p in preds[b]:
            if at[p] > at[b]:
                raise ExecutionError(f"the model's forward reaches block {b!r} before its input block {p!r} "
                                     f"(order {rec.order}), but the spec feeds {p!r} into {b!r}")
            if rec.last[p] > rec.first[b]:
                raise ExecutionError(f"the model's forward calls a submodule of block {p!r} after entering "
                                     f"block {b!r}, which it feeds: {p!r} must be complete when {b!r} begins")


def _sources(block: str, preds: tuple[str, ...], owner: dict[str, str], trace: Trace, rec: _Recorder,
             state: dict) -> list[str]:
    """The input block each passed argument of `block`'s entry call comes from (`preds`: its
    input blocks)."""
    passed = trace.passed(block)
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
    by_param = {id(p): _owner_of(owner, n) for n, p in state.items() if p.requires_grad}
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


def _owner_of(owner: dict[str, str], name: str) -> str | None:
    """The block whose mapped submodule holds parameter `name`, if any."""
    for f, b in owner.items():
        if name == f or name.startswith(f + "."):
            return b
    return None


class _Recorder:
    """Dispatch during the fake run: everything runs; record outputs and block entries."""

    def __init__(self, owner: dict[str, str]):
        self.owner = owner
        self.outputs: dict[str, _Leaves] = {}
        self.entries: dict[str, _Leaves] = {}
        self.raw: dict[str, list] = {}       # each block's entry leaves, the fake tensors themselves
        self.order: list[str] = []
        self.first: dict[str, int] = {}      # index of each block's first and last submodule call
        self.last: dict[str, int] = {}
        self.calls = 0

    def call(self, fqn, original, args, kwargs):
        block = self.owner[fqn]
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


class hooks_off:
    """Tensor-parallel hooks (which turn inputs and outputs into DTensors) set aside while a run
    goes: the fake run sees the model as one process would, and a block run (`bind.py`) leaves
    them only on its own submodules, as only its own run may see DTensors."""

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
