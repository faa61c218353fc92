"""Rank functions for the checkpoint tests: several small pipelines trained in one launch, each
saved part-way (and continued), or resumed from its checkpoint in a later launch, with a snapshot
of parameters and optimizer state at the save (or just after the load) and at the end."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from tessel_dsl.executor.models.gpt import blocks_by_name

from . import pipeline_support as ps

# The optimizer of the run that saves, and the deliberately different one a resumed run builds:
# only the checkpoint can give it back the saved group hyperparameters.
OPTIMIZERS = {
    "adamw": (lambda g: torch.optim.AdamW(g, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1),
              lambda g: torch.optim.AdamW(g, lr=0.5, betas=(0.5, 0.6), eps=1e-3, weight_decay=0.0)),
    "sgd": (lambda g: torch.optim.SGD(g, lr=5e-2, momentum=0.9, weight_decay=0.01),
            lambda g: torch.optim.SGD(g, lr=0.5, momentum=0.1, nesterov=True)),
}

GPT2 = dict(vocab_size=96, n_embd=32, n_layer=2, n_head=2, n_positions=16, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, tie_word_embeddings=False, use_cache=False, bos_token_id=0, eos_token_id=0)
GPT2_BLOCKS = {"F0": ["transformer.wte", "transformer.wpe", "transformer.h.0"],
               "F1": ["transformer.h.1", "transformer.ln_f", "lm_head"]}


def gpt2(seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(**GPT2))


def seeded(build):
    def make(seed: int = 0):
        torch.manual_seed(seed)
        return build()
    return make


def chain_blocks(spec, layers: int = 4) -> dict[str, list[str]]:
    """The shipped GPT's layers one per stage block F0, F1, ... (in stage order), embedding with
    the first and head with the last: for plans whose stages loop over the devices."""
    stages = sorted((b.name for b in spec.blocks if b.name.startswith("F") and b.name[1:].isdigit()),
                    key=lambda n: int(n[1:]))
    if len(stages) != layers:
        raise ValueError(f"{len(stages)} stages for {layers} layers")
    out = {s: [f"layers.{i}"] for i, s in enumerate(stages)}
    out[stages[0]] = ["embed", "pos"] + out[stages[0]]
    out[stages[-1]] += ["norm", "head"]
    return out


def case(name: str, plan, build, loss_fn, blocks, data, optimizer: str = "adamw", tp=None) -> dict:
    return dict(name=name, plan=plan, build=build, loss_fn=loss_fn, blocks=blocks, data=data,
                optimizer=optimizer, tp=tp)


def gpt_case(name: str, plan, optimizer: str = "adamw", blocks=None, steps: int = 4, rows: int = 4) -> dict:
    return case(name, plan, lambda seed=0: ps.gpt(seed=seed), ps.gpt_loss, blocks or blocks_by_name(plan.spec, 4),
                ps.batches(512, steps, rows, 8), optimizer, ps.gpt_tp if "H" in plan.spec.by_name else None)


def snapshot(pipe, opt) -> dict:
    """This rank's parameters, optimizer state and group hyperparameters, by full-model name
    (a DTensor as its local shard)."""
    def plain(v):
        return getattr(v, "_local_tensor", v).detach().clone() if isinstance(v, torch.Tensor) else v

    params, state, groups = {}, {}, {}
    where = {id(p): g for g in opt.param_groups for p in g["params"]}
    for name, p in pipe.named_parameters():
        params[name] = plain(p)
        state[name] = {k: plain(v) for k, v in opt.state.get(p, {}).items()}
        groups[name] = {k: v for k, v in where[id(p)].items() if k != "params"}
    return {"params": params, "state": state, "groups": groups}


def run_cases(cases: list[dict], root, save_after: int | None, resume: bool, replicas: int = 1) -> dict:
    """Train each case on this rank's rows (replica k of R takes the k-th R-th of every batch):
    with `resume`, first load ``root/<name>`` (other initial weights, other optimizer settings);
    with `save_after`, save there after that many steps and go on. Returns per case the
    snapshot taken at the save or just after the load, the losses and the final snapshot."""
    from tessel_dsl.executor.pipeline import Pipeline

    out = {}
    for c in cases:
        path = Path(root) / c["name"]
        pipe = Pipeline(c["plan"], c["build"](7 if resume else 0), c["loss_fn"], blocks=c["blocks"],
                        replicas=replicas, tp=c["tp"]() if c["tp"] else None)
        opt = OPTIMIZERS[c["optimizer"]][1 if resume else 0](pipe.param_groups())
        start, marked = 0, None
        if resume:
            start = pipe.load(path, opt)
            marked = snapshot(pipe, opt)
        losses = []
        for i, (x, y) in enumerate(c["data"][start:], start):
            if i == save_after:
                pipe.save(path, opt, step=i)
                marked = snapshot(pipe, opt)
            k = pipe.replica
            losses.append(pipe.step(ps.chunks(x, replicas)[k], y.chunk(replicas)[k]))
            opt.step()
            opt.zero_grad()
        out[c["name"]] = {"start": start, "marked": marked, "losses": losses, "final": snapshot(pipe, opt),
                          "pp_rank": pipe.pp_rank}
    return out


# -- refusals -----------------------------------------------------------------------------------

def refusals(plan, other, root) -> dict[str, str]:
    """Save a good checkpoint, then load damaged or foreign copies of it, and feed an empty
    batch: each case's error (type and message), or the repr of what it returned."""
    import torch.distributed as dist

    from tessel_dsl.executor.pipeline import Pipeline

    root = Path(root)
    blocks = blocks_by_name(plan.spec, 4)
    pipe = Pipeline(plan, ps.gpt(), ps.gpt_loss, blocks=blocks)
    rank = pipe.rank
    opt = OPTIMIZERS["adamw"][0](pipe.param_groups())
    x, y = ps.batches(512, 1, 4, 8)[0]
    pipe.step(x, y)
    opt.step()
    good = root / "good"
    pipe.save(good, opt, step=1)
    # The same plan and mapping over a model of other sizes: same fingerprint, other shapes.
    wide = Pipeline(plan, ps.gpt(hidden=48), ps.gpt_loss, blocks=blocks)
    wide.save(root / "wide")
    sgd = OPTIMIZERS["sgd"][0](pipe.param_groups())

    def damaged(name, change):
        """A copy of the good checkpoint, changed by rank 0."""
        path = root / name
        if rank == 0:
            shutil.copytree(good, path)
            change(path)
        dist.barrier()
        return path

    def truncate(f):
        f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])

    def info(path, **kw):
        import json

        doc = json.loads((path / "tessel-plan.json").read_text())
        doc.update(kw)
        for k in [k for k, v in kw.items() if v is None]:
            del doc[k]
        (path / "tessel-plan.json").write_text(json.dumps(doc))

    def plant(path):
        import pickle

        (path / ".metadata").write_bytes(pickle.dumps(Payload(str(root / "payload-ran"))))

    if rank == 0:
        (root / "a-file").write_text("not a checkpoint")
    dist.barrier()
    cases = {
        "missing directory": lambda: pipe.load(root / "nowhere", opt),
        "a file": lambda: pipe.load(root / "a-file", opt),
        "no info file": lambda: pipe.load(damaged("noinfo", lambda p: (p / "tessel-plan.json").unlink()), opt),
        "info not json": lambda: pipe.load(damaged("badjson", lambda p: (p / "tessel-plan.json").write_text("{")), opt),
        "info a list": lambda: pipe.load(damaged("list", lambda p: (p / "tessel-plan.json").write_text("[1]")), opt),
        "forged fingerprint": lambda: pipe.load(damaged("other", lambda p: info(p, fingerprint="0" * 16)), opt),
        "other schedule": lambda: Pipeline(other, ps.gpt(), ps.gpt_loss, blocks=blocks).load(good),
        "earlier format": lambda: pipe.load(damaged("old", lambda p: info(p, format=None)), opt),
        "no optimizer state": lambda: pipe.load(root / "wide", opt),
        "no metadata": lambda: pipe.load(damaged("nometa", lambda p: (p / ".metadata").unlink()), opt),
        "truncated metadata": lambda: pipe.load(damaged("halfmeta", lambda p: truncate(p / ".metadata")), opt),
        "missing data file": lambda: pipe.load(damaged("nodata", lambda p: (p / "__1_0.distcp").unlink()), opt),
        "truncated data file": lambda: pipe.load(damaged("halfdata", lambda p: truncate(p / "__0_0.distcp")), opt),
        "other sizes": lambda: pipe.load(root / "wide"),
        "other optimizer": lambda: pipe.load(good, sgd),
        "planted payload": lambda: pipe.load(damaged("planted", plant), opt),
        "payload ran": lambda: (root / "payload-ran").exists(),
        "planted payload, trusted": lambda: pipe.load(root / "planted", opt, trusted=True),
        "payload ran when trusted": lambda: (root / "payload-ran").exists(),
        "save onto a file": lambda: pipe.save(root / "a-file", opt),
        "empty batch": lambda: pipe.step(x[:0], y[:0]),
        "good": lambda: pipe.load(good, opt),
        "good, trusted": lambda: pipe.load(good, opt, trusted=True),
    }
    out = {}
    for name, call in cases.items():
        try:
            out[name] = repr(call())
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
        dist.barrier()
    return out


class Payload:
    """Unpickling it creates a marker file: what a planted checkpoint would do."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))
