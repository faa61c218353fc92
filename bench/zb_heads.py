"""Default searches of zero-bubble chains with an embedding on the first device and a head on the
last: where memory binds nowhere, how far the plan is from its bound.

    python bench/zb_heads.py               # the ten specs of the table in heldcuts.py's module text
    python bench/zb_heads.py --print 2     # print spec 2's text (to save as a .tsl and try)

Each spec comes from its index alone (seed 100 + index): 8 devices, N = 32, 1 ms times; stage i's
forward, input gradient and weight gradient on device i (forward 17 to 63 ms, the gradients 0.7
to 1.2 times it), an embedding (2 to 10 ms, whole backward) before stage 0 on device 0, a head (10
to 60 ms, split backward) after stage 7 on device 7; 80 GB a device, far more than 32 micro-batches
hold, so no memory binds. The table gives the best applicable baseline and its makespan, the
plan's, the stated bound and the search's CPU seconds (this process, one spec after another).
"""
from __future__ import annotations

import argparse
import random
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEVICES = 8


def spec_text(index: int) -> str:
    r = random.Random(100 + index)
    lines = [f"placement zb_heads{index}", "resolution time 1ms", "resolution memory 10MB",
             f"devices {DEVICES}", "memory 80GB", "microbatches 32", "mode train"]
    base, emb, head = r.randint(20, 60), r.randint(2, 10), r.randint(10, 60)
    lines += [f"forward EMB on 0 time {emb}ms memory 0.1GB",
              f"backward EMBB of EMB on 0 time {emb}ms memory -0.1GB"]
    for i in range(DEVICES):
        f = base + r.randint(-3, 3)
        gi, gw, m = round(f * r.uniform(0.9, 1.2)), round(f * r.uniform(0.7, 1.0)), round(r.uniform(0.5, 1.5), 2)
        lines += [f"forward F{i} on {i} time {f}ms memory {m}GB", f"input_grad I{i} of F{i} time {gi}ms",
                  f"weight_grad W{i} of F{i} time {gw}ms memory -{m}GB", f"I{i} -> W{i}"]
    lines += [f"forward H on {DEVICES - 1} time {head}ms memory 0.5GB", f"input_grad HI of H time {head}ms",
              f"weight_grad HW of H time {round(head * 0.8)}ms memory -0.5GB", "HI -> HW",
              f"EMB -> chain(F{{k}} for k in 0..{DEVICES - 1}) -> H -> HI"
              f" -> chain(I{{{DEVICES - 1}-k}} for k in 0..{DEVICES - 1}) -> EMBB"]
    return "\n".join(lines) + "\n"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=10)
    ap.add_argument("--print", type=int, default=None, metavar="INDEX")
    args = ap.parse_args()
    if args.print is not None:
        print(spec_text(args.print), end="")
        return
    from tessel_dsl.lang.parser import parse
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.refine import best_baseline

    print("| spec | best baseline | plan | bound | plan over bound | proven | CPU s |")
    print("|---|---|---|---|---|---|---|")
    for i in range(args.specs):
        spec = parse(spec_text(i))
        base, name = best_baseline(spec, spec.microbatches, than=None)
        t = _cpu()
        res = search(spec)
        cpu = _cpu() - t
        span, bound = res.schedule.makespan(spec), res.info.makespan_bound
        print(f"| zb_heads{i} | {name} {base.makespan(spec)} | {span} | {bound} | {100 * (span / bound - 1):+.2f} % | "
              f"{'yes' if res.info.proven else 'no'} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    main()
