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
depend on the machine.

**Where it runs.** The search runs it last, where its plan is above the makespan bound and
memory binds (some device cannot hold all N micro-batches at once) or some block runs on several
devices at once. Elsewhere the end re-solves and the whole-schedule model, TO without memory
there, see to the plan, and the sweep cost the test suite minutes for nothing:

- bench/specs/real/memchain.tsl (D = 8, N = 24): 1473 -> 1452 ms (the optimum is 1449);
- bench/specs/real/mshape8.tsl with `--set MEM=24`: 7440 -> 7393 ms.

(`python bench/search_real.py --only memchain:D=8 mshape8:MEM=24`.)

**Narrower windows.** A block on every device (an embedding split over all GPUs, an all-to-all)
counts once per device in a window, so on an NN-shape over 16 devices a fifth of the makespan
frees 600 or more (instance, device) pairs, above `WINDOW_MAX_FREE`, and no window was solved.
So a window ends early, at the first start that would take it past `WINDOW_MAX_FREE` pairs, and
the next one starts half its width later (at most a tenth of the makespan): on
bench/specs/real/ul2_nnshape16.tsl (N = 32) 3736 -> 3510 ms (bound 3242), with `MEM=20` 5252 ->
5152, nnshape16.tsl with `MEM=24` 2427 -> 2310, and, as memory does not bind there,
nnshape16.tsl itself 2005 -> 1963 (bound 1955) once such specs are swept too; 7 to 13 s more CPU
at D = 16, every other row of `python bench/search_real.py` the same plan.

A window is solved with the rest of the schedule free only when at most `WINDOW_MAX_FREE`
(instance, device) pairs start at or after its beginning (the instances that may move). Above
that, CP-SAT's one worker did not even rebuild the schedule it was given within the window's
budget: on an 8-GPU M-shape of 640 instances, a Qwen-32B interleaved over 8 GPUs (1024) and the
specs above, every window with 450 or more such pairs ended with nothing, each at 1.5 to 4 s of
CPU, and every gain came from windows with 105 to 313.

