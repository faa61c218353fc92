"""Random and mutated spec text: only TesselError subclasses may ever escape parse()."""
from __future__ import annotations

import os
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessel_dsl.errors import TesselError
from tessel_dsl.lang.parser import parse
from tests.paths import SPECS

SOURCES = [(p, p.read_text()) for p in sorted(SPECS.glob("*.tsl"))]
TOKEN = re.compile(r"\s+|[A-Za-z_]\w*(?:\{[^{}\n]*\}\w*)*|\d+(?:\.\d+)?%?|->|\.\.|<=|>=|==|!=|.", re.S)
# TESSEL_FUZZ_EXAMPLES=5000 runs a longer search than the default.
SETTINGS = settings(max_examples=int(os.environ.get("TESSEL_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _parse_only_tessel_errors(text: str, file: str = "<string>", sets=None) -> None:
    try:
        parse(text, file=file, sets=sets)
    except TesselError as e:
        assert str(e)  # every error has a message


@st.composite
def mutated(draw):
    path, text = draw(st.sampled_from(SOURCES))
    tokens = TOKEN.findall(text)
    for _ in range(draw(st.integers(1, 4))):
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert"]))
        if op == "delete":
            del tokens[i]
        elif op == "duplicate":
            tokens.insert(i, tokens[i])
        elif op == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif op == "replace":
            tokens[i] = draw(st.sampled_from(tokens))
        else:
            tokens.insert(i, draw(st.sampled_from(["->", "{", "}", "(", ")", "[", "]", ":", "\n", "    ",
                                                   "0", "-1", "all", "for", "x", "%", "..", "/", "0.5"])))
    return str(path), "".join(tokens)


@SETTINGS
@given(mutated())
def test_mutated_specs(case):
    file, text = case
    _parse_only_tessel_errors(text, file)


@SETTINGS
@given(mutated(), st.sampled_from([None, {"D": "8"}, {"D": "0"}, {"D": "3"}, {"D": "-2"}, {"D": "1e9"},
                                   {"N": "0"}, {"D": "x"}]))
def test_mutated_specs_with_sets(case, sets):
    file, text = case
    _parse_only_tessel_errors(text, file, sets)


@SETTINGS
@given(st.text(max_size=300))
def test_random_text(text):
    _parse_only_tessel_errors(text)


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes(data):
    _parse_only_tessel_errors(data.decode("utf-8", errors="replace"))


@SETTINGS
@given(st.sampled_from(SOURCES), st.data())
def test_truncated_and_spliced_specs(source, data):
    path, text = source
    cut = data.draw(st.integers(0, len(text)))
    other = data.draw(st.sampled_from(SOURCES))[1]
    cut2 = data.draw(st.integers(0, len(other)))
    _parse_only_tessel_errors(text[:cut], str(path))
    _parse_only_tessel_errors(text[:cut] + other[cut2:], str(path))


def test_absurd_nesting_is_a_clear_error():
    for text in ["devices " + "-" * 5000 + "1\nmemory 1\n",
                 "devices 1\nmemory 1\nforward A on 0 time " + "+".join(["1"] * 3000) + "\n",
                 "devices " + "(" * 3000 + "1" + ")" * 3000 + "\nmemory 1\nforward A on 0 time 1\n"]:
        _parse_only_tessel_errors(text)
