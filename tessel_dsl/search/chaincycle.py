"""Repetends holding every block k times on a memory-bound chain, from one small cyclic model.

The general cyclic model (`modulo.py`) run on a spec unrolled k times (`copies.py`) grows
quickly: on an 8-stage chain two copies give 32 blocks, each with a free window per device, and
a period it cannot settle costs about 15 s of CPU. A *device chain* (`devchain.py`: every block
on one device, the forward blocks one path visiting each device once, one source per
micro-batch; an embedding beside the first layers and a head beside the last ones, or split
backward, included) allows a much smaller exact model of the periodic steady state.

**The model** at period ``P`` for ``k`` copies: copy ``j`` (micro-batch ``k m + j`` of instance
``m``) runs block ``b`` at ``x[j][b] + m P``, with

- the dependencies within a micro-batch, ``x[j][b] >= x[j][a] + t_a + lag(a, b)`` for every edge
  ``a -> b`` (`lags.py`; an edge implied by a longer path is left out, being kept by it);
- no overlap modulo ``P`` on each device: every start is ``q P + r`` with ``0 <= r < P``, and
  the intervals ``[r, r + t)`` and ``[r + P, r + P + t)`` of all the device's blocks of all
  copies do not overlap (a block is never longer than ``P``, so this is exactly "no two blocks
  share a step modulo P");
- memory: each device's memory per micro-batch is a sum of holds (`devchain.py`): ``w`` units
  from the start of an allocating block ``a`` to the start of the block ``r`` that frees them,
  which is the validator's running sum (allocations and frees count from a block's start, and
  two blocks never start together on one device). A hold of length ``L = a P + l``
  (``0 <= l < P``) covers every step ``a`` times plus the ``l`` steps from its start modulo
  ``P``; so the memory held at any step is ``sum w a`` over the holds plus a cumulative of the
  intervals ``[r, r + l)`` and ``[r + P, r + P + l)`` with demand ``w``, whose load on
  ``[P, 2P)`` is exactly the wrapped one (elsewhere it counts less). It stays within the
  device's capacity. Weights and capacity are divided by the weights' common divisor (floored
  capacity): on a chain of one hold per device this counts micro-batches against
  ``floor(C_d / h_d)``.

Every periodic schedule of the chain with ``k`` micro-batches per period is a solution after
renaming (copies are interchangeable, so copy ``j``'s anchor, the source or the block
that starts an enclosing hold, is put at the ``j``-th residue; time starts from copy 0's) and moving within the horizon below, and every solution is one: the
model is exact. Its answers at ``P`` settle whether any repetend holding each block ``k`` times
has that period (the warmup and cooldown of a chain always exist: the periodic schedule cut to
the first ``N_R`` micro-batches, and removing whole micro-batches never adds memory since every
hold is non-negative). Feasibility is monotone in ``P``, so the period is found by bisection.

**Horizon.** Starts are bounded so the model stays small, without losing any schedule:

- when a hold ``a -> r`` encloses the micro-batch (every other block starts after ``a`` and no
  later than ``r`` in every schedule, or holds no memory and comes before ``a`` or after ``r``:
  an embedding and its backward beside an enclosing stage), a hold of ``(W + 1) P`` or more
  would alone exceed the capacity (``W``: the most whole periods its weight fits). A block
  without memory before ``a`` can move a period later while each edge out of it has ``P`` of
  slack, one after ``r`` a period earlier while each edge into it has: memory and residues stay
  as they were. So each ends within ``g = max(t_a + lag) + P - 1`` of a block nearer ``a``
  (``r``), and renaming puts ``a`` of copy ``j`` within ``[u g, u g + P)`` (``u`` blocks before
  ``a``) and every start of the copy from 0 to ``u g + (W + 2) P + v g`` (``v`` blocks after
  ``r``); on a chain of one stage per device ``a`` is the source and this is ``(W + 2) P``;
- otherwise take a periodic schedule and, for a time ``tau`` after the source's start, the set
  ``S`` of the copy's blocks starting at ``tau`` or later. It holds every block that depends on
  one of its blocks, so moving all of ``S`` one period earlier keeps the residues (no overlap
  changes), shortens the holds that end in ``S`` and lengthens none (a hold starting in ``S``
  ends in ``S``); it keeps every dependency if each edge into ``S`` has ``P`` or more of slack.
  Do so while possible (the starts' sum falls and the source, the anchor, never moves): then each ``tau``
  has an edge into ``S`` with less than ``P`` of slack, so consecutive starts of a copy are at
  most ``g`` apart. A block that starts after some hold's ``a`` and no
  later than its ``r`` in every schedule ends a gap lying inside that hold, and a hold is at
  most ``(W + 1) P - 1`` long. So the last start is within the sum, over holds, of the smaller of
  that and ``g`` per block counted to them, plus ``g`` per other block, of the source's.

**Blocks on every device** (the M- and NN-shapes' embeddings and heads, `devchain.py`). Such a
block's residue is one variable, and its two intervals join the no-overlap of every device: no
device runs anything else meanwhile, as the validator requires. Its memory, if any, is a hold on
each device. Nothing else above depends on where a block runs: moving one block, or the set
``S``, by a whole period keeps every residue, so it keeps every device's no-overlap whichever
devices the moved blocks are on, and the horizon holds as it is.

On `bench/specs/real/memchain.tsl` (D = 8) it settles every period of two copies in a few seconds
of CPU: 111 ms for two micro-batches, 55.5 each, where one copy needs 66 and the memory bound
says 47. On the memory-bound M-shape `bench/specs/m8_llama.tsl` (an embedding on all 8 devices)
two copies repeat every 104 ms, 52 each, where one copy needs 58; the periods from 92 to 103 are
not settled within the budget (the general model of the unrolled spec settled none of those
it tried either, at 12 to 15 s of CPU each: bench/results/search.md).
"""
from __future__ import annotations

