"""One iteration of a bench row under `torch.profiler`, and what its trace says.

Every rank of a row records the same unmeasured iteration (the last warm-up one, so the measured
iterations are untouched; the ranks meet at a barrier once their profilers run) with CPU activities, and CUDA ones where there is a GPU, and writes its
Chrome trace; the launching process merges the ranks' traces into one gzipped file per row
(``<row>.trace.json.gz``, one process per rank, Perfetto or chrome://tracing open it) and sums
up, rank by rank, what the iteration spent its time on:

* ``busy_ms`` / ``idle_ms``: how much of the iteration the GPU ran compute kernels (the union of
  every kernel that is not NCCL's), and how much it ran none;
* ``comm_ms``: the union of NCCL kernels (on gloo: the host's time in ``gloo``/``c10d`` calls);
* ``host_gap_ms``: the main thread's time inside the iteration that no operator, CUDA runtime
  call or communication call covers (annotations such as a schedule's own action marks do not
  count as cover): the Python of the schedule and of the model's modules between operators;
  ``host_gap_us_per_action`` divides it by the rank's actions where a row knows them;
* ``syncs``: cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize calls (and
  ``sync_ms``, the host's time blocked in them); ``stream_waits``: cudaStreamWaitEvent calls;
* ``allocs``: cudaMalloc / cudaFree calls (the caching allocator growing or giving back).

For the executor's rows the hook is a model factory (``gpu_trace:factory``) that wraps the real
one and patches the rank's `RankRunner.step` to record iteration `at`; nothing in the executor
changes.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

MARK = "bench_iteration"
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
ALLOCS = ("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaHostAlloc", "cudaFreeHost")


class Recorder:
    """``with Recorder(folder, rank):`` records what runs inside into ``folder/rank<r>.json``."""

    def __init__(self, folder: str | os.PathLike, rank: int):
        self.path = Path(folder) / f"rank{rank}.json"

    def __enter__(self):
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        if self.cuda:
            torch.cuda.synchronize()
        self.prof = profile(activities=acts)
        self.prof.__enter__()
        # The profiler's first start takes long, and not equally long on every rank: without a
        # barrier here the traced iteration would hold the ranks' skew as waiting.
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            if self.cuda:
                torch.cuda.synchronize()
        self.mark = record_function(MARK)
        self.mark.__enter__()
        return self

    def __exit__(self, *exc):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        self.mark.__exit__(*exc)
        self.prof.__exit__(*exc)
        if exc[0] is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.prof.export_chrome_trace(str(self.path))
        return False


def maybe(folder: str | None, rank: int, it: int, at: int):
    """A Recorder when iteration `it` is the traced one, else a context that does nothing."""
    import contextlib

    return Recorder(folder, rank) if folder and it == at else contextlib.nullcontext()


def factory(ctx, _inner: str, _trace_dir: str = "", _trace_at: int = -1, **kw):
    """The executor's model factory `_inner`, with iteration `_trace_at` of this rank recorded."""
    from tessel_dsl.executor.model_api import load_factory
    from tessel_dsl.executor.runtime import RankRunner

    if _trace_dir and not getattr(RankRunner.step, "_traced", False):
        plain = RankRunner.step

        def step(self, iteration: int, collect: bool = False):
            with maybe(_trace_dir, self.rank, iteration, _trace_at):
                return plain(self, iteration, collect)

        step._traced = True
        RankRunner.step = step
    return load_factory(_inner)(ctx, **kw)


def traced_model(model: str, margs: dict, folder: str | None, at: int) -> tuple[str, dict]:
    """(factory, model args) for `executor.run`: `model` itself, or wrapped to record iteration `at`."""
    if not folder:
        return model, margs
    return "gpu_trace:factory", {**margs, "_inner": model, "_trace_dir": folder, "_trace_at": at}


# -- merging and reading the traces ------------------------------------------------------------

def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    start = None
    for a, b in sorted(spans):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    if end is not None:
        total += end - start
    return total


def _clip(ev: dict, lo: float, hi: float) -> tuple[float, float] | None:
    a, b = ev["ts"], ev["ts"] + ev.get("dur", 0)
    a, b = max(a, lo), min(b, hi)
    return (a, b) if b > a else None


def _is_comm(name: str) -> bool:
    n = name.lower()
    return "nccl" in n or "gloo" in n or n.startswith("c10d::") or "sendrecv" in n


