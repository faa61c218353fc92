"""The parser loaded from the shipped LALR tables (`lang/lalr_tables.py`) is the parser of the grammar:
same specs, same syntax errors, and it is not used when it belongs to another grammar or lark."""
from __future__ import annotations

import lark
import pytest
from lark import Lark

from tessel_dsl.errors import TesselError
from tessel_dsl.lang import lalr_tables, parser
from tessel_dsl.lang.parser import LARK_OPTIONS, grammar_digest
from tests.paths import ROOT, SPECS

SPEC_FILES = sorted(SPECS.rglob("*.tsl"))
BROKEN = [
    "devices 2\nmemory 4\nfor i in 0..1:\nforward A on 0 time 1\n",
    "devices 2\nmemory 4\nforward F{i+} on 0 time 1\n",
    "devices 2\nmemory 4\nforward F{i ! 1} on 0 time 1\n",
    "devices 2\nmemory 4\nforward A on 0 time 1\nA -> (\n",
    "devices 2\nmemory 4\nforward A on 0 time 1\nA -> {B,\n",
    "devices 2 @\n",
    "devices 2\nmemory 4\nforward A on 0 time\n",
    "devices 2\nmemory 4\n  forward A on 0 time 1\n",
]


def _outcome(parse):
    """What parsing gives: the Spec, or the error's text and what it says was expected."""
    try:
        return parse()
    except TesselError as e:
        return type(e).__name__, str(e), getattr(e, "expected", None)


def _all_outcomes(monkeypatch, made: Lark) -> list:
    monkeypatch.setattr(parser, "_PARSER", made)
    out = [_outcome(lambda p=p: parser.parse_file(p)) for p in SPEC_FILES]
    out += [_outcome(lambda t=t: parser.parse(t, file="x.tsl")) for t in BROKEN]
    return out


def test_the_shipped_tables_belong_to_the_grammar():
    # fails after a grammar change until `python -m tessel_dsl.lang.grammar_tables` is run
    assert lalr_tables.GRAMMAR_SHA256 == grammar_digest(parser.grammar_text())


@pytest.mark.skipif(lalr_tables.LARK_VERSION != lark.__version__,
                    reason=f"tables written by lark {lalr_tables.LARK_VERSION}; the grammar is built instead")
def test_the_prebuilt_parser_parses_as_the_grammar_built_one(monkeypatch):
    prebuilt = parser.prebuilt_parser(parser.grammar_text())
    assert prebuilt is not None
    built = Lark(parser.grammar_text(), postlex=parser._Indenter(), propagate_positions=True, **LARK_OPTIONS)
    assert len(SPEC_FILES) > 40
    got, want = _all_outcomes(monkeypatch, prebuilt), _all_outcomes(monkeypatch, built)
    assert got == want
    assert sum(not isinstance(o, tuple) for o in want) >= 8  # specs that parse, and
    assert sum(isinstance(o, tuple) and "syntax error" in o[1] for o in want) >= len(BROKEN)  # errors


def test_tables_of_another_grammar_or_lark_are_not_used(monkeypatch):
    text = parser.grammar_text()
    monkeypatch.setattr(lalr_tables, "GRAMMAR_SHA256", grammar_digest(text + "\n"))
    assert parser.prebuilt_parser(text) is None
    monkeypatch.setattr(lalr_tables, "GRAMMAR_SHA256", grammar_digest(text))
    monkeypatch.setattr(lalr_tables, "LARK_VERSION", "0.0.0")
    assert parser.prebuilt_parser(text) is None
    # then the parser is built from the grammar (the tables are not read), and still parses
    def no_tables(*args, **kwargs):
        raise AssertionError("the shipped tables were loaded")

    monkeypatch.setattr(Lark, "_load_from_dict", no_tables)
    monkeypatch.setattr(parser, "_PARSER", None)
    assert parser.parse_file(ROOT / "specs/vshape.tsl").devices == 4
