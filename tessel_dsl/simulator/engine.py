"""The discrete-event core: one SimPy process per device walking its program.

Cost model, chosen to keep the number of events per action small (a few per compute, none for a
transfer that is already complete):

* compute is exclusive per device simply because each device is one sequential process; a block on
  several devices starts when the last of them arrives and holds all of them for its duration;
* non-blocking mode: SEND and RECV only post the operation (the transfer runs on the link, beside
  compute), WAIT idles the device until the tensor has arrived, and a device finishes only once
  everything it posted has completed (the runtime's end-of-iteration wait);
* blocking mode: SEND and RECV idle the device until the matching operation is posted by the peer
  and the transfer is over (rendezvous, like NCCL point-to-point).

When the event queue runs dry while a device has work left, the run is deadlocked; each device
keeps a note of what it is blocked on so `deadlock.explain` can say who waits for whom.
"""
from __future__ import annotations

import simpy

from tessel_dsl.errors import SimulationError
from tessel_dsl.ir import Link, Spec
from tessel_dsl.lower import tensor_bytes
from tessel_dsl.program import Op, Program
from tessel_dsl.simulator.links import Network, Xfer
from tessel_dsl.simulator.memory import MemoryTracker


class DeviceState:
    """Where one device is and what it has done so far."""

    __slots__ = ("device", "pc", "blocked", "done", "finish", "busy", "wait", "exposed", "peer_wait", "records")

    def __init__(self, device: int):
        self.device = device
        self.pc = 0
        # None while running; otherwise (kind, payload) describing an unfinished wait.
        self.blocked: tuple | None = None
        self.done = False
        self.finish = 0.0
        self.busy = 0.0
        self.wait = 0.0  # time idle inside comm operations
        self.exposed = 0.0  # part of `wait` during which a transfer was actually moving
        # time idle at a multi-device block until its other devices arrive (not waiting for data)
        self.peer_wait = 0.0
        # (start, end, block, mb) per compute, in execution order.
        self.records: list[tuple[float, float, str, int]] = []


class Engine:
    """Runs `programs` of `spec` over links costed by `link`; call `run()` once."""

    def __init__(self, spec: Spec, programs: tuple[Program, ...], link: Link):
        check_programs(spec, programs)
        self.spec = spec
        self.programs = programs
        self.env = simpy.Environment()
        self.net = Network(self.env, link)
        self.memory = MemoryTracker(spec.devices, spec.capacities)
        self.states = [DeviceState(d) for d in range(spec.devices)]
        self.starts: dict[tuple[str, int], float] = {}
        self._time = {b.name: b.time for b in spec.blocks}
        self._delta = {b.name: b.memory for b in spec.blocks}
        self._multi = {b.name: b.devices for b in spec.blocks if b.is_multi_device}
        self._barriers: dict[tuple[str, int], list] = {}
        self._bytes: dict[tuple[str, int], int] = {}
        self.actions = sum(len(p.actions) for p in programs)

    def nbytes(self, block: str, dst: int) -> int:
        key = (block, dst)
        n = self._bytes.get(key)
        if n is None:
            n = self._bytes[key] = tensor_bytes(self.spec, block, dst)
        return n

    def run(self) -> "Engine":
        for p in self.programs:
            self.env.process(self._device(p))
        self.env.run()
        return self

    @property
    def deadlocked(self) -> bool:
        return not all(s.done for s in self.states)

    # -- device process ------------------------------------------------------------------------

    def _device(self, prog: Program):
        env, net, mem = self.env, self.net, self.memory
        st = self.states[prog.device]
        d = prog.device
        blocking = prog.blocking
        time, delta, multi, starts = self._time, self._delta, self._multi, self.starts
        records = st.records
        posted: dict[tuple[str, int, int], Xfer] = {}  # non-blocking receives not yet waited for
        outgoing: list[Xfer] = []
        for i, a in enumerate(prog.actions):
            st.pc = i
            op = a.op
            if op is Op.COMPUTE:
                t = time[a.block]
                devs = multi.get(a.block)
                if devs is None:
                    now = env.now
                    mem.apply(d, delta[a.block], now, a.block, a.mb)
                    starts[(a.block, a.mb)] = now
                    records.append((now, now + t, a.block, a.mb))
                    st.busy += t
                    yield env.timeout(t)
                else:
                    yield from self._joint(st, a.block, a.mb, devs, t)
            elif op is Op.SEND:
                for peer in a.peers:
                    x = Xfer(a.block, a.mb, d, peer, self.nbytes(a.block, peer))
                    net.post_send(x)
                    outgoing.append(x)
                if blocking:
                    for x in outgoing:
                        if x.end is None or x.end > env.now:
                            yield from self._await(st, x, "send")
                    outgoing.clear()
            elif op is Op.RECV:
                src = a.peers[0]
                x = Xfer(a.block, a.mb, src, d, self.nbytes(a.block, d))
                net.post_recv(x)
                if blocking:
                    if x.end is None or x.end > env.now:
                        yield from self._await(st, x, "recv")
                else:
                    posted[(a.block, a.mb, src)] = x
            else:  # WAIT
                x = posted.pop((a.block, a.mb, a.peers[0]), None)
                if x is None:
                    st.blocked = ("unposted", a)
                    return
                if x.end is None or x.end > env.now:
                    yield from self._await(st, x, "recv")
        st.pc = len(prog.actions)
        # The runtime waits for its own outstanding operations before the iteration ends.
        for x in outgoing:
            if x.end is None or x.end > env.now:
                yield from self._await(st, x, "send-end")
        for x in posted.values():
            if x.end is None or x.end > env.now:
                yield from self._await(st, x, "recv-end")
        st.done = True
        st.finish = env.now

    def _await(self, st: DeviceState, x: Xfer, why: str):
        """Idle until transfer `x` is over; account the idle time as waiting / exposed comm."""
        env = self.env
        t0 = env.now
        if x.end is None:
            if x.event is None:
                x.event = env.event()
            st.blocked = (why, x)
            yield x.event
            st.blocked = None
        if x.end > env.now:
            yield env.timeout(x.end - env.now)
        now = env.now
        if why.endswith("-end"):
            return  # the iteration's tail: nothing is left to delay on this device
        st.wait += now - t0
        moving = now - (x.start if x.start > t0 else t0)
        if moving > 0:
            st.exposed += moving
            if moving > x.exposed:
                x.exposed = moving

    def _joint(self, st: DeviceState, block: str, mb: int, devs: tuple[int, ...], t: int):
        """A block on several devices: the last to arrive starts it for all of them."""
        env = self.env
        key = (block, mb)
        bar = self._barriers.get(key)
        if bar is None:
            bar = self._barriers[key] = [0, env.event(), 0.0]
        bar[0] += 1
        if bar[0] < len(devs):
            st.blocked = ("joint", key, devs)
            t0 = env.now
            yield bar[1]
            st.blocked = None
            st.peer_wait += bar[2] - t0
            return
        del self._barriers[key]
        now = env.now
        bar[2] = now
        self.starts[key] = now
        for d in devs:
            self.memory.apply(d, self._delta[block], now, block, mb)
            s = self.states[d]
            s.records.append((now, now + t, block, mb))
            s.busy += t
        done = env.timeout(t)
        done.callbacks.append(lambda _ev: bar[1].succeed())
        yield done

    def joint_waiting(self) -> dict[tuple[str, int], list]:
        """Multi-device blocks some but not all of their devices have reached."""
        return self._barriers


