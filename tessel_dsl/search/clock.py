"""The search's clock, shared by the driver and the steps it calls: the user's wall-clock limit
(if any), the CPU time spent (what the search reports: on a shared machine the wall clock
measures the load, not the search) and the time unit that notes multiply by."""
from __future__ import annotations

import time


class Clock:
    """The user's wall-clock limit (if any), and the time unit messages multiply by: the search
    runs on the spec with times divided by their common divisor (`timescale.py`), while notes
    speak in the spec's own units."""

    def __init__(self, time_limit: float | None, unit: int = 1):
        self.t0 = time.monotonic()
        self.cpu0 = time.process_time()
        self.limit = time_limit
        self.unit = unit
        self.skipped: list[str] = []  # steps left out because the limit had run out, in order

    def left(self) -> float | None:
        if self.limit is None:
            return None
        return self.limit - (time.monotonic() - self.t0)

    def spent(self) -> bool:
        """Whether the user's limit has run out (never without one: every step then runs on its
        deterministic budget alone)."""
        left = self.left()
        return left is not None and left <= 0

    def skip(self, step: str) -> bool:
        """Whether `step` (a phrase for the notes) is to be left out for lack of time; noted if so."""
        if not self.spent():
            return False
        if step not in self.skipped:
            self.skipped.append(step)
        return True

    def elapsed(self) -> float:
        """CPU seconds of this process since the search began (solver threads included)."""
        return time.process_time() - self.cpu0


class PlayBudget:
    """The budget of a descent that plays schedules out (`inflight.py`, `zbdepth.py`,
    `warmups.py`): a count of block instances laid out, so the answer does not depend on the
    machine, and the user's wall-clock limit (`clock`, optional), which leaves out `step`."""

    def __init__(self, work: int, clock: Clock | None, step: str):
        self.left, self.clock, self.step = work, clock, step

    def spend(self, instances: int) -> None:
        self.left -= instances

    def done(self) -> bool:
        return self.left <= 0 or (self.clock is not None and self.clock.skip(self.step))
