"""The repetend as one cyclic (modulo) scheduling model per period, offsets included.

Instead of enumerating offset assignments and solving each, the offsets ``r_i`` become integer
variables of a single model at a fixed period ``P``:

- dependencies across instances: ``s_j + P * (r_i - r_j) >= s_i + t_i`` and ``r_i >= r_j``
  (Property 2), for every edge ``i -> j``;
- each device's blocks sit in one window of length ``P`` (so instance ``k + 1`` never overlaps
  instance ``k``) and never overlap each other;
- memory at steady state: a device enters the repetend holding ``sum_i m_i * r_i`` (the warmup)
  and the running sum in start order stays within ``M``;
- ``min r = 0`` removes shifted copies.

It minimises the time one micro-batch spends in the periodic schedule,
``max(s_i + t_i - P r_i) - min(s_i - P r_i)`` (which decides warmup plus cooldown length), then
``N_R``. The driver tries ``P = lower bound, lower bound + 1, ...``: the first feasible period is the
optimum over every ``N_R`` up to the in-flight limit at once.

Three additions keep the model fast at 8 devices without cutting off solutions:

- **transitive dependencies**: for every pair ``i ->* j`` the longest path length ``L_ij``
  gives ``s_j + P (r_i - r_j) >= s_i + L_ij`` (implied, but propagates far better);
- **average memory**: with ``sigma_i = s_i - P r_i`` (block ``i`` of micro-batch 0 in the
  unrolled schedule) one micro-batch holds ``-sum_i m_i sigma_i`` memory-time units on a device,
  so the steady state's average level is that over ``P``, and the peak is at least the average:
  ``-sum_i m_i sigma_i <= M P``. For a device with one allocation and its release this is exact;
- **a common cut**: when some block runs on every device, no block of any device can straddle
  its start, so every device's window can start there (``a_d = s_E = 0``) without losing a
  periodic schedule; this is exact and removes most of the symmetry. Other specs keep free
  windows with the earliest one at 0.

Feasibility is monotone in the period (a repetend that works at ``P`` works unchanged at
``P + 1``: windows stretch, dependencies only gain slack), which the driver uses.
"""
from __future__ import annotations

import time

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Slot


def _pairs(spec: Spec) -> list[tuple[int, int]]:
    blocks = spec.blocks
    return [(i, j) for i in range(len(blocks)) for j in range(i + 1, len(blocks))
            if set(blocks[i].devices) & set(blocks[j].devices)]


def _result(spec: Spec, period: int, starts: list[int], offsets: list[int]) -> Repetend:
    base = min(starts)
    slots = tuple(sorted(Slot(s - base, b.name, r) for b, s, r in zip(spec.blocks, starts, offsets)))
    return Repetend(max(offsets) + 1, period, slots)


POLISH_EFFORT = 0.1  # deterministic budget for shortening the micro-batch latency at a settled period
# Above this many blocks the feasibility solve skips CP-SAT's presolve: on the transitive rows of
# a 128-block model it took 9 of the 9.3 s of CPU of a solve its deterministic time put at 0.04
# (llama3_405b_interleaved32 of the zoo, P=204, infeasible either way), and no budget bounds it.
PRESOLVE_MAX_BLOCKS = 64
# Each period is first asked only whether it is infeasible, with CP-SAT's LP relaxation at this
# level (more cuts); the feasibility solve at the default level runs, as before, only when that
# does not settle it. At the default level, trying the LP's solutions took 53 s of CPU for one
# unit of deterministic time on a Qwen2.5-14B interleaved over 8 GPUs at P=430, which level 2
# proves infeasible in 2.7 s. Level 2 alone finds other repetends at feasible periods, some of
# them worse (bench/results/search.md), so it only rules out, on at most `INFEASIBLE_EFFORT` of
# deterministic time (level 2 has slow probes of its own: 12.7 s of CPU for one unit on
# bench/specs/real/llama8b_interleaved8_mem.tsl at P=730).
INFEASIBLE_LINEARIZATION = 2
INFEASIBLE_EFFORT = 1.0