from math import gcd

from tessel_dsl.analysis import reachable
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.compact import compact
from tessel_dsl.search.copies import SEP
from tessel_dsl.search.devchain import DeviceChain, Hold, device_chain
from tessel_dsl.search.lags import lag
from tessel_dsl.search.onecopy import chain_stage_blocks

CHAIN_PERIOD_EFFORT = 5.0  # deterministic CP-SAT budget of one period's solve (about seconds of one core)
CHAIN_WALK_EFFORT = 12.0   # ... and of the whole bisection, charged as used
# Device chains beyond one stage per device are modelled up to this many blocks over all copies:
# on the 32-stage 405B chain with embedding and head (136 blocks for two copies) no period was
# settled within the budget of 12 deterministic units, which took about 70 s of CPU (`tessel
# search` on it went from 18 to 86 s of CPU on a loaded machine, for the same plan).
DEVICE_CHAIN_MAX_BLOCKS = 100


def applies(spec: Spec, copies: int | None = None, device_chains: bool = True) -> bool:
    """Is `spec` a chain this model covers (a device chain, `devchain.py`)? With `copies`: and
    is its model for that many copies small enough to be worth a solve (`DEVICE_CHAIN_MAX_BLOCKS`;
    a chain of one stage per device is always tried)? Without `device_chains`, only chains of
    one stage per device count."""
    if chain_stage_blocks(spec) is not None:
        return True
    if not device_chains or device_chain(spec) is None:
        return False
    return copies is None or copies * len(spec.blocks) <= DEVICE_CHAIN_MAX_BLOCKS


