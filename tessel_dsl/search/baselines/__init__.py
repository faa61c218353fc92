"""Baseline schedules (the hand-written ones in `RECORDS`) for the same spec Tessel searches.

`build(spec, name, n)` returns a validated `Schedule` whose `name` is the baseline's name. A
baseline that does not fit the placement raises `NotApplicable` (a TesselError), which reports
show as "n/a". Every baseline keeps within memory M (GPipe runs in waves to do so); the
`ignores_memory` flag remains for a baseline that may exceed M by definition: such a one is
validated without the memory check, and callers compare `peak_memory` with M to mark the overflow.

Each baseline is one `Baseline` record in `RECORDS`; the registry, the memory flag, the CLI's
help text and the tests' parametrisation are all read from there, so a new baseline is its
order function plus one record.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.baselines.capped import capped_orders
from tessel_dsl.search.baselines.chain import NotApplicable
from tessel_dsl.search.baselines.classic import (
    chimera_orders,
    gpipe_orders,
    interleaved_orders,
    one_f_one_b_orders,
)
from tessel_dsl.search.baselines.listsched import Key
from tessel_dsl.search.baselines.pinned import gpipe_plus_orders, one_f_one_b_plus_orders
from tessel_dsl.search.baselines.zbcapped import zb_capped_orders
from tessel_dsl.search.baselines.zbvcapped import zb_v_capped_orders
from tessel_dsl.search.baselines.zerobubble import zb_h1_orders, zb_v_orders
from tessel_dsl.search.compact import compact
from tessel_dsl.validate import validate


@dataclass(frozen=True)
class Baseline:
    """One hand-written schedule: its name (as `-s NAME` and in reports), how it orders each
    device's blocks, and what it promises."""

    name: str
    orders: Callable[[Spec, int], list[list[Key]]]
    help: str  # one line, for `tessel compare --help` and the docs
    # May exceed memory M by design: validated without the memory check, overflow marked in reports.
    ignores_memory: bool = False
    # Tried by the search's finishing step (`search.refine.best_baseline`) as a schedule to beat.
    seeds_search: bool = False


RECORDS: tuple[Baseline, ...] = (
    Baseline("gpipe", gpipe_orders, "all forwards, then all backwards, in waves of as many micro-batches as M holds",
             seeds_search=True),
    Baseline("1f1b", one_f_one_b_orders, "one forward, one backward on a chain of stages", seeds_search=True),
    Baseline("1f1b-capped", capped_orders,
             "1F1B played out in time, each stage keeping as many micro-batches in flight as its memory holds",
             seeds_search=True),
    Baseline("1f1b+", one_f_one_b_plus_orders, "1F1B with multi-device blocks pinned into the chain",
             seeds_search=True),
    Baseline("gpipe+", gpipe_plus_orders,
             "GPipe with multi-device blocks pinned into the chain as in 1F1B+, in waves as M holds",
             seeds_search=True),
    Baseline("chimera", chimera_orders, "Chimera-direct, two chains run in opposite directions", seeds_search=True),
    Baseline("interleaved-1f1b", interleaved_orders,
             "Megatron's interleaved 1F1B, each device running several chunks of the chain in turn",
             seeds_search=True),
    Baseline("zb-h1", zb_h1_orders, "zero-bubble ZB-H1: 1F1B with split backward, weight gradients deferred",
             seeds_search=True),
    Baseline("zb-h1-capped", zb_capped_orders,
             "ZB-H1 played out in time, each stage keeping as many micro-batches resident as its memory holds",
             seeds_search=True),
    Baseline("zb-v", zb_v_orders, "zero-bubble ZB-V: two chunks per device in a V, split backward",
             seeds_search=True),
    Baseline("zb-v-capped", zb_v_capped_orders,
             "ZB-V played out in time, each device admitting as many micro-batches as its memory holds",
             seeds_search=True),
)

BY_NAME: dict[str, Baseline] = {b.name: b for b in RECORDS}
BASELINES: dict[str, Callable[[Spec, int], list[list[Key]]]] = {b.name: b.orders for b in RECORDS}
# Baselines that may exceed memory M by design (the report marks it instead of hiding it).
IGNORES_MEMORY = frozenset(b.name for b in RECORDS if b.ignores_memory)

__all__ = ["BASELINES", "BY_NAME", "Baseline", "IGNORES_MEMORY", "NotApplicable", "RECORDS", "build"]


def build(spec: Spec, name: str, microbatches: int | None = None) -> Schedule:
    """The baseline `name` for `microbatches` (default: the spec's N), compacted and validated."""
    if name not in BY_NAME:
        raise NotApplicable(f"unknown baseline {name!r} (known: {', '.join(BY_NAME)})")
    n = spec.microbatches if microbatches is None else microbatches
    if n < 1:
        raise NotApplicable(f"{name}: the number of micro-batches must be at least 1, got {n}")
    record = BY_NAME[name]
    # A tensor-parallel group's devices are one stage to every pipeline schedule: the orders are
    # made with them folded into one device (`search/twins.py`: the same schedules, the same block
    # starts), as the search sees them. Played over the group's devices, where each stage block is
    # a multi-device block, 1F1B+ on bench/specs/real/tpmshape16.tsl at 16 GB took 5349 ms (and
    # was then capped to memory) where the same stage queues played over stages take 4087.
    from tessel_dsl.search.twins import fold_twins

    folded = fold_twins(spec)
    target = spec if folded is None else folded.spec
    try:
        orders = record.orders(target, n)
    except NotApplicable:
        if target is spec:
            raise
        target, orders = spec, record.orders(spec, n)  # (why not, in the devices the user wrote)
    schedule = Schedule(microbatches=n, slots=compact(target, orders=orders), name=name)
    validate(spec, schedule, check_memory=not record.ignores_memory)
    return schedule
