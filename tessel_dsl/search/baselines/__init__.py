"""Baseline schedules (GPipe, 1F1B, 1F1B+, Chimera) for the same spec Tessel searches.

`build(spec, name, n)` returns a validated `Schedule` whose `name` is the baseline's name. A
baseline that does not fit the placement raises `NotApplicable` (a TesselError), which reports
show as "n/a". GPipe ignores memory M by definition: its schedule is validated without the memory
check, and callers compare `peak_memory` with M to mark the overflow.
"""
from __future__ import annotations

from collections.abc import Callable

from tessel_dsl.search.compact import compact
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.validate import validate
from tessel_dsl.search.baselines.chain import NotApplicable
from tessel_dsl.search.baselines.classic import chimera_orders, gpipe_orders, one_f_one_b_orders, one_f_one_b_plus_orders
from tessel_dsl.search.baselines.listsched import Key

BASELINES: dict[str, Callable[[Spec, int], list[list[Key]]]] = {
    "gpipe": gpipe_orders,
    "1f1b": one_f_one_b_orders,
    "1f1b+": one_f_one_b_plus_orders,
    "chimera": chimera_orders,
}

# Baselines that may exceed memory M by design (the report marks it instead of hiding it).
IGNORES_MEMORY = frozenset({"gpipe"})

__all__ = ["BASELINES", "IGNORES_MEMORY", "NotApplicable", "build"]


def build(spec: Spec, name: str, microbatches: int | None = None) -> Schedule:
    """The baseline `name` for `microbatches` (default: the spec's N), compacted and validated."""
    if name not in BASELINES:
        raise NotApplicable(f"unknown baseline {name!r} (known: {', '.join(BASELINES)})")
    n = spec.microbatches if microbatches is None else microbatches
    if n < 1:
        raise NotApplicable(f"{name}: the number of micro-batches must be at least 1, got {n}")
    orders = BASELINES[name](spec, n)
    schedule = Schedule(microbatches=n, slots=compact(spec, orders=orders), name=name)
    validate(spec, schedule, check_memory=name not in IGNORES_MEMORY)
    return schedule
