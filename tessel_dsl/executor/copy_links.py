"""Transfers on the GPUs' copy engines (``TESSEL_TRANSPORT=copy``).

NCCL moves a point-to-point message with thread blocks on both GPUs, and both sides must have
posted before the kernels move a byte: a send or receive posted early spins on SMs that the
compute beside it needs, one posted when due puts the whole transfer on the consumer's path
(executor/comm.py measured both). Here the sender writes the message straight into a slot of
the receiver's memory with a copy-engine memcpy as soon as its producer has finished, then
raises a flag there; the receiver waits for the flag (a one-thread kernel) right before the
consumer, copies the slot out and hands the slot back with a flag of its own. Nothing spins on
SMs while compute runs, and the transfer overlaps whatever either GPU computes meanwhile.

Memory: every rank holds one buffer, the same size everywhere (PyTorch's symmetric memory,
`torch.distributed._symmetric_memory`, maps each peer's buffer into this process over NVLink).
Receiver r's buffer has, per sending peer s, `slots` slots of the largest message s sends it.
Message q of link s -> r goes to slot q mod slots. Its flags live in the signal pads that come
with the buffer: "full" on channel q mod slots of r's pad, "free" on channel S + q mod slots of
s's pad, S being the largest slot count of any link, so a pair of ranks talking both ways never
shares a flag. A flag is set only when clear and cleared only when set (PyTorch's put_signal and
wait_signal), so each is a one-place mailbox.

Why it cannot deadlock: each link's sends have a stream of their own, so a send waiting for a
free slot holds up only later messages of its own link, which the receiver takes in order after
the one it is about to free. The receiver's program may wait for a link's messages out of their
sending order; the slot count covers the largest such reordering in its program (`slots_needed`),
so the message it waits for never needs a slot that a message it will only take later still holds.

On the CPU (gloo tests) a shared file stands in for the buffers, host threads for the streams
and host loops for the flag kernels (`copy_host.HostMemory`), so the same layout and protocol run there.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tessel_dsl.executor.comm import _short

TRANSPORTS = ("auto", "nccl", "copy")
AUTO_MAX_BYTES = 2 * 2**30  # ``auto`` takes NCCL where the slots would hold more than this per GPU
ALIGN = 256  # bytes: every tensor of a message starts at a multiple, as the allocator would place it
MIN_SLOTS = 4  # per link; `TESSEL_COPY_SLOTS` sets another


def transport_mode() -> str:
    """``TESSEL_TRANSPORT``: ``copy`` (this module), ``nccl`` (the process group's send and receive;
    gloo on the CPU) or ``auto``, the default: ``copy`` where every rank runs a GPU of one host and
    each GPU can map the memory of every GPU it talks to, else ``nccl`` (`open_copy_links`)."""
    mode = os.environ.get("TESSEL_TRANSPORT", "") or TRANSPORTS[0]
    if mode not in TRANSPORTS:
        raise ValueError(f"TESSEL_TRANSPORT must be one of {', '.join(TRANSPORTS)}, not {mode!r}")
    return mode


def min_slots() -> int:
    raw = os.environ.get("TESSEL_COPY_SLOTS", "") or str(MIN_SLOTS)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"TESSEL_COPY_SLOTS must be a whole number of slots, at least 1, not {raw!r}")
    return int(raw)


def layout(sizes) -> tuple[list[int], int]:
    """Byte offset of each of a message's tensors (sizes in bytes) in its slot, and the slot bytes."""
    offsets, at = [], 0
    for n in sizes:
        offsets.append(at)
        at += -(-n // ALIGN) * ALIGN
    return offsets, at


def _nbytes(meta) -> int:
    n = 1
    for d in meta.shape:
        n *= d
    return n * torch.empty((), dtype=meta.dtype).element_size()


def slots_needed(order: list[int], waits: list[int]) -> int:
    """Slots a link needs so that the receiver never waits for a message whose slot is still held.

    `order` is the link's messages in sending order (the receiver's RECVs), `waits` the order in
    which the receiver's program waits for them. Waiting for message q while message e (e < q) is
    the oldest not yet taken needs q and e in different slots: q - e < slots."""
    pos = {m: i for i, m in enumerate(order)}
    taken: set[int] = set()
    oldest, need = 0, 1
    for m in waits:
        q = pos[m]
        while oldest in taken:
            oldest += 1
        need = max(need, q - oldest + 1)
        taken.add(q)
    return need


@dataclass(frozen=True)
class Region:
    """Where the messages of one link land in its receiver's buffer."""

    base: int
    slots: int
    slot_bytes: int

    def at(self, q: int) -> int:
        return self.base + (q % self.slots) * self.slot_bytes


def incoming(runner) -> dict[int, tuple[int, int]]:
    """(slots, slot bytes) of every link into this rank, read from its program."""
    from tessel_dsl.program import Op

    order: dict[int, list] = {}
    waits: dict[int, list] = {}
    peer_of: dict[tuple[str, int], int] = {}
    size: dict[int, int] = {}
    for a in runner.program.actions:
        if a.op is Op.RECV:
            peer = a.peers[0]
            peer_of[(a.block, a.mb)] = peer
            order.setdefault(peer, []).append((a.block, a.mb))
            _, n = layout([_nbytes(m) for m in runner._message_meta(a.block)])
            size[peer] = max(size.get(peer, 0), n)
        elif a.op is Op.WAIT and (a.block, a.mb) in peer_of:
            waits.setdefault(peer_of[(a.block, a.mb)], []).append((a.block, a.mb))
    floor = min_slots()
    return {p: (max(floor, slots_needed(order[p], waits.get(p, order[p]))), max(size[p], ALIGN)) for p in sorted(order)}


class CopyLinks:
    """The sending and receiving ends of every link of one rank (module docstring)."""

    def __init__(self, mem, regions: dict[int, dict[int, Region]], device: int, ranks: tuple[int, ...],
                 channels: int):
        # regions[g][s]: in global rank g's buffer, the region of plan device s's messages.
        self.mem, self.regions, self.device, self.ranks, self.S = mem, regions, device, ranks, channels
        self.sent: dict[int, int] = {}  # per receiving device: messages sent so far (all steps)
        self.noted: dict[int, int] = {}  # per sending device: messages noted so far
        self.pending: dict[tuple[str, int], tuple[int, int, tuple]] = {}

    def _g(self, device: int) -> int:
        return self.ranks[device]

    def send(self, tensors: tuple[torch.Tensor, ...], peer: int) -> None:
        """Put the message in the peer's next slot once its producer is done; returns at once."""
        g = self._g(peer)
        region = self.regions[g][self.device]
        q = self.sent.get(peer, 0)
        self.sent[peer] = q + 1
        sizes = [t.numel() * t.element_size() for t in tensors]
        offsets, total = layout(sizes)
        if total > region.slot_bytes:
            raise ValueError(f"a message of {total} bytes to device {peer} does not fit its link's {region.slot_bytes}-byte "
                             f"slots, sized on the first batch: a batch with larger messages needs TESSEL_TRANSPORT=nccl")
        slot, free = q % region.slots, q >= region.slots
        at = region.at(q)
        mem = self.mem

        def put() -> None:
            if free:
                mem.wait(g, self.S + slot)
            dst = mem.region(g)
            for t, off, n in zip(tensors, offsets, sizes):
                if n:
                    dst[at + off:at + off + n].copy_(t.reshape(-1).view(torch.uint8))
            mem.put(g, slot)

        mem.submit(peer, put, tensors)

    def note(self, block: str, mb: int, metas: tuple, peer: int) -> None:
        """The plan's RECV: the message's place in its link's order."""
        q = self.noted.get(peer, 0)
        self.noted[peer] = q + 1
        self.pending[(block, mb)] = (peer, q, metas)

    def receive(self, block: str, mb: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """The plan's WAIT: the message, copied out of its slot, on the current stream."""
        peer, q, metas = self.pending.pop((block, mb))
        g_me = self._g(self.device)
        region = self.regions[g_me][peer]
        g = self._g(peer)
        slot = q % region.slots
        sizes = [_nbytes(m) for m in metas]
        offsets, total = layout(sizes)
        if total > region.slot_bytes:
            raise ValueError(f"{block}:{mb} from device {peer} has {total} bytes, more than its link's {region.slot_bytes}-byte "
                             f"slots, sized on the first batch: a batch with larger messages needs TESSEL_TRANSPORT=nccl")
        self.mem.wait(g, slot)
        src = self.mem.region(g_me)
        at = region.at(q)
        out = []
        for m, off, n in zip(metas, offsets, sizes):
            t = torch.empty(m.shape, dtype=m.dtype, device=device)
            if n:
                t.reshape(-1).view(torch.uint8).copy_(src[at + off:at + off + n])
            out.append(t)
        self.mem.put(g, self.S + slot)
        return tuple(out)

    def flush(self) -> None:
        """Every message submitted so far has reached its slot (from the current stream's view)."""
        self.mem.flush()

    def left(self) -> list[tuple[str, int]]:
        return sorted(self.pending)


def open_copy_links(runner, group, ranks: tuple[int, ...], mode: str) -> CopyLinks | None:
    """Collective over `group` (every rank of the run, every replica): decide whether the copy
    links apply (`mode` ``auto``; ``copy`` insists, ``nccl`` declines at once), agree on the
    buffer layout and map the buffers. `ranks` maps this replica's plan devices to global ranks.
    None: the run keeps the process group's send and receive."""
    if mode == "nccl" or (mode == "auto" and runner.device.type != "cuda"):
        return None
    mine = incoming(runner)
    world = dist.get_world_size(group)
    got: list = [None] * world
    dist.all_gather_object(got, (dist.get_rank(), runner.rank, mine, _where(runner.device)), group=group)
    if not any(links for _g, _d, links, _w in got):
        return None  # nothing crosses a GPU boundary (one device, or only multi-device blocks)
    why = _agree(_cannot_map(got, runner, ranks), group, world)
    regions: dict[int, dict[int, Region]] = {}
    totals, channels = [], 1
    for g, _dev, links, _ in got:
        at, regions[g] = 0, {}
        for s, (slots, nbytes) in sorted(links.items()):
            regions[g][s] = Region(at, slots, nbytes)
            at += slots * nbytes
            channels = max(channels, slots)
        totals.append(at)
    nbytes = max(max(totals), ALIGN)
    if why is None and mode == "auto" and nbytes > AUTO_MAX_BYTES:
        why = f"the slots would take {nbytes / 2**30:.1f} GiB per GPU"
    if why is not None:
        return _declined(why, mode)
    if runner.device.type == "cuda":
        buf, why = _allocate(nbytes, runner.device, 2 * channels * world)
        why = _agree(why, group, world)  # every rank rendezvouses, or none
        if why is not None:
            return _declined(why, mode)
        mem = CudaMemory(buf, group, runner.device, runner.comm.timeout)
    else:
        from tessel_dsl.executor.copy_host import HostMemory

        mem = HostMemory(nbytes, group, 2 * channels * world, runner.comm.timeout)
    return CopyLinks(mem, regions, runner.rank, ranks, channels)


def _agree(why: str | None, group, world: int) -> str | None:
    """The first rank's reason against the copy links, the same on every rank (None: none has one)."""
    verdicts: list = [None] * world
    dist.all_gather_object(verdicts, why, group=group)
    return next((w for w in verdicts if w), None)


def _declined(why: str, mode: str) -> None:
    """`auto` keeps NCCL; `copy`, asked for by name, is an error."""
    if mode == "copy":
        raise RuntimeError(f"TESSEL_TRANSPORT=copy cannot run here: {why}")
    return None


def _where(device: torch.device) -> tuple[str, int | None]:
    import socket

    return socket.gethostname(), device.index if device.type == "cuda" else None


def _cannot_map(got: list, runner, ranks: tuple[int, ...]) -> str | None:
    """Why this rank cannot map the buffers of the GPUs it talks to (None: it can)."""
    from tessel_dsl.program import Op

    where = {g: w for g, _d, _l, w in got}
    _, index = where[dist.get_rank()]
    if len({h for h, _ in where.values()}) > 1:
        return "the run spans several hosts"
    if index is None:  # the CPU: asked for by name (auto stops earlier), a shared file stands in
        return None
    peers = {p for a in runner.program.actions if a.op in (Op.SEND, Op.RECV) for p in a.peers}
    for p in sorted(peers):
        other = where[ranks[p]][1]
        if other != index and not torch.cuda.can_device_access_peer(index, other):
            return f"GPU {index} cannot map the memory of GPU {other} (no peer access)"
    return None


def _allocate(nbytes: int, device: torch.device, flags: int) -> tuple[torch.Tensor | None, str | None]:
    """This rank's symmetric buffer, or why there is none (a build or driver without symmetric
    memory): local, so that the ranks can agree before the collective rendezvous."""
    try:
        import torch.distributed._symmetric_memory as symm

        if symm.get_signal_pad_size() < 4 * flags:
            symm.set_signal_pad_size(4 * flags)
        return symm.empty(nbytes, dtype=torch.uint8, device=device), None
    except Exception as e:
        return None, f"no symmetric memory here ({_short(e)})"


class CudaMemory:
    """Symmetric memory over NVLink: each peer's buffer mapped here, flags in its signal pad."""

    def __init__(self, buf: torch.Tensor, group, device: torch.device, timeout: float):
        import torch.distributed._symmetric_memory as symm

        self.buf = buf
        name = (group or dist.group.WORLD).group_name
        try:
            self.hdl = symm.rendezvous(self.buf, name)
        except Exception as e:  # no P2P between these GPUs, or no symmetric memory in this build
            raise RuntimeError(f"TESSEL_TRANSPORT=copy needs GPUs that map each other's memory (NVLink "
                               f"peers): {_short(e)}") from None
        self.device, self.ms = device, max(1, int(timeout * 1000))
        self.views: dict[int, torch.Tensor] = {}
        self.streams: dict[int, torch.cuda.Stream] = {}

    def region(self, g: int) -> torch.Tensor:
        v = self.views.get(g)
        if v is None:
            v = self.views[g] = self.hdl.get_buffer(g, (self.buf.numel(),), torch.uint8)
        return v

    def put(self, g: int, channel: int) -> None:
        self.hdl.put_signal(g, channel, self.ms)

    def wait(self, g: int, channel: int) -> None:
        self.hdl.wait_signal(g, channel, self.ms)

    def submit(self, peer: int, fn, tensors) -> None:
        cur = torch.cuda.current_stream(self.device)
        stream = self.streams.get(peer)
        if stream is None:
            stream = self.streams[peer] = torch.cuda.Stream(self.device)
        stream.wait_stream(cur)
        with torch.cuda.stream(stream):
            fn()
        for t in tensors:
            t.record_stream(stream)

    def flush(self) -> None:
        cur = torch.cuda.current_stream(self.device)
        for s in self.streams.values():
            cur.wait_stream(s)
