"""Device chains: the placements whose periodic steady state `chaincycle.py` models exactly.

A *device chain* runs every block on one device, or on every device, for at least one time step.
Its forward blocks form one path of dependencies that visits each device in a single run (a device
may hold several consecutive forward blocks: the embedding and the first layers, the last layers
and the head); a block on every device (the M-shape's embedding and head split over all devices,
the NN-shape's shared embedding, a mixture-of-experts all-to-all) is not a visit, and where there
is one the path visits every device, so each device is a stage;
every other block depends on the path's first block, the one source of a micro-batch. The
backward blocks usually retrace the path (with split backward an input-gradient block per stage,
and a weight-gradient block after it on the same device), but the model needs no more than the
above. Memory is a delta per block, taken at the block's start as the validator counts it.

**Memory as holds.** On each device, each allocating block's amount is paired with blocks that
depend on it and free it (`Hold`: from the start of `alloc` to the start of `free`, `weight`
units). If every allocation is paired and every freeing block gets exactly its amount, one
micro-batch's contribution to the device at any time is the sum of the weights of the holds that
have started and not ended: at a time ``t``, a pair counts ``[alloc started] - [free started]``,
which is 0 or 1 because a freeing block starts only after the allocating one it depends on.
Pairs are made latest allocation first; a device whose amounts do not pair up this way (memory
left behind per micro-batch, a free with nothing before it to release) is not a device chain. A
block on every device takes part in every device's pairing.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.analysis import reachable
from tessel_dsl.ir import Spec
from tessel_dsl.search.lags import lag


@dataclass(frozen=True)
class Hold:
    """One micro-batch holds `weight` on `device` from the start of `alloc` to the start of `free`."""

    device: int
    alloc: str
    free: str
    weight: int


@dataclass(frozen=True)
class DeviceChain:
    """A spec read as a device chain (module text). `forward`: the forward path in order;
    `backward`: the other blocks, ordered by their forward's place on the path; `devices`: the
    devices in the order the path visits them; `edges`: the dependencies a schedule must keep
    explicitly (an edge implied by a longer path, transfer lags included, is left out), ordered
    along the path; `holds`: the memory pairs of each device."""

    forward: tuple[str, ...]
    backward: tuple[str, ...]
    devices: tuple[int, ...]
    edges: tuple[tuple[str, str], ...]
    holds: tuple[Hold, ...]

    @property
    def source(self) -> str:
        return self.forward[0]


def device_chain(spec: Spec) -> DeviceChain | None:
    """`spec` read as a device chain, or None when it is not one (module text)."""
    everyone = tuple(range(spec.devices))
    if len(spec.blocks) < 2 or any(b.time <= 0 or (b.is_multi_device and b.devices != everyone) for b in spec.blocks):
        return None
    reach = reachable(spec)
    order = spec.topo_order
    forward = [n for n in order if not spec.block(n).kind.is_backward]
    if not forward or any(b not in reach[a] for a, b in zip(forward, forward[1:])):
        return None
    source = forward[0]
    if len(reach[source]) != len(spec.blocks) - 1:
        return None  # a second source, or a block that depends on nothing before it
    devices: list[int] = []
    for name in forward:
        if spec.block(name).is_multi_device:
            continue  # on every device: a barrier on the path, not a visit
        d = spec.block(name).devices[0]
        if not devices or devices[-1] != d:
            if d in devices:
                return None  # the path comes back to a device (interleaved chunks)
            devices.append(d)
    if any(not b.is_multi_device and b.devices[0] not in devices for b in spec.blocks):
        return None
    if len(devices) != spec.devices and any(b.is_multi_device for b in spec.blocks):
        return None  # a device that runs only the blocks on every device: not a stage of the chain
    place = {n: i for i, n in enumerate(forward)}
    pos = {n: i for i, n in enumerate(order)}
    backward = sorted((n for n in order if n not in place),
                      key=lambda n: (place.get(spec.block(n).forward, len(forward)), pos[n]))
    holds = _holds(spec, devices, reach)
    if holds is None:
        return None
    return DeviceChain(tuple(forward), tuple(backward), tuple(devices), _kept_edges(spec, forward, reach), holds)


def _holds(spec: Spec, devices: list[int], reach: dict[str, frozenset[str]]) -> tuple[Hold, ...] | None:
    """Each device's allocations paired with the frees that release them, latest allocation first."""
    out = []
    for d in devices:
        open_: list[list] = []  # [allocating block, amount not yet paired], in order of start
        for name in spec.topo_order:
            b = spec.block(name)
            if d not in b.devices or b.memory == 0:
                continue
            if b.memory > 0:
                open_.append([name, b.memory])
                continue
            need = -b.memory
            for entry in reversed(open_):
                if need == 0:
                    break
                if entry[1] > 0 and name in reach[entry[0]]:
                    take = min(need, entry[1])
                    entry[1] -= take
                    need -= take
                    out.append(Hold(d, entry[0], name, take))
            if need:
                return None
        if any(entry[1] for entry in open_):
            return None
    return tuple(out)


def _kept_edges(spec: Spec, forward: list[str], reach: dict[str, frozenset[str]]) -> tuple[tuple[str, str], ...]:
    """The edges not implied by a longer path (ordered: along the path, each forward block's edge
    to the next forward block, then the edges from backward blocks into its backward blocks; then
    the rest in the spec's order)."""
    time = {b.name: b.time for b in spec.blocks}
    kept = []
    for e in spec.edges:
        # the longest time from the start of e.src to the start of each block after it
        dist = {e.src: 0}
        for name in spec.topo_order:
            got = [dist[p] + time[p] + lag(spec, p, name) for p in spec.preds[name]
                   if p in dist and (p, name) != (e.src, e.dst)]
            if got and name != e.src:
                dist[name] = max(got)
        if dist.get(e.dst, -1) < time[e.src] + lag(spec, e.src, e.dst):
            kept.append((e.src, e.dst))
    kept = list(dict.fromkeys(kept))
    place = set(forward)
    first = []
    for f in forward:
        first += [(a, b) for a, b in kept if a == f and b in place]
        first += [(a, b) for a, b in kept if a not in place and b not in place and spec.block(b).forward == f]
    return tuple(first + [e for e in kept if e not in first])
