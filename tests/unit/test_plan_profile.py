"""Profiling a model's units: found from the module tree, with parameter and activation bytes
worked out by hand on a toy model."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from tessel_dsl.placement.profile import profile_model  # noqa: E402


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.head = nn.Linear(4, 10, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def test_units_and_bytes_of_a_toy_model_by_hand():
    prof = profile_model(Toy(), torch.zeros(2, 3, dtype=torch.long), repeats=1, warmup=0)
    assert prof.device == "cpu" and prof.batch_shape == (2, 3)
    assert [(u.name, u.kind, u.modules) for u in prof.units] == [
        ("embed", "embedding", ("embed",)), ("layer0", "layer", ("layers.0",)),
        ("layer1", "layer", ("layers.1",)), ("head", "head", ("head",))]
    embed, l0, _, head = prof.units
    # parameters, fp32: 10x4 table; 4x4 + 4; 4x10
    assert [u.params for u in prof.units] == [40, 20, 20, 40]
    assert [u.param_bytes for u in prof.units] == [160, 80, 80, 160]
    assert embed.state_bytes() == 2 * 160 + 8 * 40
    # a layer receives a [2, 3, 4] fp32 hidden state (96 B, its input, not counted again) and keeps
    # its [2, 3, 4] output (96 B); the head keeps its [2, 3, 10] logits (240 B); the embedding
    # keeps the int64 token ids it saves (48 B) and its output (96 B)
    assert (l0.input_bytes, l0.activation_bytes) == (96, 96)
    assert (head.input_bytes, head.activation_bytes) == (96, 240)
    assert (embed.input_bytes, embed.activation_bytes) == (0, 144)
    # the embedding's input is token ids: nothing to differentiate
    assert embed.input_grad == 0.0 and embed.weight_grad > 0 and l0.input_grad > 0


def test_hugging_face_units_are_found_from_the_module_tree():
    pytest.importorskip("transformers")
    from tests.integration.test_plan_train import gpt2_tied, llama

    prof = profile_model(llama(), torch.zeros(1, 4, dtype=torch.long), repeats=1, warmup=0)
    assert [u.modules for u in prof.units] == [("model.embed_tokens",)] + [
        (f"model.layers.{i}",) for i in range(4)] + [("model.norm",), ("lm_head",)]
    assert [u.kind for u in prof.units][-2:] == ["norm", "head"] and not prof.tied
    assert sum(u.params for u in prof.units) == sum(p.numel() for p in llama().parameters())
    gpt2 = profile_model(gpt2_tied(), torch.zeros(1, 4, dtype=torch.long), repeats=1, warmup=0)
    assert gpt2.units[0].modules == ("transformer.wte", "transformer.wpe")
    assert [u.modules for u in gpt2.units[-2:]] == [("transformer.ln_f",), ("lm_head",)]
    assert gpt2.tied == (("embed", "lm_head"),)
    assert gpt2.tied_sizes == ((96 * 32, 96 * 32 * 4),)  # the 96 x 32 fp32 token table, once


def test_tp_plans_refuse_to_shard_a_tied_weight():
    """Sharding the embedding of a spread block would give the head's shared weight a layout of
    its own: a clear error instead."""
    from types import SimpleNamespace

    from tessel_dsl.errors import TesselError
    from tessel_dsl.placement.tp import tp_plans

    model = Toy()
    model.head.weight = model.embed.weight
    devices = {"E": (0, 1), "F0": (0,), "F1": (1,)}
    plan = SimpleNamespace(spec=SimpleNamespace(block=lambda b: SimpleNamespace(devices=devices[b])))
    blocks = {"E": ["embed"], "F0": ["layers.0"], "F1": ["layers.1", "head"]}
    with pytest.raises(TesselError, match="head.weight shares"):
        tp_plans(plan, blocks, model)
    untied = Toy()
    assert list(tp_plans(plan, blocks, untied)) == ["E"]
