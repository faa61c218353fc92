"""Chrome / Perfetto trace files (the JSON "Trace Event Format"), for simulated and measured runs.

Standard library only: the executor writes measured traces with it on machines that have torch
but nothing else of ours. Each device is a process in the viewer with two threads, compute and
comm, so overlap of communication with compute is visible at a glance.

    spans = [Span(0, 0.0, 1.0, "F0:0"), Span(0, 1.0, 1.2, "F0:0 0->1", cat="transfer", lane="comm")]
    write_trace("out.json", spans, time_scale=1e-3)   # one time unit = 1 ms
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from tessel_dsl.fileio import write_text_atomic

_LANES = {"compute": 0, "comm": 1}


@dataclass(frozen=True)
class Span:
    """Something that took time on `device`: [start, end) in the caller's time unit."""

    device: int
    start: float
    end: float
    name: str
    cat: str = "compute"
    lane: str = "compute"
    args: dict = field(default_factory=dict, compare=False)


def chrome_trace(spans, *, time_scale: float = 1.0, title: str = "", devices: int | None = None,
                 metadata: dict | None = None) -> dict:
    """The trace as a JSON-able dict; `time_scale` is seconds per time unit of the spans."""
    spans = list(spans)
    n = devices if devices is not None else 1 + max((s.device for s in spans), default=-1)
    events: list[dict] = []
    for d in range(n):
        events.append({"ph": "M", "name": "process_name", "pid": d, "tid": 0, "args": {"name": f"device {d}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": d, "tid": 0, "args": {"sort_index": d}})
        for lane, tid in _LANES.items():
            events.append({"ph": "M", "name": "thread_name", "pid": d, "tid": tid, "args": {"name": lane}})
    us = time_scale * 1e6
    for s in sorted(spans, key=lambda s: (s.device, s.start)):
        ev = {
            "ph": "X", "name": s.name, "cat": s.cat, "pid": s.device, "tid": _LANES.get(s.lane, 1),
            "ts": round(s.start * us, 3), "dur": round(max(0.0, s.end - s.start) * us, 3),
        }
        if s.args:
            ev["args"] = s.args
        events.append(ev)
    meta = {"title": title, "time_scale_seconds": time_scale, **(metadata or {})}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta}


def compute_spans(rows, kinds: dict[str, str] | None = None) -> list[Span]:
    """Spans from per-device ``(start, end, block, mb)`` bars (a simulated or planned timeline)."""
    kinds = kinds or {}
    return [
        Span(d, float(a), float(b), f"{block}:{mb}", kinds.get(block, "compute"), "compute",
             {"block": block, "mb": mb})
        for d, row in enumerate(rows) for a, b, block, mb in row
    ]


def transfer_spans(transfers) -> list[Span]:
    """Spans on both ends' comm lanes from ``(start, end, block, mb, src, dst)`` transfers."""
    out = []
    for a, b, block, mb, src, dst in transfers:
        args = {"block": block, "mb": mb, "src": src, "dst": dst}
        out.append(Span(src, float(a), float(b), f"send {block}:{mb}>{dst}", "send", "comm", args))
        out.append(Span(dst, float(a), float(b), f"recv {block}:{mb}<{src}", "recv", "comm", args))
    return out



def write_trace(path, spans, **kwargs) -> None:
    """Write a Chrome/Perfetto trace JSON file atomically (see `chrome_trace` for options)."""
    write_text_atomic(path, json.dumps(chrome_trace(spans, **kwargs)) + "\n")
