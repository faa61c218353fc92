"""Non-blocking lowering posts each RECV when its producer starts: before every compute the
receiving device starts at that time or later, so the transfer can overlap them."""
from __future__ import annotations

import pytest

from tessel_dsl.lower import lower
from tessel_dsl.program import Op
from tests.helpers import one_f_one_b, vshape


@pytest.mark.parametrize("devices, n", [(4, 8), (3, 12)])
def test_a_receive_precedes_every_compute_from_its_producers_start(devices, n):
    spec = vshape(devices, devices, fwd=1, bwd=3)
    sched = one_f_one_b(spec, n)
    start = {(s.block, s.mb): s.start for s in sched.slots}
    checked = 0
    for prog in lower(spec, sched):
        for i, a in enumerate(prog.actions):
            if a.op is not Op.RECV:
                continue
            posted = start[(a.block, a.mb)]
            before = [b for b in prog.actions[:i] if b.op is Op.COMPUTE and start[(b.block, b.mb)] >= posted]
            assert not before, (prog.device, a, before)
            checked += 1
    assert checked == 2 * (devices - 1) * n  # every forward and backward transfer
