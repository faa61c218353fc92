"""Per-device programs: the ordered compute and communication actions one device executes.

Text forms round-trip (`Action.parse(str(a)) == a`):

    F1:3            run block F1 on micro-batch 3
    SEND F1:3>2,3   post the send of F1's output for micro-batch 3 to devices 2 and 3
    RECV F1:3<0     post the receive of F1's output for micro-batch 3 from device 0
    WAIT F1:3<0     block until that receive has completed (non-blocking mode only)

In blocking mode SEND and RECV complete before the next action starts and no WAIT appears.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from tessel_dsl.errors import PlanError


class Op(str, Enum):
    COMPUTE = "COMPUTE"
    SEND = "SEND"
    RECV = "RECV"
    WAIT = "WAIT"


_TEXT = re.compile(r"^(?:(SEND|RECV|WAIT) )?([A-Za-z_]\w*):(\d+)(?:([<>])(\d+(?:,\d+)*))?$")


@dataclass(frozen=True)
class Action:
    """One step of a device program. For comm ops `block` is the producer of the tensor moved."""

    op: Op
    block: str
    mb: int
    peers: tuple[int, ...] = ()

    def __str__(self) -> str:
        core = f"{self.block}:{self.mb}"
        if self.op is Op.COMPUTE:
            return core
        arrow = ">" if self.op is Op.SEND else "<"
        return f"{self.op.value} {core}{arrow}{','.join(map(str, self.peers))}"

    @classmethod
    def parse(cls, text: str) -> "Action":
        m = _TEXT.match(text.strip())
        if not m:
            raise PlanError(f"malformed action {text!r}")
        op, block, mb, arrow, peers = m.groups()
        op_ = Op(op) if op else Op.COMPUTE
        peer_t = tuple(int(p) for p in peers.split(",")) if peers else ()
        if (op_ is Op.COMPUTE) != (arrow is None) or (op_ is Op.SEND and arrow != ">") or (
            op_ in (Op.RECV, Op.WAIT) and arrow != "<"
        ):
            raise PlanError(f"malformed action {text!r}")
        return cls(op_, block, int(mb), peer_t)


@dataclass(frozen=True)
class Program:
    """Everything one device does in one iteration, in order."""

    device: int
    actions: tuple[Action, ...]
    blocking: bool = False

    def text(self) -> str:
        return " ".join(map(str, self.actions))

    @classmethod
    def from_text(cls, device: int, text: str, blocking: bool = False) -> "Program":
        return cls(device, tuple(Action.parse(t) for t in _split(text)), blocking)


def _split(text: str) -> list[str]:
    """Split on spaces but keep 'SEND F1:3>2' together."""
    out: list[str] = []
    toks = text.split()
    i = 0
    while i < len(toks):
        if toks[i] in ("SEND", "RECV", "WAIT") and i + 1 < len(toks):
            out.append(f"{toks[i]} {toks[i + 1]}")
            i += 2
        else:
            out.append(toks[i])
            i += 1
    return out
