"""Physical units a spec may write (``2.5ms``, ``80GB``, ``50 GB/s``) and their conversion to the
IR's integer units through the declared resolutions (``resolution time 1ms``)."""
from __future__ import annotations

TIME_UNITS: dict[str, float] = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}

MEMORY_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}

# The ratio "unit" used by derived backward times: `3x` is three times the forward's time.
RATIO_UNIT = "x"


def describe(units: dict) -> str:
    return ", ".join(units)


def to_units(value: float, scale: float, resolution: float) -> float:
    """`value` of a unit worth `scale` base units, expressed in multiples of `resolution`."""
    return value * scale / resolution


def round_units(x: float, positive: bool) -> int:
    """Round to the nearest integer unit (halves up); a positive cost never rounds to 0, since a
    block that takes no time at all would break the schedule's exclusivity reasoning."""
    n = int(x + 0.5) if x >= 0 else -int(-x + 0.5)
    if positive and x > 0 and n == 0:
        return 1
    return n


def format_number(x: float) -> str:
    """``1.0`` -> ``1``, ``0.5`` -> ``0.5``: labels read like what the user wrote."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


_TIME_SHOW = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
_DEC_SHOW = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3), ("B", 1))
_BIN_SHOW = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def _pick(x: float, table) -> str:
    for name, size in table:
        if abs(x) >= size:
            return f"{x / size:.4g} {name}"
    name, size = table[-1]
    return f"{x / size:.4g} {name}"


def _zero(label: str) -> str:
    """Zero in the unit of the declared resolution (``0 ms`` for ``resolution time 0.5ms``)."""
    return "0 " + label.lstrip("0123456789.")


def show_time(value: float, seconds_per_unit: float, label: str) -> str:
    """A time of `value` integer units as the user wrote times (``12.5 ms``); bare when the spec
    declared no `resolution time` (the units mean nothing physical then)."""
    if label == "unit":
        return format_number(round(value, 6))
    if value == 0:
        return _zero(label)
    return _pick(value * seconds_per_unit, _TIME_SHOW)


def show_memory(value: float, bytes_per_unit: int, label: str) -> str:
    """Memory of `value` integer units in bytes-based units (``12 GB``; binary when the spec's
    resolution is binary, ``GiB``); bare without `resolution memory`."""
    if label == "unit":
        return format_number(round(value, 6))
    if value == 0:
        return _zero(label)
    return _pick(value * bytes_per_unit, _BIN_SHOW if "iB" in label else _DEC_SHOW)


def time_in(units, value: float) -> str:
    """`show_time` with a spec's `Units` (or its JSON dict, as `tessel check --json` prints it)."""
    get = units.get if isinstance(units, dict) else lambda k: getattr(units, k)
    return show_time(value, get("time_seconds"), get("time_label"))


def memory_in(units, value: float) -> str:
    """`show_memory` with a spec's `Units` (or its JSON dict)."""
    get = units.get if isinstance(units, dict) else lambda k: getattr(units, k)
    return show_memory(value, get("memory_bytes"), get("memory_label"))


def capacity_in(spec) -> str:
    """A spec's memory limit for messages: ``M=16 GB``, or with per-device capacities (less what is
    reserved) the most common one and the exceptions, ``M=16 GB (device 0: 10 GB, device 3: 9 GB)``."""
    caps = list(spec.capacities)
    if not caps:
        return f"M={memory_in(spec.units, spec.memory)}"
    common = max(set(caps), key=lambda c: (caps.count(c), c))
    odd = [f"device {d}: {memory_in(spec.units, c)}" for d, c in enumerate(caps) if c != common]
    if len(odd) > 8:
        odd = odd[:8] + [f"{len(odd) - 8} more"]
    return f"M={memory_in(spec.units, common)}" + (f" ({', '.join(odd)})" if odd else "")
