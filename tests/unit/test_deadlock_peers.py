"""The deadlock explanation names the device each stuck one waits on, not the stuck device itself:
a removed RECV leaves the receiver's WAIT pointing at the sender, and the sender, whose SEND is
never matched, pointing at the receiver."""
from __future__ import annotations

from tessel_dsl.lower import lower
from tessel_dsl.program import Op, Program
from tessel_dsl.simulator import simulate
from tests.helpers import one_f_one_b, vshape


def _without_recv(progs, device, block, mb):
    acts = tuple(a for a in progs[device].actions if not (a.op is Op.RECV and (a.block, a.mb) == (block, mb)))
    out = list(progs)
    out[device] = Program(device, acts, progs[device].blocking)
    return tuple(out)


def test_a_wait_without_its_recv_names_the_sender():
    spec = vshape(3, 3)
    progs = _without_recv(lower(spec, one_f_one_b(spec, 3)), 2, "F1", 1)  # device 1 sends F1:1 to 2
    blocked = {b.device: b for b in simulate((spec, progs)).deadlock.blocked}
    assert blocked[2].waits_for == "WAIT for F1:1 from device 1, but this device never posted that RECV"


def test_each_side_of_an_unmatched_send_names_the_other():
    spec = vshape(3, 3)
    progs = _without_recv(lower(spec, one_f_one_b(spec, 1), blocking=True), 2, "F1", 0)
    blocked = {b.device: b for b in simulate((spec, progs)).deadlock.blocked}
    assert blocked[1].action == "SEND F1:0>2" and blocked[1].waits_for == "device 2 to post RECV F1:0<1"
