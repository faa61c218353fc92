"""Inputs that used to end in a traceback, a hang or a memory blow-up: each is a clear error, found
by a limit that is checked before the work it bounds (docs/validation.md lists them)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tessel_dsl.errors import SpecError, TesselError
from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.limits import MAX_STATEMENT_CHARS

HEAD = "placement p\ndevices 2\nmemory 8\n"


def error(text: str, **kw) -> str:
    with pytest.raises(TesselError) as err:
        parse(text, **kw)
    return str(err.value)


@pytest.mark.parametrize("text,fragment", [
    (HEAD + "param X = " + "9" * 400 + "\nforward F0 on 0 time X\n", "has 400 digits"),
    (HEAD + "forward F0 on 0 time 1\nderive backward time " + "9" * 400 + "x\n", "has 400 digits"),
    (HEAD + "param X = " + "9" * 5000 + "\n", "has 5000 digits"),
    (HEAD + "forward F0 on 0 time 1" + "0" * 30 + ".5\n", "digits"),
    (HEAD + "forward F0 on 0 time 9999999999999999\n", "number out of range"),
])
def test_long_numbers_are_clear_errors(text, fragment):
    assert fragment in error(text)


def test_a_huge_set_value_is_refused():
    text = "placement p\nparam D = 2\ndevices D\nmemory 8\nforward F0 on 0 time 1\n"
    assert "--set D=" in error(text, sets={"D": "9" * 400})


@pytest.mark.parametrize("stmt", [
    "forward F0 on 0 time 1" + " memory 1" * 100_000,
    "forward F0 on [" + ",".join(["0"] * 100_000) + "] time 1",
    "forward F0 on [\n" + ",\n".join(["0"] * 40_000) + "] time 1",
])
def test_an_overlong_statement_is_refused_before_parsing(stmt):
    msg = error(HEAD + stmt + "\n")
    assert f"<string>:4:1: error[too-large]: a statement longer than {MAX_STATEMENT_CHARS} characters" in msg


def test_devices_out_of_range_stops_before_the_blocks_are_built():
    text = ("placement p\nparam D = 4\ndevices D\nmemory 8\nfor i in 0..D-1:\n  forward F{i} on i time 1\n"
            "  F{i} -> G{i}\n")
    msg = error(text, sets={"D": "100000"})
    assert msg == "<string>:3:1: error[bad-value]: devices must be between 1 and 4096, got 100000"


def test_dependency_order_breaks_ties_by_declaration():
    """The order is computed with a heap now (the ready list was re-sorted per block, quadratic:
    bench/fuzz.py times it); it must stay the same order."""
    blocks = tuple(Block(n, Kind.FORWARD, (0,), 1, 0) for n in ("A", "B", "C", "D", "E"))
    spec = Spec("s", 1, 1, blocks, (Edge("D", "B"), Edge("A", "E"), Edge("C", "E")))
    assert spec.topo_order == ("A", "C", "D", "B", "E")


# -- include -----------------------------------------------------------------------------------

@pytest.mark.parametrize("target,reason", [
    ("/dev/urandom", "only .tsl spec files can be included"),
    ("/dev/zero", "only .tsl spec files can be included"),
    ("/etc/passwd", "only .tsl spec files can be included"),
    ("a\x00b.tsl", "NUL byte"),
    ("missing.tsl", "No such file"),
])
def test_include_reads_only_regular_tsl_files(target, reason):
    msg = error(HEAD + f'include "{target}"\nforward F0 on 0 time 1\n')
    assert "error[include-error]" in msg and reason in msg
    assert "root:" not in msg


def test_include_does_not_follow_a_tsl_link_to_another_file(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password: hunter2\n")
    (tmp_path / "evil.tsl").symlink_to(secret)
    main = tmp_path / "main.tsl"
    main.write_text(HEAD + 'include "evil.tsl"\nforward F0 on 0 time 1\n')
    with pytest.raises(SpecError) as err:
        parse_file(main)
    assert "only .tsl spec files can be included" in str(err.value) and "hunter2" not in str(err.value)


def test_include_of_a_fifo_or_directory_is_refused(tmp_path):
    (tmp_path / "dir.tsl").mkdir()
    os.mkfifo(tmp_path / "pipe.tsl")
    main = tmp_path / "main.tsl"
    for name in ("dir.tsl", "pipe.tsl"):
        main.write_text(HEAD + f'include "{name}"\nforward F0 on 0 time 1\n')
        with pytest.raises(SpecError, match="not a regular file"):
            parse_file(main)


def test_a_spec_read_from_a_device_stops_at_the_size_limit():
    with pytest.raises(SpecError, match="larger than 16 MiB"):
        parse_file(Path("/dev/zero"))
    with pytest.raises(SpecError, match="not a regular file"):
        parse_file(Path("/"))


def test_an_included_tsl_file_still_works(tmp_path):
    (tmp_path / "lib.tsl").write_text("shape one():\n  forward X on 0 time 1\n")
    main = tmp_path / "main.tsl"
    main.write_text(HEAD + 'include "lib.tsl"\nuse one()\n')
    assert [b.name for b in parse_file(main).blocks] == ["X"]
