"""`plan_model` on randomly initialised Hugging Face models, then `Pipeline` on the files it wrote:
every step's loss equals one process's, accumulating over the same micro-batches (fp32, 1e-5
relative). The profile (and so the winning candidate) depends on this machine's timings; whatever
wins must train exactly."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tessel_dsl.executor.local_ranks import run_ranks
from tests import pipeline_support as ps

STEPS, ROWS, SEQ = 20, 2, 8
VOCAB = 96
SMALL = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16, "use_cache": False,
         "tie_word_embeddings": False}


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**SMALL))


def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(**SMALL))


def gpt2_tied():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=16))


def trained(plan_path, build, data):
    """One rank: Pipeline from the plan file and the binding written beside it."""
    import torch.distributed as dist

    from tessel_dsl.executor.pipeline import Pipeline

    pipe = Pipeline(str(plan_path), build(), ps.llama_loss)  # reads plan.blocks.json beside the plan
    return {"losses": _train(pipe, data), "rank": dist.get_rank()}


def _train(pipe, data) -> list[float]:
    """Every step's loss, the shared test optimizer stepped after each."""
    opt = ps.optimizer(pipe.param_groups())
    losses = []
    for x, y in data:
        losses.append(pipe.step(x, y))
        opt.step()
        opt.zero_grad()
    return losses


@pytest.mark.parametrize("build,devices", [(llama, 2), (qwen2, 2), (llama, 4)])
def test_planned_model_trains_like_one_process(tmp_path, build, devices):
    from tessel_dsl.placement import plan_model

    n = devices  # micro-batches per step
    out = tmp_path / "plan.json"
    res = plan_model(build(), torch.randint(0, VOCAB, (ROWS, SEQ)), devices=devices, memory="1GB",
                     microbatches=n, output=out, repeats=1, warmup=1, time_limit=60)
    assert res.plan.spec.devices == devices and res.best.fits
    assert json.loads((tmp_path / "plan.blocks.json").read_text()) == res.blocks
    assert (tmp_path / "plan.tsl").read_text() == res.spec_text
    data = ps.batches(VOCAB, STEPS, ROWS * n, SEQ)
    want = ps.reference(build, ps.llama_loss, data, n)
    got = run_ranks(trained, devices, out, build, data, timeout=300)
    for r in got:
        errs = [ps.rel(a, b) for a, b in zip(r["losses"], want)]
        assert len(r["losses"]) == STEPS and max(errs) <= 1e-5, (res.best, r["rank"], errs)
    assert want[-1] < want[0]


def test_a_tied_gpt2_trains_like_one_process(tmp_path):
    """GPT-2's head is tied to its token embedding. On the measured units with set times (1 ms
    embedding and head, 10 ms a layer) the winner puts the embedding and the head on different
    ranks, so Pipeline sums the tied weight's gradient over both: every step's loss, the last
    step's gradient of every parameter (the tied one under each rank's own name) and the final
    parameters equal one process's."""
    from dataclasses import replace

    from tessel_dsl.placement import plan_model, profile_model
    from tests import pipeline_cases as pc

    measured = profile_model(pc.gpt2(), torch.randint(0, VOCAB, (ROWS, SEQ)), repeats=1, warmup=0)
    assert measured.tied == (("embed", "lm_head"),) and measured.tied_sizes == ((VOCAB * 32, VOCAB * 32 * 4),)
    ms = {"embedding": 10, "layer": 10, "norm": 1, "head": 10}
    prof = replace(measured, units=tuple(replace(u, forward=ms[u.kind] / 1e3, input_grad=ms[u.kind] / 1e3,
                                                 weight_grad=ms[u.kind] / 1e3, unsplit_backward=2 * ms[u.kind] / 1e3,
                                                 loss_forward=0.0, loss_backward=0.0) for u in measured.units))
    out = tmp_path / "plan.json"
    res = plan_model(None, None, devices=2, memory="1GB", microbatches=2, output=out, profile=prof)
    holders = {d for b, mods in res.blocks.items() for d in res.plan.spec.block(b).devices
               if {"transformer.wte", "lm_head"} & set(mods)}
    assert res.best.candidate == "chain-split" and holders == {0, 1}, res.best
    data = ps.batches(VOCAB, STEPS, ROWS * 2, SEQ)
    want = pc.reference(pc.gpt2, pc.lm_loss, data, 2)
    got = run_ranks(pc.pipelined, 2, str(out), pc.gpt2, pc.lm_loss, None, data, timeout=300)
    pc.compare(got, want)
    tied = [n for r in got for n in r["grads"] if n in ("transformer.wte.weight", "lm_head.weight")]
    assert sorted(tied) == ["lm_head.weight", "transformer.wte.weight"]


