"""A makespan lower bound from one memory-bound device alone, the rest of the pipeline as delays.

Keep device ``d``'s blocks and drop every other device's capacity: a block elsewhere then costs
only its place in a dependency chain. What is left is a one-machine problem: ``N`` instances of
each block ``x`` on ``d``, none starting before ``head(x)`` (the longest chain before it, lags
included), each followed by at least ``tail(x)``; within a micro-batch, ``y`` starts at least the
longest chain from the start of ``x`` to the start of ``y`` after ``x`` (through any blocks,
lags included); one instance at a time; and ``d``'s memory as a running sum over starts, never
above ``capacity(d)``. Every schedule the search keeps is a schedule of this problem with the
same makespan or longer, so the shortest makespan of the problem is a lower bound.

**Micro-batches in order.** The micro-batches are alike, so the instances of each block may be
taken to start in micro-batch order: sort each block's starts over the micro-batches and give
the i-th smallest to micro-batch ``i``. Each within-micro-batch constraint ``s_y >= s_x + c``
still holds (the i-th smallest of the ``s_y`` is at least the i-th smallest of the ``s_x + c``),
the machine runs the same intervals, and the running sum of memory depends only on how many
instances of each block have started by each time. So ``s_x(i+1) >= s_x(i) + t_x`` loses
nothing. With the starts in order, the holding argument of `membound.py` (``k`` micro-batches
hold at least ``need`` from the start of ``a`` to the end of ``r``, so the ``(i+k)``-th ``a`` starts
no earlier than the ``i``-th ``r`` ends) adds ``s_a(i+k) >= s_r(i) + t_r``, which also loses nothing
and lets CP-SAT prove much faster.

**Why it is tighter.** The analytic bounds count how long and how much memory a micro-batch holds
and that frees and admissions take turns, but not every block the device must run between two
frees. On `bench/specs/real/zerobubble8.tsl` with 12 GB (four micro-batches in flight on device
0) and N = 8 the optimum is 2104 (the time-optimal solve proves it): micro-batch 0's input
gradient I0 can start at 744; from then on device 0 runs I, W and F in turn, 142 ms a round,
because each new forward needs the memory a W frees, so the 8th forward starts at 744 + 4 x 142
- 47 = 1265 and its own chain back to W0 ends at 2104. The paced bound counted 91 ms a round (F
and W only) and gave 1951; this problem is 2104.

**Memory, two ways.** The cuts alone are a relaxation too (they only drop the running sum), and
where the device's memory comes from one allocating block and one freeing block of the same
size they *are* the running sum: with the starts in order, the device holds ``m`` times the
number of ``a`` started less the number of ``r`` started, so staying within ``k = floor(C / m)``
is ``s_a(i+k) >= s_r(i)``, and the cut's ``+ t_r`` follows because ``r`` occupies the device. CP-SAT
settles that model in a tenth of a second at several hundred instances (the zoo's 405B chain
over 32 devices, N = 64: 0.03 s), where it proves nothing in the same budget with the running
sum stated as a reservoir. So every device tried gets the cuts-only problem (up to
`RELAX_CUTS_MAX_INSTANCES` block instances), and a device with other memory (two chunks of a
V, an embedding beside a stage) also gets the problem with the reservoir, when it has at most
`RELAX_MAX_INSTANCES` instances; the larger proven bound is kept.

**Solving it.** CP-SAT on a deterministic budget (`RELAX_EFFORT` per solve, one worker, fixed
seed), and the bound it *proves* is used, optimal or not, so a budget that runs out only weakens
the bound. Only devices where memory binds are tried (a holding admits fewer than N micro-batches
at once): elsewhere the one-machine problem is close to the per-device work bound that costs
nothing; and of those only the `RELAX_DEVICES` whose analytic memory bounds (`membound.py`) are
the largest, which on the cases above are the devices where this problem is the largest too
(device 0 of the zero-bubble chain; device 7, the V's turn, of `specs/zerobubble.tsl` with
C = 2, D = 8, memory 8 and N = 8: 102, the time-optimal makespan, where the analytic bound is
82). Any set of devices gives a valid bound; fewer only cost less CPU. With the reservoir,
CP-SAT proves little beyond about 100 instances (the same V at N = 32, 192 instances a device:
nothing above the analytic bound in 10 units of effort). `bounds.makespan_bound` asks for this
bound only when a schedule in hand is above the others.

**Several devices at once.** The same problem over a set of devices (each with its own
one-at-a-time and its holdings' cuts, the others still delays) is a relaxation too, and a
tighter one: it sees how a micro-batch's forward on one device waits for another's backward
on the next, which no device alone shows. The whole pipeline is the exact problem, which CP-SAT
settles slowly; sets of a few devices it settles in about a second. On a memory-bound 8-stage
chain (`bench/specs/real/qwen32b_chain8_mem.tsl`, 4 micro-batches in flight on device 0, 3 on
device 7; plan 19023) device 0 alone gives 17871 and the analytic bounds 18111, while devices
{0, 1, 2, 7} give 18516 and {0, 1, 2, 3, 5, 6, 7} 18852 (on a larger budget). Which devices
matter: the ends of such chains, whose micro-batches wait longest. So the sets grow one device at
a time in a fixed order: the memory-bound devices, tightest first (fewest micro-batches in flight,
then the largest analytic memory bound), then the others by index; each set is solved on what is
left of `RELAX_SET_EFFORT`, and the growth stops at the first set not solved to optimality within
it (a larger one would be harder still) or past `RELAX_SET_MAX_INSTANCES` block instances. The
largest proven bound of any set or single device is the bound.

**The first pair with its running sums.** The sets state memory by the cuts alone. Where a
device's cuts are not its running sum (split backward frees a forward's memory in two steps, an
embedding holds beside a stage), the first set, two devices, is also solved with one device's
running sum as a reservoir, once for each such device of the two, on `RELAX_EFFORT` each and
within `RELAX_MAX_INSTANCES` instances of that device. On `bench/specs/real/phi3_medium_zb8.tsl`
at N = 8 device 0 alone with its running sum gives 3171 and devices 0 and 7 with the cuts 3126;
the two with device 0's running sum give 3224, the makespan the time-optimal solve proves
optimal, in 0.15 units. At N = 12 (60 instances on device 0) the same solve proves nothing above
the analytic bound within its budget: it is there for few micro-batches.
"""
from __future__ import annotations

