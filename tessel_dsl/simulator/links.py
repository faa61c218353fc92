"""Point-to-point links: matching posted sends with posted receives, and timing the transfers.

Every ordered device pair (src, dst) is one channel with its own link. Sends and receives posted on
a channel are matched first-in first-out, exactly like NCCL point-to-point calls between two ranks:
the k-th send from src to dst pairs with the k-th receive on dst from src. When the two sides of a
match name different tensors the programs disagree on the order; the channel is marked broken and
never completes anything again, which the engine then reports as a deadlock naming both devices.

A matched transfer starts once both sides are posted and the link has finished the previous
transfer (a link carries one tensor at a time) and takes ``latency + bytes / bandwidth``.
"""
from __future__ import annotations

from collections import deque

from tessel_dsl.ir import Link


class Xfer:
    """One tensor on its way from `src` to `dst`; times are None until known."""

    __slots__ = ("block", "mb", "src", "dst", "nbytes", "start", "end", "event", "exposed", "mate")

    def __init__(self, block: str, mb: int, src: int, dst: int, nbytes: int):
        self.block = block
        self.mb = mb
        self.src = src
        self.dst = dst
        self.nbytes = nbytes
        self.start: float | None = None
        self.end: float | None = None
        self.event = None  # simpy event, created only when someone waits before the match
        self.exposed = 0.0  # longest stretch a device sat idle while this transfer was moving
        self.mate: Xfer | None = None  # the other side once matched

    def __str__(self) -> str:
        return f"{self.block}:{self.mb} {self.src}->{self.dst}"


class Mismatch:
    """A send matched against a receive for a different tensor on the same channel."""

    __slots__ = ("src", "dst", "send", "recv")

    def __init__(self, src: int, dst: int, send: Xfer, recv: Xfer):
        self.src, self.dst, self.send, self.recv = src, dst, send, recv

    def __str__(self) -> str:
        return (
            f"device {self.src} sends {self.send.block}:{self.send.mb} to device {self.dst} while device "
            f"{self.dst} expects {self.recv.block}:{self.recv.mb} from device {self.src} at that point: "
            "the two programs post their send/recv pairs in different orders"
        )


class Channel:
    """FIFO matching and link occupancy for one ordered device pair."""

    __slots__ = ("src", "dst", "sends", "recvs", "free_at", "broken")

    def __init__(self, src: int, dst: int):
        self.src = src
        self.dst = dst
        self.sends: deque[Xfer] = deque()
        self.recvs: deque[Xfer] = deque()
        self.free_at = 0.0
        self.broken: Mismatch | None = None


class Network:
    """All channels of one simulation plus the link cost model."""

    def __init__(self, env, link: Link):
        self.env = env
        self.link = link
        self.free = link.latency == 0 and link.bandwidth <= 0
        self.channels: dict[tuple[int, int], Channel] = {}
        self.transfers: list[Xfer] = []
        self.mismatches: list[Mismatch] = []

    def channel(self, src: int, dst: int) -> Channel:
        ch = self.channels.get((src, dst))
        if ch is None:
            ch = self.channels[(src, dst)] = Channel(src, dst)
        return ch

    def post_send(self, x: Xfer) -> None:
        ch = self.channel(x.src, x.dst)
        if ch.recvs and ch.broken is None:
            self._match(ch, x, ch.recvs.popleft())
        else:
            ch.sends.append(x)

    def post_recv(self, x: Xfer) -> None:
        ch = self.channel(x.src, x.dst)
        if ch.sends and ch.broken is None:
            self._match(ch, ch.sends.popleft(), x)
        else:
            ch.recvs.append(x)

    def _match(self, ch: Channel, send: Xfer, recv: Xfer) -> None:
        if send.block != recv.block or send.mb != recv.mb:
            ch.broken = Mismatch(ch.src, ch.dst, send, recv)
            self.mismatches.append(ch.broken)
            ch.sends.appendleft(send)
            ch.recvs.appendleft(recv)
            return
        now = self.env.now
        if self.free:
            start = end = now
        else:
            start = now if now >= ch.free_at else ch.free_at
            end = start + self.link.transfer_time(send.nbytes)
            ch.free_at = end
        # Both sides share the times; the receiver's record is the one listed.
        send.start = recv.start = start
        send.end = recv.end = end
        send.mate, recv.mate = recv, send
        self.transfers.append(recv)
        for x in (send, recv):
            if x.event is not None and not x.event.triggered:
                x.event.succeed()

    def pending(self) -> list[Channel]:
        """Channels with posted but unmatched operations (what a deadlock leaves behind)."""
        return [c for c in self.channels.values() if c.sends or c.recvs]