def gpt2_untied64():
    return gpt2_untied().double()


def gpt2_untied():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=4, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False))


def _planned_with_costs(out, gb: dict, memory: str, build=None):
    """`plan_model` on the tiny Llama's measured units with set costs: 1 ms for every unit but a
    layer's 10 ms (its unsplit backward twice that, no loss time), and `gb` of weights (Adam's 16 B
    a parameter) per kind of unit. Every time is set: a measured one left in (the unsplit backward
    on a busy machine) could move the layers' split, and with it what fits."""
    from dataclasses import replace

    from tessel_dsl.placement import plan_model, profile_model

    measured = profile_model((build or llama)(), torch.randint(0, VOCAB, (ROWS, SEQ)), repeats=1, warmup=0)
    ms = {"embedding": 1, "layer": 10, "norm": 1, "head": 1}
    units = tuple(replace(u, forward=ms[u.kind] / 1e3, input_grad=ms[u.kind] / 1e3, weight_grad=ms[u.kind] / 1e3,
                          unsplit_backward=2 * ms[u.kind] / 1e3, loss_forward=0.0, loss_backward=0.0,
                          params=int(gb[u.kind] * 1e9 / 16), param_bytes=int(gb[u.kind] * 1e9 / 4))
                  for u in measured.units)
    return plan_model(llama(), None, devices=2, memory=memory, microbatches=2, output=out,
                      profile=replace(measured, units=units))


def test_a_memory_bound_plan_spreads_the_embedding_and_trains(tmp_path):
    """Measured units with costs set by hand, as if the vocabulary were large: embedding 10 GB of
    weights and optimizer state, layers 1 GB, head 0.5 GB. At 11 GB a device every placement that
    keeps the embedding whole on one device (10 + 2 layers) is over; spreading it over both
    (5 + 2 and 5 + 2.5 GB) fits, so it is chosen -- and Pipeline trains it (E replicated, no tp)."""
    out = tmp_path / "plan.json"
    res = _planned_with_costs(out, {"embedding": 10, "layer": 1, "norm": 0, "head": 0.5}, "11GB")
    assert res.best.candidate == "mshape-E" and res.plan.spec.block("E").devices == (0, 1)
    assert res.blocks["E"] == ["model.embed_tokens"]
    data = ps.batches(VOCAB, STEPS, ROWS * 2, SEQ)
    want = ps.reference(llama, ps.llama_loss, data, 2)
    for r in run_ranks(trained, 2, out, llama, data, timeout=300):
        assert max(ps.rel(a, b) for a, b in zip(r["losses"], want)) <= 1e-5, r["rank"]


def llama64():
    """`llama` in float64: the sharded head sums its logits' softmax in another order than one
    process, and over 20 AdamW steps that float32 rounding grows past 1e-5 on some CPUs
    (1.5e-5 by the last steps, from 1e-7 at the first); in float64 it stays far below, so only a
    real difference in the gradients can reach the tolerance."""
    return llama().double()


def loss64(out, labels):
    """`ps.llama_loss` without its cast of the logits to float32."""
    import torch.nn.functional as F

    return F.cross_entropy(out.logits.flatten(0, 1), labels.flatten())


def sharded(plan_path, build, data):
    """One rank, with the spread blocks sharded by `tp_plans` (float64: `llama64`)."""
    import torch.distributed as dist

    from tessel_dsl.executor.block_map import read_blocks
    from tessel_dsl.executor.pipeline import Pipeline
    from tessel_dsl.placement.tp import tp_plans

    blocks = read_blocks(str(plan_path).replace(".json", ".blocks.json"))
    model = build()
    pipe = Pipeline(str(plan_path), model, loss64, blocks=blocks, tp=tp_plans(str(plan_path), blocks, model))
    losses = _train(pipe, data)
    shapes = {n: tuple(getattr(p, "_local_tensor", p).shape) for n, p in pipe.named_parameters()}
    return {"losses": losses, "rank": dist.get_rank(), "shapes": shapes,
            "embed": type(model.get_submodule("model.embed_tokens")).__name__}


