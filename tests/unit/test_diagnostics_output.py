"""How diagnostics read where they are read: in a CI log (stderr not a terminal) each stays one
line; a syntax error on a very long line echoes the part around the column; every spec error
names its file (and line and column where a line can show the problem)."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import SpecError, TslSyntaxError
from tessel_dsl.lang.parser import parse, parse_file
from tests.helpers import run_cli


def test_diagnostics_on_a_pipe_are_never_wrapped(tmp_path, capsys):
    deep = tmp_path / ("a_rather_long_folder_name_" * 3) / "and_another_one"
    deep.mkdir(parents=True)
    spec = deep / "spec_with_a_long_name.tsl"
    spec.write_text("devices 2\nmemory 4\nforward A on 0 time 1\nA -> B\nA -> C\n")
    code, _out, err = run_cli(capsys, "check", str(spec))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 2, err  # one line per diagnostic, however long (rich wrapped at 80 columns)
    assert lines[0].startswith(f"error: {spec}:4:6: error[unknown-name]: dependency A -> B names B")
    assert lines[1].startswith(f"{spec}:5:6: error[unknown-name]")
    assert all(len(line) > 100 for line in lines)


def test_a_syntax_error_on_a_long_line_echoes_a_window_around_the_column():
    line = "forward A on 0 time 1 " + "memory 1 " * 1000 + "! " + "x" * 10_000
    with pytest.raises(TslSyntaxError) as info:
        parse(f"devices 1\nmemory 4\n{line}\n", "s.tsl")
    text = str(info.value)
    assert len(text) < 400, len(text)  # it echoed all 19,000 characters
    echoed, caret = text.splitlines()[1:3]
    assert caret.index("^") == echoed.index("!")
    assert echoed.strip().startswith("...") and echoed.endswith("...")
    assert text.startswith(f"s.tsl:3:{line.index('!') + 1}: syntax error: unexpected character '!'")


def test_a_short_line_is_echoed_whole():
    with pytest.raises(TslSyntaxError) as info:
        parse("devices 1\nmemory 4\nforward A on 0 time 1 !\n", "s.tsl")
    assert "\n    forward A on 0 time 1 !\n" + " " * 4 + " " * 22 + "^" in str(info.value)


def test_cannot_read_names_the_file_and_no_blocks_its_line(tmp_path):
    missing = tmp_path / "missing.tsl"
    with pytest.raises(SpecError) as info:
        parse_file(missing)
    assert str(info.value) == f"{missing}: error[cannot-read]: cannot read spec: No such file or directory"
    empty = tmp_path / "empty.tsl"
    empty.write_text("devices 1\nmemory 4\n")
    with pytest.raises(SpecError) as info:
        parse_file(empty)
    assert str(info.value) == f"{empty}:1:1: error[no-blocks]: the placement declares no blocks"


@pytest.mark.parametrize("devices", ["0,1", "2*s, 2*s+1"])
def test_a_device_list_without_brackets_says_how_to_write_it(devices):
    text = f"devices 4\nmemory 4\nfor s in 0..1:\n    forward A{{s}} on {devices} time 1 memory 1\n"
    with pytest.raises(TslSyntaxError) as info:
        parse(text, "s.tsl")
    err = info.value
    assert (err.location.line, err.location.column) == (4, 21 + devices.index(","))
    assert "several devices are written [0, 1] or 0..1" in str(err)
    # only what may be written there is offered: the parser's own rule names are not
    assert err.expected and not any(w.startswith("__") or "star" in w for w in err.expected)
    assert "'time'" in err.expected and "'memory'" in err.expected
