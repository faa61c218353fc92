"""What `parser.build_spec` does with the evaluator's output besides building the `Spec`:
written-out backward blocks linked to their forward blocks, the per-device capacity and reserve
for the IR, and whole-spec diagnostics placed at the line they are about."""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl import units as U
from tessel_dsl.errors import Diagnostic, Location
from tessel_dsl.ir import Block, Mode


def placed(d: Diagnostic, ev, file: str) -> Diagnostic:
    """A whole-spec diagnostic without a place (from `check`, which also takes specs built in
    Python) at the line it is about: the `placement` line, or the top of the file."""
    if d.location is not None:
        return d
    where = ev._seen_header.get("devices") if d.code == "bad-devices" else ev._seen_header.get("placement")
    return replace(d, location=where or Location(file, 1, 1))


def device_memory(ev, out, mode: Mode, memory: int, diags: list[Diagnostic]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-device capacity and reserve for the IR (empty tuples when every device has the
    default and nothing is reserved), and an error for a device whose reserve exceeds its capacity."""
    n = out.devices or 0
    caps, res = [memory] * n, [out.reserve] * n
    for d, (train, infer) in out.device_memory.items():
        if 0 <= d < n:
            caps[d] = infer if mode is Mode.INFER and infer is not None else train
    for d, r in out.device_reserve.items():
        if 0 <= d < n:
            res[d] = r
    show = ev._mem_show()
    for d in range(n):
        if res[d] > caps[d]:
            loc = ev._memory_locs.get(d, ev._seen_header.get("memory"))
            diags.append(Diagnostic("reserve-too-large", f"device {d} reserves "
                                    f"{U.show_memory(res[d], *show)} of its {U.show_memory(caps[d], *show)} "
                                    f"(capacity left {U.show_memory(caps[d] - res[d], *show)}, below zero)", loc))
    device_memory = tuple(caps) if any(c != memory for c in caps) else ()
    reserved = tuple(res) if any(res) else ()
    return device_memory, reserved


def link_backwards(ev, blocks: list[Block], diags: list[Diagnostic]) -> list[Block]:
    """Fill `forward` (from the name when `of` is omitted) and devices (the forward's) of written-out
    backward blocks."""
    by_name = {b.name: b for b in blocks}
    out = list(blocks)
    for index, decl in ev.pending_of:
        b = out[index]
        fwd = b.forward
        if fwd is None:
            guesses = (["F" + b.name[1:]] if b.name.startswith("B") and len(b.name) > 1 else []) \
                + ([b.name[:-1]] if b.name.endswith("B") and len(b.name) > 1 else [])
            fwd = next((g for g in guesses if g in by_name), None)
            if fwd is None:
                diags.append(Diagnostic("missing-forward", f"{b.kind.value} block {b.name} does not say "
                                        f"which forward block it differentiates (write `of NAME`)", b.span))
                continue
        devices = b.devices
        if decl.devices is None:
            f = by_name.get(fwd)
            devices = f.devices if f is not None else ()
        out[index] = replace(b, devices=devices, forward=fwd)
    return out
