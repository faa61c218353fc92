"""Every shipped spec parses and checks (D=4 and D=8, train and infer) and models the paper's
placement; every file in specs/invalid/ fails with its documented class, code, line and column."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tessel_dsl.analysis import busy_time, lower_bound, microbatch_memory
from tessel_dsl.errors import SpecError, TslSyntaxError
from tessel_dsl.ir import Kind, Mode
from tessel_dsl.lang.parser import parse_file
from tests.paths import SPECS

SHIPPED = sorted(p.name for p in SPECS.glob("*.tsl"))


def test_all_seven_specs_are_shipped():
    assert set(SHIPPED) >= {"vshape.tsl", "xshape.tsl", "mshape.tsl", "nnshape.tsl", "kshape.tsl",
                            "interleaved.tsl", "zerobubble.tsl"}


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("d", [4, 8])
@pytest.mark.parametrize("mode", ["train", "infer"])
def test_shipped_spec_checks(name, d, mode):
    spec = parse_file(SPECS / name, sets={"D": str(d)}, mode=mode)
    assert spec.devices == d
    assert spec.mode is Mode(mode)
    assert all(max(need) <= spec.memory for need in [microbatch_memory(spec)])
    assert {x for b in spec.blocks for x in b.devices} == set(range(d))
    if mode == "infer":
        assert all(not b.kind.is_backward for b in spec.blocks)
    else:
        for b in spec.blocks:
            if b.kind.is_backward:
                assert spec.block(b.forward).kind is Kind.FORWARD


def test_shipped_specs_have_a_header_comment():
    for name in SHIPPED:
        assert (SPECS / name).read_text().startswith("# "), name


# (spec, D, mode) -> per-device work, memory M, as in DESIGN.md's table of the paper's shapes (at
# D=4); "D" where M grows with the devices (1F1B and Chimera keep up to D micro-batches in flight).
TABLE = [
    ("vshape.tsl", "train", 4, "D"), ("vshape.tsl", "infer", 1, 4),
    ("xshape.tsl", "train", 8, "D"), ("xshape.tsl", "infer", 2, 4),
    ("mshape.tsl", "train", 6, 6), ("mshape.tsl", "infer", 2, 4),
    ("nnshape.tsl", "train", 8, 6), ("nnshape.tsl", "infer", 3, 4),
    ("kshape.tsl", "train", 6, 6), ("kshape.tsl", "infer", 2, 4),
]


@pytest.mark.parametrize("name,mode,work,memory", TABLE)
@pytest.mark.parametrize("d", [4, 8])
def test_paper_shapes_work_and_memory(name, mode, work, memory, d):
    spec = parse_file(SPECS / name, sets={"D": str(d)}, mode=mode)
    assert busy_time(spec) == (work,) * d
    assert lower_bound(spec) == work
    assert spec.memory == (d if memory == "D" else memory)


def _chain(spec):
    """Edges as a set of (src, dst) names."""
    return {(e.src, e.dst) for e in spec.edges}


def test_mshape_graph_and_hand_calculated_bound():
    spec = parse_file(SPECS / "mshape.tsl")
    assert [b.name for b in spec.blocks if b.kind is Kind.FORWARD] == ["E", "F0", "F1", "F2", "F3"]
    assert spec.block("E").devices == spec.block("EB").devices == (0, 1, 2, 3)
    assert spec.block("B2").time == 3 and spec.block("B2").memory == -1 and spec.block("B2").forward == "F2"
    assert _chain(spec) == {("E", "F0"), ("F0", "F1"), ("F1", "F2"), ("F2", "F3"), ("F3", "B3"),
                            ("B3", "B2"), ("B2", "B1"), ("B1", "B0"), ("B0", "EB")}
    assert "E 1 + Fi 1 + Bi 3 + EB 1 = 6" in (SPECS / "mshape.tsl").read_text()
    assert lower_bound(spec) == 6
    assert spec.edge_tensor("F0", "F1").shape == (4, 2048, 4096)
    assert spec.edge_tensor("B1", "B0").dtype == "bf16"


def test_nnshape_graph():
    spec = parse_file(SPECS / "nnshape.tsl")
    order = ["E1", "F0", "F1", "E2", "F2", "F3", "B3", "B2", "E2B", "B1", "B0", "E1B"]
    assert _chain(spec) == set(zip(order, order[1:]))
    assert spec.units.time_label == "10ms" and spec.units.memory_bytes == 10**10
    assert spec.memory == 6  # 60GB at 10GB per unit
    assert spec.link.bandwidth == pytest.approx(50e9 * 0.01)
    assert spec.link.latency == pytest.approx(0.002)


def test_kshape_graph():
    spec = parse_file(SPECS / "kshape.tsl")
    assert _chain(spec) == {("F0", "F1"), ("F2", "F3"), ("F1", "J"), ("F3", "J"), ("J", "JB"),
                            ("JB", "B1"), ("JB", "B3"), ("B1", "B0"), ("B3", "B2")}
    assert spec.block("J").memory == 1 and spec.block("JB").memory == -1 and spec.block("JB").time == 1


def test_xshape_second_chain_runs_the_other_way():
    spec = parse_file(SPECS / "xshape.tsl")
    assert [spec.block(f"G{i}").devices for i in range(4)] == [(3,), (2,), (1,), (0,)]
    assert ("G3", "C3") in _chain(spec) and ("C1", "C0") in _chain(spec)
    assert spec.block("C0").forward == "G0"


def test_interleaved_and_zerobubble():
    il = parse_file(SPECS / "interleaved.tsl")
    assert il.block("F5").devices == (1,) and il.block("B5").devices == (1,)
    assert len(il.blocks) == 16
    zb = parse_file(SPECS / "zerobubble.tsl")
    assert zb.block("I2").kind is Kind.INPUT_GRAD and zb.block("W2").kind is Kind.WEIGHT_GRAD
    assert zb.block("W2").forward == "F2" and zb.block("I2").devices == (2,)
    assert {("F3", "I3"), ("I3", "I2"), ("I0", "W0")} <= _chain(zb)


# Each file in specs/invalid/ ends with what it must give, worked out by hand:
#   # expected: error[CODE] at LINE:COLUMN        (or `syntax error at LINE:COLUMN`; no `at`: no location)
# optionally followed by ` with --set K=V ...`. A new error code's file says it there, nothing here.
_EXPECTED = re.compile(r"^# expected: (syntax error|error\[([\w-]+)\])(?: at (\d+):(\d+))?((?: with)?(?: --set \S+)*)$",
                       re.M)


def _expected(path: Path):
    found = _EXPECTED.findall(path.read_text())
    assert len(found) == 1, f"{path}: needs one line '# expected: error[CODE] at LINE:COLUMN' (found {len(found)})"
    what, code, line, column, sets = found[0]
    cls = TslSyntaxError if what == "syntax error" else SpecError
    pairs = dict(s.split("=", 1) for s in sets.replace(" with", "").split("--set") if s.strip())
    return (cls, code or "syntax", int(line) if line else None, int(column) if column else None,
            {k.strip(): v.strip() for k, v in pairs.items()} or None)


INVALID = sorted(p.stem for p in (SPECS / "invalid").glob("*.tsl"))


def test_the_expectation_reader_reads_what_the_files_say():
    def expected(name):
        return _expected(SPECS / "invalid" / f"{name}.tsl")

    assert len(INVALID) >= 40
    assert expected("cycle") == (SpecError, "cycle", 6, 7, None)
    assert expected("syntax-missing-arrow") == (TslSyntaxError, "syntax", 6, 3, None)
    assert expected("unknown-set") == (SpecError, "unknown-set", None, None, {"X": "1"})
    assert expected("bad-set-value") == (SpecError, "bad-set-value", 2, 7, {"D": "four"})
    assert expected("param-self") == (SpecError, "unknown-name", 2, 11, None)


@pytest.mark.parametrize("name", INVALID)
def test_invalid_spec(name):
    path = SPECS / "invalid" / f"{name}.tsl"
    cls, code, line, column, sets = _expected(path)
    with pytest.raises(cls) as info:
        parse_file(path, sets=sets)
    err = info.value
    if cls is TslSyntaxError:
        loc = err.location
        assert "^" in str(err) and "syntax error" in str(err)
    else:
        assert len(err.diagnostics) == 1, str(err)  # one mistake, one message (no cascades)
        diag = err.diagnostics[0]
        assert diag.code == code
        loc = diag.location
    if line is None:
        assert loc is None
    else:
        assert (loc.file, loc.line, loc.column) == (str(path), line, column)


def test_written_out_mshape_in_the_docs_equals_the_derived_one():
    """The language tour's first example spells out what `use mshape` + `derive` produce."""
    import re

    from tessel_dsl.lang.parser import parse

    readme = (SPECS.parent / "README.md").read_text()
    tour = readme[readme.index("## The `.tsl` language: a tour"):]
    first = re.search(r"```\n(.*?)```", tour, re.S).group(1)
    written = parse(first)
    derived = parse_file(SPECS / "mshape.tsl")
    assert sorted(written.blocks, key=lambda b: b.name) == sorted(derived.blocks, key=lambda b: b.name)
    assert _chain(written) == _chain(derived)
    assert written.memory == derived.memory and written.microbatches == derived.microbatches
