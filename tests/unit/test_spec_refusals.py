"""Specs that used to pass `check` silently wrong, or end in a traceback: each is a clear error
with its file:line:col now."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import SpecError
from tessel_dsl.lang.parser import parse

BODY = "memory 4\nforward A on 0 time 1\n"


def codes(text: str, sets=None) -> list[tuple[str, int, int]]:
    with pytest.raises(SpecError) as info:
        parse(text, "s.tsl", sets=sets)
    return [(d.code, d.location.line, d.location.column) for d in info.value.diagnostics]


@pytest.mark.parametrize("text, where", [
    ("param X = X\ndevices 2\nmemory 4\nforward A on 0 time X\n", (1, 11)),
    ("param D = D\ndevices D\n" + BODY, (1, 11)),
    ("param D = D + 1\ndevices D\n" + BODY, (1, 11)),
    ("param D = 2 * (1 + D)\ndevices D\n" + BODY, (1, 20)),
])
def test_a_parameter_defined_by_itself_is_an_error_at_its_use(text, where):
    assert codes(text) == [("unknown-name", *where)]


def test_a_parameter_may_still_use_the_ones_before_it():
    spec = parse("param A = 2\nparam D = A + 1\ndevices D\n" + BODY)
    assert spec.devices == 3


def test_a_placement_with_no_blocks_is_refused_at_its_placement_line():
    assert codes("devices 2\nplacement p\nmemory 4\n") == [("no-blocks", 2, 1)]
    assert codes("devices 2\nmemory 4\n") == [("no-blocks", 1, 1)]


@pytest.mark.parametrize("text, sets", [
    ("devices 0\nmemory 8\nmemory 4 on -1\nforward A on 0 time 1\n", None),
    ("param D = 2\ndevices D\nmemory 8\nmemory 4 on D-1\nforward A on 0 time 1\n", {"D": "-1"}),
    ("devices 2\nmemory 8\nmemory 4 on -1\nforward A on 0 time 1\n", None),
])
def test_a_negative_device_in_memory_on_is_a_device_range_error(text, sets):
    found = codes(text, sets)
    assert ("device-range", 4 if sets else 3, 1) in found


HEAD = "devices 1\nresolution time 1ms\nresolution memory 1GB\n"


@pytest.mark.parametrize("text, where", [
    (HEAD + "memory 80GB + 1B\nforward A on 0 time 1ms\n", (4, 8)),
    (HEAD + "memory 80GB\nforward A on 0 time 1ms memory 2.000000001GB\n", (5, 32)),
    (HEAD + "memory 80GB\nforward A on 0 time 100000.00001ms\n", (5, 21)),
    (HEAD + "memory 80GB\nforward A on 0 time 3ms\nderive backward time 1.0000000001x\n", (6, 1)),
    (HEAD + "memory 80GB\nforward A on 0 time (1 + 0.000000000000000001)ms\n", (5, 21)),
    ("devices 1\nresolution memory 0.5B\nmemory 8B\nforward A on 0 time 1\n", (2, 19)),
])
def test_a_quantity_off_its_resolution_by_any_amount_is_reported(text, where):
    """Below 1e-9 of the value these were rounded without a word (80 GB, 2, 100000, 3 units)."""
    assert codes(text) == [("inexact-quantity", *where)]


def test_exact_arithmetic_accepts_what_is_whole_in_decimals():
    """0.1 x 30 is 3 exactly (a float gives 3.0000000000000004); a third times 15 is 5."""
    spec = parse("param T = 0.1\n" + HEAD + "memory (0.1 * 800)GB\n"
                 "forward A on 0 time (T * 30)ms memory (0.7 * 10)GB\nforward B on 0 time (1/3 * 15)ms\n"
                 "A -> B\nderive backward time (T * 20)x\n")
    assert sorted((b.name, b.time) for b in spec.blocks) == [("A", 3), ("AB", 6), ("B", 5), ("BB", 10)]
    assert spec.memory == 80 and spec.block("A").memory == 7
    assert dict(spec.params) == {"T": "0.1"}
    assert parse("param T = 1\n" + HEAD + "memory 8GB\nforward A on 0 time (T * 30)ms\n",
                 sets={"T": "0.1"}).block("A").time == 3


def test_a_number_too_fine_to_carry_exactly_is_refused():
    assert codes("devices 1\nmemory 8\nforward A on 0 time 1 + 0." + "0" * 40 + "1\n") == [("bad-value", 3, 25)]


@pytest.mark.parametrize("text, where", [
    ("devices 1\nresolution memory 1B\nmemory 2TB\nforward A on 0 time 1\n", (3, 1)),
    ("devices 1\nresolution memory 1B\nmemory 8\nforward A on 0 time 1 memory 2TB\n", (4, 9)),
    ("devices 1\nresolution time 1ns\nmemory 8\nforward A on 0 time 1200s\n", (4, 9)),
    ("devices 2\nmemory 8\nforward A on 0 time 1\nforward B on 1 time 1\n"
     "A -> B : [1000000000, 1000000000, 2] f32\n", (5, 6)),
    ("devices 1\nresolution time 1ns\nmemory 8\nmicrobatches 1000\nforward A on 0 time 10s\n", (4, 1)),
    ("devices 2\nmemory 8\nlink latency 2000000000000\nforward A on 0 time 1\nforward B on 1 time 1\nA -> B\n",
     (3, 1)),
    ("devices 1\nmemory 8\nforward F" + "x" * 300 + " on 0 time 1\n", (3, 9)),
])
def test_what_a_plan_loader_would_refuse_is_refused_by_check(text, where):
    """One table of limits (tessel_dsl/limits.py): these passed `check`, and `search` wrote plans
    that every loader then refused (spec.memory must be between 0 and 1099511627776, ...)."""
    assert codes(text) == [("too-large", *where)]


def test_a_spec_at_the_limits_gives_a_plan_that_loads(tmp_path):
    from tessel_dsl.plan import load_plan, make_plan, save_plan
    from tessel_dsl.schedule import Schedule, Slot

    spec = parse("devices 1\nresolution memory 1B\nmemory 1TB\nmicrobatches 2\n"
                 "forward A on 0 time 1 memory 1TB\nbackward B of A on 0 time 1 memory -1TB\nA -> B\n")
    assert spec.memory == 10 ** 12
    schedule = Schedule(2, tuple(Slot(2 * mb + i, b, mb) for mb in range(2) for i, b in enumerate("AB")))
    save_plan(make_plan(spec, schedule), tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json").spec == spec


def test_a_chain_over_thousands_of_undefined_names_reports_twenty_and_a_count():
    """One error per name was 200,002 lines and a minute of CPU for a chain of 100,001 names."""
    from tessel_dsl.lang.spec_check import MAX_REPEATED

    text = "devices 1\nmemory 4\nforward A on 0 time 1\nA -> chain(X{i} for i in 0..2000)\n"
    with pytest.raises(SpecError) as info:
        parse(text, "s.tsl")
    found = info.value.diagnostics
    assert [d.code for d in found] == ["unknown-name"] * (MAX_REPEATED + 1)
    assert found[0].message == "dependency X0 -> X1 names X0, which is not a block"
    # 2,001 names: A -> X0 has one unknown end, each of the 2,000 inner edges two.
    assert found[-1].message == f"and {1 + 2 * 2000 - MAX_REPEATED} more like the ones above"
    assert str(found[-1]).startswith("s.tsl:4:12: error[unknown-name]: and ")


def test_repeated_errors_of_a_loop_are_capped_per_code():
    from tessel_dsl.lang.spec_check import MAX_REPEATED

    text = "devices 2\nmemory 4\nfor i in 0..99:\n    forward F{i} on 7 time 1\n"
    with pytest.raises(SpecError) as info:
        parse(text, "s.tsl")
    found = info.value.diagnostics
    assert [d.code for d in found] == ["device-range"] * (MAX_REPEATED + 1)
    assert found[-1].message == f"and {100 - MAX_REPEATED} more like the ones above"
