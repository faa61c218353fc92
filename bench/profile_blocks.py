"""Profile a GPT-like chain with `tessel_dsl.executor.measure` and print what `tessel profile` would write.

    python bench/profile_blocks.py [--device cuda] [--hidden 4096] [--layers 2,2,2,4] [--repeats 10]

Needs only torch (no parser): the spec is built in Python. Stage k stacks `layers[k]` MLP blocks
(hidden -> 4*hidden -> hidden, GELU, residual), so unequal layer counts show up as unequal costs.
The last stage returns an MSE loss. Prints the measured table, the chosen resolution and the
flat `.tsl` with measured integer costs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from tessel_dsl.executor.measure import measure  # noqa: E402
from tessel_dsl.executor.model_api import TensorMeta, forward_preds, forward_succs  # noqa: E402
from tessel_dsl.interop.profiled_spec import apply_measurements, spec_to_tsl  # noqa: E402
from tessel_dsl.ir import Block, Edge, Kind, Spec  # noqa: E402


def chain_spec(stages: int, split: bool) -> Spec:
    blocks = [Block(f"F{k}", Kind.FORWARD, (k,), 1, 1) for k in range(stages)]
    edges = [Edge(f"F{k}", f"F{k + 1}") for k in range(stages - 1)]
    if split:
        blocks += [Block(f"I{k}", Kind.INPUT_GRAD, (k,), 1, 0, forward=f"F{k}") for k in range(stages)]
        blocks += [Block(f"W{k}", Kind.WEIGHT_GRAD, (k,), 1, -1, forward=f"F{k}") for k in range(stages)]
        edges += [Edge(f"F{stages - 1}", f"I{stages - 1}")] + [Edge(f"I{k + 1}", f"I{k}") for k in range(stages - 1)]
        edges += [Edge(f"I{k}", f"W{k}") for k in range(stages)]
    else:
        blocks += [Block(f"B{k}", Kind.BACKWARD, (k,), 3, -1, forward=f"F{k}") for k in range(stages)]
        edges += [Edge(f"F{stages - 1}", f"B{stages - 1}")] + [Edge(f"B{k + 1}", f"B{k}") for k in range(stages - 1)]
    return Spec("gptlike", stages, stages, tuple(blocks), tuple(edges), 8)


def make_factory(hidden: int, layers: list[int], tokens: int, dtype: torch.dtype):
    def factory(ctx):
        spec = ctx.spec

        class Mlp(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.up = torch.nn.Linear(hidden, 4 * hidden)
                self.down = torch.nn.Linear(4 * hidden, hidden)

            def forward(self, x):
                return x + self.down(torch.nn.functional.gelu(self.up(x)))

        class StageBlock(torch.nn.Module):
            def __init__(self, name: str):
                super().__init__()
                self.body = torch.nn.Sequential(*[Mlp() for _ in range(layers[int(name[1:])])])
                self.loss = not forward_succs(spec, name)

            def forward(self, x, *target):
                y = self.body(x)
                return torch.nn.functional.mse_loss(y.float(), target[0].float()) if self.loss else y

        class Stage:
            modules = {n: StageBlock(n).to(ctx.device, dtype) for n in ctx.blocks_here()}

            def meta(self, block):
                return (TensorMeta(()),) if not forward_succs(spec, block) else (TensorMeta((tokens, hidden), dtype),)

            def data(self, block, mb):
                out = []
                if not forward_preds(spec, block):
                    out.append(torch.randn(tokens, hidden, dtype=dtype))
                if not forward_succs(spec, block):
                    out.append(torch.randn(tokens, hidden, dtype=dtype))
                return tuple(out)

            def param_shards(self):
                return []

        return Stage()

    return factory


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", default="2,2,2,4")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--split", action="store_true", help="split backward into I and W")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    args = ap.parse_args()
    layers = [int(x) for x in args.layers.split(",")]
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    spec = chain_spec(len(layers), args.split)
    t0 = time.perf_counter()
    found = measure(spec, make_factory(args.hidden, layers, args.tokens, dtype), device=args.device,
                    repeats=args.repeats, warmup=args.warmup)
    took = time.perf_counter() - t0
    print(f"device {args.device} ({torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}), "
          f"torch {torch.__version__}, hidden {args.hidden}, tokens {args.tokens}, layers {layers}, {args.dtype}, "
          f"median of {args.repeats} after {args.warmup} warm-up; profiling took {took:.1f}s")
    print(f"{'block':6} {'layers':>6} {'fwd ms':>9} {'bwd/I ms':>9} {'W ms':>9} {'act MiB':>9}")
    for m, n in zip(found, layers):
        bwd = m.backward if m.backward is not None else m.input_grad
        w = f"{m.weight_grad * 1e3:9.3f}" if m.weight_grad is not None else f"{'-':>9}"
        print(f"{m.block:6} {n:>6} {m.forward * 1e3:9.3f} {bwd * 1e3:9.3f} {w} {m.activation_bytes / 2**20:9.1f}")
    new = apply_measurements(spec, found)
    print()
    print(spec_to_tsl(new, "measured by bench/profile_blocks.py"))


if __name__ == "__main__":
    main()
