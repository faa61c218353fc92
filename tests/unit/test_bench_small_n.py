"""bench/small_n.py on the 4-device X-shape: the search, its stated bound and TO hinted with the
search's schedule at two small N, checked against each other and against the printed table. At
N = 4 the plan (38) is above the stated bound (36) and TO proves 38 optimal: the bound is the
loose side there, which is what the table is for."""
from __future__ import annotations

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.bounds import makespan_bound
from tests.helpers import load_bench
from tests.paths import ROOT


def test_to_never_longer_than_the_search_and_the_bound_never_above_either(capsys):
    bench = load_bench("small_n")
    path = ROOT / "specs" / "xshape.tsl"
    spec = parse_file(path, sets={"N": "4"})
    rows = [bench.row(spec, n, 1.0) for n in (2, 4)]
    for r in rows:
        assert makespan_bound(spec, r["n"]) <= r["bound"] <= r["to"] <= r["ours"]
    assert rows[0]["to"] < rows[1]["to"]  # more micro-batches take longer
    assert rows[1]["proven"] and rows[1]["bound"] < rows[1]["to"] == rows[1]["ours"]
    assert bench.main([str(path), "--set", "N=4", "--n", "2", "4", "--effort", "1"]) == 0
    out = capsys.readouterr().out
    assert f"`python bench/small_n.py {path} --set N=4 --n 2 4 --effort 1`:" in out
    for r in rows:  # the same deterministic answers in the table
        assert f"| {r['n']} | {r['bound']} | {r['ours']} | {r['to']} | " in out, out


def test_a_bad_spec_is_an_error_line_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.tsl"
    bad.write_text("devices 4\nforward F on 9 time 1\n")
    assert load_bench("small_n").main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "Traceback" not in err
