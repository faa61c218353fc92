"""The language, construct by construct: text in, IR out (tables of small specs)."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import SpecError, TslSyntaxError
from tessel_dsl.ir import Kind, Mode, Tensor
from tessel_dsl.lang.parser import parse

HEAD = "devices 4\nmemory 8\n"


def edges(spec):
    return [(e.src, e.dst) for e in spec.edges]


def test_minimal_spec_and_defaults():
    spec = parse(HEAD + "forward A on 0 time 1\n")
    assert spec.name == "spec" and spec.devices == 4 and spec.memory == 8
    assert spec.microbatches == 1 and spec.mode is Mode.TRAIN
    a = spec.block("A")
    assert (a.kind, a.devices, a.time, a.memory, a.forward) == (Kind.FORWARD, (0,), 1, 0, None)
    assert a.span.line == 3 and a.span.column == 9


def test_no_trailing_newline_comments_and_blank_lines():
    spec = parse("# header\n\n" + HEAD + "forward A on 0 time 1   # trailing comment\n\n# end")
    assert [b.name for b in spec.blocks] == ["A"]


@pytest.mark.parametrize("devset,expected", [
    ("0", (0,)), ("3", (3,)), ("1..3", (1, 2, 3)), ("[0, 2]", (0, 2)), ("[3, 1]", (3, 1)),
    ("all", (0, 1, 2, 3)), ("D-1", (3,)), ("D/2..D-1", (2, 3)),
])
def test_device_sets(devset, expected):
    spec = parse(f"param D = 4\ndevices D\nmemory 4\nforward A on {devset} time 1\n")
    assert spec.block("A").devices == expected


@pytest.mark.parametrize("text,expected", [
    ("a -> b -> c", [("a", "b"), ("b", "c")]),
    ("a -> {b, c} -> d", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]),
    ("{a, b} -> c", [("a", "c"), ("b", "c")]),
    ("chain(n{i} for i in 0..2)", [("n0", "n1"), ("n1", "n2")]),
    ("a -> chain(n{i} for i in 0..2) -> d", [("a", "n0"), ("n0", "n1"), ("n1", "n2"), ("n2", "d")]),
    ("a -> {n{i} for i in 0..1} -> d", [("a", "n0"), ("a", "n1"), ("n0", "d"), ("n1", "d")]),
    ("a -> b\na -> b", [("a", "b")]),
])
def test_dependencies(text, expected):
    blocks = "".join(f"forward {n} on 0 time 1\n" for n in ["a", "b", "c", "d", "n0", "n1", "n2"])
    spec = parse(HEAD + blocks + text + "\n")
    assert sorted(edges(spec)) == sorted(expected)


def test_dependency_over_several_lines_inside_brackets():
    spec = parse(HEAD + "forward a on 0 time 1\nforward b on 1 time 1\nforward c on 2 time 1\n"
                 "a -> {\n    b,\n    c,\n}\n")
    assert edges(spec) == [("a", "b"), ("a", "c")]


def test_tensor_annotation_uses_params():
    spec = parse("param mb = 2\nparam H = 16\n" + HEAD +
                 "forward a on 0 time 1\nforward b on 1 time 1\na -> b : [mb, 8, H * 2] bf16\n")
    assert spec.edges[0].tensor == Tensor((2, 8, 32), "bf16")
    assert spec.edges[0].tensor.nbytes == 2 * 8 * 32 * 2


def test_loops_nested_and_inline():
    spec = parse("param D = 3\ndevices D\nmemory 9\n"
                 "for c in 0..1:\n    for i in 0..D-1:\n        forward F{c*D+i} on i time 1 memory 1\n"
                 "for k in 0..4: F{k} -> F{k+1}\n")
    assert [b.name for b in spec.blocks] == [f"F{k}" for k in range(6)]
    assert spec.block("F4").devices == (1,)
    assert edges(spec) == [(f"F{k}", f"F{k+1}") for k in range(5)]


def test_params_set_and_expressions():
    text = "param D = 4\nparam H = D / 2\ndevices D\nmemory 4\nforward A on H time D - 1\n"
    assert parse(text).block("A").devices == (2,)
    spec = parse(text, sets={"D": "8"})
    assert spec.devices == 8 and spec.block("A").devices == (4,) and spec.block("A").time == 7
    assert spec.params == (("D", "8"), ("H", "4"))


def test_modulo_places_interleaved_chunks():
    # chunk k of 8 on device k % 4, the way interleaved placements are written; a template name
    # takes it too, and the remainder has the divisor's sign, as in Python
    text = HEAD + ("param D = 4\nfor k in 0..7:\n    forward C{k} on k % D time 1\n"
                   "forward X{9 % D} on (0 - 1) % D time 1\nforward Y on 3%2 time 7 % 4\n")
    spec = parse(text)
    assert [spec.block(f"C{k}").devices for k in range(8)] == [(0,), (1,), (2,), (3,)] * 2
    assert spec.block("X1").devices == (3,)
    assert spec.block("Y").devices == (1,) and spec.block("Y").time == 3
    # `%` binds like `*` and `/`: 2 + 7 % 4 * 2 is 2 + ((7 % 4) * 2)
    assert parse(HEAD + "forward Z on 0 time 2 + 7 % 4 * 2\n").block("Z").time == 8
    assert parse(HEAD + "forward A on 0 time 1\nexpect bubble <= 30%\n").expectations[0].value == 0.3


def test_modulo_by_zero_is_an_error_at_its_place():
    with pytest.raises(SpecError) as info:
        parse(HEAD + "forward A on 3 % 0 time 1\n", file="x.tsl")
    (d,) = info.value.diagnostics
    assert d.code == "bad-value" and "modulo by zero" in d.message
    assert (d.location.line, d.location.column) == (3, 14)


def test_param_without_value_takes_set():
    spec = parse("param D\ndevices D\nmemory 4\nforward A on 0 time 1\n", sets={"D": "2"})
    assert spec.devices == 2


def test_shapes_with_defaults_keywords_and_positional_args():
    text = ("shape pair(D, t=1, m=1):\n"
            "    forward P0 on 0 time t memory m\n"
            "    forward P1 on D-1 time t memory m\n"
            "    P0 -> P1\n" + HEAD + "use pair(4, m=2)\n")
    spec = parse(text)
    assert spec.block("P1").devices == (3,) and spec.block("P1").memory == 2 and spec.block("P1").time == 1


def test_include_is_relative_to_the_including_file(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "s.tsl").write_text("shape one(t):\n    forward X on 0 time t\n")
    (tmp_path / "m.tsl").write_text('include "lib/s.tsl"\n' + HEAD + "use one(5)\n")
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(tmp_path / "m.tsl")
    assert spec.block("X").time == 5 and spec.name == "m"


def test_derived_backward_names_times_memory_and_edges():
    text = (HEAD + "forward E on all time 1 grad time 1\n"
            "for i in 0..1:\n    forward F{i} on i time 2 memory 1\n"
            "forward G on 3 time 1 memory 2 grad Gr grad time 1x\n"
            "E -> F0 -> F1\nE -> G\nderive backward time 3x\n")
    spec = parse(text)
    b = {x.name: x for x in spec.blocks}
    assert b["B0"].time == 6 and b["B0"].memory == -1 and b["B0"].forward == "F0"
    assert b["EB"].time == 1 and b["EB"].devices == (0, 1, 2, 3)
    assert b["Gr"].time == 1 and b["Gr"].memory == -2 and b["Gr"].kind is Kind.BACKWARD
    assert set(edges(spec)) == {("E", "F0"), ("F0", "F1"), ("E", "G"), ("F1", "B1"), ("B1", "B0"),
                                ("B0", "EB"), ("G", "Gr"), ("Gr", "EB")}


def test_derive_default_ratio_is_two():
    spec = parse(HEAD + "forward F0 on 0 time 2\nderive backward\n")
    assert spec.block("B0").time == 4


def test_explicit_backward_is_not_derived_again():
    text = (HEAD + "forward F0 on 0 time 1 memory 1\nforward F1 on 1 time 1 memory 1\n"
            "backward B1 of F1 time 5 memory -1\nF0 -> F1 -> B1\nderive backward time 3x\n")
    spec = parse(text)
    assert spec.block("B1").time == 5 and spec.block("B1").devices == (1,)
    assert spec.block("B0").time == 3
    assert ("B1", "B0") in edges(spec) and len([b for b in spec.blocks if b.name == "B1"]) == 1


def test_backward_finds_its_forward_by_name():
    spec = parse(HEAD + "forward F0 on 0 time 1 memory 1\nbackward B0 time 2 memory -1\n"
                 "forward X on 1 time 1\nbackward XB time 1\nF0 -> B0\nX -> XB\n")
    assert spec.block("B0").forward == "F0" and spec.block("B0").devices == (0,)
    assert spec.block("XB").forward == "X"


def test_infer_mode_keeps_forward_blocks_and_infer_memory():
    text = ("devices 2\nmemory 6, infer 3\nforward F0 on 0 time 1 memory 1 infer memory 1\n"
            "forward F1 on 1 time 1 memory 1\nF0 -> F1\nderive backward time 3x\n")
    assert len(parse(text).blocks) == 4
    spec = parse(text, mode="infer")
    assert [b.name for b in spec.blocks] == ["F0", "F1"] and spec.memory == 3
    assert [b.memory for b in spec.blocks] == [1, 0] and edges(spec) == [("F0", "F1")]
    assert parse(text + "mode infer\n").mode is Mode.INFER
    assert parse(text + "mode infer\n", mode="train").mode is Mode.TRAIN


def test_units_resolutions_and_link():
    text = ("resolution time 0.5ms\nresolution memory 512MiB\ndevices 2\nmemory 8GiB\n"
            "link latency 10us bandwidth 100 GB/s\n"
            "forward A on 0 time 1.5ms memory 1GiB\nforward B on 1 time 2\n")
    spec = parse(text)
    assert spec.block("A").time == 3 and spec.block("A").memory == 2 and spec.block("B").time == 2
    assert spec.memory == 16
    assert spec.units.time_seconds == pytest.approx(0.0005) and spec.units.time_label == "0.5ms"
    assert spec.units.memory_bytes == 512 * 2**20 and spec.units.memory_label == "512MiB"
    assert spec.link.latency == pytest.approx(0.02)
    assert spec.link.bandwidth == pytest.approx(100e9 * 0.0005)


@pytest.mark.parametrize("link, where, why", [
    ("link bandwidth 0", 16, "must be positive"),
    ("resolution time 1us\nlink latency 1 bandwidth 0 GB/s", 26, "must be positive"),
    # 1 B/s is 1e-9 bytes per 1ns unit: a real but tiny rate, stored rounded it would read as 0
    ("resolution time 1ns\nlink bandwidth 1 B/s", 16, "rounds to 0"),
    ("link bandwidth 0.0000001", 16, "rounds to 0"),
])
def test_link_bandwidth_that_is_or_rounds_to_zero_is_an_error(link, where, why):
    text = f"devices 2\nmemory 4\n{link}\nforward A on 0 time 1\nforward B on 1 time 1\nA -> B\n"
    line = 3 + link.count("\n")
    with pytest.raises(SpecError) as err:
        parse(text, "l.tsl")
    (d,) = err.value.diagnostics
    assert d.code == "bad-link" and why in d.message
    assert (d.location.file, d.location.line, d.location.column) == ("l.tsl", line, where)


def test_link_bandwidth_small_but_representable_is_kept():
    text = "devices 2\nmemory 4\nresolution time 1ns\nlink bandwidth 1 GB/s\nforward A on 0 time 1\n"
    assert parse(text).link.bandwidth == 1.0
    assert parse(text.replace("1 GB/s", "0.001")).link.bandwidth == 0.001


def test_expectations():
    text = (HEAD + "microbatches 8\nforward A on 0 time 1\n"
            "expect bubble <= 5% at N=128\nexpect peak_memory <= M\nexpect deadlock_free\n"
            "expect period == lower_bound\nexpect makespan < 40\n")
    got = [(x.metric, x.op, x.value, x.microbatches) for x in parse(text).expectations]
    assert got == [("bubble", "<=", 0.05, 128), ("peak_memory", "<=", "M", None),
                   ("deadlock_free", "==", None, None), ("period", "==", "lower_bound", None),
                   ("makespan", "<", 40.0, None)]


def test_placement_name_and_microbatches():
    spec = parse("placement gpt\nparam N = 12\n" + HEAD + "microbatches N\nforward A on 0 time 1\n",
                 sets={"N": "64"})
    assert spec.name == "gpt" and spec.microbatches == 64


@pytest.mark.parametrize("text,line,column,fragment", [
    ("devices 2\nmemory 4\nforward A on 0 time 1\nA B\n", 4, 3, "'->'"),
    ("devices 2\nmemory 4\nforward A on 0 time\n", 3, 20, "end of line"),
    ("devices 2\nmemory 4\nfor i in 0..1:\nforward A on 0 time 1\n", 4, 1, "indented block"),
    ("devices 2\nmemory 4\nforward F{i+} on 0 time 1\n", 3, 13, "unexpected '}'"),
    ("devices 2\nmemory 4\nforward F{i ! 1} on 0 time 1\n", 3, 13, "unexpected character '!'"),
    ("devices 2\nmemory 4\nforward A on 0 time 1\nA -> (\n", 4, 6, "unexpected '('"),
    ("devices 2\nmemory 4\nforward A on 0 time 1\nA -> {B,\n", 4, 9, "end of file"),
    ("devices 2 @\n", 1, 11, "unexpected character '@'"),
])
def test_syntax_errors_point_at_the_problem(text, line, column, fragment):
    with pytest.raises(TslSyntaxError) as info:
        parse(text, file="x.tsl")
    err = info.value
    assert (err.location.line, err.location.column) == (line, column), str(err)
    assert fragment in str(err)
    assert str(err).startswith(f"x.tsl:{line}:{column}: syntax error")


def test_all_problems_reported_together():
    text = ("param D\ndevices 2\nmemory 4\nforward A on 5 time 0\nforward A on 0 time 1\n"
            "A -> Z\n")
    with pytest.raises(SpecError) as info:
        parse(text)
    codes = [d.code for d in info.value.diagnostics]
    assert codes == ["unset-param", "device-range", "non-positive-time", "duplicate-name", "unknown-name"]


def test_a_loop_that_repeats_a_name_is_reported_once_per_name_at_its_line():
    # `C{k % 2}` in a loop of 8: C0 and C1 four times each. Two errors at the loop's line, not
    # one per repeat pointing at itself as "first at", and no derived-backward clash on top.
    text = HEAD + ("for k in 0..7:\n    forward C{k % 2} on k % 4 time 1\n"
                   "forward A on 0 time 1\nforward A on 1 time 1\nderive backward\n")
    with pytest.raises(SpecError) as info:
        parse(text, file="x.tsl")
    got = [(d.code, d.location.line, d.message) for d in info.value.diagnostics]
    loop_line = HEAD.count("\n") + 2
    assert got[:2] == [("duplicate-name", loop_line, f"block C{i} is declared more than once by this line (in a "
                        "loop, or a shape used twice, its name must differ each time)") for i in (0, 1)]
    assert [(c, line) for c, line, _ in got[2:]] == [("duplicate-name", loop_line + 2)]
    assert "first at x.tsl:" in got[2][2]


def test_unknown_set_and_bad_mode():
    with pytest.raises(SpecError) as info:
        parse(HEAD + "forward A on 0 time 1\n", sets={"Q": "3"}, mode="sideways")
    assert sorted(d.code for d in info.value.diagnostics) == ["bad-mode", "unknown-set"]


def test_a_backward_without_of_is_reported_once_with_the_fix():
    # Neither name guesses its forward (B<x> -> F<x>, <x>B -> <x>): one diagnostic each, at the
    # declaration, saying to write `of NAME`; the checker's "has no forward block" is the same fault.
    text = HEAD + "forward F0 on 0 time 1 memory 1\nfor s in 0..1:\n    backward I{s} on 0 time 2 memory -1\nF0 -> I0\n"
    with pytest.raises(SpecError) as err:
        parse(text, "b.tsl")
    found = [(d.code, d.message.split(" does not say")[0], d.location.line) for d in err.value.diagnostics]
    assert found == [("missing-forward", "backward block I0", 5), ("missing-forward", "backward block I1", 5)]
    assert all("write `of NAME`" in d.message for d in err.value.diagnostics)
