"""The size limits on specs whose expansion runs long before the limit stops it."""
from __future__ import annotations

from tessel_dsl.limits import MAX_EXPANSION
from tests.unit.test_limits import HEAD, error


def test_edge_groups_are_charged_to_the_budget():
    text = HEAD + "{F{i} for i in 0..99999} -> {G{j} for j in 0..99999}\n"
    assert "expansion budget exceeded" in error(text)


def test_nested_loops_share_one_expansion_budget():
    text = HEAD + "for a in 0..99:\n for b in 0..99:\n  for c in 0..99:\n   for d in 0..99:\n    F0 -> F0\n"
    msg = error(text)
    assert "error[too-large]" in msg and f"at most {MAX_EXPANSION} items" in msg
    assert msg.count("\n") == 0  # one diagnostic, not one per iteration


def test_shapes_that_double_stop_at_a_limit():
    shapes = "".join(f"shape s{i}():\n  use s{i - 1}()\n  use s{i - 1}()\n" for i in range(1, 40))
    msg = error(HEAD + shapes + "shape s0():\n  forward X on 0 time 1\nuse s39()\n")
    assert "error[too-large]" in msg and msg.count("\n") == 0
