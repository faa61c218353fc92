"""What each compute block of a plan dispatches on rank 0 when `Pipeline` runs it, and which of
the plan's sends wait for their receivers while a block computes.

The plan runs on the GPT of executor/models/gpt.py at small sizes, on gloo ranks on the CPU, with
the binding `tessel plan` wrote beside it (``PLAN.blocks.json``) and the DTensor plans
`placement.tp.tp_plans` gives it -- what bench/gpu_zb.py's choice rows run on the GPUs. Per block
of rank 0, over the micro-batches of the last of ``--steps`` steps: the operators its action
dispatches (on a GPU about one kernel launch each; a set of values where micro-batches differ) and,
for a backward block, the autograd nodes of the graph it runs. These counts do not depend on the
machine's load, so two checkouts can be compared by running this script from each.

The second table reads the plan alone. A send is matched once its receiver posts the receive,
which under ``TESSEL_RECV_POST=due`` (the default) happens at the receiver's ``WAIT``, just before
the block that consumes it; until then a GPU send of more than NCCL's buffer holds its kernel on
the sender's GPU. For each block of the chosen device, per micro-batch in order: how many links
of that device have a send still unmatched when the block starts, by the schedule's times (with a
stream per link, ``TESSEL_COMM_STREAMS=link``, each such link has one send kernel waiting).

    PYTHONPATH=. python bench/pipeline_ops.py bench/plans/gpu_zb/gpt512k4_choice_tessel_n16.json
    PYTHONPATH=. python bench/pipeline_ops.py --plan-only bench/plans/gpu_zb/gpt512k4_mshape_tessel_n16.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: the checkout named there is the one measured

SMALL = {"vocab": 512, "hidden": 64, "heads": 4, "seq": 16, "batch": 1}


def _loss(logits, labels):
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def _graph_nodes(outs) -> int:
    seen, stack = set(), [o.grad_fn for o in outs if o.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return len(seen)


def _rank(plan_file: str, blocks: dict, margs: dict, steps: int) -> dict:
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT, Config
    from tessel_dsl.executor.pipeline import Pipeline
    from tessel_dsl.placement.tp import tp_plans
    from tessel_dsl.plan import load_plan

    plan = load_plan(plan_file)
    device = torch.device("cpu")
    model = seeded(GPT, Config.of(margs), device)
    mbs = [model.batch(mb, device) for mb in range(plan.schedule.microbatches)]
    x, y = torch.cat([b[0] for b in mbs]), torch.cat([b[1] for b in mbs])
    pipe = Pipeline(plan, model, _loss, blocks=blocks, tp=tp_plans(plan, blocks, model))
    runner, last = pipe.runner, steps - 1
    got: dict[str, dict[int, tuple[int, int | None]]] = collections.defaultdict(dict)

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    def counted(run, backward: bool):
        def action(name, mb, *rest):
            nodes = None
            if backward and step[0] == last:
                saved = runner.saved.get((runner.spec.block(name).forward, mb))
                nodes = _graph_nodes(saved[1]) if saved else None
            with Count() as c:
                out = run(name, mb, *rest)
            if step[0] == last:
                got[name][mb] = (c.n, nodes)
            return out
        return action

    step = [0]
    if dist.get_rank() == 0:
        runner._forward = counted(runner._forward, False)
        runner._backward = counted(runner._backward, True)
    for step[0] in range(steps):
        for p in pipe.parameters():
            p.grad = None
        pipe.step(x, y)
    return dict(got)


def unmatched_links(plan, device: int) -> dict[str, list[int]]:
    """Per block of `device`, per micro-batch in start order: the links with a send unmatched at
    its start (a send is posted when its block ends, matched when the receiver's next compute
    after its WAIT starts)."""
    from tessel_dsl.program import Op

    spec, sched = plan.spec, plan.schedule
    start = {(s.block, s.mb): s.start for s in sched.slots}
    matched: dict[tuple[int, str, int], int] = {}  # (receiver, block, mb) -> when
    for p, prog in enumerate(plan.programs):
        waiting = []
        for a in prog.actions:
            if a.op is Op.WAIT:
                waiting.append((a.block, a.mb))
            elif a.op is Op.COMPUTE:
                for key in waiting:
                    matched[(p, *key)] = start[(a.block, a.mb)]
                waiting = []
    sends = [(start[(a.block, a.mb)] + spec.block(a.block).time, p, matched[(p, a.block, a.mb)])
             for a in plan.programs[device].actions if a.op is Op.SEND for p in a.peers]
    out: dict[str, list[int]] = {}
    for s in sorted(s for s in sched.slots if device in s.devices(spec)):
        out.setdefault(s.block, []).append(len({p for posted, p, when in sends if posted <= s.start < when}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan", type=Path, help="a GPT plan file with its .blocks.json beside it")
    ap.add_argument("--steps", type=int, default=2, help="steps run; the last is counted")
    ap.add_argument("--device", type=int, default=0, help="the device of the second table")
    ap.add_argument("--layers", type=int, default=None, help="GPT layers (default: those the binding names)")
    ap.add_argument("--plan-only", action="store_true", help="the second table alone (no run, no binding needed)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from tessel_dsl.plan import load_plan

    plan = load_plan(args.plan)
    if not args.plan_only:
        run(plan, args)
    print(f"{args.plan.name}, device {args.device}: links with a send unmatched when each micro-batch's block "
          f"starts (schedule times, receives posted at their WAIT)")
    print()
    print("| block | per micro-batch, in start order |")
    print("|---|---|")
    for b, counts in unmatched_links(plan, args.device).items():
        print(f"| {b} | {' '.join(map(str, counts))} |")


def run(plan, args) -> None:
    from tessel_dsl.executor.local_ranks import run_ranks

    blocks = json.loads(args.plan.with_name(args.plan.name.removesuffix(".json") + ".blocks.json").read_text())
    layers = args.layers or sum(1 for fs in blocks.values() for f in fs if f.startswith("layers."))
    margs = SMALL | {"layers": layers}
    got = run_ranks(_rank, plan.spec.devices, str(args.plan), blocks, margs, args.steps, timeout=1800)[0]
    print(f"{args.plan.name}: GPT {margs}, N={plan.schedule.microbatches}, {plan.spec.devices} gloo ranks; "
          f"rank 0, step {args.steps} of {args.steps}")
    print()
    print("| block | micro-batches | operators per micro-batch | autograd nodes per micro-batch |")
    print("|---|---|---|---|")
    for b in sorted(got):
        ops = sorted({n for n, _ in got[b].values()})
        nodes = sorted({g for _, g in got[b].values() if g is not None})
        print(f"| {b} | {len(got[b])} | {'/'.join(map(str, ops))} | {'/'.join(map(str, nodes)) or '-'} |")
    print()


if __name__ == "__main__":
    main()
