"""Profiled costs: the arithmetic, the flat .tsl writer, torch-side measuring and `tessel profile`."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from tessel_dsl.analysis import max_inflight
from tessel_dsl.errors import TesselError
from tessel_dsl.interop.profiled_spec import (
    Measurement,
    apply_measurements,
    measurements_from_run,
    nice_floor,
    spec_to_tsl,
)
from tessel_dsl.ir import Kind
from tessel_dsl.lang.parser import parse
from tests.paths import ROOT, SPECS

CHAIN = """placement chain
devices 2
memory 4
microbatches 4
mode train
forward F0 on 0 time 1 memory 1
forward F1 on 1 time 1 memory 1
backward B1 of F1 on 1 time 3 memory -1
backward B0 of F0 on 0 time 3 memory -1
F0 -> F1 -> B1 -> B0
"""

SPLIT = """placement zb
devices 2
memory 8
microbatches 4
mode train
forward F0 on 0 time 1 memory 2
forward F1 on 1 time 1 memory 2
input_grad I0 of F0 on 0 time 1 memory -1
input_grad I1 of F1 on 1 time 1 memory -1
weight_grad W0 of F0 on 0 time 1 memory -1
weight_grad W1 of F1 on 1 time 1 memory -1
F0 -> F1 -> I1 -> I0
I0 -> W0
I1 -> W1
"""


# ----------------------------------------------------------------------------- a tiny model

def factory(ctx, hidden: int = 32, batch: int = 16, wide: int = 1):
    """Test model: F_k is Linear+Tanh (F1 `wide` times wider inside); the last block returns MSE."""
    import torch

    from tessel_dsl.executor.model_api import TensorMeta, forward_preds, forward_succs

    spec = ctx.spec

    class Block(torch.nn.Module):
        def __init__(self, name: str):
            super().__init__()
            width = hidden * (wide if name == "F1" else 1)
            self.inner = torch.nn.Sequential(torch.nn.Linear(hidden, width), torch.nn.Tanh(),
                                             torch.nn.Linear(width, hidden))
            self.loss = not forward_succs(spec, name) and spec.mode.value == "train"

        def forward(self, x, *target):
            y = self.inner(x)
            return torch.nn.functional.mse_loss(y, target[0]) if self.loss else y

    class Stage:
        def __init__(self):
            torch.manual_seed(0)
            self.modules = {n: Block(n).to(ctx.device) for n in ctx.blocks_here()}

        def meta(self, block):
            if not forward_succs(spec, block) and spec.mode.value == "train":
                return (TensorMeta(()),)
            return (TensorMeta((batch, hidden)),)

        def data(self, block, mb):
            g = torch.Generator().manual_seed(mb)
            out = []
            if not forward_preds(spec, block):
                out.append(torch.randn(batch, hidden, generator=g))
            if not forward_succs(spec, block) and spec.mode.value == "train":
                out.append(torch.randn(batch, hidden, generator=g))
            return tuple(out)

        def param_shards(self):
            return []

    return Stage()


# ----------------------------------------------------------------------------- arithmetic

@pytest.mark.parametrize("x, want", [(7.3e-5, 5e-5), (1.0, 1.0), (0.0019, 0.001), (3e-3, 2e-3), (0.5, 0.5)])
def test_nice_floor(x, want):
    assert nice_floor(x) == pytest.approx(want)


def test_times_get_a_resolution_that_makes_the_quickest_block_a_few_units():
    spec = parse(CHAIN)
    found = [Measurement("F0", 1.0e-3, 2.9e-3, activation_bytes=4096),
             Measurement("F1", 1.6e-3, 4.1e-3, activation_bytes=8192)]
    new = apply_measurements(spec, found)
    t = {b.name: b.time for b in new.blocks}
    assert new.units.time_seconds == pytest.approx(5e-4) and new.units.time_label == "500us"
    assert t == {"F0": 2, "F1": 3, "B0": 6, "B1": 8}  # 1.0/0.5, 1.6/0.5, 2.9/0.5 -> 5.8, 4.1/0.5 -> 8.2
    assert 1 <= min(t.values()) <= 10
    mem = {b.name: b.memory for b in new.blocks}
    assert new.units.memory_bytes == 2000 and mem == {"F0": 2, "F1": 4, "B0": -2, "B1": -4}
    # abstract memory units: as many micro-batches in flight as before (4), on the busiest device
    assert max_inflight(new) == max_inflight(spec) == 4 and new.memory == 16
    assert new.name == "chain_profiled"


def test_split_backward_releases_memory_in_the_spec_proportions():
    spec = parse(SPLIT)
    found = [Measurement("F0", 1e-3, None, 1e-3, 2e-3, 9000), Measurement("F1", 1e-3, None, 1e-3, 1e-3, 9000)]
    new = apply_measurements(spec, found, time_resolution=1e-4)
    mem = {b.name: b.memory for b in new.blocks}
    # resolution 2000 B (a round number near half the smallest activation): 9000 B -> 4.5 -> 5 units
    assert new.units.memory_bytes == 2000 and mem["F0"] == 5
    assert mem["I0"] + mem["W0"] == -5 and mem["I0"] in (-2, -3)  # the spec releases half at I
    assert {b.name: b.time for b in new.blocks}["W0"] == 20
    for fwd in ("F0", "F1"):
        assert sum(b.memory for b in new.blocks if b.name == fwd or b.forward == fwd) == 0


def test_explicit_capacity_and_unmeasured_blocks():
    spec = parse(CHAIN)
    found = [Measurement("F0", 1e-3, 3e-3, activation_bytes=10**6), Measurement("F1", note="not measured (x)")]
    new = apply_measurements(spec, found, capacity_bytes=80 * 10**9)
    assert new.memory == 80 * 10**9 // new.units.memory_bytes
    assert {b.name: b.time for b in new.blocks}["F1"] == 1  # kept: the old unit had no physical meaning


def test_nothing_measured_is_an_error():
    with pytest.raises(TesselError, match="no block could be measured"):
        apply_measurements(parse(CHAIN), [Measurement("F0", note="not measured")])


# ----------------------------------------------------------------------------- the .tsl writer

@pytest.mark.parametrize("text", [CHAIN, SPLIT])
def test_flat_tsl_parses_back_to_the_same_spec(text):
    spec = parse(text)
    back = parse(spec_to_tsl(spec, "header line"))
    assert replace(back, params=()) == spec


def test_shipped_spec_with_tensors_and_expectations_round_trips():
    path = SPECS / "mshape.tsl"
    if not path.exists():
        pytest.skip("specs/mshape.tsl not present")
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(path)
    back = parse(spec_to_tsl(spec))
    assert replace(back, params=()) == replace(spec, params=())
    assert back.expectations == spec.expectations


def test_profiled_spec_with_physical_units_round_trips():
    spec = parse(CHAIN)
    new = apply_measurements(spec, [Measurement("F0", 1e-3, 3e-3, activation_bytes=4096),
                                    Measurement("F1", 1e-3, 3e-3, activation_bytes=4096)])
    new = replace(new, link=replace(new.link, latency=0.5, bandwidth=2.5e6))
    back = parse(spec_to_tsl(new))
    assert replace(back, params=()) == new and back.units == new.units and back.link == new.link


# ----------------------------------------------------------------------------- torch side

def test_measure_times_and_activations_on_this_device():
    pytest.importorskip("torch")
    from tessel_dsl.executor.measure import measure

    found = measure(parse(CHAIN), factory, device="cpu", repeats=3, warmup=1, model_args={"wide": 8})
    by = {m.block: m for m in found}
    assert set(by) == {"F0", "F1"}
    for m in found:
        assert m.forward > 0 and m.backward > 0 and m.activation_bytes > 0 and m.device == "cpu"
    # F1's inner layer is 8x wider, so it saves more activations than F0
    assert by["F1"].activation_bytes > by["F0"].activation_bytes
    split = measure(parse(SPLIT), factory, device="cpu", repeats=2, warmup=0)
    assert all(m.input_grad > 0 and m.weight_grad > 0 and m.backward is None for m in split)


def test_inference_measures_forward_only():
    pytest.importorskip("torch")
    from tessel_dsl.executor.measure import measure

    spec = parse(CHAIN.replace("mode train", "mode infer"))
    found = measure(spec, factory, device="cpu", repeats=2, warmup=0)
    assert [m.block for m in found] == ["F0", "F1"]
    assert all(m.backward is None and m.activation_bytes == 0 for m in found)
    new = apply_measurements(spec, found)
    assert all(b.memory == 0 and b.kind is Kind.FORWARD for b in new.blocks)


def test_model_errors_are_tessel_errors():
    pytest.importorskip("torch")
    from tessel_dsl.executor.measure import measure

    with pytest.raises(TesselError, match="MODULE:FACTORY"):
        measure(parse(CHAIN), "no_colon_here", device="cpu")
    with pytest.raises(TesselError, match="cannot import model module"):
        measure(parse(CHAIN), "no_such_module_xyz:f", device="cpu")
    with pytest.raises(TesselError, match="profiling block F0"):
        measure(parse(CHAIN), lambda ctx: type("S", (), {"modules": {}})(), device="cpu")


# ----------------------------------------------------------------------------- command line

def _cli(*args: str):
    return subprocess.run([sys.executable, "-m", "tessel_dsl.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_near_zero_actions_do_not_dictate_the_resolution():
    spec = parse(SPLIT)
    found = [Measurement("F0", 1e-3, None, 2e-6, 2e-3, 4096), Measurement("F1", 1e-3, None, 1e-3, 2e-3, 4096)]
    new = apply_measurements(spec, found)
    t = {b.name: b.time for b in new.blocks}
    assert new.units.time_seconds == pytest.approx(5e-4) and t["I0"] == 1 and t["W1"] == 4


# ----------------------------------------------------------------------------- times from a run

def test_run_times_map_backward_blocks_to_their_forward_and_keep_memory():
    spec = parse(SPLIT)
    found = measurements_from_run(spec, {"F0": 2e-3, "F1": 2e-3, "I0": 1e-3, "I1": 1e-3, "W0": 3e-3, "W1": 3e-3},
                                  device="GPU")
    assert {m.block: (m.forward, m.input_grad, m.weight_grad, m.activation_bytes) for m in found} == {
        "F0": (2e-3, 1e-3, 3e-3, None), "F1": (2e-3, 1e-3, 3e-3, None)}
    new = apply_measurements(spec, found)
    assert {b.name: b.time for b in new.blocks} == {"F0": 4, "F1": 4, "I0": 2, "I1": 2, "W0": 6, "W1": 6}
    # No activations were measured: memory costs, their unit and the capacity are the spec's.
    assert [b.memory for b in new.blocks] == [b.memory for b in spec.blocks]
    assert new.memory == spec.memory and new.units.memory_label == spec.units.memory_label
    assert new.units.time_seconds == pytest.approx(5e-4)


def test_run_times_from_another_spec_are_refused():
    with pytest.raises(TesselError, match="does not have: X9"):
        measurements_from_run(parse(CHAIN), {"F0": 1e-3, "X9": 1e-3})
