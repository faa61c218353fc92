"""Per-layer costs of the shipped GPT's pieces at real sizes, for writing real-cost specs.

    python bench/profile_layers.py [--config 7b,13b,70b] [--seq 4096] [--batch 1] [--tp 8]

Times (ms, median of `--repeats` after warm-up, CUDA events) and memory (GB) on the one GPU it
runs on, in bf16, of:

* one `TransformerLayer` (the layer the shipped GPT stacks): forward; the whole backward; the
  backward to its input only (the `input_grad` block of a split backward) -- the weight gradient
  (`weight_grad`) is the difference of the two, as it is the rest of the same work; activation
  memory kept from the forward for the backward;
* the vocabulary-parallel embedding and LM head + cross entropy as one of `--tp` GPUs computes
  them (its 1/tp slice of the vocabulary; the collectives that join the slices are not included).

The configurations take the published shapes of Llama 2 (Touvron et al. 2023, Table 1 and the
released configs: hidden 4096 / 5120 / 8192, 32 / 40 / 64 heads, 32 / 40 / 80 layers, vocabulary
32,000) and Llama 3's larger vocabulary; the layer is the shipped GPT's (multi-head attention and a
GELU MLP of 4x width), not Llama's own, so the figures are of that layer at those shapes. Prints a
table and the per-stage sums for an even split over 8 and 16 stages.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tessel_dsl.executor.models.common import TransformerLayer  # noqa: E402

CONFIGS = {  # hidden, heads, layers, vocab (Llama 2, Touvron et al. 2023)
    "7b": (4096, 32, 32, 32000),
    "13b": (5120, 40, 40, 32000),
    "70b": (8192, 64, 80, 32000),
    # Llama 3's 128,256-token vocabulary (Llama Team 2024, "The Llama 3 Herd of Models", Table 3)
    "l3-8b": (4096, 32, 32, 128256),
    "l3-70b": (8192, 64, 80, 128256),
}
GB = 1024**3


def timed(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def layer_costs(hidden: int, heads: int, seq: int, batch: int, repeats: int) -> dict[str, float]:
    dev, dt = torch.device("cuda"), torch.bfloat16
    layer = TransformerLayer(hidden, heads, causal=True, device=dev, dtype=dt)
    x = torch.randn(batch, seq, hidden, device=dev, dtype=dt, requires_grad=True)
    grad = torch.randn_like(x)
    params = [p for p in layer.parameters()]

    def full():
        y = layer(x)
        torch.autograd.backward(y, grad, inputs=[x, *params])

    def input_only():
        y = layer(x)
        torch.autograd.grad(y, [x], grad)

    # The backward's time is (forward + backward) - forward, measured the same way, so that the
    # recomputed forward inside `full` is not counted twice.
    f = timed(lambda: layer(x), repeats)
    b_full = timed(full, repeats) - f
    b_in = timed(input_only, repeats) - f
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    y = layer(x)
    kept = torch.cuda.memory_allocated() - before - y.numel() * y.element_size()
    del y
    return {"F": f, "B": b_full, "I": b_in, "W": b_full - b_in, "act_gb": kept / GB}


def vocab_costs(hidden: int, vocab: int, tp: int, seq: int, batch: int, repeats: int) -> dict[str, float]:
    dev, dt = torch.device("cuda"), torch.bfloat16
    rows = -(-vocab // tp)
    table = torch.randn(rows, hidden, device=dev, dtype=dt, requires_grad=True)
    head = torch.randn(rows, hidden, device=dev, dtype=dt, requires_grad=True)
    norm = torch.nn.LayerNorm(hidden, device=dev, dtype=dt)
    tokens = torch.randint(0, rows, (batch, seq), device=dev)
    h = torch.randn(batch, seq, hidden, device=dev, dtype=dt, requires_grad=True)
    g = torch.randn(batch, seq, hidden, device=dev, dtype=dt)

    def emb_f():
        return F.embedding(tokens, table)

    def emb_fb():
        torch.autograd.backward(emb_f(), g)

    def head_f():
        logits = F.linear(norm(h), head).float()
        return F.cross_entropy(logits.view(-1, rows), tokens.view(-1))

    def head_fb():
        head_f().backward()

    ef = timed(emb_f, repeats)
    hf = timed(head_f, repeats)
    out = {"E_F": ef, "E_B": timed(emb_fb, repeats) - ef, "H_F": hf, "H_B": timed(head_fb, repeats) - hf}
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    loss = head_f()
    out["H_act_gb"] = (torch.cuda.memory_allocated() - before) / GB
    del loss
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="7b,13b,70b")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tp", type=int, default=8, help="GPUs the embedding and head are split over")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("profile_layers: needs a CUDA GPU")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, seq {args.seq}, micro-batch {args.batch}, "
          f"vocab split over {args.tp}")
    print("| config | layer F ms | layer B ms | I ms | W ms | act GB/layer | emb F/B ms | head F/B ms | head act GB |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name in args.config.split(","):
        hidden, heads, layers, vocab = CONFIGS[name]
        lc = layer_costs(hidden, heads, args.seq, args.batch, args.repeats)
        vc = vocab_costs(hidden, vocab, args.tp, args.seq, args.batch, args.repeats)
        rows.append((name, layers, lc, vc))
        print(f"| {name} | {lc['F']:.2f} | {lc['B']:.2f} | {lc['I']:.2f} | {lc['W']:.2f} | {lc['act_gb']:.2f} | "
              f"{vc['E_F']:.2f} / {vc['E_B']:.2f} | {vc['H_F']:.2f} / {vc['H_B']:.2f} | {vc['H_act_gb']:.2f} |")
        torch.cuda.empty_cache()
    print()
    print("| config | stages | layers/stage | stage F ms | stage B ms | stage act GB |")
    print("|---|---|---|---|---|---|")
    for name, layers, lc, _ in rows:
        for stages in (8, 16):
            per = layers / stages
            print(f"| {name} | {stages} | {per:g} | {lc['F'] * per:.1f} | {lc['B'] * per:.1f} | {lc['act_gb'] * per:.2f} |")


if __name__ == "__main__":
    main()
