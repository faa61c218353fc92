"""Mutated programs must be reported as deadlocks naming the right devices, never hang."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import SimulationError
from tessel_dsl.lower import lower
from tessel_dsl.program import Action, Op, Program
from tessel_dsl.simulator import simulate
from tests.helpers import one_f_one_b, vshape
from tests.unit.test_lower import mshape, sequential


def _replace(progs, device, actions):
    out = list(progs)
    out[device] = Program(device, tuple(actions), progs[device].blocking)
    return tuple(out)


def _swap_first_two_sends(progs, device, peer):
    acts = list(progs[device].actions)
    idx = [i for i, a in enumerate(acts) if a.op is Op.SEND and peer in a.peers][:2]
    acts[idx[0]], acts[idx[1]] = acts[idx[1]], acts[idx[0]]
    return _replace(progs, device, acts)


@pytest.mark.parametrize("blocking", [False, True])
def test_swapped_sends_deadlock_and_name_the_pair(blocking):
    spec = vshape(4, 4)
    sch = one_f_one_b(spec, 6)
    progs = _swap_first_two_sends(lower(spec, sch, blocking=blocking), 1, 2)
    report = simulate((spec, progs, sch))
    assert not report.ok
    dl = report.deadlock
    assert dl is not None and dl.mismatches
    assert "device 1 sends F1:1 to device 2 while device 2 expects F1:0" in dl.mismatches[0]
    blocked = {b.device: b for b in dl.blocked}
    assert 2 in blocked and "order mismatch" in blocked[2].waits_for
    assert dl.summary().startswith("deadlock (send/recv order mismatch): ")
    with pytest.raises(SimulationError, match="deadlock"):
        simulate((spec, progs, sch), strict=True)


def test_removed_recv_nonblocking_names_the_wait_and_the_sender():
    spec = vshape(3, 3)
    progs = lower(spec, one_f_one_b(spec, 3))
    acts = [a for a in progs[2].actions if not (a.op is Op.RECV and (a.block, a.mb) == ("F1", 1))]
    report = simulate((spec, _replace(progs, 2, acts)))
    blocked = {b.device: b for b in report.deadlock.blocked}
    assert blocked[2].action == "WAIT F1:1<1"
    assert "never posted that RECV" in blocked[2].waits_for
    # Device 1's send of F1:1 is never received: it cannot finish its iteration either.
    assert 1 in blocked


def test_removed_recv_blocking_leaves_the_sender_waiting():
    spec = vshape(2, 2)
    progs = lower(spec, one_f_one_b(spec, 1), blocking=True)
    acts = [a for a in progs[1].actions if a.op is not Op.RECV]
    report = simulate((spec, _replace(progs, 1, acts)))
    blocked = {b.device: b for b in report.deadlock.blocked}
    assert blocked[0].action == "SEND F0:0>1"
    assert blocked[0].waits_for == "device 1 to post RECV F0:0<0"
    # Device 1 ran F1 without its input, then waits for B1's output... to be received by device 0.
    assert set(blocked) == {0, 1}


def test_missing_member_of_a_joint_block_is_a_deadlock():
    spec = mshape()
    progs = lower(spec, sequential(spec, 1))
    acts = [a for a in progs[3].actions if not (a.op is Op.COMPUTE and a.block == "E")]
    report = simulate((spec, _replace(progs, 3, acts)))
    blocked = {b.device: b for b in report.deadlock.blocked}
    assert blocked[0].action == "E:0"
    assert "still waiting for device(s) 3" in blocked[0].waits_for


def test_recv_posted_but_never_sent_blocks_at_end_of_iteration():
    spec = vshape(2, 2)
    progs = (Program(0, ()), Program(1, (Action(Op.RECV, "F0", 0, (0,)),)))
    report = simulate((spec, progs))
    (b,) = report.deadlock.blocked
    assert b.device == 1 and "device 0 to post SEND F0:0>1 (end-of-iteration wait)" == b.waits_for


def test_a_correct_lowering_never_deadlocks_with_costly_links():
    from tessel_dsl.ir import Link

    spec = vshape(4, 4)
    for blocking in (False, True):
        report = simulate((spec, lower(spec, one_f_one_b(spec, 9), blocking=blocking)),
                          link=Link(latency=0.7, bandwidth=2.0))
        assert report.ok, report.problems()
