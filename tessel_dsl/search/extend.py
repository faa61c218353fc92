"""Extension (paper §3.3): warmup + the repetend repeated + the shifted cooldown, for any N >= N_R.

Instance ``k`` (``0 <= k <= N - N_R``) runs every repetend block on micro-batch ``r_i + k``; the
cooldown's micro-batches move up by ``N - N_R``. Only each device's block *order* is taken from
the parts; the joined order is then compacted (`tessel_dsl.search.compact`), so every block starts as soon
as its dependencies and its devices allow and the joins leave no avoidable gaps. Memory on a
device depends only on that order, which is why the limits the parts were solved under still hold.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.errors import InfeasibleError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Schedule, Slot
from tessel_dsl.search.compact import compact
from tessel_dsl.validate import validate


@dataclass(frozen=True)
class Parts:
    """What extension needs: warmup and cooldown numbered for ``N = N_R``, and the repetend."""

    warmup: tuple[Slot, ...]
    repetend: Repetend
    cooldown: tuple[Slot, ...]


def parts_of(schedule: Schedule) -> Parts:
    """Recover the parts stored in a searched schedule.

    A schedule for ``N >= N_R`` micro-batches stores its final warmup and cooldown slots (cooldown
    numbered for N); one for fewer keeps the ``N_R``-micro-batch phases as they are.
    """
    rep = schedule.repetend
    if rep is None:
        raise InfeasibleError(
            f"schedule '{schedule.name}' has no repetend, so it cannot be extended to another N "
            "(only schedules from `tessel search` can)")
    shift = schedule.microbatches - rep.nr if schedule.microbatches >= rep.nr else 0
    cooldown = tuple(Slot(s.start, s.block, s.mb - shift) for s in schedule.cooldown)
    return Parts(schedule.warmup, rep, cooldown)


def device_orders(spec: Spec, parts: Parts, n: int) -> list[list[tuple[str, int]]]:
    """Each device's (block, mb) sequence for N = `n`: warmup, instances, shifted cooldown."""
    rep = parts.repetend
    rows: list[list[tuple[str, int]]] = [[] for _ in range(spec.devices)]

    def put(slots, mb_shift: int) -> None:
        for s in sorted(slots, key=lambda s: s.start):
            for d in spec.block(s.block).devices:
                rows[d].append((s.block, s.mb + mb_shift))

    put(parts.warmup, 0)
    for k in range(n - rep.nr + 1):
        put(rep.slots, k)
    put(parts.cooldown, n - rep.nr)
    return rows


DIRECT_MAX_TASKS = 800  # beyond this many block instances, N < N_R is not solved in one model


def truncated(spec: Spec, parts: Parts, n: int) -> tuple[Slot, ...]:
    """The schedule for N_R micro-batches with the micro-batches from `n` on left out, compacted:
    removing whole micro-batches never adds memory or breaks a dependency."""
    rows = [[k for k in row if k[1] < n] for row in device_orders(spec, parts, parts.repetend.nr)]
    return compact(spec, orders=rows)


def below_span(spec: Spec, parts: Parts, n: int, solver: str, time_limit: float | None,
               seed: tuple[Slot, ...] | None = None) -> tuple[tuple[Slot, ...], str]:
    """A schedule for ``n < N_R`` micro-batches and how it was found.

    `seed` is a valid schedule of the `n` micro-batches to start from (default: the `truncated`
    N_R schedule). A seed that reaches the makespan bound (`bounds.makespan_bound`) is optimal
    as it is. Otherwise, up to `DIRECT_MAX_TASKS` block instances, one time-optimal solve of all
    of them (`direct.py`) warm-started from the seed, with a deterministic budget: ``"optimal"``
    when it proves its answer (or reaches the bound), ``"cut"`` when the budget stopped it with a
    shorter schedule than the seed. Otherwise ``"seed"``: the seed itself, compacted (above that size such a solve does
    not settle: a long repetend on many devices; or the budget found nothing shorter).
    """
    from tessel_dsl.search.bounds import makespan_bound
    from tessel_dsl.search.direct import direct

    def span(slots: tuple[Slot, ...]) -> int:
        return max(s.start + spec.block(s.block).time for s in slots)

    seed = truncated(spec, parts, n) if seed is None else compact(spec, seed)
    bound = makespan_bound(spec, n, above=span(seed))  # no schedule of n micro-batches is shorter
    if span(seed) <= bound:
        return seed, "optimal"  # nothing to solve
    if n * len(spec.blocks) > DIRECT_MAX_TASKS:
        return seed, "seed"
    slots, proven = direct(spec, n, solver, time_limit, hint=seed)
    if proven or span(slots) <= bound:
        return slots, "optimal"
    return slots, ("cut" if span(slots) < span(seed) else "seed")


def extend(spec: Spec, schedule_or_parts: Schedule | Parts, n: int, *, name: str = "tessel",
           check: bool = True) -> Schedule:
    """The schedule for `n` micro-batches, compacted and validated.

    For ``n >= N_R`` no solver runs, so a saved plan is re-extended to any N cheaply. A repetend
    can't be used for fewer micro-batches than it spans, so ``n < N_R`` is solved directly
    (time-optimally, all `n` micro-batches at once, within a deterministic budget) when that is
    small, else taken from the schedule for N_R (`below_span`).
    """
    from tessel_dsl.plan_check import check_microbatch_count

    if n >= 1:
        check_microbatch_count(spec, n)  # before any work that grows with n
    parts = schedule_or_parts if isinstance(schedule_or_parts, Parts) else parts_of(schedule_or_parts)
    rep = parts.repetend
    if n < 1:
        raise InfeasibleError(f"the number of micro-batches must be at least 1 (got {n})")
    if n < rep.nr:
        slots, _how = below_span(spec, parts, n, "auto", None)
        out = Schedule(n, slots, name=name, warmup=parts.warmup, repetend=rep, cooldown=parts.cooldown)
        if check:
            validate(spec, out)
        return out
    slots = compact(spec, orders=device_orders(spec, parts, n))
    by_key = {(s.block, s.mb): s for s in slots}
    warm = tuple(by_key[(s.block, s.mb)] for s in parts.warmup)
    shift = n - rep.nr
    cool = tuple(sorted(by_key[(s.block, s.mb + shift)] for s in parts.cooldown))
    first = min(by_key[(s.block, s.mb)].start for s in rep.slots)
    out = Schedule(n, slots, name=name, warmup=tuple(sorted(warm)), repetend=rep, cooldown=cool,
                   repetend_start=first)
    if check:
        validate(spec, out)
    return out
