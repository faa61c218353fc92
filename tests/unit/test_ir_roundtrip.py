"""Every IR field, at a non-default value, survives text -> IR -> text -> IR and the inference
projection. Specs are generated as IR (every block option from the option table gets a random
value), written with the `.tsl` writer, and read back with the parser."""
from __future__ import annotations

import dataclasses
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tessel_dsl.ir import DTYPE_BYTES, Block, Edge, Expectation, Kind, Link, Mode, Spec, Tensor, Units
from tessel_dsl.lang.options import BLOCK_FIELDS
from tessel_dsl.lang.parser import parse

SETTINGS = settings(max_examples=int(os.environ.get("TESSEL_ROUNDTRIP_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
# Block fields the writer handles by the statement's shape; every other field must be an option row.
STRUCTURAL = {"name", "kind", "devices", "forward", "span"}
# A value for an option, by how its row says the value is read (memory is drawn with the structure).
VALUES = {"time": st.integers(1, 40), "integer": st.integers(-20, 20), "memory": st.integers(0, 5)}
RESOLUTIONS = ["", "resolution time 1ms\n", "resolution time 20us\nresolution memory 1GB\n",
               "resolution memory 500MB\n"]
EXPECTATIONS = [Expectation("bubble", "<=", 0.05, 128), Expectation("peak_memory", "<=", "M"),
                Expectation("period", "==", "lower_bound"), Expectation("deadlock_free", "==", None, 8),
                Expectation("makespan", "<", 120.0)]


def test_every_block_field_is_structural_or_a_table_option():
    # A Block field the option table does not know would be dropped by the writer.
    fields = {f.name for f in dataclasses.fields(Block)}
    assert fields == STRUCTURAL | {o.field for o in BLOCK_FIELDS}


# The IR fields the tests below cover: `specs()` draws them (mode is train there; infer is the
# projection test's; params is the writer's own `param N`). A new IR field fails this test until
# the generator draws it too, and then the writer and the parser must carry it.
GENERATED = {
    Spec: {"name", "devices", "memory", "blocks", "edges", "microbatches", "mode", "expectations", "units",
           "link", "params", "device_memory", "reserved"},
    Edge: {"src", "dst", "tensor"},
    Tensor: {"shape", "dtype"},
    Link: {"latency", "bandwidth"},
    Units: {"time_seconds", "time_label", "memory_bytes", "memory_label"},
    Expectation: {"metric", "op", "value", "microbatches"},
}


def test_the_generator_covers_every_ir_field():
    for cls, drawn in GENERATED.items():
        assert {f.name for f in dataclasses.fields(cls) if f.compare} == drawn, cls.__name__


@st.composite
def specs(draw) -> Spec:
    d = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    blocks: list[Block] = []
    edges: list[Edge] = []

    def options(memory: int) -> dict:
        out = {}
        for o in BLOCK_FIELDS:
            sound = VALUES[o.value].filter(lambda v, o=o: o.check is None or o.check(v) is None)
            out[o.field] = memory if o.field == "memory" else draw(sound)
        return out

    def tensor():
        if not draw(st.booleans()):
            return None
        shape = tuple(draw(st.lists(st.integers(1, 64), min_size=1, max_size=3)))
        return Tensor(shape, draw(st.sampled_from(sorted(DTYPE_BYTES))))

    def devices():
        chosen = draw(st.lists(st.integers(0, d - 1), min_size=1, max_size=d, unique=True))
        return tuple(chosen)

    grads: list[list[str]] = []
    for i in range(k):
        devs = devices()
        split = draw(st.sampled_from(["backward", "split", "none"]))
        held = draw(VALUES["memory"]) if split != "none" else 0
        blocks.append(Block(f"F{i}", Kind.FORWARD, devs, **options(held)))
        if i:
            edges.append(Edge(f"F{i - 1}", f"F{i}", tensor()))
        if split == "backward":
            blocks.append(Block(f"B{i}", Kind.BACKWARD, devs, forward=f"F{i}", **options(-held)))
            grads.append([f"B{i}"])
        elif split == "split":
            part = draw(st.integers(0, held))
            blocks.append(Block(f"I{i}", Kind.INPUT_GRAD, devs, forward=f"F{i}", **options(-part)))
            blocks.append(Block(f"W{i}", Kind.WEIGHT_GRAD, devs, forward=f"F{i}", **options(part - held)))
            grads.append([f"I{i}", f"W{i}"])
        else:
            grads.append([])
        for g in grads[-1]:
            edges.append(Edge(f"F{i}", g))
        if len(grads[-1]) == 2:
            edges.append(Edge(f"I{i}", f"W{i}"))
    # backward chain in reverse, from the last forward through every gradient's first block
    chain = [f"F{k - 1}"] + [g[0] for g in reversed(grads) if g]
    for a, b in zip(chain, chain[1:]):
        if a != b and Edge(a, b) not in edges:
            edges.append(Edge(a, b, tensor()))
    if draw(st.booleans()):
        blocks.append(Block("O", Kind.OTHER, devices(), **options(0)))
        edges.append(Edge(f"F{k - 1}", "O"))
    head = draw(st.sampled_from(RESOLUTIONS))
    units = parse(f"{head}devices 1\nmemory 1\nforward A on 0 time 1\n").units
    link = Link(draw(st.sampled_from([0.0, 0.5, 3.0])), draw(st.sampled_from([0.0, 1.5, 1000.0])))
    expectations = tuple(draw(st.lists(st.sampled_from(EXPECTATIONS), max_size=3, unique=True)))
    # Per-device capacity and reserve, stored as the parser stores them: empty when every device
    # has the default capacity, or nothing is reserved.
    caps = tuple(draw(st.sampled_from([100, 100, 60, 150])) for _ in range(d))
    reserved = tuple(draw(st.sampled_from([0, 0, 5])) for _ in range(d))
    return Spec(draw(st.sampled_from(["p", "model_a", "X1"])), d, 100, tuple(blocks), tuple(edges),
                microbatches=draw(st.integers(1, 64)), mode=Mode.TRAIN, expectations=expectations,
                units=units, link=link, device_memory=caps if set(caps) != {100} else (),
                reserved=reserved if any(reserved) else ())
