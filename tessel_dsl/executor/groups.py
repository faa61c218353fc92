"""Process groups a plan needs, created eagerly and identically on every rank.

`dist.new_group` is collective over the whole world, so every rank must create the same groups in
the same order even if it is not a member; doing it once at start-up keeps that out of the step.
Point-to-point links are warmed up the same way: NCCL creates a communicator per pair of ranks on
first use, and doing that lazily in the middle of a pipeline can wedge two pairs against each
other, so every pair that will talk exchanges one tiny message, in one global order, first.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from tessel_dsl.ir import Spec
from tessel_dsl.program import Op, Program


def device_sets(spec: Spec) -> list[tuple[int, ...]]:
    """Distinct device sets of multi-device blocks, in a deterministic order."""
    return sorted({tuple(sorted(b.devices)) for b in spec.blocks if b.is_multi_device})


def make_groups(spec: Spec, backend: str | None = None,
                ranks: tuple[int, ...] | None = None) -> dict[tuple[int, ...], object]:
    """One sub-group per multi-device block's device set (the default group for all devices),
    keyed by plan devices; `ranks` maps plan devices to global ranks (one replica of several)."""
    world = dist.get_world_size()
    glob = ranks or tuple(range(world))
    out: dict[tuple[int, ...], object] = {}
    for devs in device_sets(spec):
        members = [glob[d] for d in devs]
        if members == list(range(world)):
            out[devs] = dist.group.WORLD
        else:
            out[devs] = dist.new_group(members, backend=backend)
    return out


def directions(programs: tuple[Program, ...]) -> list[tuple[int, int]]:
    """Every ordered (sender, receiver) pair the programs use."""
    out: set[tuple[int, int]] = set()
    for prog in programs:
        for a in prog.actions:
            if a.op is Op.SEND:
                out.update((prog.device, p) for p in a.peers)
    return sorted(out)


def make_links(programs: tuple[Program, ...], backend: str | None = None,
               ranks: tuple[int, ...] | None = None) -> dict[tuple[int, int], object]:
    """One two-rank group per direction of every talking pair.

    NCCL runs the operations of one communicator in the order they were posted. Receives are
    posted ahead of time, so with one communicator per pair a receive from the peer could sit in
    front of a send the peer is waiting for. With one communicator per direction, each carries
    only one sender's messages, in the order both sides post them (checked by `check_plan`).
    Keys are plan devices; `ranks` maps them to global ranks (one replica of several)."""
    opts = _link_options(backend)
    g = ranks or tuple(range(max((max(p) for p in directions(programs)), default=-1) + 1))
    return {(s, d): dist.new_group([g[s], g[d]], backend=backend, pg_options=opts) for s, d in directions(programs)}


# NCCL's own choice: measured in bench/results/gpu.md ("Receives posted when due"). One block was the
# default while receives were posted ahead of time ("NCCL thread blocks of the links").
P2P_MAX_CTAS = "0"


def _link_options(backend: str | None):
    """NCCL options for the point-to-point links: at most ``TESSEL_P2P_MAX_CTAS`` thread blocks
    per transfer (default 0: NCCL's choice). A receive posted ahead of time
    (``TESSEL_RECV_POST=ahead``, executor/comm.py) occupies its blocks' SMs until the peer is
    ready, alongside the compute it is meant to overlap with, and a small cap kept that cheap;
    posted when due it runs only while its consumer waits, and NCCL's blocks make that wait short."""
    ctas = os.environ.get("TESSEL_P2P_MAX_CTAS", P2P_MAX_CTAS)
    if not ctas or ctas == "0" or backend != "nccl" or not hasattr(dist, "ProcessGroupNCCL"):
        return None
    opts = dist.ProcessGroupNCCL.Options()
    opts.config.max_ctas = int(ctas)
    opts.config.min_ctas = 1
    return opts


def warm_up_links(links: dict[tuple[int, int], object], rank: int, device: torch.device,
                  ranks: tuple[int, ...] | None = None) -> None:
    """Move one element over every direction, in the same order everywhere, so communicators are
    created while nothing else is in flight. `rank` is a plan device, `ranks` as in `make_links`."""
    g = (lambda x: ranks[x]) if ranks is not None else (lambda x: x)
    for (s, d), group in sorted(links.items()):
        if rank == s:
            dist.isend(torch.zeros(1, device=device), g(d), group=group).wait()
        elif rank == d:
            dist.irecv(torch.empty(1, device=device), g(s), group=group).wait()
        if rank in (s, d) and device.type == "cuda":
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