def solve_chain_period(spec: Spec, copies: int, period: int, *, effort: float | None = CHAIN_PERIOD_EFFORT,
                       time_limit: float | None = None,
                       spent: list[float] | None = None) -> tuple[str, dict[str, int] | None]:
    """("feasible", flat starts) / ("infeasible", None) / ("unknown", None) for a periodic
    schedule of `copies` micro-batches every `period` (module text). The flat starts are keyed by
    the unrolled spec's block names (``F@j``: block ``F`` of copy ``j``)."""
    from tessel_dsl.search.solvers.cpsat import run_model
    from tessel_dsl.search.solvers.cpsat_module import cp_model as _cp_model

    cp_model = _cp_model()
    chain = device_chain(spec)
    if chain is None:
        raise ValueError("solve_chain_period needs a device chain (devchain.device_chain)")
    if any(b.time > period for b in spec.blocks):
        return "infeasible", None
    k, p = copies, period
    time = {b.name: b.time for b in spec.blocks}
    # Each device's holds in units of their common divisor: a chain of one hold per device
    # counts micro-batches (demand 1, capacity floor(C / h)).
    unit = {d: gcd(*(h.weight for h in chain.holds if h.device == d)) or 1 for d in chain.devices}
    limit = {d: spec.capacity(d) // unit[d] for d in chain.devices}
    anchor, anchor_at, horizon = _frame(spec, chain, p, limit, unit)
    m = cp_model.CpModel()
    x = [{n: m.new_int_var(0, horizon, f"x{j}_{i}") for i, n in enumerate(chain.forward)} for j in range(k)]
    for j, i, n in ((j, i, n) for j in range(k) for i, n in enumerate(chain.backward)):
        x[j][n] = m.new_int_var(0, horizon, f"y{j}_{i}")
    for j in range(k):
        for a, b in chain.edges:
            m.add(x[j][b] >= x[j][a] + time[a] + lag(spec, a, b))
        if j == 0:
            m.add(x[0][anchor] == anchor_at)
        else:
            m.add(x[j][anchor] >= x[j - 1][anchor])
            m.add(x[j][anchor] <= anchor_at + p - 1)

    def residue(value, name: str):
        q = m.new_int_var(0, horizon // p + 1, f"q_{name}")
        r = m.new_int_var(0, p - 1, f"r_{name}")
        m.add(value == p * q + r)
        return q, r

    names = chain.forward + chain.backward
    # One residue per block of a copy, shared by the devices it is on. The order in which they
    # are made steers a budgeted solve: with blocks on every device they are made copy by copy up
    # front, which settled shorter periods (two copies of bench/specs/real/nnshape8.tsl at 24 GB:
    # 216 against 222 ms; bench/specs/m8_llama.tsl's ends 1880 against 1904) than making them
    # device by device, the order single-device chains keep (their plans stay as they were).
    rests: dict[tuple[int, str], object] = {}

    def rest(j: int, n: str):
        if (j, n) not in rests:
            rests[(j, n)] = residue(x[j][n], f"{n}{SEP}{j}")[1]
        return rests[(j, n)]

    if any(spec.block(n).is_multi_device for n in names):
        for j in range(k):
            for n in names:
                rest(j, n)

    for d in chain.devices:
        on = [n for n in names if d in spec.block(n).devices]
        mine = [(h, h.weight // unit[d]) for h in chain.holds if h.device == d]
        blocks, holds, demands, wraps = [], [], [], []
        for j in range(k):
            for n in on:
                r = rest(j, n)
                blocks.append(m.new_fixed_size_interval_var(r, time[n], f"{n}{SEP}{j}"))
                blocks.append(m.new_fixed_size_interval_var(r + p, time[n], f"{n}{SEP}{j}+P"))
            for i, (h, w) in enumerate(mine):
                tag = f"{j}_{d}_{i}"
                length = m.new_int_var(0, horizon, f"hold{tag}")
                m.add(length == x[j][h.free] - x[j][h.alloc])
                whole, part = residue(length, f"hold{tag}")
                _, at = residue(x[j][h.alloc], f"at{tag}")
                for shift in (0, p):
                    start = m.new_int_var(0, 2 * p, f"hs{tag}_{shift}")
                    end = m.new_int_var(0, 3 * p, f"he{tag}_{shift}")
                    m.add(start == at + shift)
                    m.add(end == start + part)
                    holds.append(m.new_interval_var(start, part, end, f"h{tag}_{shift}"))
                    demands.append(w)
                wraps.append(whole if w == 1 else w * whole)
        m.add_no_overlap(blocks)
        if not mine:
            continue
        # Implied: the average held over a period, the holds' lengths times their weights over
        # P, is at most the peak (it propagates far earlier than the cumulative).
        m.add(sum(_weighted(w, x[j][h.free] - x[j][h.alloc]) for j in range(k) for h, w in mine) <= limit[d] * p)
        base = m.new_int_var(0, limit[d], f"whole_{d}")
        m.add(base == sum(wraps))
        holds.append(m.new_fixed_size_interval_var(0, 3 * p, f"base_{d}"))
        demands.append(base)
        m.add_cumulative(holds, demands, limit[d])
    status, solver = run_model(m, effort=effort, time_limit=time_limit)
    if spent is not None:
        spent[0] += solver.deterministic_time
    if status != "found":
        return status, None
    return "feasible", {f"{n}{SEP}{j}": solver.value(x[j][n]) for j in range(k) for n in names}


def _weighted(w: int, expr):
    return expr if w == 1 else w * expr


def _frame(spec: Spec, chain: DeviceChain, p: int, limit: dict[int, int],
           unit: dict[int, int]) -> tuple[str, int, int]:
    """(anchor, its start in copy 0, a bound on every start): module text, "Horizon"."""
    reach = reachable(spec)
    whole = {h: limit[h.device] // (h.weight // unit[h.device]) for h in chain.holds}  # its most wraps
    time = {b.name: b.time for b in spec.blocks}
    gap = max(time[a] + lag(spec, a, b) for a, b in chain.edges) + p - 1
    best = None
    for h in chain.holds:
        before = after = 0
        for b in spec.blocks:
            if b.name == h.alloc or _held(h, b.name, reach):
                continue
            if b.memory == 0 and h.alloc in reach[b.name]:
                before += 1
            elif b.memory == 0 and b.name in reach[h.free]:
                after += 1
            else:
                break
        else:
            shift = before * gap
            got = (h.alloc, shift, shift + (whole[h] + 2) * p + after * gap)
            best = got if best is None or got[2] < best[2] else best
    if best is not None:
        return best
    # each block after the source ends one gap; a hold's blocks end gaps within its interval
    group: dict[Hold, int] = {}
    free = 0
    ranked = sorted(chain.holds, key=lambda h: -sum(1 for b in spec.blocks if _held(h, b.name, reach)))
    for b in spec.blocks:
        if b.name == chain.source:
            continue
        h = next((h for h in ranked if _held(h, b.name, reach)), None)
        if h is None:
            free += 1
        else:
            group[h] = group.get(h, 0) + 1
    span = free * gap + sum(min((whole[h] + 1) * p - 1, count * gap) for h, count in group.items())
    return chain.source, 0, p + span


def _held(h: Hold, name: str, reach: dict[str, frozenset[str]]) -> bool:
    """Does every schedule start `name` after `h.alloc` and no later than `h.free`?"""
    return name in reach[h.alloc] and (name == h.free or h.free in reach[name])


def periodic_schedule(spec: Spec, starts: dict[str, int], copies: int, period: int, n: int,
                      name: str = "periodic") -> Schedule:
    """The first `n` micro-batches of the periodic schedule (micro-batch ``copies * m + j`` runs
    ``b`` at ``starts["b@j"] + m * period``), each block then as early as its device's order
    allows. Valid whenever the periodic schedule is: dropping whole micro-batches never adds
    memory, and keeping each device's order keeps its running sums."""
    slots = []
    for mb in range(n):
        m, j = divmod(mb, copies)
        slots += [Slot(starts[f"{b.name}{SEP}{j}"] + m * period, b.name, mb) for b in spec.blocks]
    return Schedule(n, compact(spec, sorted(slots)), name=name)


def chain_period_search(spec: Spec, copies: int, low: int, high: int, *, effort: float | None = CHAIN_PERIOD_EFFORT,
                        left=lambda: None, walk: float | None = None) -> tuple[int | None, dict[str, int] | None, bool]:
    """The smallest period in ``[low, high)`` at which `copies` micro-batches repeat (bisection:
    feasibility is monotone in the period), as (period, flat starts, proven). `proven`: every period below the answer was shown
    infeasible (down to `low`, which the caller knows to be a lower bound). `left()` gives the
    seconds of a user's time limit still left (None: no limit, only the deterministic budgets).
    With nothing feasible below `high` the period and starts are None (`proven`: every period
    tried below `high` was shown infeasible, so none exists). The whole bisection spends at most
    `walk` (default `CHAIN_WALK_EFFORT`) of deterministic time; what it leaves unsettled is not
    proven."""
    walk = CHAIN_WALK_EFFORT if walk is None else walk
    best = None
    below = low - 1  # every period up to `below` is infeasible or unsettled
    settled = True   # ... and, while this holds, every one of them was proven infeasible
    hi = high
    spent = [0.0]    # deterministic time used, within `walk`
    while below + 1 < hi:
        t = left()
        if (t is not None and t <= 0) or spent[0] >= walk - 0.05:
            settled = False
            break
        period = (below + 1 + hi) // 2
        budget = None if effort is None else min(effort, walk - spent[0])
        status, starts = solve_chain_period(spec, copies, period, effort=budget, time_limit=t, spent=spent)
        if status == "feasible":
            best, hi = (period, starts), period
        else:
            below = period
            settled = settled and status == "infeasible"
    if best is None:
        return None, None, settled
    return best[0], best[1], settled
