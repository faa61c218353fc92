"""The units of a model a stage boundary may fall between, found from its module tree.

The stack of layers is the `nn.ModuleList` holding the most parameters (``model.layers`` of
Llama and Qwen, ``transformer.h`` of GPT-2). Every other submodule with parameters that sits
beside the stack on its path from the root (``model.embed_tokens``, ``model.norm``, ``lm_head``;
GPT-2's ``transformer.wte``, ``wpe``, ``ln_f``) is placed by when the forward first calls it:
those called before the first layer make one embedding unit, each one called after the last
layer is a unit of its own (the last of them the head).
"""
from __future__ import annotations

from torch import nn

from tessel_dsl.errors import TesselError


def _params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def find_stack(model: nn.Module) -> str:
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) and n]
    if not lists:
        raise TesselError("the model has no stack of layers (no nn.ModuleList of submodules); "
                          "name its units yourself with units=[[...], ...]")
    return max(lists, key=lambda nm: _params(nm[1]))[0]


def _beside(model: nn.Module, stack: str) -> list[str]:
    """Submodules with parameters hanging off the path from the root to the stack."""
    parts = stack.split(".")
    out = []
    for depth in range(len(parts)):
        parent = ".".join(parts[:depth])
        mod = model.get_submodule(parent) if parent else model
        for name, child in mod.named_children():
            fqn = f"{parent}.{name}" if parent else name
            if name != parts[depth] and _params(child):
                out.append(fqn)
    return out


def call_order(model: nn.Module, names: list[str], args: tuple, kwargs: dict) -> list[str]:
    """`names` in the order one forward first calls them (a meta-free real run, no grad)."""
    import torch

    seen: list[str] = []
    handles = []
    for n in names:
        handles.append(model.get_submodule(n).register_forward_pre_hook(
            lambda m, a, n=n: seen.append(n) if n not in seen else None))
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return seen


def discover(model: nn.Module, args: tuple, kwargs: dict) -> list[tuple[str, str, tuple[str, ...]]]:
    """[(unit name, kind, submodule names)] in forward order."""
    stack = find_stack(model)
    layers = [f"{stack}.{i}" for i in range(len(model.get_submodule(stack)))]
    others = _beside(model, stack)
    order = call_order(model, others + [layers[0], layers[-1]], args, kwargs)
    missing = [n for n in others + layers if n not in order and n not in (layers[1:-1])]
    if missing:
        raise TesselError(f"the forward never calls {missing}, which hold parameters; every parameter "
                          f"must belong to a unit (name the units yourself with units=[[...], ...])")
    first, last = order.index(layers[0]), order.index(layers[-1])
    before = [n for n in order[:first] if n in others]
    after = [n for n in order[last + 1:] if n in others]
    between = [n for n in order[first + 1:last] if n in others]
    if between:
        raise TesselError(f"{between} are called between the layers of {stack!r}; name the units yourself "
                          f"with units=[[...], ...]")
    units: list[tuple[str, str, tuple[str, ...]]] = []
    if before:
        units.append(("embed", "embedding", tuple(before)))
    units += [(f"layer{i}", "layer", (f,)) for i, f in enumerate(layers)]
    for k, f in enumerate(after):
        kind = "head" if k == len(after) - 1 else "norm"
        units.append((f.rsplit(".", 1)[-1], kind, (f,)))
    return units


def tied_units(model: nn.Module, units: list[tuple[str, str, tuple[str, ...]]]) -> list[tuple[str, str]]:
    """Pairs of units that hold one parameter between them (tied embedding and head)."""
    owner: dict[int, str] = {}
    pairs: list[tuple[str, str]] = []
    for name, _, mods in units:
        for f in mods:
            for p in model.get_submodule(f).parameters():
                other = owner.setdefault(id(p), name)
                if other != name and (other, name) not in pairs:
                    pairs.append((other, name))
    return pairs


def tied_sizes(model: nn.Module, units: list[tuple[str, str, tuple[str, ...]]],
               pairs: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """For each pair of `tied_units`: the (parameters, bytes) its two units hold between them."""
    held: dict[str, dict[int, nn.Parameter]] = {}
    for name, _, mods in units:
        held[name] = {id(p): p for f in mods for p in model.get_submodule(f).parameters()}
    out = []
    for a, b in pairs:
        both = [held[a][k] for k in held[a].keys() & held[b].keys()]
        out.append((sum(p.numel() for p in both), sum(p.numel() * p.element_size() for p in both)))
    return out
