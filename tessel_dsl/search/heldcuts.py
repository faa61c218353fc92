"""The whole schedule for N micro-batches with memory stated as holding cuts: a bound, and often
the schedule itself.

**The model.** Every block instance of every micro-batch, as in TO (`optimal.py`): each block's
instances in micro-batch order, which loses no makespan; the dependencies with their lags; one
block at a time on each device. Memory is not stated as the running sum but by the holdings of
`membound.py`: ``k`` micro-batches hold at least ``need`` on a device from the start of ``a`` to
the end of ``r``, and only ``limit`` of them fit, so with the starts in order the
``(i + limit)``-th ``a`` starts no earlier than the ``i``-th ``r`` ends (`devrelax.py`'s module text
shows this loses nothing). Each instance also starts no earlier than the longest chain before its
block and ends at least the longest chain after it before the makespan.

**What it proves.** Every valid schedule, relabelled into micro-batch order, is a solution of the
model with the same makespan, so the bound CP-SAT proves is a makespan bound for the spec. It is
not a relaxation of one device (`devrelax.py`): it sees how micro-batches in flight on several
memory-bound stages wait for each other, which the analytic bounds miss (the 4-stage chain of
`tests/unit/test_membound_area.py`: 141, the optimum, where they give 138; its one-device and
two-device forms give 138 too, three devices 141).

**What it finds.** Where a device's memory comes from one allocating and one freeing block of the
same size, the cuts state its running sum exactly; elsewhere (a zero-bubble stage frees in two
steps) they are weaker. Either way a solution is checked against the spec (`validate`) and kept
only when it fits: then it is a schedule, and when CP-SAT proved it optimal in the model it is
optimal among all schedules, since the model's optimum is a lower bound. Measured when the model
was made (2-core x86_64; the search's plan first, then this model asked for a shorter schedule
on a budget of 2):

- bench/specs/zoo/tune/vit_llama8_chain8.tsl: the plan, 12205, proven shortest in 2.9 s of CPU
  (the analytic bound is 11884; TO with the running sum took 96 s to prove it, `zoo_best.py`);
- zoo/tune/mixtral_8x22b_chain16_mem.tsl: 22384 proven in 3.5 s (TO: 132 s);
  zoo/tune/llama3_405b_chain32.tsl: 22971 proven in 0.7 s (TO: 286 s);
- bench/specs/real/memchain.tsl: 1503 -> 1461 in 2 s (the optimum is 1449, proven by TO in 169 s;
  the search asks first about its best baseline, 1515, and gets 1473);
- bench/specs/real/zerobubble8.tsl: 5394 -> 5385, the analytic bound, in 1.3 s.

Why it settles where TO does not: the cuts are plain precedences, which CP-SAT's linear
relaxation sees, while a reservoir constraint on hundreds of events gives it almost nothing (the
same model with the reservoir added proves nothing in 17 s on the ViT chain).

**Asked with the schedule in hand.** The search asks with a valid schedule in hand (a baseline,
or its plan), so the model is given it as its first solution, relabelled into micro-batch order,
and allowed to end at its makespan: CP-SAT then starts from a solution and spends the budget on
shorter ones and on its lower bound, and "optimal at that makespan" is the proof that the one in
hand is shortest. Asked for a shorter schedule only (no solution at the makespan in hand, no
hint), as it was before, it proved less on the same budget on every spec tried, where memory
binds (2 units, then 4; bench/specs/real/, no zoo spec): gemma2_9b_chain8_mem 12414 and 12414
against 12494 and 12607, qwen32b_chain8_mem 18111 / 18111 against 18160 / 18208, memchain 1356
/ 1372 against 1359 / 1383, nnshape8 at 24 GB 2662 / 2662 against 2882 / 2882, mshape8 at 24 GB
5673 / 5673 against 5799 / 5799. Only gemma2's comes above the bound stated before (12496, the
device relaxations'), from 3 units on, which is the budget (`CUT_EFFORT`; 3 and 6 units gave the
same on these five); in the search, whose first ask is about its best baseline, it states 12543.

Where no device's memory binds (every holding fits N micro-batches) the model has no cuts and
is TO without memory. It is asked there all the same: on zero-bubble chains with an embedding on
the first device and a head on the last (`python bench/zb_heads.py`: ten random ones, 8 devices,
N = 32) the search without it (commit 65257f8) stayed 0.03 to 2.4 % above the bound on five, the
ends of its repetend's extension not quite closed; with it, all ten reach the bound (2.0 to 2.6
s of CPU for each whole search).

**Memory in hand.** Where a schedule the model finds holds more on some device than the one in
hand, the model is solved again with the peaks of the one in hand as each device's memory, for a
schedule only. Where memory is loose (no holding binds) only that second schedule may replace the
one in hand, as the polish keeps (`refine.polish`); where memory binds, the shorter of the two
does, since using the room the spec states is the point there (a chain with an embedding and a
head at 2 units a device, tests/integration/test_search_devchain.py: 180, its bound, with the
room, 183 within the peaks). Where memory is loose the model alone returns any schedule of the
shortest length it finds: on the GPT with a
512k vocabulary (`bench/gpu_zb.py`, `tessel plan`'s mshape-EH, 144 GB a GPU) it turned the
plan's 1F1B-like order (4557 units of 100 us) into a GPipe-like one of 4550 that keeps 13
micro-batches in flight, and on 4 x H200 that ran 485.2 ms where the same placement had run
453.5 (2026-11-29, bench/results/gpu.md); kept within the peaks, the plan is 4557 at 3.9 GB, and
ran 452.6. Elsewhere the second solve only helped, its smaller memory making the model tighter:
bench/specs/real/memchain.tsl 1452 -> 1449, the optimum (the model 1503 -> 1452 within capped
1F1B's peaks; the windows the rest), bench/specs/m8_llama.tsl at N = 12
876 -> 804, its bound (the windows had reached 852); every other row of `bench/search_real.py`
and every zoo plan the same, CPU up to 6 s more (memchain at D = 16).

**Cost.** A deterministic budget (`CUT_EFFORT`, one worker, fixed seed); asked for only when a
schedule in hand is above the analytic bounds, and up to `CUT_MAX_INSTANCES` block instances.
CP-SAT's presolve, whose CPU the budget does not count, is off above `PRESOLVE_MAX_INSTANCES`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tessel_dsl.analysis import chains
from tessel_dsl.errors import ScheduleError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.lags import edge_lags

CUT_EFFORT = 3.0               # CP-SAT deterministic time of the one solve
CUT_MAX_INSTANCES = 5000       # block instances beyond which the model is not tried
PRESOLVE_MAX_INSTANCES = 1024  # ... and beyond which CP-SAT's presolve is off


@dataclass(frozen=True)
class CutAnswer:
    """`bound`: no schedule of the N micro-batches is shorter (0: nothing proven). `schedule`: a
    valid schedule shorter than the one the solve was asked to beat, or None. `optimal`: that
    schedule, or else the one asked about, is at `bound`."""

    bound: int
    schedule: Schedule | None
    optimal: bool


# [spec, microbatches, CutAnswer, effort] of the last solve: the search asks, then reads it back
_LAST: list = []


def held_cuts(spec: Spec, microbatches: int, above: int, *, time_limit: float | None = None,
              effort: float = CUT_EFFORT, hint: Schedule | None = None) -> CutAnswer | None:
    """The module text's solve for a schedule shorter than `above` (the makespan of one in hand)
    on `effort` (deterministic time); None when it is not tried (too many instances, zero-time
    blocks). `hint`: that schedule in hand (valid, of `above`), which the model is then given as
    its first solution ("Asked with the schedule in hand"). Asked again for the same spec and N on no more effort, the
    first answer is returned (its bound holds whatever schedule is now in hand); on more, the
    model is solved again below `above`, and the larger of the two proven bounds is kept."""
    got = cached(spec, microbatches)
    if got is not None and _LAST[3] >= effort:
        return got
    from tessel_dsl.search.membound import holdings

    n = microbatches
    binding = [h for h in holdings(spec) if h.limit < n]
    if n * len(spec.blocks) > CUT_MAX_INSTANCES or any(b.time <= 0 for b in spec.blocks):
        return None
    answer = _solve(spec, n, above, binding, time_limit, effort, hint)
    if hint is not None and answer.schedule is not None:
        answer = _within_peaks(spec, n, above, answer, hint, bool(binding), time_limit, effort)
    if got is not None and got.bound > answer.bound:
        settled = answer.schedule.makespan(spec) <= got.bound if answer.schedule is not None else got.bound >= above
        answer = CutAnswer(got.bound, answer.schedule, settled)
    _LAST[:] = [spec, n, answer, effort]
    return answer


def _within_peaks(spec: Spec, n: int, above: int, answer: CutAnswer, hint: Schedule, binds: bool,
                  time_limit: float | None, effort: float) -> CutAnswer:
    """`answer` where its schedule holds no more than the schedule in hand on any device; else
    ("Memory in hand") the model solved again on the spec with those peaks as its memory, for a
    schedule only (the first solve's bound stays: the second's holds for the smaller memory
    alone). Where memory binds (`binds`), the shorter of the two schedules is kept, the second on
    a tie; where it is loose, only the second."""
    from tessel_dsl.search.membound import holdings

    peaks = hint.peak_memory(spec)
    if all(p <= q for p, q in zip(answer.schedule.peak_memory(spec), peaks)):
        return answer
    capped = spec.within(peaks)
    again = _solve(capped, n, above, [h for h in holdings(capped) if h.limit < n], time_limit, effort, hint)
    options = [again.schedule] if again.schedule is not None and again.schedule.makespan(spec) < above else []
    if binds:
        options.append(answer.schedule)
    sched = min(options, key=lambda s: s.makespan(spec), default=None)  # (the first of equals)
    return CutAnswer(answer.bound, sched, answer.bound >= (sched.makespan(spec) if sched is not None else above))


def cached(spec: Spec, microbatches: int) -> CutAnswer | None:
    """The answer of the last `held_cuts` for this very spec and N, if that was the last asked."""
    if _LAST and _LAST[0] is spec and _LAST[1] == microbatches:
        return _LAST[2]
    return None


def _solve(spec: Spec, n: int, above: int, binding, time_limit: float | None, effort: float,
           hint: Schedule | None = None) -> CutAnswer:
    from tessel_dsl.search.solvers.cpsat import run_model
    from tessel_dsl.search.solvers.cpsat_module import cp_model
    from tessel_dsl.validate import validate

    time = {b.name: b.time for b in spec.blocks}
    lags = edge_lags(spec)
    head, tail = chains(spec, time, lags)
    names = [b.name for b in spec.blocks]
    if any(head[x] + time[x] + tail[x] >= above for x in names):
        return CutAnswer(above, None, True)  # one micro-batch's own chain already takes that long
    m = cp_model().CpModel()
    top = above if hint is not None else above - 1  # (with the hint, a solution at `above` is the hint)
    start = {(x, i): m.new_int_var(head[x], top - time[x] - tail[x], "") for x in names for i in range(n)}
    for d in range(spec.devices):
        m.add_no_overlap([m.new_fixed_size_interval_var(start[b.name, i], b.time, "")
                          for b in spec.blocks_on(d) for i in range(n)])
    span = m.new_int_var(0, top, "")
    for x in names:
        for i in range(n):
            m.add(span >= start[x, i] + time[x] + tail[x])
            if i + 1 < n:
                m.add(start[x, i + 1] >= start[x, i] + time[x])
    for e in spec.edges:
        for i in range(n):
            m.add(start[e.dst, i] >= start[e.src, i] + time[e.src] + lags.get((e.src, e.dst), 0))
    for h in binding:
        for i in range(n - h.limit):
            m.add(start[h.alloc, i + h.limit] >= start[h.free, i] + time[h.free])
    if hint is not None:
        from tessel_dsl.search.optimal import starts_in_order

        given = starts_in_order(spec, hint.slots)  # (in micro-batch order, as the model states it)
        for key, var in start.items():
            m.add_hint(var, given[key])
        m.add_hint(span, above)
    m.minimize(span)
    status, solver = run_model(m, effort=effort, time_limit=time_limit,
                               presolve=n * len(names) <= PRESOLVE_MAX_INSTANCES)
    if status == "infeasible":
        return CutAnswer(above, None, True)  # nothing shorter than the schedule in hand
    bound = max(0, math.ceil(solver.best_objective_bound - 1e-6))
    if status != "found" or (hint is not None and solver.objective_value >= above):
        return CutAnswer(above, None, True) if bound >= above else CutAnswer(bound, None, False)
    slots = tuple(sorted(Slot(solver.value(start[x, i]), x, i) for x in names for i in range(n)))
    sched = Schedule(microbatches=n, slots=slots, name="tessel")
    try:
        validate(spec, sched)
    except ScheduleError:
        return CutAnswer(bound, None, False)  # the cuts let through more than memory holds
    optimal = bound >= sched.makespan(spec)  # (CP-SAT's proven bound reached its schedule)
    return CutAnswer(max(bound, sched.makespan(spec)) if optimal else bound, sched, optimal)


def adopt(spec: Spec, microbatches: int, result, bound: int, *, time_limit: float | None = None,
          effort: float = CUT_EFFORT):
    """`result` (a `SearchResult` for `microbatches`) with the module text's solve applied (on
    `effort`): its schedule replaced by a shorter one found (the slots only: the stored repetend
    stays for other N), and its stated bound and verdict raised by what the solve proved.
    `bound`: the makespan bound known so far (`bounds.makespan_bound` beside this schedule)."""
    from dataclasses import replace

    from tessel_dsl.search.compact import compact
    from tessel_dsl.search.notes import note
    from tessel_dsl.validate import validate

    sched, info = result.schedule, result.info
    span = sched.makespan(spec)
    if span <= bound:
        return result  # at the bound already (or a solve before settled it): nothing to win
    answer = held_cuts(spec, microbatches, span, time_limit=time_limit, effort=effort, hint=sched)
    if answer is None:
        return result
    notes = info.notes
    if answer.schedule is not None and answer.schedule.makespan(spec) < span:
        # (its order is not the repetend's: the repetend stays for other N only, as in `finish.py`)
        better = replace(sched, slots=compact(spec, answer.schedule.slots), repetend_start=None)
        validate(spec, better)
        notes += (note("held-cuts", n=microbatches, before=span, after=better.makespan(spec),
                       optimal=better.makespan(spec) <= answer.bound),)
        sched, span = better, better.makespan(spec)
    elif span <= answer.bound:
        notes += (note("held-cuts-proof", n=microbatches),)
    bound = max(info.makespan_bound, answer.bound)
    # At the bound the makespan is optimal for this N; `proven` also asks for the period's proof
    # (the driver's rule), which a plan with no repetend has nothing to prove for.
    settled = span <= bound and (info.period_proven or sched.repetend is None)
    info = replace(info, notes=notes, makespan_bound=bound, proven=info.proven or settled)
    return replace(result, schedule=sched, info=info)
