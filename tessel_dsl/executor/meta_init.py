"""A rank's part of a model built on the meta device: allocated on the rank's device and filled.

The user's ``init(fqn, module)`` fills what it loads, usually ``module.load_state_dict(...)``. A
state dict leaves out non-persistent buffers (a rotary embedding's ``inv_freq``, BERT's
``position_ids``): these are not state but values the module's constructor computes from its
configuration, so they are computed again here the same way, from a CPU copy of just the module
that owns them, built from its ``config`` (or the nearest enclosing module's, as Hugging Face
models hand theirs down). Anything else `init` leaves as allocated (garbage) is
refused before the first step, by name: whether `init` wrote a tensor is seen from its version
counter, which every in-place write (``copy_``, ``load_state_dict``, ``nn.init``) bumps.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from tessel_dsl.errors import ExecutionError


def on_meta(mod: nn.Module) -> bool:
    return any(t.is_meta for t in list(mod.parameters()) + list(mod.buffers()))


def materialise(model: nn.Module, mapped: dict[str, nn.Module], local: set[str], device: torch.device,
                init: Callable[[str, nn.Module], None] | None) -> None:
    """Local mapped submodules onto `device` (allocated and `init`-ed when on meta), the other
    mapped ones onto meta; modules outside every block that hold buffers onto `device` too (the
    glue code between blocks runs on every rank and may read them). A tensor that local and other
    modules share (tied weights) stays one tensor, on `device`."""
    from tessel_dsl.executor.ties import retie

    slots: dict[int, list[tuple[nn.Module, str]]] = {}
    for mod in {id(m): m for m in mapped.values()}.values():
        for _, owner, attr, t, _ in _tensors(mod, recurse=True):
            slots.setdefault(id(t), []).append((owner, attr))
    done: set[int] = set()
    for fqn in [f for f in mapped if f in local]:
        mod = mapped[fqn]
        if id(mod) in done:
            continue
        done.add(id(mod))
        if not on_meta(mod):
            mod.to(device)
            continue
        if init is None:
            raise ExecutionError(f"{fqn!r} is on the meta device: pass init(fqn, module) to fill it")
        mod.to_empty(device=device)
        _fill(model, fqn, mod, init, recurse=True)
    inside = {id(m) for f in local for m in mapped[f].modules()}
    shared = retie(slots, inside)
    for fqn, mod in mapped.items():
        if fqn not in local and id(mod) not in done:
            _to_meta(mod, shared)
    for fqn, mod in model.named_modules():
        if any(fqn == m or fqn.startswith(m + ".") for m in mapped):
            continue
        own = list(mod.named_buffers(recurse=False))
        if not own:
            continue
        if any(b.is_meta for _, b in own):
            if init is None:
                raise ExecutionError(f"{fqn!r} holds buffers on the meta device: pass init(fqn, module)")
            for n, b in own:
                mod._buffers[n] = torch.empty_like(b, device=device)
            _fill(model, fqn, mod, init, recurse=False)
        else:
            for n, b in own:
                mod._buffers[n] = b.to(device)


def _to_meta(mod: nn.Module, keep: set[int]) -> None:
    """`mod`'s tensors onto meta, but those in `keep` (shared with local modules): they stay."""
    for _, owner, attr, t, _ in list(_tensors(mod, recurse=True)):
        if id(t) in keep or t.is_meta:
            continue
        if attr in owner._parameters:
            owner._parameters[attr] = nn.Parameter(torch.empty_like(t, device="meta"), requires_grad=t.requires_grad)
        else:
            owner._buffers[attr] = torch.empty_like(t, device="meta")


def _tensors(mod: nn.Module, recurse: bool):
    """(owner name, owner, attribute, tensor, is a non-persistent buffer) for every parameter
    and buffer of `mod` (its own only, unless `recurse`)."""
    owners = mod.named_modules() if recurse else [("", mod)]
    for name, owner in owners:
        for attr, t in owner._parameters.items():
            if t is not None:
                yield name, owner, attr, t, False
        for attr, t in owner._buffers.items():
            if t is not None:
                yield name, owner, attr, t, attr in owner._non_persistent_buffers_set


def _fill(model: nn.Module, fqn: str, mod: nn.Module, init, recurse: bool) -> None:
    """Call `init` on freshly allocated `mod`, then rebuild the non-persistent buffers it left
    unwritten and refuse anything else it left so."""
    before = [(name, owner, attr, t, t._version, derived) for name, owner, attr, t, derived in _tensors(mod, recurse)]
    with torch.no_grad():
        init(fqn, mod)
    unset = [(name, owner, attr, derived) for name, owner, attr, t, v, derived in before
             if getattr(owner, attr, None) is t and t._version == v]
    if not unset:
        return
    def full(name: str, attr: str) -> str:
        return ".".join(p for p in (fqn, name, attr) if p)

    left = [full(name, attr) for name, _, attr, derived in unset if not derived]
    if left:
        raise ExecutionError(f"init({fqn!r}, module) left {_few(left)} unset (still as allocated): "
                             f"load or compute every parameter and persistent buffer there")
    by_owner: dict[str, tuple[nn.Module, list[str]]] = {}
    for name, owner, attr, _ in unset:
        by_owner.setdefault(name, (owner, []))[1].append(attr)
    for name, (owner, attrs) in by_owner.items():
        copy, why = _rebuild(owner, _config(model, ".".join(p for p in (fqn, name) if p)))
        if copy is None:
            raise ExecutionError(
                f"non-persistent buffers {_few([full(name, a) for a in attrs])} are on the meta device and "
                f"init({fqn!r}, module) did not fill them (a state dict leaves them out), and they cannot be "
                f"rebuilt: {why}; set them in init (e.g. module.{attrs[0]}.copy_(...))")
        with torch.no_grad():
            for a in attrs:
                src, dst = getattr(copy, a, None), getattr(owner, a)
                if not isinstance(src, torch.Tensor) or src.shape != dst.shape:
                    raise ExecutionError(f"buffer {full(name, a)}: a copy of {type(owner).__name__} built from its "
                                         f"config has no buffer of shape {tuple(dst.shape)} there; set it in init")
                dst.copy_(src)


def _config(model: nn.Module, name: str):
    """The ``config`` of the module called `name` or of the nearest module enclosing it."""
    parts = name.split(".") if name else []
    for k in range(len(parts), -1, -1):
        cfg = getattr(model.get_submodule(".".join(parts[:k])), "config", None)
        if cfg is not None:
            return cfg
    return None


def _rebuild(owner: nn.Module, cfg) -> tuple[nn.Module | None, str]:
    """A CPU instance of `owner`'s class built from `cfg` (as Hugging Face modules are), without
    disturbing the random number generator."""
    if cfg is None:
        return None, f"neither {type(owner).__name__} nor a module enclosing it has a `config` to build a copy from"
    try:
        with torch.random.fork_rng(devices=[]), torch.device("cpu"):
            return type(owner)(cfg), ""
    except Exception as e:  # the module's own constructor
        return None, f"{type(owner).__name__}(config) failed ({type(e).__name__}: {e})"


def _few(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
