"""Explaining a deadlock: for every stuck device, the action it is blocked on and what it waits for.

The engine stops when no event is left; a device that has not finished by then can never finish.
Its `blocked` note says why (a transfer whose other side was never posted, a multi-device block
some members never reach, a WAIT for a receive that was never posted), and a broken channel adds
the order mismatch that caused it.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.simulator.engine import Engine


@dataclass(frozen=True)
class Blocked:
    """Device `device` is stuck at action index `pc` (`action`) waiting for `waits_for`."""

    device: int
    pc: int
    action: str
    waits_for: str

    def __str__(self) -> str:
        return f"device {self.device} blocked at action #{self.pc} `{self.action}`: {self.waits_for}"


@dataclass(frozen=True)
class Deadlock:
    """Every stuck device plus the send/recv order mismatches found on the way."""

    blocked: tuple[Blocked, ...]
    mismatches: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(b.device for b in self.blocked)

    def summary(self) -> str:
        """One line, for CI logs."""
        what = "; ".join(f"dev{b.device} at `{b.action}`" for b in self.blocked)
        cause = " (send/recv order mismatch)" if self.mismatches else ""
        return f"deadlock{cause}: {what}"

    def __str__(self) -> str:
        lines = ["deadlock: no device can make progress"]
        lines += [f"  {b}" for b in self.blocked]
        lines += [f"  cause: {m}" for m in self.mismatches]
        return "\n".join(lines)


def explain(engine: Engine) -> Deadlock | None:
    """The deadlock of a finished engine run, or None when every device completed."""
    if not engine.deadlocked:
        return None
    out: list[Blocked] = []
    for st in engine.states:
        if st.done:
            continue
        prog = engine.programs[st.device]
        action = str(prog.actions[st.pc]) if st.pc < len(prog.actions) else "(end of program)"
        out.append(Blocked(st.device, st.pc, action, _waits_for(engine, st)))
    return Deadlock(tuple(out), tuple(str(m) for m in engine.net.mismatches))


def _waits_for(engine: Engine, st) -> str:
    note = st.blocked
    if note is None:  # cannot happen for a stuck device; keep the report honest if it does
        return "unknown"
    kind = note[0]
    if kind == "unposted":
        a = note[1]
        return f"WAIT for {a.block}:{a.mb} from device {a.peers[0]}, but this device never posted that RECV"
    if kind == "joint":
        _, (block, mb), devs = note
        arrived = engine.joint_waiting().get((block, mb), [0])[0]
        missing = [d for d in devs if _not_at(engine, d, block, mb)]
        return (f"multi-device block {block}:{mb} needs devices {','.join(map(str, devs))}; "
                f"{arrived} arrived, still waiting for device(s) {','.join(map(str, missing)) or '?'}")
    x = note[1]
    ch = engine.net.channels.get((x.src, x.dst))
    if ch is not None and ch.broken is not None:
        return f"channel {x.src}->{x.dst} is broken by an order mismatch ({x.block}:{x.mb} never completes)"
    if kind.startswith("send"):
        tail = " (end-of-iteration wait)" if kind == "send-end" else ""
        return f"device {x.dst} to post RECV {x.block}:{x.mb}<{x.src}{tail}"
    tail = " (end-of-iteration wait)" if kind == "recv-end" else ""
    return f"device {x.src} to post SEND {x.block}:{x.mb}>{x.dst}{tail}"


def _not_at(engine: Engine, device: int, block: str, mb: int) -> bool:
    st = engine.states[device]
    note = st.blocked
    return not (note and note[0] == "joint" and note[1] == (block, mb))