def cut_block(spec: Spec) -> int | None:
    """Index of a block that runs on every device (its start is a common cut), or None."""
    return next((i for i, b in enumerate(spec.blocks) if len(set(b.devices)) == spec.devices), None)


def _closure(spec: Spec) -> list[tuple[int, int, int]]:
    """(i, j, longest path from the start of i to the start of j) for every j reachable from i."""
    from tessel_dsl.search.repetend import Shape

    index = {b.name: i for i, b in enumerate(spec.blocks)}
    return [(index[a], index[b], length) for a, row in Shape.of(spec).longest.items() for b, length in row.items()]


def _cpsat_memory_rows(m, spec: Spec, period: int, s: list, r: list, before: dict) -> None:
    """The memory rows of the CP-SAT model, per device that allocates or frees anything.

    A device enters the repetend holding ``sum_i m_i r_i`` (what earlier micro-batches keep there);
    the running sum peaks right after an allocation, so one row per allocating block bounds the
    entry level plus everything started before it plus its own allocation; and, when the device's
    memory balances per micro-batch, the average level over one period (see the module notes).
    `before[(j, i)]` is the literal "block j starts before block i".
    """
    blocks = spec.blocks
    for d in range(spec.devices):
        on = [i for i, b in enumerate(blocks) if d in b.devices]
        if not any(blocks[i].memory for i in on):
            continue
        entry = sum(blocks[i].memory * r[i] for i in on)
        m.add(entry <= spec.capacity(d))
        if sum(blocks[i].memory for i in on) == 0:  # the average is only defined when nothing leaks
            m.add(sum(-blocks[i].memory * (s[i] - period * r[i]) for i in on if blocks[i].memory)
                  <= spec.capacity(d) * period)
        for i in on:
            if blocks[i].memory > 0:
                # The running sum peaks right after an allocation.
                m.add(entry + blocks[i].memory
                      + sum(blocks[j].memory * before[(j, i)] for j in on if j != i and blocks[j].memory)
                      <= spec.capacity(d))


def _z3_memory_rows(z3, spec: Spec, period: int, s: list, r: list) -> list:
    """The same memory rows as `_cpsat_memory_rows`, as Z3 constraints."""
    blocks = spec.blocks
    cons = []
    for d in range(spec.devices):
        on = [i for i, b in enumerate(blocks) if d in b.devices and b.memory]
        if not on:
            continue
        entry = z3.Sum([blocks[i].memory * r[i] for i in on])
        cons.append(entry <= spec.capacity(d))
        if sum(blocks[i].memory for i in on) == 0:
            cons.append(z3.Sum([-blocks[i].memory * (s[i] - period * r[i]) for i in on]) <= spec.capacity(d) * period)
        for i in on:
            if blocks[i].memory > 0:
                prior = [z3.If(s[j] < s[i], blocks[j].memory, 0) for j in on if j != i]
                cons.append(entry + blocks[i].memory + (z3.Sum(prior) if prior else 0) <= spec.capacity(d))
    return cons


