"""Train a small byte-level GPT on real text with a Tessel plan, from an ordinary training loop.

    python examples/train_gpt.py                               # 2 CPU ranks (gloo), M-shape plan
    python examples/train_gpt.py --replicas 2 --steps 300      # 2 pipeline x 2 data-parallel ranks
    python examples/train_gpt.py --text notes/*.md --trace step.json
    torchrun --nproc-per-node 4 examples/train_gpt.py --plan plan.json --replicas 2   # GPUs

The text is the Python documentation that ships with Python itself (`pydoc_data.topics`, about
465 kB), or the files given with --text; tokens are bytes (a 256-symbol vocabulary). The model is
the shipped GPT (`tessel_dsl.executor.models.gpt.GPT`), its blocks bound by submodule name to the
plan's blocks, the embedding and LM head (E and H, on every device) sharded with DTensor. Without
--plan, the M-shape spec for --devices is searched here (that needs the full package; a GPU
machine with torch only takes a plan file). Rank 0 draws a progress bar with the loss; the last
line compares the mean loss of the first and the last tenth of the steps. --trace writes a
Chrome/Perfetto trace of the last step.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a source checkout works uninstalled


def corpus(files: list[str]) -> torch.Tensor:
    """The text as a tensor of byte values."""
    if files:
        text = b"\n".join(Path(f).read_bytes() for f in files)
    else:
        from pydoc_data.topics import topics

        text = "\n\n".join(topics[k] for k in sorted(topics)).encode()
    if len(text) < 1024:
        raise SystemExit(f"the text is only {len(text)} bytes: give more with --text")
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()


def batches(data: torch.Tensor, rows: int, seq: int, seed: int):
    """Endless (tokens, next tokens) batches of random windows of the text."""
    g = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(0, len(data) - seq - 1, (rows,), generator=g)
        window = torch.stack([data[s:s + seq + 1] for s in start.tolist()])
        yield window[:, :-1], window[:, 1:]


def lm_loss(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def make_plan(args):
    if args.plan:
        from tessel_dsl.plan import load_plan

        return load_plan(args.plan)
    from tessel_dsl.executor.models import shapes
    from tessel_dsl.lower import lower
    from tessel_dsl.plan import Plan
    from tessel_dsl.search.driver import search

    spec = shapes.mshape(args.devices, head=True, microbatches=args.microbatches)
    res = search(spec, microbatches=args.microbatches)
    return Plan(spec, res.schedule, lower(spec, res.schedule))


def setup(args, plan):
    """The model on the meta device (nothing allocated until each rank keeps its own blocks), its
    block mapping, DTensor plans for E and H, and an example batch of the right shape."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from tessel_dsl.executor.models.gpt import GPT, Config, blocks_by_name

    cfg = Config(vocab=256, hidden=args.hidden, heads=4, layers=args.layers, seq=args.seq, batch=args.rows)
    with torch.device("meta"):
        model = GPT(cfg)
    names = {b.name for b in plan.spec.blocks}
    tp = {}
    if args.tp and "E" in names:
        tp["E"] = {"embed": RowwiseParallel(input_layouts=Replicate())}
    if args.tp and "H" in names:
        tp["H"] = {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    rows = args.rows * plan.schedule.microbatches  # per replica and step
    example = (torch.zeros(rows, cfg.seq, dtype=torch.long),) * 2
    return cfg, model, blocks_by_name(plan.spec, cfg.layers), tp, example


def train(args, plan) -> list[float]:
    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT
    from tessel_dsl.executor.pipeline import Pipeline

    cfg, model, blocks, tp, example = setup(args, plan)
    weights = dict(seeded(GPT, cfg).named_modules())  # small here; load your checkpoint instead

    def init(fqn, module):
        module.load_state_dict(weights[fqn].state_dict())

    # batch=: the example batch is checked (split, fake run) before the process group is joined
    pipe = Pipeline(plan, model, lm_loss, blocks=blocks, replicas=args.replicas, init=init, tp=tp, batch=example)
    opt = torch.optim.AdamW(pipe.param_groups(), lr=args.lr)
    rows = args.rows * plan.schedule.microbatches  # per replica and step
    data = batches(corpus(args.text), rows, cfg.seq, seed=1 + pipe.replica)
    show = pipe.rank == 0
    losses, t0 = [], time.perf_counter()
    for step in range(args.steps):
        x, y = next(data)
        losses.append(pipe.step(x, y))
        opt.step()
        opt.zero_grad(set_to_none=True)
        if show:
            tokens = (step + 1) * rows * cfg.seq * pipe.replicas
            progress(step + 1, args.steps, losses, tokens / (time.perf_counter() - t0))
    if args.trace:
        pipe.write_trace(args.trace)
    return losses


def progress(done: int, total: int, losses: list[float], tok_s: float) -> None:
    width = 30
    fill = int(width * done / total)
    recent = losses[-20:]
    print(f"\r[{'#' * fill}{'.' * (width - fill)}] step {done}/{total}  loss {losses[-1]:.3f} "
          f"(last {len(recent)}: {sum(recent) / len(recent):.3f})  {tok_s:,.0f} tokens/s", end="", flush=True)
    if done == total:
        print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", help="a plan file (default: search the M-shape for --devices)")
    ap.add_argument("--devices", type=int, default=2, help="pipeline devices of the searched plan")
    ap.add_argument("--replicas", type=int, default=1, help="data-parallel copies of the pipeline")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rows", type=int, default=4, help="sequences per micro-batch")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--no-tp", dest="tp", action="store_false", help="replicate E and H instead of sharding them")
    ap.add_argument("--text", nargs="*", default=[], help="text files to train on")
    ap.add_argument("--trace", help="write a Chrome trace of the last step here")
    args = ap.parse_args()
    plan = make_plan(args)
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        losses = train(args, plan)
    else:
        from tessel_dsl.executor.local_ranks import run_ranks
        from tessel_dsl.executor.pipeline import Pipeline

        # Names, batch and world checked here, in about a second, before any rank starts.
        world = plan.spec.devices * args.replicas
        _, model, blocks, tp, example = setup(args, plan)
        Pipeline.check(plan, model, lm_loss, blocks=blocks, batch=example, world=world, tp=tp)
        losses = run_ranks(train, world, args, plan, threads=1)[0]
    if os.environ.get("RANK", "0") == "0":
        k = max(1, len(losses) // 10)
        first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
        print(f"mean loss of the first {k} steps {first:.3f}, of the last {k} steps {last:.3f}")
        if args.trace:
            print(f"trace of the last step: {args.trace}")


if __name__ == "__main__":
    main()
