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
    """Exchange one element each way over every talking pair, pairs in the same order everywhere,
    with the same single isend/irecv calls the step uses (so the same communicators get made)."""
    for a, b in talking_pairs(programs):
        if rank not in (a, b):
            continue
        peer = b if rank == a else a
        out = torch.zeros(1, device=device)
        inc = torch.empty(1, device=device)
        first, second = (dist.isend, dist.irecv) if rank == a else (dist.irecv, dist.isend)
        for op in (first, second):
            op(out if op is dist.isend else inc, peer).wait()
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def warm_up_device(device: torch.device) -> None:
    """Create the math libraries' handles and workspaces before any transfer is in flight.

    The first matrix product on a stream initialises cuBLAS, which can wait for the whole device;
    with a receive kernel already spinning for a peer that waits forever. Doing it here, while the
    device is idle, keeps that out of the step."""
    if device.type != "cuda":
        return
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(64, 64, device=device, dtype=dtype, requires_grad=True)
        y = torch.nn.functional.linear(x, x) @ x
        q = x.view(1, 1, 64, 64)
        y = y.sum() + torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
        y.backward()
    torch.cuda.synchronize(device)
