"""Property runs: every IR field survives text -> IR -> text -> IR, and the inference
projection keeps every other field."""
from __future__ import annotations

import dataclasses

from hypothesis import given

from tessel_dsl.interop.profiled_spec import spec_to_tsl
from tessel_dsl.ir import Mode
from tessel_dsl.lang.parser import parse
from tests.unit.test_ir_roundtrip import SETTINGS, specs


@SETTINGS
@given(specs())
def test_every_ir_field_survives_text_ir_text_ir(spec):
    text = spec_to_tsl(spec)
    first = parse(text, "gen.tsl")
    # The writer names N as a parameter; everything else is the generated IR, field by field.
    assert first == dataclasses.replace(spec, params=first.params), text
    again = spec_to_tsl(first)
    assert again == text
    assert parse(again, "gen.tsl") == first


@SETTINGS
@given(specs())
def test_inference_projection_keeps_every_other_field(spec):
    infer = parse(spec_to_tsl(spec), "gen.tsl", mode="infer")
    kept = [b for b in spec.blocks if not b.kind.is_backward]
    # Inference drops backward-like blocks, and each block's memory is its `infer memory` (0 here);
    # every other field of every kept block is as generated.
    assert infer.blocks == tuple(dataclasses.replace(b, memory=0, forward=None) for b in kept)
    names = {b.name for b in kept}
    assert infer.edges == tuple(e for e in spec.edges if e.src in names and e.dst in names)
    assert infer.mode is Mode.INFER
    assert (infer.units, infer.link, infer.expectations) == (spec.units, spec.link, spec.expectations)
