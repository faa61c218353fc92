"""Program text round-trips and malformed actions are rejected."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import PlanError
from tessel_dsl.program import Action, Op, Program


@pytest.mark.parametrize("text, action", [
    ("F1:3", Action(Op.COMPUTE, "F1", 3)),
    ("SEND F1:3>2,3", Action(Op.SEND, "F1", 3, (2, 3))),
    ("RECV E:0<1", Action(Op.RECV, "E", 0, (1,))),
    ("WAIT B_2:10<0", Action(Op.WAIT, "B_2", 10, (0,))),
])
def test_action_text_round_trip(text, action):
    assert Action.parse(text) == action
    assert str(action) == text


@pytest.mark.parametrize("bad", ["", "F1", "F1:x", "SEND F1:3", "SEND F1:3<2", "RECV F1:3>2", "F1:3>2", "JUMP F1:3>2"])
def test_malformed_actions(bad):
    with pytest.raises(PlanError):
        Action.parse(bad)


def test_program_round_trip():
    text = "F0:0 SEND F0:0>1 F0:1 RECV B1:0<1 SEND F0:1>1 WAIT B1:0<1 B0:0"
    prog = Program.from_text(0, text)
    assert prog.text() == text
    assert [a.op for a in prog.actions].count(Op.SEND) == 2
