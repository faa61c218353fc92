"""Lowering: send/recv placement, pair ordering, WAIT placement, multi-device blocks."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import ScheduleError
from tessel_dsl.ir import Block, Edge, Kind, Spec, Tensor, Units
from tessel_dsl.lower import lower, programs_text, tensor_bytes
from tessel_dsl.program import Op, Program
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.compact import compact
from tests.helpers import one_f_one_b, vshape


def mshape(devices: int = 4, memory: int = 6) -> Spec:
    """E(all) -> F0..F{D-1} -> B{D-1}..B0 -> EB(all)."""
    alld = tuple(range(devices))
    blocks = [Block("E", Kind.FORWARD, alld, 1, 0)]
    blocks += [Block(f"F{i}", Kind.FORWARD, (i,), 1, 1) for i in range(devices)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (i,), 3, -1, forward=f"F{i}") for i in range(devices)]
    blocks += [Block("EB", Kind.BACKWARD, alld, 1, 0, forward="E")]
    edges = [Edge("E", "F0")] + [Edge(f"F{i}", f"F{i + 1}") for i in range(devices - 1)]
    edges += [Edge(f"F{devices - 1}", f"B{devices - 1}")]
    edges += [Edge(f"B{i + 1}", f"B{i}") for i in range(devices - 1)]
    edges += [Edge("B0", "EB")]
    return Spec("mshape", devices, memory, tuple(blocks), tuple(edges), 4)


def sequential(spec: Spec, n: int) -> Schedule:
    """Micro-batches one after another in topological order (trivially valid)."""
    orders: list[list[tuple[str, int]]] = [[] for _ in range(spec.devices)]
    for mb in range(n):
        for name in spec.topo_order:
            for d in spec.block(name).devices:
                orders[d].append((name, mb))
    return Schedule(n, compact(spec, orders=orders), name="seq")


def pair_sequences(programs: tuple[Program, ...]):
    """Per (src, dst): the tensors the sender sends and the receiver receives, in program order."""
    sends: dict[tuple[int, int], list] = {}
    recvs: dict[tuple[int, int], list] = {}
    for p in programs:
        for a in p.actions:
            if a.op is Op.SEND:
                for d in a.peers:
                    sends.setdefault((p.device, d), []).append((a.block, a.mb))
            elif a.op is Op.RECV:
                recvs.setdefault((a.peers[0], p.device), []).append((a.block, a.mb))
    return sends, recvs


@pytest.mark.parametrize("blocking", [False, True])
@pytest.mark.parametrize("build", [lambda: (vshape(4, 4), 6), lambda: (mshape(), 5)])
def test_pairs_match_in_order_and_text_round_trips(build, blocking):
    spec, n = build()
    sch = one_f_one_b(spec, n) if spec.name == "vshape" else sequential(spec, n)
    progs = lower(spec, sch, blocking=blocking)
    assert len(progs) == spec.devices
    sends, recvs = pair_sequences(progs)
    assert sends == recvs and sends
    for p in progs:
        assert p.blocking is blocking
        assert Program.from_text(p.device, p.text(), blocking) == p
        computes = [(a.block, a.mb) for a in p.actions if a.op is Op.COMPUTE]
        assert computes == [(s.block, s.mb) for s in sch.per_device(spec)[p.device]]
        assert any(a.op is Op.WAIT for a in p.actions) is (not blocking and bool(recvs))


def test_vshape_programs_text():
    spec = vshape(3, 3)
    progs = lower(spec, one_f_one_b(spec, 2))
    assert programs_text(progs).splitlines()[0] == (
        "dev0: F0:0 SEND F0:0>1 F0:1 SEND F0:1>1 RECV B1:0<1 WAIT B1:0<1 B0:0 RECV B1:1<1 WAIT B1:1<1 B0:1"
    )
    blk = lower(spec, one_f_one_b(spec, 2), blocking=True)
    assert blk[2].text() == "RECV F1:0<1 F2:0 RECV F1:1<1 B2:0 SEND B2:0>1 F2:1 B2:1 SEND B2:1>1"


def test_wait_sits_right_before_first_consumer():
    spec = vshape(4, 4)
    progs = lower(spec, one_f_one_b(spec, 5))
    for p in progs:
        acts = p.actions
        for i, a in enumerate(acts):
            if a.op is Op.RECV:
                waits = [j for j, b in enumerate(acts) if b.op is Op.WAIT and (b.block, b.mb) == (a.block, a.mb)]
                assert len(waits) == 1 and waits[0] > i
                nxt = acts[waits[0] + 1]
                assert nxt.op in (Op.COMPUTE, Op.WAIT)
                consumer = next(b for b in acts[waits[0]:] if b.op is Op.COMPUTE)
                assert a.block in spec.preds[consumer.block] and consumer.mb == a.mb


def test_multi_device_blocks_send_from_lowest_member_and_to_all_non_holders():
    spec = mshape()
    progs = lower(spec, sequential(spec, 1), blocking=True)
    text = {p.device: p.text() for p in progs}
    # E runs on all devices: F0 on device 0 needs no transfer.
    assert "E:0" in text[0] and "RECV E" not in text[0]
    # B0 (device 0) feeds EB on every device: device 0 already holds it, 1..3 receive it.
    assert "SEND B0:0>1,2,3" in text[0]
    for d in (1, 2, 3):
        assert "RECV B0:0<0" in text[d]
    # No transfers out of E at all: every consumer's device runs E itself.
    assert all("SEND E:" not in t for t in text.values())


def test_multi_device_output_goes_to_outside_consumer_from_lowest_member():
    blocks = (Block("T", Kind.FORWARD, (1, 2), 1, 1), Block("G", Kind.FORWARD, (3,), 1, 1),
              Block("H", Kind.FORWARD, (0, 2), 1, 0))
    spec = Spec("tp", 4, 4, blocks, (Edge("T", "G"), Edge("T", "H")), 1)
    progs = lower(spec, Schedule(1, (Slot(0, "T", 0), Slot(1, "G", 0), Slot(1, "H", 0))))
    assert progs[1].text() == "T:0 SEND T:0>0,3"
    assert progs[2].text() == "T:0 H:0"
    assert progs[0].text() == "RECV T:0<1 WAIT T:0<1 H:0"


def test_tensor_bytes_declared_or_from_memory():
    spec = vshape(2, 2)
    assert tensor_bytes(spec, "F0") == 1
    units = Units(memory_bytes=1 << 20)
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 2), Block("B", Kind.FORWARD, (1,), 1, 0))
    s2 = Spec("s", 2, 4, blocks, (Edge("A", "B"),), units=units)
    assert tensor_bytes(s2, "A") == 2 << 20
    assert tensor_bytes(s2, "B") == 1  # never zero
    s3 = Spec("s", 2, 4, blocks, (Edge("A", "B", Tensor((8, 4), "bf16")),), units=units)
    assert tensor_bytes(s3, "A", 1) == 64


def test_consumer_before_producer_end_is_a_schedule_error():
    spec = vshape(2, 2)
    bad = Schedule(1, (Slot(0, "F0", 0), Slot(0, "F1", 0), Slot(1, "B1", 0), Slot(3, "B0", 0)))
    with pytest.raises(ScheduleError, match="F1:0 starts at t=0 before its input F0:0"):
        lower(spec, bad)


def test_missing_consumer_is_a_schedule_error():
    spec = vshape(2, 2)
    with pytest.raises(ScheduleError, match="not its consumer F1:0"):
        lower(spec, Schedule(1, (Slot(0, "F0", 0),)))


def _fanout(size_b: int, size_c: int) -> Spec:
    """A on device 0 feeds B on 1 and C on 2 with tensors of the given byte sizes; A keeps 5 units."""
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 5), Block("B", Kind.FORWARD, (1,), 1, 0),
              Block("C", Kind.FORWARD, (2,), 1, 0))
    edges = (Edge("A", "B", Tensor((size_b,), "u8")), Edge("A", "C", Tensor((size_c,), "u8")))
    return Spec("fanout", 3, 8, blocks, edges)


def test_tensor_bytes_per_destination_and_in_total():
    spec = _fanout(300, 40)
    assert tensor_bytes(spec, "A", 1) == 300 and tensor_bytes(spec, "A", 2) == 40
    assert tensor_bytes(spec, "A") == 300  # any consumer: the largest declared tensor, not A's memory
    assert tensor_bytes(spec, "A", 0) == 5  # no declared tensor goes there: the memory delta stands in
    assert tensor_bytes(_fanout(1, 0), "A", 1) == 1 and tensor_bytes(_fanout(1, 0), "A", 2) == 1  # never 0


def test_lower_names_unknown_and_duplicate_blocks():
    spec = vshape(2, 2)
    sched = one_f_one_b(spec, 2)
    with pytest.raises(ScheduleError, match=r"^schedule names block 'Zed', which the spec does not declare$"):
        lower(spec, Schedule(2, sched.slots + (Slot(40, "Zed", 0),)))
    with pytest.raises(ScheduleError, match=r"^F1:1 is scheduled twice$"):
        lower(spec, Schedule(2, sched.slots + (Slot(40, "F1", 1),)))


def test_non_blocking_receive_is_posted_when_the_producer_starts():
    # B on device 1 consumes A (device 0, t=0..1); device 1 computes C (t=0..10) meanwhile. The
    # receive goes before C so the transfer overlaps it; blocking mode receives after C.
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 0), Block("B", Kind.FORWARD, (1,), 1, 0),
              Block("C", Kind.OTHER, (1,), 10, 0))
    spec = Spec("pair", 2, 4, blocks, (Edge("A", "B", Tensor((100,), "u8")),))
    sch = Schedule(1, (Slot(0, "A", 0), Slot(0, "C", 0), Slot(10, "B", 0)))
    assert programs_text(lower(spec, sch)) == "dev0: A:0 SEND A:0>1\ndev1: RECV A:0<0 C:0 WAIT A:0<0 B:0"
    assert programs_text(lower(spec, sch, blocking=True)) == "dev0: A:0 SEND A:0>1\ndev1: C:0 RECV A:0<0 B:0"


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("blocking", [False, True])
def test_every_send_directly_follows_its_producer(n, blocking):
    # A tensor is sent as soon as it exists: no other compute between its producer and the send.
    spec = vshape(4, 4)
    for p in lower(spec, one_f_one_b(spec, n), blocking=blocking):
        last_compute = None
        for a in p.actions:
            if a.op is Op.COMPUTE:
                last_compute = (a.block, a.mb)
            elif a.op is Op.SEND:
                assert last_compute == (a.block, a.mb), (p.device, str(a))


def test_lower_refuses_a_consumer_before_its_input_with_a_marked_grid():
    spec = vshape(2, 2)
    sched = one_f_one_b(spec, 2)
    early = Schedule(2, tuple(sorted(Slot(0, s.block, s.mb) if (s.block, s.mb) == ("F1", 1) else s for s in sched.slots)))
    with pytest.raises(ScheduleError) as info:
        lower(spec, early)
    msg = str(info.value)
    assert msg.startswith("F1:1 starts at t=0 before its input F0:1 ends at t=2")
    assert "dev1 | " in msg and msg.rstrip().endswith("<-- ERROR HERE (t=0)")
