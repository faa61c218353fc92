"""Block declarations and dependency chains, evaluated into IR `Block`s and `Edge`s.

Split out of `evaluate` so that each module stays about one thing; both functions take the
evaluator (an `EvalContext`, for its values and diagnostics) and the variable scope of the statement.
"""
from __future__ import annotations

from tessel_dsl.errors import Location
from tessel_dsl.ir import DTYPE_BYTES, Block, Edge, Kind, Tensor
from tessel_dsl.lang import syntax as A
from tessel_dsl.lang.context import EvalContext
from tessel_dsl.lang.options import BY_WORDS, OPTIONS
from tessel_dsl.lang.values import MAX_BLOCKS, ForwardOptions


def build_block(ev: EvalContext, s: A.BlockDecl, env) -> None:
    """Evaluate one `forward|backward|... NAME [of FWD] [on DEVICES] time T memory M ...`."""
    if len(ev.blocks) >= MAX_BLOCKS:
        ev.stop("too-large", f"more than {MAX_BLOCKS} blocks", s.loc)
    kind = Kind(s.kind)
    name = ev.render(s.name, env)
    opts: dict[str, tuple[object, Location]] = {}
    for key, value, loc in s.options:
        if key in opts:
            raise ev.error("duplicate-option", f"`{key}` is given twice for block {name}", loc)
        if BY_WORDS[key].forward_only and kind is not Kind.FORWARD:
            raise ev.error("bad-option", f"`{key}` only applies to forward blocks", loc)
        opts[key] = (value, loc)
    if s.of is not None and not kind.is_backward:
        raise ev.error("bad-option", f"`of` names the forward block of a backward block; {name} is "
                       f"{kind.value}", s.of.loc)
    forward = ev.render(s.of, env) if s.of is not None else None
    devices = _devices(ev, s.devices, env) if s.devices is not None else None
    if devices is None and not kind.is_backward:
        raise ev.error("missing-devices", f"block {name} needs `on DEVICES` (a device, a range "
                       "`0..3`, a list `[0, 2]` or `all`)", s.loc)
    for option in OPTIONS:
        if option.required and option.words not in opts:
            raise ev.error(option.missing_code, f"block {name} needs "
                           f"`{option.words} {option.metavar}`", s.loc)
    fields = {}
    fo = ForwardOptions()
    for option in OPTIONS:
        if option.words in opts:
            value = _read(ev, option.value, opts[option.words][0], env)
        elif option.on == "forward":
            continue  # ForwardOptions has its own defaults
        else:
            value = option.default
        if option.on == "block":
            fields[option.field] = value
        else:
            setattr(fo, option.field, value)
    if kind is Kind.FORWARD:
        ev.forward_opts[name] = fo
    block = Block(name, kind, devices or (), forward=forward, span=s.name.loc, **fields)
    if kind.is_backward and (forward is None or devices is None):
        ev.pending_of.append((len(ev.blocks), s))  # resolved once every block is known
    ev.blocks.append(block)


def _read(ev: EvalContext, how: str, value, env):
    """An option's value, read the way its row in `options.OPTIONS` says."""
    if how == "time":
        return int(ev.time_units(value, env))
    if how == "memory":
        return ev.memory_units(value, env)
    if how == "grad time":
        return ev.grad_time(value, env)
    if how == "name":
        return ev.render(value, env)
    if how == "integer":
        if value.unit is not None:
            raise ev.error("unknown-unit", f"`{value.unit}`: this option takes a plain whole number", value.loc)
        return ev.integer(value.expr, env)
    raise ValueError(f"no reader for option values of kind {how!r}")


def _devices(ev: EvalContext, d: A.DevSet, env) -> tuple[int, ...]:
    if isinstance(d, A.DevAll):
        if ev.out.devices is None:
            raise ev.error("missing-declaration", "`on all` needs `devices N` first", d.loc)
        return tuple(range(ev.out.devices))
    if isinstance(d, A.DevList):
        return tuple(ev.integer(e, env) for e in d.items)
    lo = ev.integer(d.lo, env)
    if d.hi is None:
        return (lo,)
    hi = ev.integer(d.hi, env)
    if hi - lo > 4096:
        raise ev.error("device-range", f"device range {lo}..{hi} is far too large", d.loc)
    return tuple(range(lo, hi + 1))


def expand_edges(ev: EvalContext, s: A.Edges, env) -> None:
    """`a -> {b, c} -> chain(F{i} for i in 0..3) -> d : [dims] dtype` into IR edges."""
    tensor = None
    if s.tensor is not None:
        dims = tuple(ev.integer(e, env) for e in s.tensor.dims)
        if any(x < 1 for x in dims):
            raise ev.error("bad-value", f"tensor dimensions must be positive, got {list(dims)}", s.tensor.loc)
        if s.tensor.dtype not in DTYPE_BYTES:
            raise ev.error("unknown-dtype", f"unknown dtype `{s.tensor.dtype}` (known: "
                           f"{', '.join(sorted(DTYPE_BYTES))})", s.tensor.loc)
        tensor = Tensor(dims, s.tensor.dtype)
    # Each node becomes (entry names, exit names); a sequence also adds its inner chain.
    pieces: list[tuple[list[tuple[str, Location]], list[tuple[str, Location]]]] = []
    for node in s.nodes:
        if isinstance(node, A.NodeName):
            item = [(ev.render(node.name, env), node.name.loc)]
            pieces.append((item, item))
        elif isinstance(node, A.NodeGroup):
            items = [(ev.render(n, env), n.loc) for n in node.names]
            pieces.append((items, items))
        else:
            lo, hi = ev.integer(node.range.lo, env), ev.integer(node.range.hi, env)
            if hi < lo:
                raise ev.error("empty-group", f"`{node.var} in {lo}..{hi}` is empty", node.loc)
            if hi - lo > 100_000:
                raise ev.error("too-large", f"`{node.var} in {lo}..{hi}` is far too large", node.loc)
            # Each name is rendered, and a `chain(...)` also adds an edge per name.
            ev.spend((hi - lo + 1) * (2 if node.sequence else 1), f"`{node.var} in {lo}..{hi}`", node.loc)
            items = [(ev.render(node.name, {node.var: i, **env}), node.name.loc) for i in range(lo, hi + 1)]
            if node.sequence:
                for (a, _), (b, loc) in zip(items, items[1:]):
                    _add(ev, a, b, tensor, loc)
                pieces.append((items[:1], items[-1:]))
            else:
                pieces.append((items, items))
    for (_, exits), (entries, _) in zip(pieces, pieces[1:]):
        ev.spend(len(exits) * len(entries), "these dependencies", s.loc)
        for a, _ in exits:
            for b, loc in entries:
                _add(ev, a, b, tensor, loc)


def _add(ev: EvalContext, a: str, b: str, tensor: Tensor | None, loc: Location) -> None:
    ev.edges.append(Edge(a, b, tensor, loc))
