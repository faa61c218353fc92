"""Point-to-point messages between ranks: the message manager of the paper's §5.

A message is the output of one (block, micro-batch) -- a tuple of tensors -- going to one peer.
Sends are posted with `isend` on a dedicated communication stream (on CUDA; gloo on the CPU runs
the same code) and the manager keeps every outstanding handle. A receive is waited for right
before the block that needs it (the plan's ``WAIT``), and all sends are waited for at the end of
the step, so compute never stalls on a transfer it does not depend on.

When a receive is posted is ``TESSEL_RECV_POST``'s choice:

* ``due`` (the default): the plan's ``RECV`` only notes the receive; it is posted at its ``WAIT``
  (with every earlier noted receive of the same link, so each link still posts in the senders'
  order), from the compute stream. Its kernel then starts when the compute queued before it has
  finished, and never holds SMs while that compute runs -- the way PyTorch's schedules post a
  step's receives just before its compute. The wait is the transfer itself, which is short when
  the links have NCCL's thread blocks (``TESSEL_P2P_MAX_CTAS``).
* ``lead``: noted like ``due``, and started one compute earlier: when the host issues the
  compute right before the one that needs it, on the communication stream once the compute
  queued before that has finished. The transfer then runs beside that one compute instead of
  after it (``due`` exposes every transfer on the receiver: for a V with two chunks per GPU,
  four receives per micro-batch on a middle GPU); a late sender costs at most one compute's
  worth of a spinning kernel. Measured slower than ``due`` on 2 x H200 (bench/results/gpu.md,
  "receives posted one compute early"): the kernel's share of the GPU costs that compute more
  than the wait it saves.
* ``ahead``: posted at the ``RECV``, on the communication stream, at once: its kernel spins on
  its SMs from then on, alongside the compute it is meant to overlap with.

With ``TESSEL_COMM_STREAMS=link`` each link (peer and direction) has its own communication
stream; ``one`` (the default) keeps a single stream for every link. NCCL's point-to-point kernel
of a send waits, on its SMs, until the peer posts the matching receive. On one shared stream
everything queued behind it waits too, so a send to a late peer holds up a send to another peer
that is ready; with a stream per link the transfers don't queue, but every send whose receiver is
late spins at once, each on its own SMs, beside the compute. On 4 x H200
(bench/results/gpu.md, calls i and l) a stream per link gained about 1 ms on the plain chain,
within the spread of the runs; and with it, a plan that leaves three of GPU 0's sends waiting
through every first-stage backward (the 512k GPT's chosen M-shape, whose embedding backwards all
come last) ran that block 2.6 ms per micro-batch slower than an earlier run on one stream, with
a plan that left one waiting (which of the two made the difference was not measured apart). So
one stream stays the default.

Where the copy links apply (``TESSEL_TRANSPORT``, executor/copy_links.py: GPUs of one host that
map each other's memory) the manager hands every message to them instead, and none of the above
is used.

Tags make gloo match messages by identity rather than arrival order; NCCL ignores them and relies
on both sides posting in the same order, which the lowering guarantees.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from tessel_dsl.executor.model_api import TensorMeta

RECV_POST = ("due", "lead", "ahead")
COMM_STREAMS = ("one", "link")


def recv_post_mode() -> str:
    """``TESSEL_RECV_POST``: when receives are posted (module docstring); ``due`` by default."""
    mode = os.environ.get("TESSEL_RECV_POST", "") or RECV_POST[0]
    if mode not in RECV_POST:
        raise ValueError(f"TESSEL_RECV_POST must be one of {', '.join(RECV_POST)}, not {mode!r}")
    return mode


def comm_streams_mode() -> str:
    """``TESSEL_COMM_STREAMS``: one stream for all links or one per link (module docstring); ``one`` by default."""
    mode = os.environ.get("TESSEL_COMM_STREAMS", "") or COMM_STREAMS[0]
    if mode not in COMM_STREAMS:
        raise ValueError(f"TESSEL_COMM_STREAMS must be one of {', '.join(COMM_STREAMS)}, not {mode!r}")
    return mode


class CommTimeout(RuntimeError):
    """A transfer did not complete within the configured timeout (peer stuck or dead)."""


@dataclass
class _Pending:
    works: list
    tensors: tuple[torch.Tensor, ...]
    peer: int
    on_compute: bool = False  # posted from the compute stream: its buffers already belong there


@dataclass
class MessageManager:
    """Posts sends and receives and waits for them on demand."""

    device: torch.device
    timeout: float
    tag_of: dict[str, int]
    rank: int = 0
    links: dict[tuple[int, int], object] = field(default_factory=dict)
    # Global rank of each plan device: replica k of a data-parallel run holds devices at other ranks.
    ranks: tuple[int, ...] | None = None
    recvs: dict[tuple[str, int], _Pending] = field(default_factory=dict)
    sends: list[_Pending] = field(default_factory=list)
    post: str = field(default_factory=recv_post_mode)
    # Receives noted but not posted yet ("due" mode), per sending peer, in the plan's order.
    noted: dict[int, list[tuple[str, int, tuple[TensorMeta, ...]]]] = field(default_factory=dict)
    streams_mode: str = field(default_factory=comm_streams_mode)
    # The links' copy-engine slots where ``TESSEL_TRANSPORT`` takes them (executor/copy_links.py),
    # set by the rank once every rank has mapped its buffer; None: the process group's transfers.
    copies: object = None

    def __post_init__(self) -> None:
        if self.post not in RECV_POST:
            raise ValueError(f"receive posting must be one of {', '.join(RECV_POST)}, not {self.post!r}")
        self.cuda = self.device.type == "cuda"
        self._streams: dict[tuple[str, int], torch.cuda.Stream] = {}

    def stream(self, direction: str, peer: int):
        """The communication stream of the link to (``send``) or from (``recv``) `peer`; None on the CPU."""
        if not self.cuda:
            return None
        key = (direction, peer) if self.streams_mode == "link" else ("", 0)
        if key not in self._streams:
            self._streams[key] = torch.cuda.Stream(self.device)
        return self._streams[key]

    def _global(self, device: int) -> int:
        return self.ranks[device] if self.ranks is not None else device

    def _tag(self, block: str, mb: int, i: int) -> int:
        # Unique per tensor of a message; kept below 2**31 for gloo.
        return ((self.tag_of[block] * 65536 + mb) * 16 + i) % (2**31 - 1)

    def post_send(self, block: str, mb: int, tensors: tuple[torch.Tensor, ...], peers: tuple[int, ...]) -> None:
        """Start sending `tensors` to every peer; returns at once."""
        tensors = tuple(t.detach().contiguous() for t in tensors)
        if self.copies is not None:
            for p in peers:
                self.copies.send(tensors, p)
            return
        for p in peers:
            stream = self.stream("send", p)
            if stream is not None:
                # The tensors are produced on the compute stream: make the link's stream wait for
                # them, and tell the allocator they are in use there until the send completes.
                stream.wait_stream(torch.cuda.current_stream(self.device))
                for t in tensors:
                    t.record_stream(stream)
            with _on(stream):
                group = self.links.get((self.rank, p))
                works = [dist.isend(t, self._global(p), group=group, tag=self._tag(block, mb, i)) for i, t in enumerate(tensors)]
                self.sends.append(_Pending(works, tensors, p))

    def post_recv(self, block: str, mb: int, metas: tuple[TensorMeta, ...], peer: int) -> None:
        """Receive (block, mb) from `peer` into buffers shaped by `metas`: start it now ("ahead"),
        or note it and start it at its wait ("due"); returns at once."""
        if self.copies is not None:
            self.copies.note(block, mb, metas, peer)
        elif self.post != "ahead":
            self.noted.setdefault(peer, []).append((block, mb, metas))
        else:
            self._start_recv(block, mb, metas, peer, self.stream("recv", peer))

    def _start_recv(self, block: str, mb: int, metas: tuple[TensorMeta, ...], peer: int, stream) -> None:
        """Post the receive on `stream` (a link's stream), or on the compute stream if None."""
        with _on(stream):
            bufs = tuple(torch.empty(m.shape, dtype=m.dtype, device=self.device) for m in metas)
            group = self.links.get((peer, self.rank))
            works = [dist.irecv(b, self._global(peer), group=group, tag=self._tag(block, mb, i)) for i, b in enumerate(bufs)]
        self.recvs[(block, mb)] = _Pending(works, bufs, peer, on_compute=stream is None)

    def _start_noted(self, block: str, mb: int, on_link: bool = False) -> None:
        """Start the noted receive of (block, mb) and every one noted before it on its link, on
        the link's stream behind the compute queued so far (`on_link`) or on the compute stream."""
        for peer, queue in self.noted.items():
            at = next((i for i, (b, m, _) in enumerate(queue) if (b, m) == (block, mb)), None)
            if at is not None:
                stream = self.stream("recv", peer) if on_link else None
                if stream is not None:
                    stream.wait_stream(torch.cuda.current_stream(self.device))
                for b, m, metas in queue[:at + 1]:
                    self._start_recv(b, m, metas, peer, stream)
                del queue[:at + 1]
                return

    def start_early(self, block: str, mb: int) -> None:
        """``lead``: start the noted receive of (block, mb) now, on the communication stream,
        behind the compute queued so far (its kernel starts when that compute ends)."""
        if (block, mb) in self.recvs or self.copies is not None:
            return
        self._start_noted(block, mb, on_link=True)

    def wait_recv(self, block: str, mb: int) -> tuple[torch.Tensor, ...]:
        """Make the compute side wait until (block, mb) has arrived and return its tensors."""
        if self.copies is not None:
            return self.copies.receive(block, mb, self.device)
        if (block, mb) not in self.recvs:
            self._start_noted(block, mb)
        pending = self.recvs.pop((block, mb), None)
        if pending is None:
            raise KeyError(f"{block}:{mb} was never posted for receiving")
        self._wait(pending)
        if self.cuda and not pending.on_compute:
            cur = torch.cuda.current_stream(self.device)
            for t in pending.tensors:
                t.record_stream(cur)
        return pending.tensors

    def wait_sends(self) -> None:
        """Wait for every send posted so far (end of step, or in place in blocking mode)."""
        if self.copies is not None:
            self.copies.flush()
        while self.sends:
            self._wait(self.sends.pop(0))

    def drain(self) -> None:
        """End of step: sends done, and no receive left behind."""
        if self.copies is not None:
            for block, mb in self.copies.left():  # taken out of their slots, which frees them
                self.copies.receive(block, mb, self.device)
        for peer, queue in self.noted.items():
            for b, m, metas in queue:
                self._start_recv(b, m, metas, peer, None)
            queue.clear()
        self.wait_sends()
        for key in list(self.recvs):
            self._wait(self.recvs.pop(key))

    def _wait(self, pending: _Pending) -> None:
        for w in pending.works:
            try:
                ok = w.wait(datetime.timedelta(seconds=self.timeout)) if not self.cuda else w.wait()
            except RuntimeError as e:
                raise CommTimeout(f"transfer with rank {pending.peer} failed: {_short(e)}") from None
            if ok is False:
                raise CommTimeout(f"no transfer with rank {pending.peer} within {self.timeout:g}s")


class _on:
    """`torch.cuda.stream(s)` that is a no-op for the CPU."""

    def __init__(self, stream) -> None:
        self.ctx = torch.cuda.stream(stream) if stream is not None else None

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
