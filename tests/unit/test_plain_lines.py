"""Plain block lines are read without the parser (`tessel_dsl/lang/plain_lines.py`): the syntax
tree must be exactly the parser's, locations included, and anything unusual must go to the parser."""
from __future__ import annotations

import random

import pytest

from tessel_dsl.errors import SpecError, TslSyntaxError
from tessel_dsl.lang import parser as P
from tests.paths import ROOT, SPECS


def by_parser(text: str, monkeypatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(P, "split_plain_lines", lambda text, file, keywords: (text, []))
        try:
            return P.parse_module(text, "f.tsl")
        except TslSyntaxError as e:
            return str(e)


def both(text: str, monkeypatch) -> tuple[object, object]:
    try:
        fast = P.parse_module(text, "f.tsl")
    except TslSyntaxError as e:
        fast = str(e)
    return fast, by_parser(text, monkeypatch)


LINES = [
    "forward A on 0 time 1",
    "forward F12 on 3 time 2.5ms memory 1GB",
    "backward B of A on all time 3 memory -1",
    "backward B of A time 3",
    "input_grad I0 of F0 on 0..3 time 2 ms memory 0.5 GB # a comment",
    "weight_grad W0 of F0 on 1 .. 2 time 2",
    "other O on 2 time 7 memory 4",
    "forward\tT\ton\t1\ttime\t1ms\tmemory\t2",
    "forward G on 0 time 1 memory 2 grad GB grad time 3x infer memory 1",
    "forward G on 0 time 1 grad time 1.5x",
    "forward H on 0 time 01 memory 0010",
    "forward A on 0 time 1 memory 2 time 3",      # a repeated option: the evaluator reports it
    "forward A on 0 time 1e5",                    # unit `e5`
    "forward A on 0 time 1 train",                # not an option
    "forward time on 0 time 1",                   # a keyword as a name
    "forward A on 0 time 1 memory",               # unfinished
    "forward A on 0 time 2.5.3",
    "forward F{1} on 0 time 1",
    "forward A on [0, 1] time 1",
    "forward A on 0 time 1 + 1",
    "forward A on 0 time (1)ms",
    "forward A on 0 time -1",
    "forward A on 0 time 12345678901234567",
    "forward A on allx time 1",
    "forward A on 0x time 1",
    "forwardA on 0 time 1",
    "forward A on 0 time 1 memory 2GB grad",
    "forward A of B on 0 time 1",
]


@pytest.mark.parametrize("line", LINES)
def test_a_line_reads_as_the_parser_reads_it(line, monkeypatch):
    text = f"devices 4\nmemory 8\n{line}\nforward Z on 1 time 1\n"
    fast, slow = both(text, monkeypatch)
    assert fast == slow


@pytest.mark.parametrize("text", [
    "for i in 0..1:\nforward A on 0 time 1\n",            # a body that is missing
    "for i in 0..1:\n\n# c\nforward A on 0 time 1\n",
    "for i in 0..1:\n    forward F{i} on 0 time 1\nforward A on 0 time 1\n",
    "shape s():\n    forward X on 0 time 1\nforward A on 0 time 1\nuse s()\n",
    "A -> (\nforward A on 0 time 1\n)\n",
    "link latency 1 \\\nforward A on 0 time 1\n",
    'include "x#y.tsl"\nforward A on 0 time 1\n',
    "forward A on 0 time 1\r\nforward B on 0 time 1\r\n",
    "forward A on 0 time 1",                             # no final newline
    "devices 2\nforward A on 0 time 1\n  forward B on 0 time 1\n",
])
def test_context_decides_as_the_parser_would(text, monkeypatch):
    fast, slow = both(text, monkeypatch)
    assert fast == slow


def test_every_spec_of_the_project_reads_the_same(monkeypatch):
    files = sorted(SPECS.rglob("*.tsl")) + sorted((ROOT / "bench").rglob("*.tsl"))
    assert len(files) > 20
    for path in files:
        text = path.read_text()
        fast, slow = both(text, monkeypatch)
        assert fast == slow, path


def test_random_block_lines_read_the_same(monkeypatch):
    rng = random.Random(7)
    words = ["forward", "backward", "on", "of", "time", "memory", "grad", "infer", "all", "A", "B1", "x",
             "1", "2.5", "0..2", "ms", "GB", "#c", "..", "3x", "  ", "\t"]
    lines = []
    for _ in range(400):
        kind = rng.choice(["forward", "backward", "other", "weight_grad"])
        lines.append(" ".join([kind, rng.choice(["A", "B1", "F{1}", "time"])]
                              + [rng.choice(words) for _ in range(rng.randint(0, 8))]))
    for line in lines:
        fast, slow = both(f"devices 4\nmemory 8\n{line}\n", monkeypatch)
        assert fast == slow, line


def test_a_plain_line_error_still_names_its_place():
    with pytest.raises(SpecError) as info:
        P.parse("devices 2\nmemory 8\nforward A on 5 time 1\n", "f.tsl")
    assert str(info.value).startswith("f.tsl:3:9: error[device-range]")
