"""The simulation report: what a run measured, as a value, as JSON and as a rich summary table."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tessel_dsl.ir import Link, Units
from tessel_dsl.simulator.deadlock import Deadlock
from tessel_dsl.simulator.memory import Overflow
from tessel_dsl.units import show_memory, show_time

Bar = tuple[float, float, str, int]  # (start, end, block, micro-batch)


@dataclass(frozen=True)
class Report:
    """Everything one simulation measured. `ok` is False on deadlock or memory overflow."""

    spec: str
    schedule: str
    devices: int
    microbatches: int
    blocking: bool
    link: Link
    makespan: float
    busy: tuple[float, ...]
    bubble: float
    bubble_per_device: tuple[float, ...]
    period: float | None
    planned_period: int | None
    lower_bound: int
    peak_memory: tuple[int, ...]
    memory_capacity: int
    overflows: tuple[Overflow, ...]
    overflow_count: int
    comm_total: float
    comm_exposed: float
    comm_hidden: float
    transfers: int
    bytes_moved: int
    # Some transfer's size is its producer's memory delta, standing in for an undeclared tensor.
    bytes_from_memory: bool
    # Idle inside a receive/wait until the tensor arrived (communication only).
    wait_per_device: tuple[float, ...]
    # Idle at a multi-device block until the block's other devices reached it.
    peer_wait_per_device: tuple[float, ...]
    drift_max: float | None
    drift_mean: float | None
    drift_blocks: int | None
    deadlock: Deadlock | None
    actions: int
    wall_seconds: float
    time_label: str = "unit"
    memory_label: str = "unit"
    time_seconds: float = 1.0   # what one time unit is, for showing times as the spec wrote them
    memory_bytes: int = 1
    repetend_start: int | None = None
    # Per device: the capacity left for the schedule (memory less reserve) and the reserve.
    memory_capacities: tuple[int, ...] = ()
    memory_reserved: tuple[int, ...] = ()
    # Per device, the computes in execution order; for timelines and traces, not for JSON.
    timeline: tuple[tuple[Bar, ...], ...] = field(default=(), repr=False, compare=False)
    comm: tuple[tuple[float, float, str, int, int, int], ...] = field(default=(), repr=False, compare=False)

    def capacity(self, device: int) -> int:
        """Device `device`'s memory limit (what is left after its reserve)."""
        return self.memory_capacities[device] if self.memory_capacities else self.memory_capacity

    @property
    def uniform_memory(self) -> bool:
        return len(set(self.memory_capacities)) <= 1

    def over_memory(self) -> list[int]:
        """Devices whose peak went above their own capacity."""
        return [d for d, p in enumerate(self.peak_memory) if p > self.capacity(d)]

    @property
    def ok(self) -> bool:
        return self.deadlock is None and self.overflow_count == 0

    def problems(self) -> list[str]:
        """One line per reason the run is not ok (deadlock first)."""
        out = []
        if self.deadlock is not None:
            out.append(self.deadlock.summary())
        if self.overflow_count:
            first = self.overflows[0]
            more = f" (+{self.overflow_count - 1} more)" if self.overflow_count > 1 else ""
            units = None
            if self.time_label != "unit" or self.memory_label != "unit":
                units = Units(self.time_seconds, self.time_label, self.memory_bytes, self.memory_label)
            out.append(f"{first.text(units)}{more}")
        return out

    def to_json(self) -> dict:
        """Machine-readable form (no timeline; stable keys)."""
        def r(x):
            return None if x is None else round(float(x), 6)

        return {
            "spec": self.spec,
            "schedule": self.schedule,
            "devices": self.devices,
            "microbatches": self.microbatches,
            "blocking": self.blocking,
            "link": {"latency": self.link.latency, "bandwidth": self.link.bandwidth},
            "ok": self.ok,
            "makespan": r(self.makespan),
            "bubble": r(self.bubble),
            "bubble_per_device": [r(b) for b in self.bubble_per_device],
            "busy_per_device": [r(b) for b in self.busy],
            "period": r(self.period),
            "planned_period": self.planned_period,
            "lower_bound": self.lower_bound,
            "peak_memory": list(self.peak_memory),
            "memory_capacity": self.memory_capacity,
            "memory_capacities": [self.capacity(d) for d in range(self.devices)],
            "memory_reserved": list(self.memory_reserved) or [0] * self.devices,
            "over_memory_devices": self.over_memory(),
            "overflows": [
                {"time": r(o.time), "device": o.device, "action": o.action, "used": o.used}
                for o in self.overflows
            ],
            "overflow_count": self.overflow_count,
            "comm": {
                "transfers": self.transfers,
                "bytes": self.bytes_moved,
                "bytes_from_memory": self.bytes_from_memory,
                "total": r(self.comm_total),
                "exposed": r(self.comm_exposed),
                "hidden": r(self.comm_hidden),
                "wait_per_device": [r(w) for w in self.wait_per_device],
            },
            "peer_wait_per_device": [r(w) for w in self.peer_wait_per_device],
            "drift": None if self.drift_max is None else {
                "max": r(self.drift_max), "mean": r(self.drift_mean), "blocks": self.drift_blocks,
            },
            "deadlock": None if self.deadlock is None else {
                "blocked": [
                    {"device": b.device, "pc": b.pc, "action": b.action, "waits_for": b.waits_for}
                    for b in self.deadlock.blocked
                ],
                "mismatches": list(self.deadlock.mismatches),
            },
            "actions": self.actions,
            "time_label": self.time_label,
            "memory_label": self.memory_label,
        }


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:g}" if abs(x - round(x)) > 1e-9 else str(int(round(x)))


