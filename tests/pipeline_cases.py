"""Models and loops for the `Pipeline` tests of meta-device buffers, batch checks and tied
weights: Hugging Face models (random weights, tiny configs) trained by pipelined ranks and by
one process, returning losses and final parameters so both can be compared."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import pipeline_support as ps

SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=16, use_cache=False)


def llama(tie: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**SMALL, tie_word_embeddings=tie))


def qwen2(tie: bool = False):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(**SMALL, tie_word_embeddings=tie))


def lm_loss(out, labels):
    return F.cross_entropy(out.logits.float().flatten(0, 1), labels.flatten())


def decoder_blocks(spec, layers: int = 4, prefix: str = "model.") -> dict[str, list[str]]:
    """Embedding with the first stage (V) or as E(all) (M); norm and head with the last stage."""
    stages = [b.name for b in spec.blocks if b.name.startswith("F")]
    per = layers // len(stages)
    out = {s: [f"{prefix}layers.{i * per + j}" for j in range(per)] for i, s in enumerate(stages)}
    if "E" in spec.by_name:
        out["E"] = [f"{prefix}embed_tokens"]
    else:
        out[stages[0]].insert(0, f"{prefix}embed_tokens")
    out[stages[-1]] += [f"{prefix}norm", "lm_head"]
    return out


def reference(build, loss_fn, data, micro: int, steps_of=None) -> dict:
    """One process accumulating over the same micro-batches: losses and final parameters."""
    model = build()
    opt = ps.optimizer(model.parameters())
    losses = []
    for x, y in data:
        total = 0.0
        for xs, ys in zip(ps.chunks(x, micro), ps.chunks(y, micro)):
            loss = loss_fn(ps.call(model, xs), *(ys if isinstance(ys, tuple) else (ys,))) / micro
            loss.backward()
            total += float(loss.detach())
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return {"losses": losses, "params": {n: p.detach().clone() for n, p in model.named_parameters()}}


def pipelined(plan, build, loss_fn, blocks, data, replicas: int = 1, on_meta: bool = False, **kw) -> dict:
    """One rank of R replicas (each takes its rows of every batch): its losses and its final
    parameters under their full-model names."""
    from tessel_dsl.executor.pipeline import Pipeline

    init = None
    if on_meta:
        full = build()
        with torch.device("meta"):
            model = build()
        subs = dict(full.named_modules())

        def init(fqn, mod):
            mod.load_state_dict(subs[fqn].state_dict())
    else:
        model = build()
    pipe = Pipeline(plan, model, loss_fn, blocks=blocks, replicas=replicas, init=init, **kw)
    opt = ps.optimizer(pipe.param_groups())
    losses = []
    for x, y in data:
        k = pipe.replica
        y = y if isinstance(y, tuple) else (y,)
        losses.append(pipe.step(ps.chunks(x, replicas)[k], tuple(t.chunk(replicas)[k] for t in y)))
        opt.step()
        opt.zero_grad()
    return {"losses": losses, "params": {n: p.detach().clone() for n, p in pipe.named_parameters()},
            "rank": pipe.rank}


def compare(got: list[dict], want: dict, tol: float = 1e-5) -> None:
    """Every rank's losses and every parameter it holds equal one process's."""
    for r in got:
        errs = [ps.rel(a, b) for a, b in zip(r["losses"], want["losses"])]
        assert len(r["losses"]) == len(want["losses"]) and max(errs) <= tol, (r["rank"], errs)
        assert r["params"]
        for n, p in r["params"].items():
            ref = want["params"][n]
            err = float((p - ref).norm() / ref.norm().clamp_min(1e-30))
            assert err <= tol, (r["rank"], n, err)


def per_rank_batches(plan, blocks, data) -> list[float]:
    """GPT ranks each drawing their own batch (rank r takes batch r of `data`), as a per-rank
    sampler would."""
    import torch.distributed as dist

    from tessel_dsl.executor.pipeline import Pipeline

    pipe = Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=blocks)
    x, y = data[dist.get_rank() % len(data)]
    return [pipe.step(x, y)]