def test_embedding_and_head_spread_and_sharded_train_like_one_process(tmp_path):
    """Embedding 20 GB of state, head 10 GB, layers 1 GB: at 18 GB a device only spreading both
    fits (10 + 5 + 2 layers = 17 GB; any placement holding the embedding whole needs 22 GB).
    With `tp_plans` the embedding is split by rows and the head by columns over the 2 ranks."""
    out = tmp_path / "plan.json"
    res = _planned_with_costs(out, {"embedding": 20, "layer": 1, "norm": 0, "head": 10}, "18GB")
    assert res.best.candidate == "mshape-EH"
    data = ps.batches(VOCAB, STEPS, ROWS * 2, SEQ)
    want = ps.reference(llama64, loss64, data, 2)
    for r in run_ranks(sharded, 2, out, llama64, data, timeout=300):
        assert r["embed"] == "SpreadEmbedding"  # its weight gradient is built at its rows' size
        assert r["shapes"]["model.embed_tokens.weight"] == (VOCAB // 2, 32)
        assert r["shapes"]["lm_head.weight"] == (VOCAB // 2, 32)
        # float64: the orders of summation differ by about 1e-16 a step (the issue asks 1e-5)
        assert max(ps.rel(a, b) for a, b in zip(r["losses"], want)) <= 1e-9, r["rank"]


def sharded_gpt2(plan_path, data):
    """One rank of the untied GPT-2 with its spread blocks sharded by `tp_plans` (in float64, as
    `llama64` says why: in float32 the losses drifted to 2.3e-6 of one process's here)."""
    import torch.distributed as dist

    from tessel_dsl.executor.block_map import read_blocks
    from tessel_dsl.executor.pipeline import Pipeline
    from tessel_dsl.placement.tp import tp_plans
    from tests import pipeline_cases as pc

    blocks = read_blocks(str(plan_path).replace(".json", ".blocks.json"))
    model = gpt2_untied64()
    pipe = Pipeline(str(plan_path), model, loss64, blocks=blocks, tp=tp_plans(str(plan_path), blocks, model))
    opt = pc.optimizer(pipe.param_groups())  # the one `pc.reference` steps
    losses = []
    for x, y in data:
        losses.append(pipe.step(x, y))
        wpe = model.get_submodule("transformer.wpe").weight.grad.detach().clone()
        opt.step()
        opt.zero_grad()
    kinds = {n: type(model.get_submodule(n)).__name__ for n in ("transformer.wte", "transformer.wpe")}
    return {"losses": losses, "rank": dist.get_rank(), "kinds": kinds, "wpe_grad": wpe,
            "wpe_shape": tuple(model.get_submodule("transformer.wpe").weight.shape)}


def test_a_positional_embedding_beside_a_spread_vocabulary_stays_whole(tmp_path):
    """GPT-2 (untied) with its embedding block spread over 2 ranks: the vocabulary's table is
    sharded by rows, the positional table (16 rows) stays whole on both ranks, with no collective
    of its own, and every step's loss and the last step's positional gradient equal one process's."""
    from tests import pipeline_cases as pc

    out = tmp_path / "plan.json"
    res = _planned_with_costs(out, {"embedding": 20, "layer": 1, "norm": 0, "head": 10}, "18GB", gpt2_untied)
    assert res.best.candidate == "mshape-EH"
    assert res.blocks["E"] == ["transformer.wte", "transformer.wpe"]
    data = ps.batches(VOCAB, STEPS, ROWS * 2, SEQ)
    want = pc.reference(gpt2_untied64, loss64, data, 2)
    for r in run_ranks(sharded_gpt2, 2, out, data, timeout=300):
        assert r["kinds"] == {"transformer.wte": "SpreadEmbedding", "transformer.wpe": "Embedding"}
        assert r["wpe_shape"] == (16, 32)
        assert max(ps.rel(a, b) for a, b in zip(r["losses"], want["losses"])) <= 1e-9, r["rank"]
        ref = want["grads"]["transformer.wpe.weight"]
        assert float((r["wpe_grad"] - ref).norm() / ref.norm()) <= 1e-9, r["rank"]