def _cpsat_model(spec: Spec, period: int, max_nr: int, objective: bool):
    from tessel_dsl.search.solvers.cpsat_module import cp_model as _cp_model

    cp_model = _cp_model()

    m = cp_model.CpModel()
    blocks = spec.blocks
    cut = cut_block(spec)
    span = (max_nr + 1) * period + sum(b.time for b in blocks)
    s = [m.new_int_var(0, period - b.time if cut is not None else span, f"s_{b.name}") for b in blocks]
    r = [m.new_int_var(0, max_nr - 1, f"r_{b.name}") for b in blocks]
    iv = [m.new_fixed_size_interval_var(s[i], b.time, f"iv_{b.name}") for i, b in enumerate(blocks)]
    for i, j, length in _closure(spec):
        m.add(s[j] + period * (r[i] - r[j]) >= s[i] + length)
        m.add(r[i] >= r[j])
    rmin = m.new_int_var(0, 0, "rmin")
    m.add_min_equality(rmin, r)
    if cut is not None:
        m.add(s[cut] == 0)
    windows = []
    for d in range(spec.devices):
        on = [i for i, b in enumerate(blocks) if d in b.devices]
        if not on:
            continue
        if cut is None:  # with a cut every window is [0, P): the domains of s say so already
            a = m.new_int_var(0, span, f"win{d}")
            windows.append(a)
            for i in on:
                m.add(s[i] >= a)
                m.add(s[i] + blocks[i].time <= a + period)
        m.add_no_overlap([iv[i] for i in on])
    if windows:
        m.add_min_equality(m.new_int_var(0, 0, "wmin"), windows)
    before: dict[tuple[int, int], object] = {}
    for i, j in _pairs(spec):
        b = m.new_bool_var(f"o_{i}_{j}")
        m.add(s[i] + blocks[i].time <= s[j]).only_enforce_if(b)
        m.add(s[j] + blocks[j].time <= s[i]).only_enforce_if(~b)
        before[(i, j)], before[(j, i)] = b, ~b
    _cpsat_memory_rows(m, spec, period, s, r, before)
    if objective:
        lo = m.new_int_var(-max_nr * period - span, span, "lo")
        hi = m.new_int_var(-max_nr * period - span, 2 * span, "hi")
        m.add_min_equality(lo, [s[i] - period * r[i] for i in range(len(blocks))])
        m.add_max_equality(hi, [s[i] + b.time - period * r[i] for i, b in enumerate(blocks)])
        nr = m.new_int_var(0, max_nr - 1, "maxr")
        m.add_max_equality(nr, r)
        m.minimize((hi - lo) * max_nr + nr)
    return m, s, r


def _charge(spent: list[float] | None, effort: float) -> None:
    if spent is not None:
        spent[0] += effort


def solve_period_cpsat(spec: Spec, period: int, max_nr: int, time_limit: float | None,
                       effort: float | None = None, cuts: list[str] | None = None,
                       spent: list[float] | None = None) -> tuple[str, Repetend | None]:
    """CP-SAT at `period`: (status, repetend), status optimal (period feasible), infeasible or unknown.

    First any solution (is the period feasible?) within the deterministic budget `effort`, then a
    deterministic, budgeted improvement of the micro-batch latency starting from it. `time_limit`
    (wall clock) applies only when the user set one. `spent[0]` (if given) grows by the
    deterministic time both solves used.
    """
    from tessel_dsl.search.solvers.cpsat_module import cp_model as _cp_model

    cp_model = _cp_model()

    from tessel_dsl.search.solvers.cpsat import configure, run_model

    deadline = None if time_limit is None else time.monotonic() + time_limit
    m, s, r = _cpsat_model(spec, period, max_nr, objective=False)
    presolve = len(spec.blocks) <= PRESOLVE_MAX_BLOCKS
    # first only whether the period is infeasible, with more LP cuts (`INFEASIBLE_LINEARIZATION`)
    first = INFEASIBLE_EFFORT if effort is None else min(effort, INFEASIBLE_EFFORT)
    found, solver = run_model(m, effort=first, time_limit=time_limit, presolve=presolve,
                              linearization=INFEASIBLE_LINEARIZATION)
    _charge(spent, solver.deterministic_time)
    if found == "infeasible":
        return found, None
    found, solver = run_model(m, effort=effort, time_limit=time_limit, presolve=presolve)
    _charge(spent, solver.deterministic_time)
    if found != "found":
        return found, None
    first_s, first_r = [solver.value(x) for x in s], [solver.value(x) for x in r]
    m2, s2, r2 = _cpsat_model(spec, period, max_nr, objective=True)
    for var, val in zip(s2 + r2, first_s + first_r):
        m2.add_hint(var, val)
    polish = cp_model.CpSolver()
    configure(polish.parameters, effort=POLISH_EFFORT,
              time_limit=None if deadline is None else max(0.01, deadline - time.monotonic()))
    polish.parameters.cp_model_presolve = len(spec.blocks) <= PRESOLVE_MAX_BLOCKS
    st = polish.solve(m2)
    _charge(spent, polish.deterministic_time)
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        first_s, first_r = [polish.value(x) for x in s2], [polish.value(x) for x in r2]
    if st != cp_model.OPTIMAL and cuts is not None:
        cuts.append(f"the micro-batch latency of the repetend at P={period}")
    return "optimal", _result(spec, period, first_s, first_r)