import math

from tessel_dsl.analysis import chains
from tessel_dsl.ir import Spec
from tessel_dsl.search.lags import edge_lags

RELAX_EFFORT = 0.3         # CP-SAT deterministic time per device
RELAX_MAX_INSTANCES = 100  # block instances per device beyond which memory is stated by the cuts alone
RELAX_CUTS_MAX_INSTANCES = 400  # ... and beyond which the device is not tried
RELAX_DEVICES = 2          # how many devices are tried: those with the largest memory bounds
RELAX_SET_EFFORT = 2.0     # CP-SAT deterministic time for the growing sets of devices, in all
RELAX_SET_MAX_INSTANCES = 1500  # block instances of a set beyond which it is not solved


def device_relaxation_bound(spec: Spec, microbatches: int) -> int:
    """The largest proven optimum (or proven bound) of the module text's one-device problem over
    the devices where memory binds; 0 when none is tried."""
    return device_relaxation(spec, microbatches)[0]


def device_relaxation(spec: Spec, microbatches: int) -> tuple[int, tuple[int, ...]]:
    """(`device_relaxation_bound`, the devices whose problem gives it: one, several, or none)."""
    from tessel_dsl.search.membound import holdings, paced_bound

    n = microbatches
    if n < 2 or any(b.time <= 0 for b in spec.blocks):
        return 0, ()  # zero-time blocks may share a start; the running sum over starts needs them apart
    binding = [h for h in holdings(spec) if h.limit < n]
    pressed: dict[int, int] = {}  # device -> its largest analytic memory bound
    for h in binding:
        if len(spec.blocks_on(h.device)) * n <= RELAX_CUTS_MAX_INSTANCES:
            pressed[h.device] = max(pressed.get(h.device, 0), h.makespan(n), paced_bound(spec, h, n))
    best, where = 0, ()
    for d in sorted(pressed, key=lambda d: (-pressed[d], d))[:RELAX_DEVICES]:
        held = [h for h in binding if h.device == d]
        got = _solve_device(spec, n, d, held, reservoir=False)
        if _wants_reservoir(spec, n, d):
            got = max(got, _solve_device(spec, n, d, held, reservoir=True))
        if got > best:
            best, where = got, (d,)
    for devices, got in _growing_sets(spec, n, binding):
        if got > best:
            best, where = got, devices
    return best, where