def _t(report: Report, x: float | None) -> str:
    """A time in the spec's declared units (``12.5 ms``), or bare units without a resolution."""
    return "-" if x is None else show_time(x, report.time_seconds, report.time_label)


def _m(report: Report, x: float) -> str:
    """A memory size in the spec's declared units (``12 GB``), or bare units without a resolution."""
    return show_memory(x, report.memory_bytes, report.memory_label)


def _labels(report: Report) -> dict[str, str]:
    """What {tu}/{mu} become in row labels: the unit label when values are bare units; nothing
    (the parentheses dropped) when the values carry their own ms/GB."""
    return {"tu": report.time_label if report.time_label == "unit" else "",
            "mu": report.memory_label if report.memory_label == "unit" else ""}


def _label(text: str, report: Report) -> str:
    return text.format(**_labels(report)).replace(" ()", "")


def summary_table(report: Report):
    """A rich Table with the headline numbers and a per-device breakdown. Times and memory read
    in the spec's declared units (ms, GB) when it declares resolutions."""
    from rich.table import Table

    tu = report.time_label
    mode = "blocking" if report.blocking else "non-blocking"
    link = "free"
    if report.link.latency > 0 or report.link.bandwidth > 0:
        parts = [f"latency {_t(report, report.link.latency)}"]
        if report.link.bandwidth > 0:
            # The IR's bandwidth is bytes per time unit.
            parts.append(f"{show_memory(report.link.bandwidth / report.time_seconds, 1, 'B')}/s" if tu != "unit"
                         else f"{report.link.bandwidth:g} B/{tu}")
        link = ", ".join(parts)
    title = f"{report.spec} · {report.schedule} · N={report.microbatches} · {mode} · link {link}"
    t = Table(title=title, title_justify="left", show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for label, text in METRIC_ROWS:
        value = text(report)
        if value is not None:
            t.add_row(_label(label, report), value)

    d = Table(show_header=True, header_style="bold", title="per device", title_justify="left")
    columns = [col for col in DEVICE_COLUMNS if col.shown(report)]
    for col in columns:
        d.add_column(_label(col.title, report), justify="right")
    for i in range(report.devices):
        d.add_row(*(col.cell(report, i) for col in columns))
    return t, d


@dataclass(frozen=True)
class DeviceColumn:
    """One column of the per-device table: a title (``{tu}``/``{mu}`` become the time/memory unit
    labels) and the cell text of device i."""

    title: str
    cell: Callable[[Report, int], str]
    # Left out of a report it says nothing for (capacity when every device has the same M).
    shown: Callable[[Report], bool] = lambda r: True


def _verdict(report: Report) -> str:
    if report.ok:
        return "[green]ok[/]"
    return "[bold red]" + ("DEADLOCK" if report.deadlock else "MEMORY OVERFLOW") + "[/]"


def _period(report: Report) -> str:
    period = _t(report, report.period)
    if report.planned_period is not None:
        period += f" (planned {_t(report, report.planned_period)})"
    return period


# The headline table: (label, value text of a report, or None to leave the row out); a label's
# {tu}/{mu} become the time/memory unit labels, as in DEVICE_COLUMNS.
METRIC_ROWS: tuple[tuple[str, Callable[[Report], str | None]], ...] = (
    ("verdict", _verdict),
    ("makespan ({tu})", lambda r: _t(r, r.makespan)),
    ("bubble rate", lambda r: _pct(r.bubble)),
    ("steady-state period ({tu})", _period),
    ("lower bound ({tu})", lambda r: _t(r, r.lower_bound)),
    ("peak memory / M ({mu})", lambda r: _peak_vs_capacity(r)),
    ("transfers", lambda r: f"{r.transfers} ({show_memory(r.bytes_moved, 1, 'B')})"),
    # (a size no edge declares is its producer's memory delta: say so, not present it as traffic)
    ("transfer sizes", lambda r: "memory deltas" if r.bytes_from_memory else None),
    ("comm hidden / exposed ({tu})", lambda r: f"{_t(r, r.comm_hidden)} / {_t(r, r.comm_exposed)}"),
    ("start drift vs plan ({tu})", lambda r: None if r.drift_max is None else
     f"max {_t(r, r.drift_max)}, {r.drift_blocks} block(s) moved"),
)


def _peak_vs_capacity(r: Report) -> str:
    """Peak against M; with capacities that differ per device, the device nearest (or furthest
    over) its own capacity."""
    if r.uniform_memory:
        return f"{_m(r, max(r.peak_memory, default=0))} / {_m(r, r.capacity(0) if r.devices else r.memory_capacity)}"
    d = max(range(r.devices), key=lambda i: (r.peak_memory[i] - r.capacity(i), r.peak_memory[i]))
    return f"{_m(r, r.peak_memory[d])} / {_m(r, r.capacity(d))} on device {d}"


def _peak_cell(report: Report, i: int) -> str:
    peak = report.peak_memory[i]
    return f"[red]{_m(report, peak)}[/]" if peak > report.capacity(i) else _m(report, peak)


def _capacity_cell(report: Report, i: int) -> str:
    """The device's capacity left, with its whole memory and reserve when it has one."""
    cap, res = report.capacity(i), (report.memory_reserved[i] if report.memory_reserved else 0)
    return _m(report, cap) + (f" ({_m(report, cap + res)} - {_m(report, res)} reserved)" if res else "")


DEVICE_COLUMNS: tuple[DeviceColumn, ...] = (
    DeviceColumn("device", lambda r, i: str(i)),
    DeviceColumn("busy ({tu})", lambda r, i: _t(r, r.busy[i])),
    DeviceColumn("bubble", lambda r, i: _pct(r.bubble_per_device[i])),
    DeviceColumn("peak mem", _peak_cell),
    DeviceColumn("capacity", _capacity_cell, shown=lambda r: not r.uniform_memory or any(r.memory_reserved)),
    DeviceColumn("waiting for data ({tu})", lambda r, i: _t(r, r.wait_per_device[i])),
    DeviceColumn("waiting for peers ({tu})", lambda r, i: _t(r, r.peer_wait_per_device[i])),
)
