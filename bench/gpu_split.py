"""The executor's split backward against one whole backward, on one stage of two layers on one GPU.

For each layer kind it times, as medians of CUDA-event intervals over ``--reps`` repetitions after
``--warmup`` ones, every phase alone (the device synchronised before and after it):

* F: the stage's forward, and `split_backward.prepare` on its graph (which parameter gradients each
  pass computes), as the executor runs a forward whose backward is split;
* I: `split_backward.backward_input` with that (input gradient, the gradients kept for the weight
  pass);
* W: `WeightGrad.run()` (the parameter gradients from the kept gradients);
* B: ``torch.autograd.backward`` of a second forward of the same input, with the same seed gradient.

I + W should cost what B does; the table gives (I+W)/B. Each kind also checks that the split gives
the input gradient and every parameter's gradient that B gives (``grads equal``); the script exits
1 when a kind's do not agree.

Layer kinds (``--kinds``, comma-separated; each a stage of two layers, bf16 on the GPU):

* ``chain``: the residual MLP layers of executor/models/chain.py at bench/gpu8.py's ``CHAIN`` sizes
  (hidden 4096, 4096 rows);
* ``gpt``: the transformer layers of executor/models/gpt.py at bench/gpu_common.py's ``GPT`` sizes
  (hidden 4096, 32 heads, sequence 2048, micro-batch 1; the vocabulary, which the layers never
  touch, cut to 32k so the unused embedding and head stay small);
* ``llama``: Hugging Face's ``LlamaDecoderLayer`` at Llama-3-8B's sizes (hidden 4096, MLP 14336,
  32 query and 8 key/value heads, sequence 2048, micro-batch 1), randomly initialised from a
  ``LlamaConfig``, ``sdpa`` attention; the stage computes the rotary (cos, sin) with
  ``LlamaRotaryEmbedding`` and the causal mask with ``create_causal_mask`` as ``LlamaModel`` does
  and hands both to each layer.

On the GPU machine (torch only, no transformers, no network), with bench/wheels carried (14 wheels,
16.6 MiB: transformers 5.24.0 and what its Llama import needs, for CPython 3.12 on x86_64 Linux):

    PYTHONPATH=. python3 bench/gpu_split.py --out $OUT        carry ["bench/wheels"]

When transformers is missing or at another version than bench/wheels' (the tests' version), the
script installs those wheels with
``pip install --no-index --no-deps --target <a temporary folder>`` and puts that folder first on
sys.path (unpacking the wheels there itself when pip is missing); the folder goes at exit.
bench/wheels is ignored by git; it is made with

    pip download --python-version 3.12 --platform manylinux2014_x86_64 --only-binary=:all: --no-deps \\
        -d bench/wheels transformers==5.24.0 huggingface-hub==2.4.0 safetensors==0.8.0 \\
        regex==2026.11.19 pyyaml==6.0.4 tqdm==4.70.1 packaging==26.4 httpx2==2.16.2 idna==3.20 \\
        h11==0.16.0 httpcore2==2.16.2 truststore==0.10.5 filelock==4.3.1 typing-extensions==4.16.0

(numpy comes with torch there; typing-extensions and filelock do too, but the import needs them, so
they travel as well). Those are the versions of this project's development environment.

Here, a check of the script on the CPU at tiny sizes in fp32 (hidden 64, sequence 16):

    PYTHONPATH=. python bench/gpu_split.py --tiny --out DIR

Writes ``gpu_split.json`` and ``gpu_split.md`` in ``--out``.
"""
from __future__ import annotations

import argparse
import atexit
import glob
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from gpu8 import CHAIN
from gpu_common import GPT, ROOT, write_results

from tessel_dsl.executor.models import chain, gpt
from tessel_dsl.executor.models.common import DTYPES, seeded
from tessel_dsl.executor.split_backward import backward_input, prepare