def _growing_sets(spec: Spec, n: int, binding):
    """(devices, proven bound) for each set of two or more devices the module text grows."""
    from tessel_dsl.search.membound import paced_bound

    if not binding:
        return
    tightest: dict[int, tuple[int, int]] = {}  # device -> (fewest in flight, -largest memory bound)
    for h in binding:
        key = (h.limit, -max(h.makespan(n), paced_bound(spec, h, n)))
        tightest[h.device] = min(tightest.get(h.device, key), key)
    order = sorted(tightest, key=lambda d: (tightest[d], d)) + [d for d in range(spec.devices) if d not in tightest]
    left = RELAX_SET_EFFORT
    for k in range(2, len(order) + 1):
        devices = tuple(sorted(order[:k]))
        if len({b.name for d in devices for b in spec.blocks_on(d)}) * n > RELAX_SET_MAX_INSTANCES or left <= 0:
            return
        held = [h for h in binding if h.device in devices]
        got, optimal, spent = _solve(spec, n, devices, held, reservoir=(), effort=left)
        left -= spent
        yield devices, got
        if k == 2:
            # The first pair also with the running sum of its devices whose cuts are not exact
            # (module text, "The first pair with its running sums"), on its own small budget.
            for d in devices:
                if _wants_reservoir(spec, n, d):
                    yield devices, _solve(spec, n, devices, held, reservoir=(d,), effort=RELAX_EFFORT)[0]
        if not optimal:
            return


def _wants_reservoir(spec: Spec, n: int, d: int) -> bool:
    """Is device `d`'s running sum worth stating as a reservoir: the holdings' cuts do not state
    it exactly (more than one allocating block and the block that frees it all), and `d` has at
    most `RELAX_MAX_INSTANCES` block instances?"""
    sizes = sorted(b.memory for b in spec.blocks_on(d) if b.memory)
    paired = len(sizes) == 2 and sizes[0] == -sizes[1]  # the cuts state the running sum exactly
    return not paired and len(spec.blocks_on(d)) * n <= RELAX_MAX_INSTANCES


def _solve_device(spec: Spec, n: int, d: int, held, *, reservoir: bool) -> int:
    """The proven bound of device `d`'s problem: memory as the holdings' cuts, and with
    `reservoir` also as the running sum itself."""
    return _solve(spec, n, (d,), held, reservoir=(d,) if reservoir else (), effort=RELAX_EFFORT)[0]


def _solve(spec: Spec, n: int, devices: tuple[int, ...], held, *, reservoir: tuple[int, ...], effort: float
           ) -> tuple[int, bool, float]:
    """(the proven bound of the problem over `devices`, whether it was solved to optimality, the
    deterministic time it took). Memory is the holdings' cuts (`held`) and, on each device of
    `reservoir`, also the running sum itself."""
    from tessel_dsl.search.membound import start_distances
    from tessel_dsl.search.solvers.cpsat import configure
    from tessel_dsl.search.solvers.cpsat_module import cp_model

    cp = cp_model()
    time = {b.name: b.time for b in spec.blocks}
    lags = edge_lags(spec)
    head, tail = chains(spec, time, lags)
    on = sorted({b.name for d in devices for b in spec.blocks_on(d)})
    horizon = max(head.values()) + n * sum(time.values()) + max(tail.values())
    m = cp.CpModel()
    start = {(x, i): m.new_int_var(head[x], horizon, "") for x in on for i in range(n)}
    for d in devices:
        m.add_no_overlap([m.new_fixed_size_interval_var(start[b.name, i], b.time, "")
                          for b in spec.blocks_on(d) for i in range(n)])
    span = m.new_int_var(0, horizon, "")
    for x in on:
        reach = start_distances(spec, x, time, lags)
        for y in on:
            if y != x and y in reach:
                for i in range(n):
                    m.add(start[y, i] >= start[x, i] + reach[y])
        for i in range(n):
            m.add(span >= start[x, i] + time[x] + tail[x])
            if i + 1 < n:
                m.add(start[x, i + 1] >= start[x, i] + time[x])
    for h in held:
        for i in range(n - h.limit):
            m.add(start[h.alloc, i + h.limit] >= start[h.free, i] + time[h.free])
    for d in reservoir:
        mine = [b.name for b in spec.blocks_on(d) if b.memory]
        changes = [(start[x, i], spec.block(x).memory) for x in mine for i in range(n)]
        floor = -sum(abs(c) for _, c in changes) - 1
        m.add_reservoir_constraint([t for t, _ in changes], [c for _, c in changes], floor, spec.capacity(d))
    m.minimize(span)
    solver = cp.CpSolver()
    configure(solver.parameters, effort=effort)
    status = solver.solve(m)
    spent = solver.response_proto.deterministic_time
    if status == cp.INFEASIBLE or status == cp.MODEL_INVALID:
        return 0, False, spent  # no claim: a spec that can't fit is refused before any search
    return max(0, math.ceil(solver.best_objective_bound - 1e-6)), status == cp.OPTIMAL, spent

