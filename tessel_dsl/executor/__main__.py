"""``torchrun --nproc-per-node N -m tessel_dsl.executor PLAN --model MODULE:FACTORY``: one rank per process.

Uses the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT); rank 0
prints the measured summary (or JSON with --json) and can write the Chrome trace.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from tessel_dsl.errors import TesselError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tessel_dsl.executor", description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--model", required=True, help="MODULE:FACTORY")
    ap.add_argument("--model-arg", action="append", default=[], metavar="K=V")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=1, help="data-parallel copies of the plan")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        from tessel_dsl.executor.launch import Options, load, rank_main
        from tessel_dsl.executor.models.common import parse_model_args
        from tessel_dsl.plan import plan_to_json

        plan = load(args.plan)
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        local = int(os.environ.get("LOCAL_RANK", rank))
        if world != plan.spec.devices * args.replicas:
            raise TesselError(f"the plan needs {plan.spec.devices} ranks x {args.replicas} replica(s) = "
                              f"{plan.spec.devices * args.replicas}, torchrun started {world}")
        import torch

        backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        opts = Options(args.model, parse_model_args(args.model_arg), backend, args.timeout, args.steps, args.warmup,
                       collect=True, replicas=args.replicas)
        rep = rank_main(rank, world, plan_to_json(plan), opts, "env://", local_rank=local)
        if rep is not None:
            from tessel_dsl.executor.trace import write_trace

            if args.trace:
                write_trace(args.trace, rep.timelines[rep.median_index()])
            print(json.dumps(rep.summary(), indent=1) if args.json else format_summary(rep.summary()))
        return 0
    except TesselError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def format_summary(s: dict) -> str:
    """Plain-text table of measured vs replayed numbers (the CLI renders the same with rich)."""
    m, sim = s["measured"], s["simulated"]
    lines = [f"{s['plan']} ({s['schedule']}, {'blocking' if s['blocking'] else 'non-blocking'}) on "
             f"{s['devices']} x {s['device']}, {s['microbatches']} micro-batches",
             f"iteration  measured {m['iteration'] * 1e3:9.2f} ms   simulated {sim['iteration'] * 1e3:9.2f} ms",
             f"throughput {s['throughput_mb_per_s']:.2f} micro-batches/s"]
    for d in range(s["devices"]):
        lines.append(f"dev{d}  busy {m['busy'][d] * 1e3:8.2f} ms  wait {m['wait'][d] * 1e3:8.2f} ms "
                     f"({s['wait_share_measured'][d]:.1%})  simulated wait {sim['wait'][d] * 1e3:8.2f} ms "
                     f"({s['wait_share_simulated'][d]:.1%})")
    if s.get("loss") is not None:
        lines.append(f"loss {s['loss']:.6f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