def solve_period_z3(spec: Spec, period: int, max_nr: int, time_limit: float | None,
                    effort: float | None = None, cuts: list[str] | None = None) -> tuple[str, Repetend | None]:
    """The same model in Z3 (feasibility within `effort`, then bisection on the objective)."""
    from tessel_dsl.search.solvers.z3 import RLIMIT_PER_EFFORT, Fresh

    z3 = Fresh()

    deadline = None if time_limit is None else time.monotonic() + time_limit
    blocks = spec.blocks
    s = [z3.Int(f"s_{b.name}") for b in blocks]
    r = [z3.Int(f"r_{b.name}") for b in blocks]
    cons = []
    for i in range(len(blocks)):
        cons += [s[i] >= 0, r[i] >= 0, r[i] <= max_nr - 1]
    for i, j, length in _closure(spec):
        cons += [s[j] + period * (r[i] - r[j]) >= s[i] + length, r[i] >= r[j]]
    cons.append(z3.Or(*[x == 0 for x in r]))
    for d in range(spec.devices):
        on = [i for i, b in enumerate(blocks) if d in b.devices]
        if on:
            a = z3.Int(f"win{d}")
            for i in on:
                cons += [s[i] >= a, s[i] + blocks[i].time <= a + period]
    for i, j in _pairs(spec):
        cons.append(z3.Or(s[i] + blocks[i].time <= s[j], s[j] + blocks[j].time <= s[i]))
    cons += _z3_memory_rows(z3, spec, period, s, r)
    lo, hi, nr, obj = z3.Int("lo"), z3.Int("hi"), z3.Int("maxr"), z3.Int("obj")
    for i, b in enumerate(blocks):
        cons += [lo <= s[i] - period * r[i], hi >= s[i] + b.time - period * r[i], nr >= r[i]]
    cons.append(obj == (hi - lo) * max_nr + nr)
    solver = z3.Solver()
    solver.add(*cons)
    if effort is not None:
        solver.set("rlimit", int(effort * RLIMIT_PER_EFFORT))

    def check() -> object:
        if deadline is not None:
            solver.set("timeout", max(1, int((deadline - time.monotonic()) * 1000)))
        return solver.check()

    res = check()
    if res == z3.unsat:
        return "infeasible", None
    if res != z3.sat:
        return "unknown", None

    def grab():
        mdl = solver.model()
        val = lambda x: mdl.eval(x, model_completion=True).as_long()  # noqa: E731
        return val(obj), _result(spec, period, [val(x) for x in s], [val(x) for x in r])

    best_obj, best = grab()
    low = 0
    status = "optimal"  # the period is settled; the rest only shortens the latency, within a budget
    solver.set("rlimit", int(POLISH_EFFORT * RLIMIT_PER_EFFORT))
    while low < best_obj:
        mid = (low + best_obj) // 2
        solver.push()
        solver.add(obj <= mid)
        res = check()
        if res == z3.sat:
            best_obj, best = grab()
        elif res == z3.unsat:
            low = mid + 1
        else:
            solver.pop()
            if cuts is not None:
                cuts.append(f"the micro-batch latency of the repetend at P={period}")
            break
        solver.pop()
    return status, best


def solve_period(spec: Spec, period: int, max_nr: int, solver: str, time_limit: float | None,
                 effort: float | None = None, cuts: list[str] | None = None,
                 spent: list[float] | None = None) -> tuple[str, Repetend | None]:
    """Dispatch to the named backend; a budget cutting the latency polish is added to `cuts`.
    `spent[0]` grows by the budget used (CP-SAT: its deterministic time; Z3: the whole `effort`
    and polish budget, an upper bound)."""
    if solver == "z3":
        _charge(spent, (effort or 0.0) + POLISH_EFFORT)
        return solve_period_z3(spec, period, max_nr, time_limit, effort, cuts)
    return solve_period_cpsat(spec, period, max_nr, time_limit, effort, cuts, spent)
