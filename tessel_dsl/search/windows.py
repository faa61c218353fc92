"""A schedule made shorter a window at a time: each stretch of it re-solved with the rest held.

The whole-schedule solves (`heldcuts.py`, and `refine.polish` with an effort) see every block
instance at once; where memory binds, N is 24 to 64 and the devices 8 to 32, they are given a
small budget and often stop where they began. Re-solving one stretch of time at a time is much
cheaper and still moves what a local change can: the instances that start in a window
``[t0, t1)`` are free; those that start before ``t0`` stay where they are; those that start at or
after ``t1`` may move but keep their order on each device. Everything else is the TO model
(`optimal.py`): every dependency with its lag, one block at a time per device, each device's
memory as a running sum, each block's instances in micro-batch order (the schedule is relabelled
so first, which keeps it valid). The current schedule is a solution, so the solver starts from it
and only a strictly shorter one is kept, checked again against the spec.

The windows are a fifth of the makespan wide and start every tenth, one sweep from the start to
the end; each solve has the same deterministic budget (`WINDOW_EFFORT`), so the result does not
depend on the machine. The search runs it last, where its plan is above the makespan bound and
memory binds (some device cannot hold all N micro-batches at once: elsewhere the end re-solves
and the whole-schedule model, TO without memory there, see to the plan, and the sweep cost the
test suite minutes for nothing):

- bench/specs/real/memchain.tsl (D = 8, N = 24): 1473 -> 1452 ms (the optimum is 1449);
- bench/specs/real/mshape8.tsl with `--set MEM=24`: 7440 -> 7393 ms.

(`python bench/search_real.py --only memchain:D=8 mshape8:MEM=24`.)

A window is solved only when at most `WINDOW_MAX_FREE` (instance, device) pairs start at or after
its beginning (the instances that may move). Above that, CP-SAT's one worker did not even rebuild
the schedule it was given within the window's budget: on an 8-GPU M-shape of 640 instances, a
Qwen-32B interleaved over 8 GPUs (1024) and the specs above, every window with 450 or more such
pairs ended with nothing, each at 1.5 to 4 s of CPU, and every gain came from windows with 105 to
313. Skipping them kept every result above and cut the sweep's CPU from 14-24 s to 3-9 s.

It does not prove anything: the pinned prefix and the fixed orders make each solve a
restriction, not a relaxation.
"""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot

WINDOW_EFFORT = 1.0  # deterministic solver budget of each window's solve
WINDOW_SHARE = 5  # a window is 1 / WINDOW_SHARE of the makespan wide ...
WINDOW_STEP_SHARE = 10  # ... and one starts every 1 / WINDOW_STEP_SHARE of it
WINDOW_MAX_FREE = 400  # a window is skipped when more (instance, device) pairs than this are not pinned
WINDOW_MAX_TASKS = 2500  # block instances: above this one window's model costs more than it wins


