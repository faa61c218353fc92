"""Training loops for the `Pipeline` tests: the same model trained by pipelined ranks and by one
process accumulating gradients over the same micro-batches, step by step."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tessel_dsl.executor.models import shapes
from tessel_dsl.lower import lower
from tessel_dsl.plan import Plan


def searched_plan(spec) -> Plan:
    """The Tessel schedule of `spec` for its micro-batches, lowered."""
    from tessel_dsl.search.driver import search

    res = search(spec, microbatches=spec.microbatches)
    return Plan(spec, res.schedule, lower(spec, res.schedule))


# -- models -------------------------------------------------------------------------------------

def gpt(**kw):
    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT, Config

    return seeded(GPT, Config.of(kw))


def gpt_loss(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


LLAMA = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=16, use_cache=False, tie_word_embeddings=False)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**LLAMA))


def llama_loss(out, labels):
    return F.cross_entropy(out.logits.float().flatten(0, 1), labels.flatten())


def llama_blocks(spec) -> dict[str, list[str]]:
    """Embedding with the first stage (V) or as E(all) (M); norm and head with the last stage."""
    stages = [b.name for b in spec.blocks if b.name.startswith("F")]
    per = LLAMA["num_hidden_layers"] // len(stages)
    out = {s: [f"model.layers.{i * per + j}" for j in range(per)] for i, s in enumerate(stages)}
    if "E" in spec.by_name:
        out["E"] = ["model.embed_tokens"]
    else:
        out[stages[0]].insert(0, "model.embed_tokens")
    out[stages[-1]] += ["model.norm", "lm_head"]
    return out


class Fuse(torch.nn.Module):
    """Joins two sequences, taken as separate arguments, and mixes them with a residual MLP."""

    def __init__(self, d: int):
        super().__init__()
        from tessel_dsl.executor.models.common import ResidualMLP

        self.mlp = ResidualMLP(d)

    def forward(self, text, image):
        return self.mlp(torch.cat([text, image], dim=1))


class TwoTower(torch.nn.Module):
    """A text tower and an image tower joined by `Fuse`, then a classifier: the K-shape's
    branches (F0 and F1) and join (J), bound by name."""

    def __init__(self, vocab: int = 64, d: int = 16, patch: int = 12, classes: int = 5):
        super().__init__()
        from tessel_dsl.executor.models.common import TransformerLayer

        self.embed = torch.nn.Embedding(vocab, d)
        self.text = torch.nn.ModuleList(TransformerLayer(d, 2, causal=False) for _ in range(2))
        self.patch = torch.nn.Linear(patch, d)
        self.image = torch.nn.ModuleList(TransformerLayer(d, 2, causal=False) for _ in range(2))
        self.fuse = Fuse(d)
        self.cls = torch.nn.Linear(d, classes)

    def forward(self, tokens, patches):
        t = self.embed(tokens)
        for layer in self.text:
            t = layer(t)
        v = self.patch(patches)
        for layer in self.image:
            v = layer(v)
        return self.cls(self.fuse(t, v).mean(1))


class JoinedTwoTower(TwoTower):
    """The same towers, but joined before the join's first submodule: `fuse.mlp` gets one tensor
    that depends on both towers, which no single input block can send."""

    def forward(self, tokens, patches):
        t = self.embed(tokens)
        for layer in self.text:
            t = layer(t)
        v = self.patch(patches)
        for layer in self.image:
            v = layer(v)
        return self.cls(self.fuse.mlp(torch.cat([t, v], dim=1)).mean(1))


def two_tower():
    torch.manual_seed(0)
    return TwoTower()


TWO_TOWER_BLOCKS = {"F0": ["embed", "text.0", "text.1"], "F1": ["patch", "image.0", "image.1"], "J": ["fuse", "cls"]}


def two_tower_batches(steps: int, rows: int, distinct: int = 2):
    g = torch.Generator().manual_seed(1)
    pool = [((torch.randint(0, 64, (rows, 6), generator=g), torch.randn(rows, 4, 12, generator=g)),
             torch.randint(0, 5, (rows,), generator=g)) for _ in range(distinct)]
    return [pool[i % distinct] for i in range(steps)]


def chunks(x, n: int) -> list:
    """A batch tensor, or a tuple of them, in `n` parts along dim 0."""
    if isinstance(x, tuple):
        return list(zip(*(t.chunk(n) for t in x)))
    return list(x.chunk(n))


def call(model, x):
    return model(*x) if isinstance(x, tuple) else model(x)


def batches(vocab: int, steps: int, rows: int, seq: int, seed: int = 1, distinct: int = 2):
    """`steps` batches cycling over `distinct` random ones (so that the loss can fall)."""
    g = torch.Generator().manual_seed(seed)
    pool = []
    for _ in range(distinct):
        s = torch.randint(0, vocab, (rows, seq + 1), generator=g)
        pool.append((s[:, :-1].contiguous(), s[:, 1:].contiguous()))
    return [pool[i % distinct] for i in range(steps)]


# -- the two sides ------------------------------------------------------------------------------

def optimizer(params):
    return torch.optim.AdamW(params, lr=1e-2)


def reference(build, loss_fn, data, micro: int) -> list[float]:
    """One process: each step's batch split into `micro` micro-batches, mean loss, accumulated."""
    model = build()
    opt = optimizer(model.parameters())
    losses = []
    for x, y in data:
        total = 0.0
        for xs, ys in zip(chunks(x, micro), y.chunk(micro)):
            loss = loss_fn(call(model, xs), ys) / micro
            loss.backward()
            total += float(loss.detach())
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return losses