WHEELS = ROOT / "bench" / "wheels"
KINDS = ("chain", "gpt", "llama")
GPT_LAYERS = GPT | {"vocab": 32000, "layers": 2}
LLAMA = {"hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8, "seq": 2048, "batch": 1}
TINY = {"chain": {"hidden": 64, "batch": 16},
        "gpt": {"vocab": 64, "hidden": 64, "heads": 4, "seq": 16, "batch": 1},
        "llama": {"hidden": 64, "intermediate": 224, "heads": 4, "kv_heads": 2, "seq": 16, "batch": 1}}
# (rtol, atol as a fraction of the largest reference entry). bf16 keeps 8 bits of mantissa, and the
# two backwards may sum a gradient's parts in another order, so a few units of its last place.
TOLERANCE = {torch.bfloat16: (2e-2, 1e-2), torch.float32: (1e-5, 1e-6)}


@dataclass
class Stage:
    """Two layers, the function that runs them on a stage input, and an input of the right shape."""

    params: list[torch.Tensor]
    forward: Callable[[torch.Tensor], torch.Tensor]
    shape: tuple[int, ...]
    sizes: dict


def chain_stage(tiny: bool, dtype: str, device: torch.device) -> Stage:
    sizes = (TINY["chain"] if tiny else {k: CHAIN[k] for k in ("hidden", "batch")}) | {"layers": 2}
    model = seeded(chain.Chain, chain.Config.of(sizes | {"dtype": dtype}), device)
    return Stage(list(model.layers.parameters()), _run_layers(model.layers), (sizes["batch"], sizes["hidden"]), sizes)


def gpt_stage(tiny: bool, dtype: str, device: torch.device) -> Stage:
    sizes = (TINY["gpt"] if tiny else {k: v for k, v in GPT_LAYERS.items() if k != "dtype"}) | {"layers": 2}
    model = seeded(gpt.GPT, gpt.Config.of(sizes | {"dtype": dtype}), device)
    return Stage(list(model.layers.parameters()), _run_layers(model.layers),
                 (sizes["batch"], sizes["seq"], sizes["hidden"]), sizes)


def _run_layers(layers):
    def run(x):
        for layer in layers:
            x = layer(x)
        return x
    return run


def llama_stage(tiny: bool, dtype: str, device: torch.device) -> Stage:
    from transformers import LlamaConfig
    from transformers.masking_utils import create_causal_mask
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    sizes = TINY["llama"] if tiny else LLAMA
    cfg = LlamaConfig(hidden_size=sizes["hidden"], intermediate_size=sizes["intermediate"],
                      num_attention_heads=sizes["heads"], num_key_value_heads=sizes["kv_heads"],
                      num_hidden_layers=2, max_position_embeddings=max(8192, sizes["seq"]), rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        layers = torch.nn.ModuleList(LlamaDecoderLayer(cfg, i) for i in range(2)).to(DTYPES[dtype])
        rotary = LlamaRotaryEmbedding(cfg)
    pos = torch.arange(sizes["seq"], device=device).unsqueeze(0)

    def run(x):
        mask = create_causal_mask(cfg, x, None, None, position_ids=pos)  # None here: sdpa's causal path
        cos_sin = rotary(x, position_ids=pos)
        for layer in layers:
            x = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
            x = x[0] if isinstance(x, tuple) else x
        return x
    return Stage(list(layers.parameters()), run, (sizes["batch"], sizes["seq"], sizes["hidden"]), sizes)


BUILD = {"chain": chain_stage, "gpt": gpt_stage, "llama": llama_stage}


def need_transformers(wheel_dir: Path = WHEELS) -> None:
    """Makes ``import transformers`` work at the wheels' version: the installed one when it is that
    version (or there are no wheels), else the wheels in `wheel_dir`, put first on sys.path."""
    from importlib.metadata import PackageNotFoundError, version

    wheels = sorted(glob.glob(str(Path(wheel_dir) / "*.whl")))
    wanted = [Path(w).name.split("-")[1] for w in wheels if Path(w).name.startswith("transformers-")]
    try:
        have = version("transformers")
    except PackageNotFoundError:
        have = None
    if have and (not wanted or have == wanted[0]):
        return
    if not wheels:
        raise SystemExit(f"the llama kind needs transformers: install it, or carry the wheels in {wheel_dir} "
                         f"(see this script's docstring)")
    target = tempfile.mkdtemp(prefix="gpu_split_wheels_")
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                          "--disable-pip-version-check", "--target", target, *wheels], capture_output=True, text=True)
    if pip.returncode != 0:
        print(f"pip could not install {wheel_dir} ({pip.stderr.strip()[-300:]}); unpacking the wheels instead", flush=True)
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                z.extractall(target)
    sys.path.insert(0, target)
    importlib.invalidate_caches()
    import transformers

    print(f"transformers {transformers.__version__} from {wheel_dir}, installed in {target}", flush=True)


