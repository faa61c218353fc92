"""The numbers the docs quote are what the tool gives today (a sample; `bench/doc_numbers.py` checks all).

When a change to the search moves these numbers, run `python bench/doc_numbers.py --write` and
fix any drifted sentence it lists.
"""
from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.paths import ROOT, SPECS


@pytest.fixture(scope="module")
def doc_numbers():
    spec = importlib.util.spec_from_file_location("doc_numbers", ROOT / "bench" / "doc_numbers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_numbers"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("doc_numbers", None)


def _run(doc_numbers, *argv):
    return doc_numbers.run(doc_numbers.parser().parse_args(list(argv)))


def test_search_table_rows_match_the_tool(doc_numbers):
    # interleaved training is the row that once went stale; vshape inference is cheap and exact.
    assert _run(doc_numbers, "--only", "search-d4", "--rows", "interleaved/train", "vshape/infer") == []
    assert _run(doc_numbers, "--only", "search-d8", "--rows", "kshape/infer") == []


def test_readme_check_output_and_search_claims_match_the_tool(doc_numbers):
    assert _run(doc_numbers, "--only", "check-mshape", "readme-search-mshape", "search-end-resolve") == []


def test_every_search_table_row_is_documented(doc_numbers):
    for block in ("search-d4", "search-d8"):
        text = doc_numbers.block_text(ROOT / "bench" / "results" / "search.md", block)
        rows = {(r[0], r[1]) for r in doc_numbers.parse_table(text)}
        assert rows == {(s, m) for s in doc_numbers.SPEC_NAMES for m in ("train", "infer")}, block
    assert {p.stem for p in SPECS.glob("*.tsl")} == set(doc_numbers.SPEC_NAMES)


def test_a_drifted_number_is_reported(doc_numbers, tmp_path, monkeypatch):
    # The check itself: a table cell and a claim that disagree with the tool are both named.
    monkeypatch.setattr(doc_numbers, "ROOT", tmp_path)
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "specs").symlink_to(SPECS)
    table = doc_numbers.markdown_table(doc_numbers.SEARCH_HEAD, [
        ["vshape", "infer", "4", "1", "1 = 1", "11 (27.3%)", "19 (15.8%)", "36 (8.6%)", "131 (2.3%)", "", ""]])
    (tmp_path / "bench" / "results" / "search.md").write_text(f"<!-- numbers:search-d4 -->\n{table}\n<!-- /numbers:search-d4 -->\n")
    (tmp_path / "docs" / "search.md").write_text("(interleaved D=4, N=8: 85 -> 1, the optimum)\n")
    problems = _run(doc_numbers, "--only", "search-d4", "search-end-resolve", "--rows", "vshape/infer")
    assert len(problems) == 2, problems
    assert "vshape infer, N=32 makespan (bubble): docs say '36 (8.6%)', the tool gives '35 (8.6%)'" in problems[0]
    assert "docs say 85 / 1, the tool gives 85 / " in problems[1]


def test_to_cells_are_solved_on_a_deterministic_budget_unless_a_limit_is_given(doc_numbers, monkeypatch):
    # The TO cells are what a CP-SAT budget in deterministic time gives, so the same on any machine:
    # no wall-clock limit reaches the solver unless --to-limit is passed, and the check alone solves no TO.
    from tessel_dsl.search import optimal as module
    from tessel_dsl.search.optimal import TO_EFFORT

    seen = []
    original = module.optimal

    def spy(spec, n, **kw):
        seen.append((n, kw["effort"], kw["time_limit"]))
        return original(spec, n, **kw)

    monkeypatch.setattr(module, "optimal", spy)
    budget = lambda *argv: doc_numbers.to_budget(doc_numbers.parser().parse_args(list(argv)))  # noqa: E731
    assert budget() is None and budget("--rows", "vshape/infer") is None
    assert budget("--write") == (TO_EFFORT, None)
    assert budget("--to-limit", "3") == (TO_EFFORT, 3.0)
    row = doc_numbers.search_row("vshape", "infer", 4, budget("--to-effort", "5"))
    assert seen == [(8, 5.0, None), (16, 5.0, None)]
    assert row[-2:] == ["11 (+0.0%)", "19 (+0.0%)"]  # makespans 11 and 19, both proven: no `?`
    seen.clear()
    assert _run(doc_numbers, "--only", "search-d4", "--rows", "vshape/infer", "--to-effort", "5") == []
    assert seen == [(8, 5.0, None), (16, 5.0, None)]  # the documented TO cells were checked too
