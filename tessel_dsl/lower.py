"""Lowering a schedule to per-device programs (the paper's §4.4, runtime instantiation).

The schedule says when each block runs; it says nothing about moving tensors between devices. This
pass decides every transfer once, so the simulator and the executor run exactly the same thing:

1. Every compute and every transfer gets a key on one global sequence. A block's compute sits at
   its start time; a transfer sits at the *end* time of the block producing the tensor, ahead of
   the computes starting at that instant. Ties are broken by the block's declaration order and the
   micro-batch, so the sequence is a total order that keeps each device's schedule order. (In
   non-blocking mode the receive is posted earlier, when the producer starts, so it never waits
   behind the receiver's own long block; per device pair the order is still the senders'.)
2. Each device's program is the projection of that sequence onto the device. Because every send
   and its receive occupy the same position of one sequence, every pair of devices posts its sends
   and receives in the same order, which is what rules out a mismatched rendezvous (deadlock).

A tensor is identified by (producer block, micro-batch). A device needs it when it runs a
consumer and did not run the producer itself; it is sent once per receiving device. The output of
a multi-device block is replicated on all its devices, and its lowest-numbered device sends it.

In non-blocking mode SEND and RECV are only posted at their position, and a ``WAIT`` right before
the first block that consumes the tensor makes the device wait for arrival (the runtime waits for
its own sends at the end of the iteration). In blocking mode SEND and RECV complete in place.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.errors import ScheduleError
from tessel_dsl.ir import Spec
from tessel_dsl.program import Action, Op, Program
from tessel_dsl.schedule import Schedule, Slot

__all__ = ["lower", "programs_text"]


@dataclass(frozen=True)
class Transfer:
    """One tensor moving from `src` to each device in `dsts`; the producer runs [start, ready)."""

    block: str
    mb: int
    src: int
    dsts: tuple[int, ...]
    ready: int
    start: int


def tensor_bytes(spec: Spec, producer: str, dst_device: int | None = None) -> int:
    """Bytes moved when `producer`'s output travels to `dst_device` (any consumer when None).

    A declared edge tensor wins (the largest one, when several consumers on the device declare
    one); otherwise the producer's memory delta stands in for its activation size.
    """
    declared = declared_bytes(spec, producer, dst_device)
    if declared:
        return max(1, max(declared))
    return max(1, abs(spec.block(producer).memory) * spec.units.memory_bytes)


def declared_bytes(spec: Spec, producer: str, dst_device: int | None = None) -> list[int]:
    """The sizes of the tensors declared on `producer`'s edges to `dst_device` (any when None)."""
    return [e.tensor.nbytes for e in spec.edges
            if e.src == producer and e.tensor is not None
            and (dst_device is None or dst_device in spec.block(e.dst).devices)]


def transfers(spec: Spec, schedule: Schedule) -> list[Transfer]:
    """Every transfer the schedule needs, in global-sequence order."""
    start = {(s.block, s.mb): s.start for s in schedule.slots}
    order = {b.name: i for i, b in enumerate(spec.blocks)}
    out: list[tuple[tuple, Transfer]] = []
    for s in schedule.slots:
        block = spec.block(s.block)
        holders = set(block.devices)
        end = s.start + block.time
        need: dict[int, None] = {}
        for consumer in spec.succs[s.block]:
            cstart = start.get((consumer, s.mb))
            if cstart is None:
                raise ScheduleError(
                    f"schedule has {s.block}:{s.mb} but not its consumer {consumer}:{s.mb}"
                )
            if cstart < end:
                raise ScheduleError(
                    f"{consumer}:{s.mb} starts at t={cstart} before its input {s.block}:{s.mb} "
                    f"ends at t={end}\n{schedule.grid(spec, (spec.block(consumer).devices[0], cstart))}"
                )
            for d in spec.block(consumer).devices:
                if d not in holders:
                    need[d] = None
        if need:
            t = Transfer(s.block, s.mb, min(holders), tuple(sorted(need)), end, s.start)
            out.append(((end, s.start, order[s.block], s.mb), t))
    out.sort(key=lambda kv: kv[0])
    return [t for _, t in out]


def _check_complete(spec: Spec, schedule: Schedule) -> None:
    seen: set[tuple[str, int]] = set()
    for s in schedule.slots:
        if s.block not in spec.by_name:
            raise ScheduleError(f"schedule names block {s.block!r}, which the spec does not declare")
        if (s.block, s.mb) in seen:
            raise ScheduleError(f"{s.block}:{s.mb} is scheduled twice")
        seen.add((s.block, s.mb))


def lower(spec: Spec, schedule: Schedule, blocking: bool = False) -> tuple[Program, ...]:
    """One `Program` per device for `schedule`, with every send/recv pair placed consistently.

    Raises ScheduleError when a consumer starts before its input is produced or a block of a
    scheduled micro-batch is missing (run `validate` first for the full diagnosis).
    """
    _check_complete(spec, schedule)
    order = {b.name: i for i, b in enumerate(spec.blocks)}
    # Global sequence keys: comm at (ready, 0, ...) precedes computes at (start, 1, ...).
    events: list[tuple[tuple, str, object]] = []
    for s in schedule.slots:
        events.append(((s.start, 1, s.start, order[s.block], s.mb), "compute", s))
    for i, t in enumerate(transfers(spec, schedule)):
        events.append(((t.ready, 0, i), "send", t))
        # A non-blocking receive is posted when the producer starts, so the transfer can overlap
        # whatever the receiver computes meanwhile; per channel the order stays that of the
        # sends (the producers sharing a sender never overlap, so start order = end order).
        events.append(((t.ready if blocking else t.start, 0, i), "recv", t))
    events.sort(key=lambda e: e[0])

    acts: list[list[Action]] = [[] for _ in range(spec.devices)]
    # Receives still waiting for their first consumer: (device, block, mb) -> source device.
    pending: dict[tuple[int, str, int], int] = {}
    for _key, kind, item in events:
        if kind == "compute":
            s: Slot = item  # type: ignore[assignment]
            block = spec.block(s.block)
            for d in block.devices:
                if not blocking:
                    for p in spec.preds[s.block]:
                        src = pending.pop((d, p, s.mb), None)
                        if src is not None:
                            acts[d].append(Action(Op.WAIT, p, s.mb, (src,)))
                acts[d].append(Action(Op.COMPUTE, s.block, s.mb))
        elif kind == "send":
            t: Transfer = item  # type: ignore[assignment]
            acts[t.src].append(Action(Op.SEND, t.block, t.mb, t.dsts))
        else:
            t = item  # type: ignore[assignment]
            for d in t.dsts:
                acts[d].append(Action(Op.RECV, t.block, t.mb, (t.src,)))
                if not blocking:
                    pending[(d, t.block, t.mb)] = t.src
    return tuple(Program(d, tuple(a), blocking) for d, a in enumerate(acts))


def programs_text(programs: tuple[Program, ...]) -> str:
    """The programs as text, one device per line (``dev0: F0:0 SEND F0:0>1 ...``)."""
    return "\n".join(f"dev{p.device}: {p.text()}" for p in programs)