def summarize(events: list[dict], actions: int | None = None) -> dict:
    """What one rank's traced iteration spent its time on (the module docstring's fields)."""
    xs = [e for e in events if e.get("ph") == "X" and "ts" in e]
    marks = [e for e in xs if e.get("name") == MARK and e.get("cat") in ("user_annotation", "cpu_op")]
    if not marks:
        return {"error": "no iteration mark in the trace"}
    mark = marks[0]
    lo, hi = mark["ts"], mark["ts"] + mark["dur"]
    main = (mark["pid"], mark["tid"])
    # the iteration's kernels: launched inside it, so they start after its mark does (the
    # barrier's before it do not count); the GPU window may end after the host's
    kernels = [e for e in xs if e.get("cat") == "kernel" and e["ts"] >= lo]
    g_lo, g_hi = lo, max([hi] + [e["ts"] + e.get("dur", 0) for e in kernels])
    compute = [s for e in kernels if not _is_comm(e["name"]) and (s := _clip(e, g_lo, g_hi))]
    comm_k = [s for e in kernels if _is_comm(e["name"]) and (s := _clip(e, g_lo, g_hi))]
    host = [e for e in xs if (e["pid"], e["tid"]) == main and e is not mark
            and e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")
            and e["ts"] >= lo and e["ts"] < hi]
    covered = _union([s for e in host if (s := _clip(e, lo, hi))])
    runtime = [e for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver") and lo <= e["ts"] < hi]
    syncs = [e for e in runtime if e["name"] in SYNCS]
    wall = (hi - lo) / 1e3
    out = {"iteration_ms": round(wall, 3)}
    if kernels:
        busy = _union(compute) / 1e3
        out.update(busy_ms=round(busy, 3), idle_ms=round((g_hi - g_lo) / 1e3 - busy, 3),
                   comm_ms=round(_union(comm_k) / 1e3, 3), kernels=len(kernels))
    else:
        comm_host = [s for e in host if _is_comm(e["name"]) and (s := _clip(e, lo, hi))]
        out["comm_ms"] = round(_union(comm_host) / 1e3, 3)
    gap = wall - covered / 1e3
    out.update(host_gap_ms=round(gap, 3), syncs=len(syncs), sync_ms=round(sum(e["dur"] for e in syncs) / 1e3, 3),
               stream_waits=sum(e["name"] == "cudaStreamWaitEvent" for e in runtime),
               allocs=sum(e["name"] in ALLOCS for e in runtime), launches=sum("LaunchKernel" in e["name"] for e in runtime))
    if actions:
        out["actions"] = actions
        out["host_gap_us_per_action"] = round(gap * 1e3 / actions, 1)
    return out


def thin(events: list[dict], depth: int = 2) -> list[dict]:
    """The events less operators nested deeper than `depth` under another on their thread
    (``aten::mm`` inside ``aten::linear`` inside a module call): kernels, runtime calls and the
    outer operators stay, and a GPT row's trace stays small enough to bring back."""
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0)))
    drop, stack, thread = set(), [], None
    for e in ops:
        if (e["pid"], e["tid"]) != thread:
            thread, stack = (e["pid"], e["tid"]), []
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        if len(stack) > depth:
            drop.add(id(e))
        stack.append(e["ts"] + e.get("dur", 0))
    return [e for e in events if id(e) not in drop]


def collect(folder: str | os.PathLike, out_file: str | os.PathLike, actions: dict[int, int] | None = None) -> dict:
    """Merge ``folder/rank*.json`` into one gzipped Chrome trace (each rank its own processes,
    named ``rank r``) at `out_file`, and return each rank's summary."""
    folder = Path(folder)
    merged, summary = [], {}
    for path in sorted(folder.glob("rank*.json"), key=lambda p: int(p.stem[4:])):
        r = int(path.stem[4:])
        data = json.loads(path.read_text())
        events = data["traceEvents"] if isinstance(data, dict) else data
        summary[f"rank{r}"] = summarize(events, (actions or {}).get(r))
        events = thin(events)
        pids = {}
        for e in events:
            if "pid" not in e:
                continue
            p = pids.setdefault(e["pid"], 1000 * (r + 1) + len(pids))
            e["pid"] = p
            if e.get("ph") == "M" and e.get("name") == "process_name":
                e.setdefault("args", {})["name"] = f"rank {r} {e.get('args', {}).get('name', '')}".strip()
            merged.append(e)
        path.unlink()
    if merged:
        with gzip.open(out_file, "wt") as fh:
            json.dump({"traceEvents": merged, "displayTimeUnit": "ms"}, fh)
    return summary


def lines(name: str, summary: dict) -> list[str]:
    """The per-rank summary as table rows."""
    out = []
    for r, s in summary.items():
        if "error" in s:
            out.append(f"| {name} | {r} | {s['error']} |||||||")
            continue
        per = f"{s['host_gap_us_per_action']:.0f}" if "host_gap_us_per_action" in s else "-"
        gpu = (f"{s['busy_ms']:.1f} / {s['idle_ms']:.1f}" if "busy_ms" in s else "-")
        out.append(f"| {name} | {r} | {s['iteration_ms']:.1f} | {gpu} | {s['comm_ms']:.1f} | {s['host_gap_ms']:.1f} | "
                   f"{per} | {s['syncs']} ({s['sync_ms']:.1f} ms) | {s['stream_waits']} | {s['allocs']} |")
    return out


HEADER = ("| row | rank | traced iteration ms | GPU compute busy / idle ms | communication ms | host gaps ms | "
          "host gap per action us | syncs (host blocked) | stream waits | cudaMalloc/Free |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def read(path: str | os.PathLike, actions: dict[int, int] | None = None) -> dict:
    """Each rank's summary of a merged ``.trace.json.gz`` written by `collect`."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    ranks: dict[int, list[dict]] = {}
    for e in events:
        if "pid" in e:
            ranks.setdefault(e["pid"] // 1000 - 1, []).append(e)
    return {f"rank{r}": summarize(evs, (actions or {}).get(r)) for r, evs in sorted(ranks.items())}


def main() -> None:
    """``python bench/gpu_trace.py ROW.trace.json.gz...``: the summary table of saved traces."""
    import sys

    print(HEADER)
    for path in sys.argv[1:]:
        print("\n".join(lines(Path(path).name.removesuffix(".trace.json.gz"), read(path))))


if __name__ == "__main__":
    main()
