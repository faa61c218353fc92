"""Several forward blocks with no input: a warning at each one not declared `independent` (a head
left unconnected after the last layer is read, not refused), and the declaration itself checked."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tessel_dsl.errors import SpecError
from tessel_dsl.lang.parser import parse, parse_file

ROOT = Path(__file__).resolve().parents[2]

CHAIN = """placement chain
devices 4
memory 8
forward E on 0 time 1 memory 1
for i in 0..3:
    forward F{i} on i time 2 memory 1
forward H on 3 time 1 memory 1
E -> chain(F{i} for i in 0..3)
derive backward
"""


def test_a_head_left_unconnected_is_a_warning_at_its_line():
    spec = parse(CHAIN, "c.tsl")  # read all the same: a warning, not an error
    assert [(w.code, w.severity, w.location.line, w.location.column) for w in spec.warnings] == [
        ("several-sources", "warning", 7, 9)]
    text = str(spec.warnings[0])
    assert text.startswith("c.tsl:7:9: warning[several-sources]: forward block H has no input, and neither has E")
    assert "`F3 -> H`" in text and "`independent H`" in text
    # connected, or declared to start a path of its own: nothing to say
    assert parse(CHAIN + "F3 -> H\n", "c.tsl").warnings == ()
    declared = parse(CHAIN + "independent H\n", "c.tsl")
    assert declared.warnings == () and declared == parse(CHAIN, "c.tsl")  # the spec itself is the same


def test_the_declaration_names_sources_only():
    with pytest.raises(SpecError) as e:
        parse(CHAIN + "independent Q, F2\n", "c.tsl")
    found = [(d.code, d.location.line) for d in e.value.diagnostics]
    assert found == [("unknown-name", 10), ("not-a-source", 10)]
    assert "F1 -> F2" in str(e.value)


def test_shapes_with_two_paths_declare_them():
    # X-shape (two chains) and K-shape (two encoders) each start two paths: declared in specs/lib
    for name in ("xshape", "kshape", "vshape", "mshape", "nnshape"):
        assert parse_file(ROOT / "specs" / f"{name}.tsl").warnings == (), name


def test_check_prints_the_warning_and_succeeds(tmp_path):
    path = tmp_path / "c.tsl"
    path.write_text(CHAIN)
    r = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "check", str(path), "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{path}:7:9: warning[several-sources]" in " ".join(r.stderr.split())
    assert json.loads(r.stdout)["warnings"][0].startswith(f"{path}:7:9: warning[several-sources]")


def test_a_source_that_joins_the_chain_is_asked_to_be_declared():
    # a text embedding on the first language-model device beside a vision tower: it joins at L0
    text = ("placement towers\ndevices 3\nmemory 8\nforward V0 on 0 time 5 memory 1\n"
            "forward T on 1 time 1 memory 0\nforward L0 on 1 time 5 memory 1\nforward L1 on 2 time 5 memory 1\n"
            "V0 -> L0 -> L1\nT -> L0\nderive backward\n")
    (w,) = parse(text, "t.tsl").warnings
    assert (w.code, w.location.line) == ("several-sources", 5)
    assert "whose path it joins at L0" in w.message and "`independent T`" in w.message
    assert parse(text + "independent T\n", "t.tsl").warnings == ()
