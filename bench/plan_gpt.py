"""`tessel plan` on the embedding-heavy GPT of bench/gpu_common.py (512k vocabulary, bf16).

    python bench/plan_gpt.py profile --layers L -o gpt.profile.json   # on a GPU: profile each unit
    python bench/plan_gpt.py estimate --layers L -o gpt.profile.json  # or costs from FLOPs (no GPU)
    python bench/plan_gpt.py choose gpt.profile.json --devices 4      # anywhere: candidates, search, table

`estimate` writes the profile a GPU would give if every matrix product ran at an assumed 400
TFLOP/s (bf16, about 40% of an H100's dense peak), as bench/specs/real/*.tsl are costed:
  layer forward 24 s h^2 + 4 s^2 h FLOP, input and weight gradient each the same again;
  head forward 2 s h V FLOP, likewise; embedding forward a gather (0.05 ms), no input gradient,
  weight gradient writing the dense V x h table once at an assumed 3 TB/s; the norm 0.05 ms each;
  activations 34 s h bytes a layer, the head's logits s V x 2 bytes (bf16), 16 MB for embedding
  and norm; bf16 parameters (2 bytes each).

The profile runs the shipped GPT (`tessel_dsl.executor.models.gpt.GPT`) on one micro-batch of
`batch` x `seq` tokens; the choice prints, per device count, every candidate's rows, the
winner and the time the searches took.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def profile(args) -> None:
    import torch

    from tessel_dsl.executor.models.gpt import GPT, Config
    from tessel_dsl.placement.profile import profile_model

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_common import GPT as SIZES

    cfg = Config.of({**SIZES, "layers": args.layers})
    torch.manual_seed(0)
    model = GPT(cfg)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq))
    prof = profile_model(model, tokens, repeats=args.repeats, warmup=3)
    Path(args.output).write_text(json.dumps(prof.to_json(), indent=1) + "\n")
    for u in prof.units:
        print(f"{u.name:8} F {u.forward * 1e3:8.3f} ms  I {u.input_grad * 1e3:8.3f} ms  W {u.weight_grad * 1e3:8.3f} ms"
              f"  act {u.activation_bytes / 1e9:6.3f} GB  params {u.params / 1e6:8.1f} M")
    print(f"profiled on {prof.device} in {prof.seconds:.1f} s")


def estimate(args) -> None:
    from tessel_dsl.placement.costs import Profile, Unit

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_common import GPT as SIZES

    s, h, V = SIZES["seq"] * SIZES["batch"], SIZES["hidden"], SIZES["vocab"]
    flops = 400e12
    layer = (24 * s * h * h + 4 * s * s * h) / flops
    head = 2 * s * h * V / flops
    units = [Unit("embed", ("embed", "pos"), 5e-5, 0.0, 2 * V * h / 3e12, 16 * 10**6, 0, 2 * V * h, V * h,
                  "embedding")]
    units += [Unit(f"layer{i}", (f"layers.{i}",), layer, layer, layer, 34 * s * h, 2 * s * h, 24 * h * h, 12 * h * h)
              for i in range(args.layers)]
    units += [Unit("norm", ("norm",), 5e-5, 5e-5, 5e-5, 16 * 10**6, 2 * s * h, 4 * h, 2 * h, "norm"),
              Unit("head", ("head",), head, head, head, 2 * s * V, 2 * s * h, 2 * V * h, V * h, "head")]
    prof = Profile(tuple(units), "estimate: 400 TFLOP/s, 3 TB/s", (SIZES["batch"], SIZES["seq"]))
    Path(args.output).write_text(json.dumps(prof.to_json(), indent=1) + "\n")
    print(f"layer {layer * 1e3:.2f} ms, head {head * 1e3:.2f} ms (forward; each gradient the same)")


def choose(args) -> None:
    from tessel_dsl.placement.api import plan_model, table_lines
    from tessel_dsl.placement.costs import Profile

    prof = Profile.from_json(json.loads(Path(args.profile).read_text()))
    print(f"profile: {len(prof.units)} units on {prof.device}, micro-batch {prof.batch_shape}")
    for d in args.devices:
        t0 = time.process_time()
        res = plan_model(None, None, devices=d, memory=args.memory, reserve=args.reserve,
                         microbatches=args.microbatches or 4 * d, profile=prof, time_limit=args.budget)
        cpu = time.process_time() - t0
        print(f"\nD={d}, N={res.plan.schedule.microbatches}, {args.memory} less {args.reserve} a device, "
              f"time limit {args.budget or 'none'}; "
              f"candidates, search and baselines took {cpu:.1f} CPU s")
        print("\n".join(table_lines(res.outcome)))
        print(f"chosen: {res.outcome.why}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("profile")
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--repeats", type=int, default=10)
    a.add_argument("-o", "--output", default="gpt.profile.json")
    e = sub.add_parser("estimate")
    e.add_argument("--layers", type=int, default=4)
    e.add_argument("-o", "--output", default="gpt.profile.json")
    b = sub.add_parser("choose")
    b.add_argument("profile")
    b.add_argument("--devices", type=int, nargs="+", default=[4])
    b.add_argument("--memory", default="80GB")
    b.add_argument("--reserve", default="8GB")
    b.add_argument("--microbatches", type=int)
    b.add_argument("--time-limit", "--budget", dest="budget", type=float,
                   help="wall-clock seconds for all the searches of one D together (default: none)")
    args = p.parse_args()
    {"profile": profile, "estimate": estimate, "choose": choose}[args.cmd](args)


if __name__ == "__main__":
    main()
