"""A spec means what it says: no backward before its forward, no silently ignored options, no
silent rounding, and one micro-batch's memory stays consistent."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import SpecError
from tessel_dsl.lang.parser import parse

HEAD = "placement p\ndevices 2\nmemory 8\n"

# The spec of the report: two stages, the backward chain written out, `F1 -> B1` forgotten.
FORGOT_EDGE = HEAD + ("forward F0 on 0 time 1 memory 1\nforward F1 on 1 time 1 memory 1\n"
                      "backward B1 on 1 time 2 memory -1\nbackward B0 on 0 time 2 memory -1\n"
                      "F0 -> F1\nB1 -> B0\n")


def diag(text: str, mode: str | None = None) -> str:
    with pytest.raises(SpecError) as err:
        parse(text, mode=mode)
    return str(err.value)


def test_backward_without_a_path_from_its_forward_is_an_error():
    msg = diag(FORGOT_EDGE)
    assert "<string>:6:10: error[backward-before-forward]: backward block B1 does not depend on its forward F1" in msg
    # B0 depends on F0 only through B1, which has no path from F1 or F0 either.
    assert "backward block B0 does not depend on its forward F0" in msg
    spec = parse(FORGOT_EDGE + "F1 -> B1\n")
    assert [b.name for b in spec.blocks] == ["F0", "F1", "B1", "B0"]


@pytest.mark.parametrize("kind", ["input_grad", "weight_grad"])
def test_split_backward_blocks_need_their_forward_too(kind):
    text = HEAD + f"forward F0 on 0 time 1 memory 1\n{kind} I0 of F0 on 0 time 1 memory -1\n"
    assert f"{kind} block I0 does not depend on its forward F0" in diag(text)
    parse(text + "F0 -> I0\n")


def test_grad_time_without_derive_backward_names_the_line():
    text = HEAD + "forward F0 on 0 time 1 memory 1 grad time 3\nforward F1 on 1 time 1 grad B9\nF0 -> F1\n"
    msg = diag(text)
    assert "<string>:4:9: error[grad-without-derive]: `grad` options of F0" in msg
    assert "<string>:5:9: error[grad-without-derive]: `grad` options of F1" in msg
    assert len(parse(text + "derive backward\n").blocks) == 4


@pytest.mark.parametrize("line,fragment", [
    ("forward F0 on 0 time 1ms memory 2.5GB", "memory 2.5GB is 2.5 units of `resolution memory 1GB`"),
    ("forward F0 on 0 time 1.5ms memory 2GB", "time 1.5ms is 1.5 units of `resolution time 1ms`"),
    ("forward F0 on 0 time 1ms memory 1500MB", "memory 1500MB is 1.5 units"),
])
def test_quantities_that_do_not_divide_the_resolution_are_errors(line, fragment):
    head = "placement p\ndevices 1\nmemory 10GB\nresolution memory 1GB\nresolution time 1ms\n"
    msg = diag(head + line + "\n")
    assert "<string>:6:" in msg and "error[inexact-quantity]" in msg and fragment in msg


def test_exact_multiples_of_the_resolution_are_kept():
    head = "placement p\ndevices 1\nmemory 10GB\nresolution memory 0.5GB\nresolution time 0.1ms\n"
    spec = parse(head + "forward F0 on 0 time 0.3ms memory 2.5GB\n")
    assert spec.blocks[0].time == 3 and spec.blocks[0].memory == 5


def test_memory_of_one_microbatch_never_goes_below_zero():
    text = HEAD + "forward F0 on 0 time 1 memory 1\nbackward B0 on 0 time 2 memory -3\nF0 -> B0\n"
    msg = diag(text)
    assert "error[negative-memory]: B0 frees more memory on device 0" in msg and "reaches -2" in msg


def test_training_forwards_must_be_freed_by_their_backwards():
    text = HEAD + "forward F0 on 0 time 1 memory 3\nbackward B0 on 0 time 2 memory -1\nF0 -> B0\n"
    msg = diag(text)
    assert "error[memory-not-freed]: on device 0 the forwards (F0) allocate 2 more than the backwards free" in msg
    # Memory that is meant to stay is declared as such, on an `other` block.
    parse(text.replace("memory 3", "memory 1") + "other W on 0 time 1 memory 2\n")
    # Inference keeps no activations for a backward pass, so nothing is left to free.
    parse(HEAD + "forward F0 on 0 time 1 memory 3\nderive backward\nmode infer\n")


def test_a_derived_backward_time_is_never_rounded():
    # 1.5 x 3 units = 4.5 units: refused at the `derive backward` line, not made 5.
    text = HEAD + "forward F0 on 0 time 3 memory 1\nforward F1 on 1 time 2 memory 1\nF0 -> F1\n"
    msg = diag(text + "derive backward time 1.5x\n")
    assert "<string>:7:1: error[inexact-quantity]: `derive backward time 1.5x` makes the backward of F0 " \
           "1.5 x 3 = 4.5 units, not a whole number" in msg
    assert "backward of F1" not in msg  # 1.5 x 2 = 3 is whole
    spec = parse(text.replace("time 3", "time 4") + "derive backward time 1.5x\n")
    assert {b.name: b.time for b in spec.blocks} == {"F0": 4, "F1": 2, "B1": 3, "B0": 6}


def test_a_forwards_own_grad_ratio_is_never_rounded():
    head = "placement p\ndevices 1\nmemory 8\nresolution time 1ms\n"
    msg = diag(head + "forward F0 on 0 time 3ms memory 1 grad time 0.5x\nderive backward\n")
    assert "<string>:5:9: error[inexact-quantity]: `grad time 0.5x` of F0 makes the backward of F0 " \
           "0.5 x 3 = 1.5 units of `resolution time 1ms`" in msg
    spec = parse(head + "forward F0 on 0 time 4ms memory 1 grad time 0.5x\nderive backward\n")
    assert spec.block("B0").time == 2