def check_programs(spec: Spec, programs: tuple[Program, ...]) -> None:
    """Reject programs that do not fit the spec before simulating anything."""
    if len(programs) != spec.devices:
        raise SimulationError(f"the plan has {len(programs)} programs but the spec has {spec.devices} devices")
    placed = {b.name: frozenset(b.devices) for b in spec.blocks}
    compute, send = Op.COMPUTE, Op.SEND
    good_peers: set[tuple] = set()  # (peers, is_send) already checked for this device
    for i, p in enumerate(programs):
        if p.device != i:
            raise SimulationError(f"program #{i} is labelled for device {p.device}")
        good_peers.clear()
        for k, a in enumerate(p.actions):
            devs = placed.get(a.block)
            op = a.op
            if devs is None:
                _explain_bad_action(spec, p, i, k, a)
            if op is compute:
                if i not in devs:
                    _explain_bad_action(spec, p, i, k, a)
                continue
            key = (a.peers, op is send)
            if key not in good_peers:
                if _bad_peers(a, spec.devices, i, op is send):
                    _explain_bad_action(spec, p, i, k, a)
                good_peers.add(key)
            if p.blocking and op is Op.WAIT:
                _explain_bad_action(spec, p, i, k, a)


def _bad_peers(a, devices: int, me: int, is_send: bool) -> bool:
    peers = a.peers
    if not peers or (not is_send and len(peers) != 1):
        return True
    return any(q == me or not 0 <= q < devices for q in peers)


def _explain_bad_action(spec: Spec, p: Program, i: int, k: int, a) -> None:
    where = f"device {i}, action #{k} ({a})"
    block = spec.by_name.get(a.block)
    if block is None:
        raise SimulationError(f"{where}: unknown block {a.block!r}")
    if a.op is Op.COMPUTE:
        raise SimulationError(f"{where}: {a.block} is placed on device(s) "
                              f"{','.join(map(str, block.devices))}, not on device {i}")
    if a.op is Op.WAIT and p.blocking:
        raise SimulationError(f"{where}: WAIT in a blocking program")
    if a.op is not Op.SEND and len(a.peers) != 1:
        raise SimulationError(f"{where}: a {a.op.value} names exactly one source device")
    raise SimulationError(f"{where}: peer device out of range or the device itself")