class Clock:
    """Times one phase alone: the device idle before it starts and finished when it is read."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn):
        """(what `fn` returned, its seconds)."""
        self.sync()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return out, start.elapsed_time(end) / 1e3
        t = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t


def _clear(stage: Stage, x: torch.Tensor) -> None:
    x.grad = None
    for p in stage.params:
        p.grad = None


def _grads(stage: Stage, x_grad) -> list:
    return [x_grad] + [p.grad for p in stage.params]


def measure(kind: str, tiny: bool, device: torch.device, dtype: str, reps: int, warmup: int) -> dict:
    stage = BUILD[kind](tiny, dtype, device)
    tdtype = DTYPES[dtype]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(stage.shape, generator=g).to(device, tdtype).requires_grad_()
    seed = torch.randn(stage.shape, generator=g).to(device, tdtype)  # every stage here keeps its input's shape
    clock = Clock(device)
    times = {k: [] for k in ("F", "I", "W", "IW", "B")}
    split = whole = None
    left_mb, with_graph = 0.0, False
    for rep in range(warmup + reps):
        _clear(stage, x)
        before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        # F as the executor runs it before a split backward: the forward, then `prepare` (its walk
        # over the graph runs on the host while the device runs the forward's kernels).
        (y, split_at), f = clock.time(lambda: (lambda out: (out, prepare([out], [x], stage.params)))(stage.forward(x)))
        (x_grads, wgrad), i = clock.time(lambda: backward_input([y], [seed], [x], stage.params, split_at))
        _, w = clock.time(wgrad.run)
        split = _grads(stage, x_grads[0])
        y = wgrad = split_at = None  # frees the graph the input pass kept
        # What the two passes leave besides the gradients themselves: nothing, unless a gradient
        # was recorded on the forward's graph and holds it.
        with_graph = with_graph or any(t is not None and t.grad_fn is not None for t in split)
        if device.type == "cuda":
            grads = sum(t.numel() * t.element_size() for t in split if t is not None)
            left_mb = max(left_mb, (torch.cuda.memory_allocated(device) - before - grads) / 2**20)
        _clear(stage, x)
        y, _ = clock.time(lambda: stage.forward(x))
        _, b = clock.time(lambda: torch.autograd.backward([y], [seed]))
        whole = _grads(stage, x.grad)
        if rep >= warmup:
            for k, v in zip(("F", "I", "W", "IW", "B"), (f, i, w, i + w, b)):
                times[k].append(v)
    ok, err, missing = same_grads(split, whole, tdtype)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"kind": kind, "sizes": stage.sizes, "dtype": dtype, "params": sum(p.numel() for p in stage.params),
            "reps": reps, "warmup": warmup, "ms": {k: round(v * 1e3, 4) for k, v in med.items()},
            "iw_over_b": round(med["IW"] / med["B"], 4), "grads_equal": ok, "max_rel_err": err,
            "grads_missing": missing, "graph_left_mib": round(left_mb, 1), "grads_hold_graph": with_graph}


def same_grads(split: list, whole: list, dtype: torch.dtype) -> tuple[bool, float, int]:
    """Whether every gradient of the split backward matches the whole one's (both None, or close in
    fp32); the largest difference relative to the reference's largest entry; and how many
    gradients only one of the two backwards produced."""
    rtol, atol = TOLERANCE[dtype]
    ok, worst, missing = True, 0.0, 0
    for a, b in zip(split, whole, strict=True):
        if a is None or b is None:
            missing += (a is None) != (b is None)
            continue
        a, b = a.float(), b.float()
        scale = b.abs().max().item() or 1.0
        worst = max(worst, (a - b).abs().max().item() / scale)
        ok = ok and a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol * scale)
    return ok and not missing, float(f"{worst:.3g}"), missing


def table(results: dict) -> str:
    lines = [f"Split backward against one backward, one stage of two layers: {results['device']}, "
             f"torch {results['torch']}, {results['dtype']}, medians of {results['reps']} repetitions (ms)", "",
             "| layer kind | F | I | W | I+W | B | (I+W)/B | grads equal | left after both passes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind in results["kinds"]:
        r = results[kind]
        m = r["ms"]
        lines.append(f"| {kind} {_sizes(r['sizes'])} | {m['F']:.3f} | {m['I']:.3f} | {m['W']:.3f} | {m['IW']:.3f} | "
                     f"{m['B']:.3f} | {r['iw_over_b']:.3f} | {'yes' if r['grads_equal'] else 'NO'} "
                     f"(max rel. diff {r['max_rel_err']:.2g}{_missing(r['grads_missing'])}) | "
                     f"{'a graph, from .grad' if r['grads_hold_graph'] else 'no graph'}, {r['graph_left_mib']:.1f} MiB |")
    return "\n".join(lines)


def _missing(n: int) -> str:
    return f", {n} gradient(s) from one backward only" if n else ""


def _sizes(sizes: dict) -> str:
    return "(" + ", ".join(f"{k} {v}" for k, v in sizes.items() if k not in ("layers", "vocab")) + ")"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for gpu_split.json and .md")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes, fp32, on the CPU: a check of the script")
    ap.add_argument("--wheels", type=Path, default=WHEELS, help="wheels to install transformers from when it is "
                    "not installed (default bench/wheels)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args(argv)
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        ap.error(f"unknown kind(s) {unknown}; known: {', '.join(KINDS)}")
    if a.tiny:
        device, dtype, name = torch.device("cpu"), "f32", "CPU"
    elif torch.cuda.is_available():
        device, dtype, name = torch.device("cuda:0"), "bf16", torch.cuda.get_device_name(0)
    else:
        ap.error("no CUDA device here: pass --tiny for the CPU check")
    print(f"device: {name}; torch {torch.__version__}", flush=True)
    if "llama" in kinds:
        need_transformers(a.wheels)
    results = {"device": name, "torch": torch.__version__, "dtype": dtype, "reps": a.reps, "kinds": kinds}
    for kind in kinds:
        results[kind] = measure(kind, a.tiny, device, dtype, a.reps, a.warmup)
        print(kind, results[kind], flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    write_results(a.out, "gpu_split", results, table(results))
    bad = [k for k in kinds if not results[k]["grads_equal"] or results[k]["grads_hold_graph"]]
    if bad:
        print(f"the split backward's gradients differ from the whole backward's, or hold its graph, for: "
              f"{', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