**A rigid tail** (`_solve_rigid`) lets those earlier windows move too: the instances that start
at or after ``t1`` keep their times relative to each other and all move by one amount ``delta``
(the model's one extra variable, a task on no device as long as the tail), so what the window
gains carries to the end. That stays valid when, on each device, everything not in the tail
ends before the tail's first instance there starts (moved by ``delta``) and every dependency
into the tail holds with ``delta``: the tail's own dependencies, order and memory sums are
those of the schedule (the same instances precede it on every device, so its running sums
start from the same level). Memory is stated there as what each micro-batch holds between its
changes (`solvers/holding.py`): as a plain running sum CP-SAT did not even rebuild the schedule
it was given within a window's budget on the interleaved spec below. Only the window's instances
are free, so a window costs about as much wherever it lies; instances that ended a window's
width before it are left out (their memory is the level the model starts from; on each device
they all started before anything left in the model). The rigid windows of one sweep share
`RIGID_WINDOWS` windows' budgets, twice that from `WIDE_DEVICES` devices on. With them `tessel search` (defaults, N = 32) gives
bench/specs/real/phi3_medium_zb8.tsl 11339 -> 10371 ms (the makespan bound is 9645),
llama70b_zb16_mem.tsl 17865 -> 17405, llama8b_interleaved8_mem.tsl 27709 -> 27280,
qwen14b_interleaved8_a100.tsl 17234 -> 16590, gemma2_9b_chain8_mem.tsl 13031 -> 12903, for at most
15 s more CPU (bench/results/search.md, "specs written afterwards").

It does not prove anything: the pinned prefix and the fixed orders (or the rigid tail) make each
solve a restriction, not a relaxation.
"""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot

WINDOW_EFFORT = 1.0  # deterministic solver budget of each window's solve
WINDOW_SHARE = 5  # a window is 1 / WINDOW_SHARE of the makespan wide ...
WINDOW_STEP_SHARE = 10  # ... and one starts every 1 / WINDOW_STEP_SHARE of it
WINDOW_MAX_FREE = 400  # above this many unpinned (instance, device) pairs a window keeps the rest rigid
# The rigid-tail solves of one sweep share this many windows' budgets: in a draft that also stated the
# free-tail solves' memory as held intervals, 6 gave 27048 and 16490 on the interleaved specs above
# (27178 and 16589 with 4) for 3 and 2 s more CPU, and 10 the same as 6.
RIGID_WINDOWS = 4
# ... and twice that from WIDE_DEVICES devices on, where the CPU a default search may take is four
# times larger (issue 27: 120 s at D = 16-32 against 30 s at D = 8) and the memory-bound NN-shapes
# still gain from more rigid windows (docs/search.md step 7).
WIDE_DEVICES = 16
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
    if (all(n * held <= spec.capacity(d) for d, held in enumerate(resident_memory(spec)))
            and not any(b.is_multi_device for b in spec.blocks)):
        # No memory binds and no block waits for several devices at once: the end re-solves and
        # step 6 (TO without memory) see to the plan (module text, "Where it runs").
        return None
    keys = [(b.name, mb) for mb in range(n) for b in spec.blocks]
    index = {k: i for i, k in enumerate(keys)}
    base = [Precedence(index[(e.src, mb)], index[(e.dst, mb)], lag(spec, e.src, e.dst))
            for mb in range(n) for e in spec.edges] + microbatch_order(index)
    start = starts_in_order(spec, schedule.slots)
    span = schedule.makespan(spec)
    best = None
    rigid = RIGID_WINDOWS * (2 if spec.devices >= WIDE_DEVICES else 1)
    spent = [0.0]  # deterministic time of the rigid-tail solves, within rigid * effort
    pairs = {k: len(spec.block(k[0]).devices) for k in keys}  # (instance, device) pairs of each instance
    t0 = 0
    while t0 < span:
        limit = left()
        if limit is not None and limit <= 0.05:
            break
        t1 = _window_end(start, pairs, t0, t0 + max(1, span // WINDOW_SHARE))
        movable = sum(pairs[k] for k in keys if start[k] >= t0)
        free = sum(pairs[k] for k in keys if t0 <= start[k] < t1)
        if movable <= WINDOW_MAX_FREE:
            found = _solve_window(spec, schedule, index, base, start, t0, t1, span, limit, solver, effort)
        elif free <= WINDOW_MAX_FREE and spent[0] < rigid * effort - 0.05:
            budget = min(effort, rigid * effort - spent[0])
            found = _solve_rigid(spec, schedule, start, t0, t1, span, limit, solver, budget, spent)
        else:
            found = None
        if found is not None:
            best, span, start = found, found.makespan(spec), starts_in_order(spec, found.slots)
        t0 += max(1, min(span // WINDOW_STEP_SHARE, (t1 - t0) // 2))
    return best


def _window_end(start, pairs, t0: int, t1: int) -> int:
    """`t1`, or earlier where the window would free more than `WINDOW_MAX_FREE` (instance, device)
    pairs: the first start at which the count would pass it (module text, "Narrower windows")."""
    free = 0
    for at, k in sorted((at, k) for k, at in start.items() if t0 <= at < t1):
        free += pairs[k]
        if free > WINDOW_MAX_FREE:
            return max(t0 + 1, at)
    return t1


def _solve_window(spec: Spec, schedule: Schedule, index, base, start, t0: int, t1: int, span: int, limit,
                  solver: str, effort: float) -> Schedule | None:
    """One window's solve (module text): a valid schedule shorter than `span`, or None. `index`:
    (block, micro-batch) -> its task number in `base`, the precedences of every micro-batch;
    `start`: the current schedule's starts, relabelled in micro-batch order."""
    from tessel_dsl.search.solvers import Precedence, Problem, Task, solve

    keys = list(index)
    tasks = tuple(Task(k, spec.block(k[0]).time, spec.block(k[0]).devices, spec.block(k[0]).memory,
                       fixed=start[k] if start[k] < t0 else None) for k in keys)
    prec = list(base)
    for d in range(spec.devices):
        late = sorted((start[k], index[k]) for k in keys if start[k] >= t1 and d in spec.block(k[0]).devices)
        prec += [Precedence(a, b) for (_, a), (_, b) in zip(late, late[1:])]
    problem = Problem(tasks, tuple(prec), spec.devices, capacity=spec.capacities, horizon=span,
                      hints=tuple(start[k] for k in keys))
    sol = solve(problem, "makespan", limit, solver=solver, effort=effort)
    if not sol.ok or sol.objective is None or sol.objective >= span:
        return None
    return _shorter(spec, schedule, [Slot(t, k[0], k[1]) for k, t in zip(keys, sol.starts)], span)


def _shorter(spec: Spec, schedule: Schedule, slots: list[Slot], span: int) -> Schedule | None:
    """`schedule` with these slots (compacted), checked again, when it is shorter than `span`."""
    from tessel_dsl.search.compact import compact
    from tessel_dsl.validate import validate

    found = replace(schedule, slots=tuple(compact(spec, slots)), repetend_start=None)
    validate(spec, found)
    return found if found.makespan(spec) < span else None


def _solve_rigid(spec: Spec, schedule: Schedule, start, t0: int, t1: int, span: int, limit, solver: str,
                 effort: float, spent: list[float]) -> Schedule | None:
    """One window's solve with the tail moved as one piece (module text, "A rigid tail"): a
    valid schedule shorter than `span`, or None. `start`: the schedule's starts, relabelled in
    micro-batch order; `spent[0]` grows by the solve's deterministic time."""
    from tessel_dsl.search.lags import lag
    from tessel_dsl.search.solvers import Precedence, Problem, Task, microbatch_order, solve

    n = schedule.microbatches
    keys = [(b.name, mb) for mb in range(n) for b in spec.blocks]
    time = {k: spec.block(k[0]).time for k in keys}
    tail = [k for k in keys if start[k] >= t1]
    if not tail:
        return None
    # Instances that ended a window's width before t0 are left out: their memory is the level
    # the rest starts from, and nothing in the model may start before that point.
    since = max(0, t0 - (t1 - t0))
    gone = {k for k in keys if start[k] + time[k] <= since}
    held = [k for k in keys if start[k] < t1 and k not in gone]
    initial = [0] * spec.devices
    for k in gone:
        for d in spec.block(k[0]).devices:
            initial[d] += spec.block(k[0]).memory
    index = {k: i for i, k in enumerate(held)}
    shift = len(held)  # the tail's task: it starts at t1 + delta and ends where the moved tail ends
    release = {k: since for k in held}
    first: dict[int, int] = {}  # each device's first tail instance
    for k in tail:
        for d in spec.block(k[0]).devices:
            first[d] = min(first.get(d, start[k]), start[k])
    prec, tail_release = [], 0
    for mb in range(n):
        for e in spec.edges:
            a, b, gap = (e.src, mb), (e.dst, mb), lag(spec, e.src, e.dst)
            if a in gone and b in index:
                release[b] = max(release[b], start[a] + time[a] + gap)
            elif a in gone and b not in gone:
                tail_release = max(tail_release, start[a] + time[a] + gap + t1 - start[b])
            elif a in index and b in index:
                prec.append(Precedence(index[a], index[b], gap))
            elif a in index:  # into the tail: b starts at start[b] + delta
                prec.append(Precedence(index[a], shift, gap + t1 - start[b]))
    tasks = [Task(k, time[k], spec.block(k[0]).devices, spec.block(k[0]).memory, release=release[k],
                  fixed=start[k] if start[k] < t0 else None, group=k[1]) for k in held]
    tasks.append(Task(("tail", n), max(start[k] + time[k] for k in tail) - t1, (), release=tail_release))
    for k in held:  # each device finishes the rest before its tail starts
        prec += [Precedence(index[k], shift, t1 - first[d]) for d in spec.block(k[0]).devices if d in first]
    prec += microbatch_order(index)  # each block's instances in micro-batch order (as in the TO model)
    problem = Problem(tuple(tasks), tuple(prec), spec.devices, capacity=spec.capacities, horizon=span,
                      initial_memory=tuple(initial), hints=tuple(start[k] for k in held) + (t1,))
    sol = solve(problem, "makespan", limit, solver=solver, effort=effort)
    spent[0] += effort if sol.deterministic is None else sol.deterministic
    if not sol.ok or sol.objective is None or sol.objective >= span:
        return None
    delta = sol.starts[shift] - t1
    slots = [Slot(t, k[0], k[1]) for k, t in zip(held, sol.starts)] + [Slot(start[k], k[0], k[1]) for k in gone]
    return _shorter(spec, schedule, slots + [Slot(start[k] + delta, k[0], k[1]) for k in tail], span)


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
