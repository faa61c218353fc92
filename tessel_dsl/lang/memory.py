"""The `memory C [reserve R] on DEVICES` lines of a spec, resolved per device once `devices` is known."""
from __future__ import annotations

from tessel_dsl.errors import Location
from tessel_dsl.lang import syntax as A
from tessel_dsl.lang.blocks import _devices
from tessel_dsl.lang.context import EvalContext
from tessel_dsl.lang.values import Skip


def resolve_device_memory(ev: EvalContext, lines: list[A.Memory]) -> dict[int, Location]:
    """Resolve the `memory ... on DEVICES` lines into per-device capacity and reserve: a
    device named by two lines, or outside 0..D-1, is an error naming both places."""
    o = ev.out
    first: dict[int, Location] = {}
    for s in lines:
        try:
            cap = ev._capacity(s.train)
            infer = ev._capacity(s.infer) if s.infer is not None else None
            reserve = ev._capacity(s.reserve, "reserved memory") if s.reserve is not None else None
            devs: list[int] = []
            for d in s.on:
                devs.extend(_devices(ev, d, ev.params))
        except Skip:
            continue
        # A negative device is wrong whatever the count; above it, only once the count is known.
        outside = {d for d in devs if d < 0 or (o.devices is not None and d >= o.devices)}
        here: set[int] = set()
        twice = []  # named by an earlier line, or twice on this one
        for d in devs:
            if d in outside:
                continue
            if d in first or d in here:
                twice.append(d)
            else:
                here.add(d)
        # One error of each kind per line, however many devices its ranges name.
        if outside:
            more = f" (and {len(outside) - 1} more)" if len(outside) > 1 else ""
            within = f"0..{o.devices - 1}" if o.devices is not None else "the devices, numbered from 0"
            ev.error("device-range", f"`memory ... on {min(outside)}`: device {min(outside)} is outside "
                     f"{within}{more}", s.loc)
        if twice:
            more = f" (and {len(twice) - 1} more)" if len(twice) > 1 else ""
            ev.error("duplicate-declaration", f"the memory of device {twice[0]} is given twice "
                     f"(first at {first.get(twice[0], s.loc)}){more}", s.loc)
        for d in here:
            first[d] = s.loc
            o.device_memory[d] = (cap, infer)
            if reserve is not None:
                o.device_reserve[d] = reserve
    return first