def gpt_tp():
    """Vocabulary-sharded embedding and LM head (the M-shape's E and H): the embedding replaced
    by its row shards (`spread_embedding`, as `tp_plans` gives), the head a DTensor plan."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    from tessel_dsl.placement.tp import spread_embedding

    return {"E": {"embed": spread_embedding},
            "H": {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}}


def built(build, on_meta: bool):
    """The model and the `init` Pipeline takes: on meta, `init` copies each submodule's weights
    from a CPU build, so the pipelined model starts where one process's does."""
    if not on_meta:
        return build(), None
    full = build()
    with torch.device("meta"):
        model = build()
    subs = dict(full.named_modules())

    def init(fqn, mod):
        mod.load_state_dict(subs[fqn].state_dict())

    return model, init


def pipelined(plan, build, loss_fn, blocks, data, replicas: int = 1, on_meta: bool = False, tp=None) -> dict:
    """One rank of R replicas: each takes its rows of every batch; returns its losses."""
    import torch.distributed as dist

    from tessel_dsl.executor.pipeline import Pipeline

    model, init = built(build, on_meta)
    pipe = Pipeline(plan, model, loss_fn, blocks=blocks, replicas=replicas, init=init, tp=tp() if tp else None)
    opt = optimizer(pipe.param_groups())
    losses = []
    for x, y in data:
        k = pipe.replica
        losses.append(pipe.step(chunks(x, replicas)[k], y.chunk(replicas)[k]))
        opt.step()
        opt.zero_grad()
    meta = sorted(n for n, p in model.named_parameters() if p.is_meta)
    return {"losses": losses, "rank": dist.get_rank(), "meta": meta,
            "local": sorted(n for n, _ in pipe.named_parameters()),
            "shapes": {n: tuple(getattr(p, "_local_tensor", p).shape) for n, p in pipe.named_parameters()}}


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def mshape(devices: int, n: int):
    return shapes.mshape(devices, microbatches=n)


def vshape(devices: int, n: int):
    return shapes.vshape(devices, microbatches=n)



def bad_batch(plan, blocks, rows: int, label_len: int = 8):
    from tessel_dsl.executor.pipeline import Pipeline

    pipe = Pipeline(plan, gpt(), gpt_loss, blocks=blocks)
    x, y = batches(512, 1, rows, 8)[0]
    return pipe.step(x, y[:, :label_len])


def bad_world(plan, blocks, replicas: int):
    from tessel_dsl.executor.pipeline import Pipeline

    return Pipeline(plan, gpt(), gpt_loss, blocks=blocks, replicas=replicas)


def inferred(plan, blocks, x):
    """The output of an inference plan's `forward` on this rank (None off the last block)."""
    from tessel_dsl.executor.pipeline import Pipeline

    pipe = Pipeline(plan, gpt(), blocks=blocks)
    return pipe.forward(x)


class Diamond(torch.nn.Module):
    """A trunk feeding two branches, joined again: a fan-out (F0 -> F1, F0 -> F2) and a join
    (F1, F2 -> J), bound by name."""

    def __init__(self, vocab: int = 64, d: int = 16, classes: int = 5):
        super().__init__()
        from tessel_dsl.executor.models.common import ResidualMLP

        self.embed = torch.nn.Embedding(vocab, d)
        self.trunk = ResidualMLP(d)
        self.left = ResidualMLP(d)
        self.right = ResidualMLP(d, act=torch.tanh)
        self.fuse = Fuse(d)
        self.cls = torch.nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.trunk(self.embed(tokens))
        return self.cls(self.fuse(self.left(x), self.right(x * 2)).mean(1))


def diamond():
    torch.manual_seed(0)
    return Diamond()


DIAMOND_BLOCKS = {"F0": ["embed", "trunk"], "F1": ["left"], "F2": ["right"], "J": ["fuse", "cls"]}


def diamond_spec():
    """F0 (device 0) feeds F1 (device 1) and F2 (device 0), which J (both devices) joins."""
    from tessel_dsl.ir import Mode

    fwd = [("F0", (0,)), ("F1", (1,)), ("F2", (0,)), ("J", None)]
    return shapes._spec("diamond", 2, 8, fwd, [("F0", "F1"), ("F0", "F2"), ("F1", "J"), ("F2", "J")], Mode.TRAIN, 2)
