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


def gpt2():
    """GPT-2 with its LM head tied to the token embedding (the default), no dropout."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=4, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def gpt2_blocks(spec) -> dict[str, list[str]]:
    """Token and position embeddings with the first stage (V) or as E (M); final norm and the
    tied head with the last stage."""
    stages = [b.name for b in spec.blocks if b.name.startswith("F") and not b.kind.is_backward]
    per = 4 // len(stages)
    out = {s: [f"transformer.h.{i * per + j}" for j in range(per)] for i, s in enumerate(stages)}
    embed = ["transformer.wte", "transformer.wpe"]
    if "E" in spec.by_name:
        out["E"] = embed
    else:
        out[stages[0]] = embed + out[stages[0]]
    out[stages[-1]] += ["transformer.ln_f", "lm_head"]
    return out


def t5():
    """T5 with one embedding shared by encoder, decoder and LM head, no dropout."""
    from transformers import T5Config, T5ForConditionalGeneration

    class T5(T5ForConditionalGeneration):
        def forward(self, input_ids, decoder_input_ids):  # the batch's two tensors, positionally
            return super().forward(input_ids=input_ids, decoder_input_ids=decoder_input_ids)

    torch.manual_seed(0)
    return T5(T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2,
                                               num_heads=2, dropout_rate=0.0, decoder_start_token_id=0))


# The encoder and the decoder's embedding on the first device, the decoder and the head on the
# second: the shared embedding is used on both.
T5_BLOCKS = {"F0": ["encoder.embed_tokens", "encoder.block.0", "encoder.block.1", "encoder.final_layer_norm",
                    "decoder.embed_tokens"],
             "F1": ["decoder.block.0", "decoder.block.1", "decoder.final_layer_norm", "lm_head"]}


def t5_batches(steps: int, rows: int, distinct: int = 2):
    g = torch.Generator().manual_seed(1)
    pool = [((torch.randint(0, 64, (rows, 7), generator=g), torch.randint(0, 64, (rows, 5), generator=g)),
             torch.randint(0, 64, (rows, 5), generator=g)) for _ in range(distinct)]
    return [pool[i % distinct] for i in range(steps)]


def seq2seq_loss(out, labels):
    return F.cross_entropy(out.logits.float().flatten(0, 1), labels.flatten())


def qwen2_tied():
    return qwen2(tie=True)


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


def optimizer(params):
    """Plain SGD: a parameter's change is its gradients' sum, so parameters compare as gradients
    do (Adam would blow roundoff in a gradient that is zero in exact arithmetic, such as a key
    bias's, up to steps of the learning rate)."""
    return torch.optim.SGD(params, lr=0.05)


def _grads(named) -> dict:
    return {n: p.grad.detach().clone() for n, p in named if p.grad is not None}


def reference(build, loss_fn, data, micro: int) -> dict:
    """One process accumulating over the same micro-batches: losses, the last step's gradients
    and the final parameters."""
    model = build()
    opt = optimizer(model.parameters())
    losses = []
    for x, y in data:
        total = 0.0
        for xs, ys in zip(ps.chunks(x, micro), ps.chunks(y, micro)):
            loss = loss_fn(ps.call(model, xs), *(ys if isinstance(ys, tuple) else (ys,))) / micro
            loss.backward()
            total += float(loss.detach())
        grads = _grads(model.named_parameters(remove_duplicate=False))
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return {"losses": losses, "grads": grads,
            "params": {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}}


def pipelined(plan, build, loss_fn, blocks, data, replicas: int = 1, on_meta: bool = False, **kw) -> dict:
    """One rank of R replicas (each takes its rows of every batch): its losses and its final
    parameters under their full-model names."""
    from tessel_dsl.executor.pipeline import Pipeline

    model, init = ps.built(build, on_meta)
    pipe = Pipeline(plan, model, loss_fn, blocks=blocks, replicas=replicas, init=init, **kw)
    opt = optimizer(pipe.param_groups())
    losses = []
    for x, y in data:
        k = pipe.replica
        y = y if isinstance(y, tuple) else (y,)
        losses.append(pipe.step(ps.chunks(x, replicas)[k], tuple(t.chunk(replicas)[k] for t in y)))
        grads = _grads(pipe.named_parameters())
        opt.step()
        opt.zero_grad()
    return {"losses": losses, "grads": grads, "params": {n: p.detach().clone() for n, p in pipe.named_parameters()},
            "rank": pipe.rank}


def compare(got: list[dict], want: dict, tol: float = 1e-5) -> None:
    """Every rank's losses, and the last step's gradient and the final value of every parameter
    it holds, equal one process's (norm-wise relative error)."""
    for r in got:
        errs = [ps.rel(a, b) for a, b in zip(r["losses"], want["losses"])]
        assert len(r["losses"]) == len(want["losses"]) and max(errs) <= tol, (r["rank"], errs)
        assert r["params"] and set(r["grads"]) == set(r["params"])
        for what in ("grads", "params"):
            for n, p in r[what].items():
                ref = want[what][n]
                err = float((p - ref).norm() / ref.norm().clamp_min(1e-30))
                assert err <= tol, (r["rank"], what, n, err)


def per_rank_batches(plan, blocks, data) -> list[float]:
    """GPT ranks each drawing their own batch (rank r takes batch r of `data`), as a per-rank
    sampler would."""
    import torch.distributed as dist

    from tessel_dsl.executor.pipeline import Pipeline

    pipe = Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=blocks)
    x, y = data[dist.get_rank() % len(data)]
    return [pipe.step(x, y)]


def padded_batches(steps: int, rows: int, seq: int = 8, vocab: int = 512):
    """GPT batches whose labels end in padding (-100) of a different length in every row, so
    micro-batches hold different numbers of tokens."""
    data = ps.batches(vocab, steps, rows, seq)
    out = []
    for x, y in data:
        y = y.clone()
        for r in range(rows):
            y[r, seq - (r * 3) % seq:] = -100
        out.append((x, y))
    return out


def token_loss(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)


def tokens(labels):
    return (labels != -100).sum()


def token_mean_reference(build, data) -> dict:
    """One process, one pass over each whole batch: the loss is the mean over its tokens."""
    model = build()
    opt = optimizer(model.parameters())
    losses = []
    for x, y in data:
        loss = token_loss(model(x), y)
        loss.backward()
        grads = _grads(model.named_parameters())
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return {"losses": losses, "grads": grads, "params": {n: p.detach().clone() for n, p in model.named_parameters()}}


def token_weighted(plan, build, blocks, data, replicas: int) -> dict:
    """`pipelined` with the token-mean loss and micro-batches weighted by their token counts."""
    return pipelined(plan, build, token_loss, blocks, data, replicas, loss_weight=tokens)
