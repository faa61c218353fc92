"""Per-device memory accounting while programs execute.

A block's memory delta is applied when the block starts (the paper's convention, the same one the
schedule's `peak_memory` uses), so the simulated peak equals the planned one for the same order.
Going above a device's capacity (`Spec.capacity`: its memory less what is reserved) is recorded as an `Overflow` rather than stopping the run: the
report keeps every overflow, and the caller decides whether it is an error.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.units import memory_in, time_in


@dataclass(frozen=True)
class Overflow:
    """Device `device` held `used` units (> capacity) when `action` started at `time`."""

    time: float
    device: int
    action: str
    used: int
    capacity: int

    def __str__(self) -> str:
        return self.text()

    def text(self, units=None) -> str:
        """The overflow in the spec's declared units (``t=12 ms``, ``18 GB > 16 GB``) when given."""
        if units is None:
            t, used, cap = f"{self.time:g}", str(self.used), str(self.capacity)
        else:
            t, used, cap = time_in(units, self.time), memory_in(units, self.used), memory_in(units, self.capacity)
        return (f"memory overflow on device {self.device} at t={t}: {self.action} raises use to "
                f"{used} > its capacity {cap}")


class MemoryTracker:
    """Running memory sum and peak per device; keeps the first `keep` overflows."""

    __slots__ = ("capacity", "used", "peak", "overflows", "overflow_count", "keep")

    def __init__(self, devices: int, capacity: int | tuple[int, ...], keep: int = 50):
        # One capacity per device (a spec's `capacities`: its memory less what is reserved there).
        self.capacity = tuple(capacity) if isinstance(capacity, tuple) else (capacity,) * devices
        self.used = [0] * devices
        self.peak = [0] * devices
        self.overflows: list[Overflow] = []
        self.overflow_count = 0
        self.keep = keep

    def apply(self, device: int, delta: int, time: float, block: str, mb: int) -> None:
        """Apply `delta` for `block:mb` starting on `device` at `time`."""
        used = self.used[device] + delta
        self.used[device] = used
        if used > self.peak[device]:
            self.peak[device] = used
        if used > self.capacity[device]:
            self.overflow_count += 1
            if len(self.overflows) < self.keep:
                self.overflows.append(Overflow(time, device, f"{block}:{mb}", used, self.capacity[device]))
