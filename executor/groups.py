"""Process groups a plan needs, created eagerly and identically on every rank.

`dist.new_group` is collective over the whole world, so every rank must create the same groups in
the same order even if it is not a member; doing it once at start-up keeps that out of the step.
Point-to-point links are warmed up the same way: NCCL creates a communicator per pair of ranks on
first use, and doing that lazily in the middle of a pipeline can wedge two pairs against each
other, so every pair that will talk exchanges one tiny message, in one global order, first.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from tessel_dsl.ir import Spec
from tessel_dsl.program import Op, Program


def device_sets(spec: Spec) -> list[tuple[int, ...]]:
    """Distinct device sets of multi-device blocks, in a deterministic order."""
    return sorted({tuple(sorted(b.devices)) for b in spec.blocks if b.is_multi_device})


def make_groups(spec: Spec, backend: str | None = None) -> dict[tuple[int, ...], object]:
    """One sub-group per multi-device block's device set (the default group for all devices)."""
    world = dist.get_world_size()
    out: dict[tuple[int, ...], object] = {}
    for ranks in device_sets(spec):
        if list(ranks) == list(range(world)):
            out[ranks] = dist.group.WORLD
        else:
            out[ranks] = dist.new_group(list(ranks), backend=backend)
    return out


def talking_pairs(programs: tuple[Program, ...]) -> list[tuple[int, int]]:
    """Every unordered pair of ranks that exchanges a message in the programs."""
    pairs: set[tuple[int, int]] = set()
    for prog in programs:
        for a in prog.actions:
            if a.op is Op.SEND:
                for p in a.peers:
                    pairs.add((min(prog.device, p), max(prog.device, p)))
    return sorted(pairs)


def warm_up_links(programs: tuple[Program, ...], rank: int, device: torch.device) -> None:
    """Exchange one element over every talking pair, pairs taken in the same order everywhere."""
    for a, b in talking_pairs(programs):
        if rank not in (a, b):
            continue
        peer = b if rank == a else a
        out = torch.zeros(1, device=device)
        inc = torch.empty(1, device=device)
        ops = [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, inc, peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
