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
