"""Does the order of one GPU's blocks change how long they take? Two plans' programs for GPU 0,
replayed alone on one GPU.

In a pipeline, a block's time on a GPU can depend on the plan around it in two ways: through the
other GPUs (messages on the links while it computes) and through its own GPU's order (what ran
just before it: caches, the allocator's state, the host's lead over the GPU). This separates the
second from the first. For two plans of the same placement, each takes the blocks one GPU runs
(`--device`), in that plan's order, as a plan of its own on one GPU: the stages the GPU holds
become consecutive stages of a model with that many layers, and every dependency through the
other GPUs is met by the order itself (it was met in the original plan). Both run alternately by
this executor, so any difference in their block times comes from the order alone.

  here:  python bench/gpu_order.py make PLAN_A PLAN_B        -> bench/plans/gpu_order/{a,b}.json
  there: PYTHONPATH=. python bench/gpu_order.py run [--rounds R --steps S]   -> $OUT/gpu_order.{md,json}

`make` needs the search package (parser, compaction, validation); `run` needs torch and the plans.
The model is bench/gpu_zb.py's GPT with a 32k vocabulary, as many layers as the GPU has stages.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_common import GPT, PLANS, TINY, compute_actions, gpu_info, smoke  # noqa: E402

OUT = PLANS / "gpu_order"
MODEL = "tessel_dsl.executor.models.gpt:factory"


def one_device_order(plan, device: int) -> tuple[list[str], list[tuple[str, int]]]:
    """The forward stages `device` holds, in the spec's order (the chain's, in the bench's V and
    chain plans), and its blocks' order renamed to stages 0, 1, ... of a one-device chain (``F7``
    -> ``F1`` when the GPU holds F0 and F7). Split-backward plans only (F, I, W per stage)."""
    from tessel_dsl.ir import Kind

    spec = plan.spec
    mine = [b for b in spec.blocks if b.devices == (device,)]
    forwards = [b.name for b in spec.blocks if b.kind is Kind.FORWARD and b in mine]
    if any(b.is_multi_device for b in spec.blocks):
        raise SystemExit("only plans whose blocks each run on one GPU")
    rename = {}
    for i, f in enumerate(forwards):
        rename[f] = f"F{i}"
        for b in spec.blocks:
            if b.forward == f:
                rename[b.name] = f"{'I' if b.kind is Kind.INPUT_GRAD else 'W'}{i}"
    order = [(rename[s.block], s.mb) for s in plan.schedule.per_device(spec)[device]]
    return forwards, order


def one_device_spec(plan, forwards: list[str]) -> str:
    """A one-device split-backward chain of the stages `forwards`, each block with its original
    time (the executor runs the order, not the times; they only give the plan its start times)."""
    from tessel_dsl.ir import Kind

    spec = plan.spec
    us = spec.units.time_seconds * 1e6

    def t(block) -> str:
        return f"time {max(1, round(block.time * us))}us"

    lines = ["placement gpu_order", "resolution time 1us", "devices 1", "memory 1000000",
             f"microbatches {plan.schedule.microbatches}", "mode train"]
    for i, f in enumerate(forwards):
        part = {b.kind: b for b in spec.blocks if b.forward == f}
        lines += [f"forward F{i} on 0 {t(spec.block(f))}", f"input_grad I{i} of F{i} {t(part[Kind.INPUT_GRAD])}",
                  f"weight_grad W{i} of F{i} {t(part[Kind.WEIGHT_GRAD])}", f"I{i} -> W{i}"]
    last = len(forwards) - 1
    lines += [f"F{i} -> F{i + 1}" for i in range(last)] + [f"F{last} -> I{last}"]
    lines += [f"I{i + 1} -> I{i}" for i in range(last)]
    return "\n".join(lines) + "\n"


def make(plans: list[str], device: int) -> None:
    from tessel_dsl.lang.parser import parse
    from tessel_dsl.plan import load_plan, make_plan, save_plan
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.compact import compact

    OUT.mkdir(parents=True, exist_ok=True)
    made = {}
    for tag, path in zip("ab", plans):
        plan = load_plan(path)
        forwards, order = one_device_order(plan, device)
        spec = parse(one_device_spec(plan, forwards))
        schedule = Schedule(plan.schedule.microbatches, compact(spec, orders=[order]))
        save_plan(make_plan(spec, schedule), OUT / f"{tag}.json")
        made[tag] = {"from": str(path), "device": device, "stages": forwards,
                     "order": " ".join(f"{b}:{m}" for b, m in order)}
    (OUT / "made.json").write_text(json.dumps(made, indent=1))
    print(json.dumps(made, indent=1))


def run(rounds: int, steps: int, warmup: int, out: Path) -> None:
    import tessel_dsl.executor as executor
    from tessel_dsl.plan import load_plan

    made = json.loads((OUT / "made.json").read_text())
    layers = len(made["a"]["stages"])
    margs = (TINY["gpt"] if smoke() else GPT | {"vocab": 32000}) | {"layers": layers}
    res: dict = {"gpu": gpu_info(), "made": made, "rounds": []}
    for r in range(rounds):
        row = {}
        for tag in ("ab" if r % 2 == 0 else "ba"):
            plan = load_plan(OUT / f"{tag}.json")
            rep = executor.run(plan, MODEL, backend="gloo" if smoke() else "nccl", steps=steps, warmup=warmup,
                               timeout=100, model_args=margs)
            s = rep.summary()
            row[tag] = {"iterations": s["iterations"], "block_seconds": s["block_seconds"],
                        "actions": compute_actions(rep)}
        res["rounds"].append(row)
    lines = [f"# One GPU's blocks in two plans' orders, alone ({res['gpu']})", "",
             f"a: {made['a']['from']}, b: {made['b']['from']}, GPU {made['a']['device']}'s stages "
             f"{', '.join(made['a']['stages'])}; {steps} iterations a round, {rounds} rounds (a, b alternating first)", "",
             "| round | a: median iteration ms | b: median iteration ms | b - a |", "|---|---|---|---|"]
    for i, row in enumerate(res["rounds"]):
        a, b = (statistics.median(row[t]["iterations"]) * 1e3 for t in "ab")
        lines.append(f"| {i} | {a:.2f} | {b:.2f} | {b - a:+.2f} |")
    blocks = sorted(res["rounds"][0]["a"]["block_seconds"])
    lines += ["", "| block | a: median ms over rounds | b |", "|---|---|---|"]
    for blk in blocks:
        a, b = (statistics.median(row[t]["block_seconds"][blk] for row in res["rounds"]) * 1e3 for t in "ab")
        lines.append(f"| {blk} | {a:.3f} | {b:.3f} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_order.json").write_text(json.dumps(res))
    (out / "gpu_order.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("plans", nargs=2)
    m.add_argument("--device", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("--rounds", type=int, default=4)
    r.add_argument("--steps", type=int, default=7)
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    if args.cmd == "make":
        make(args.plans, args.device)
    else:
        run(args.rounds, args.steps, args.warmup, Path(args.out))


if __name__ == "__main__":
    main()