def shorten_by_windows(spec: Spec, schedule: Schedule, *, solver: str, left=lambda: None,
                       effort: float = WINDOW_EFFORT) -> Schedule | None:
    """A strictly shorter valid schedule found by the module's sweep, or None. `left()`: the
    seconds of the user's time limit still left (None: no limit); the sweep stops when it runs
    out, with the best schedule found by then."""
    from tessel_dsl.analysis import resident_memory
    from tessel_dsl.search.lags import lag
    from tessel_dsl.search.optimal import starts_in_order
    from tessel_dsl.search.solvers import Precedence, microbatch_order

    n = schedule.microbatches
    if solver != "cpsat" or len(schedule.slots) > WINDOW_MAX_TASKS:
        return None
    if all(n * held <= spec.capacity(d) for d, held in enumerate(resident_memory(spec))):
        return None  # no memory binds: the end re-solves and step 6 (TO without memory) see to it
    keys = [(b.name, mb) for mb in range(n) for b in spec.blocks]
    index = {k: i for i, k in enumerate(keys)}
    base = [Precedence(index[(e.src, mb)], index[(e.dst, mb)], lag(spec, e.src, e.dst))
            for mb in range(n) for e in spec.edges] + microbatch_order(index)
    start = starts_in_order(spec, schedule.slots)
    span = schedule.makespan(spec)
    best = None
    t0 = 0
    while t0 < span:
        limit = left()
        if limit is not None and limit <= 0.05:
            break
        movable = sum(len(spec.block(k[0]).devices) for k in keys if start[k] >= t0)
        found = None if movable > WINDOW_MAX_FREE else \
            _solve_window(spec, schedule, index, base, start, t0, span, limit, solver, effort)
        if found is not None:
            best, span, start = found, found.makespan(spec), starts_in_order(spec, found.slots)
        t0 += max(1, span // WINDOW_STEP_SHARE)
    return best


def _solve_window(spec: Spec, schedule: Schedule, index, base, start, t0: int, span: int, limit, solver: str,
                  effort: float) -> Schedule | None:
    """One window's solve (module text): a valid schedule shorter than `span`, or None. `index`:
    (block, micro-batch) -> its task number in `base`, the precedences of every micro-batch;
    `start`: the current schedule's starts, relabelled in micro-batch order."""
    from tessel_dsl.search.compact import compact
    from tessel_dsl.search.solvers import Precedence, Problem, Task, solve
    from tessel_dsl.validate import validate

    keys = list(index)
    tasks = tuple(Task(k, spec.block(k[0]).time, spec.block(k[0]).devices, spec.block(k[0]).memory,
                       fixed=start[k] if start[k] < t0 else None) for k in keys)
    prec = list(base)
    t1 = t0 + max(1, span // WINDOW_SHARE)
    for d in range(spec.devices):
        late = sorted((start[k], index[k]) for k in keys if start[k] >= t1 and d in spec.block(k[0]).devices)
        prec += [Precedence(a, b) for (_, a), (_, b) in zip(late, late[1:])]
    problem = Problem(tasks, tuple(prec), spec.devices, capacity=spec.capacities, horizon=span,
                      hints=tuple(start[k] for k in keys))
    sol = solve(problem, "makespan", limit, solver=solver, effort=effort)
    if not sol.ok or sol.objective is None or sol.objective >= span:
        return None
    slots = compact(spec, [Slot(t, k[0], k[1]) for k, t in zip(keys, sol.starts)])
    found = replace(schedule, slots=tuple(slots), repetend_start=None)
    validate(spec, found)
    return found if found.makespan(spec) < span else None


def adopt_windows(spec: Spec, result, *, solver: str, clock, effort: float = 0.0):
    """`result` (a `SearchResult`) with its schedule replaced by the sweep's, when that is shorter
    (the slots only: the stored repetend stays for other N, as in `heldcuts.adopt`), and a note.
    A positive `effort` (the user's `--effort`) sweeps once more from the result, each window on
    `WINDOW_EFFORT + effort` units: never longer than the first sweep alone."""
    from tessel_dsl.search.notes import note

    sched, info = result.schedule, result.info
    before = sched.makespan(spec)
    if before <= info.makespan_bound:
        return result
    better = shorten_by_windows(spec, sched, solver=solver, left=clock.left)
    if effort > 0 and (better or sched).makespan(spec) > info.makespan_bound:
        better = shorten_by_windows(spec, better or sched, solver=solver, left=clock.left,
                                    effort=WINDOW_EFFORT + effort) or better
    if better is None:
        return result
    after = better.makespan(spec)
    notes = info.notes + (note("windows", n=sched.microbatches, before=before * clock.unit, after=after * clock.unit),)
    settled = after <= info.makespan_bound and (info.period_proven or better.repetend is None)
    return replace(result, schedule=better, info=replace(info, notes=notes, proven=info.proven or settled))
