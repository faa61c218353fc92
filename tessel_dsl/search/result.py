"""What a search hands back: its result, and the progress snapshots it reports while it runs.

Their own module so that the driver and the searches it calls (`kcopy`) share them without
importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.plan import SearchInfo
from tessel_dsl.schedule import Schedule


@dataclass(frozen=True)
class Progress:
    """A snapshot for live displays: what the search is doing right now."""

    phase: str
    lower_bound: int
    period: int = 0
    nr: int = 0
    best: int | None = None
    tried: int = 0
    pruned: int = 0
    elapsed: float = 0.0


@dataclass(frozen=True)
class SearchResult:
    """The searched schedule (warmup/repetend/cooldown filled when a repetend exists) and how."""

    schedule: Schedule
    info: SearchInfo
