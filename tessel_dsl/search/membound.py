"""Lower bounds that come from memory: how long a micro-batch holds memory on a device, and how
many micro-batches the device can hold at once.

**Holding.** Take a device ``d``, a block ``a`` on it that allocates, and a block ``r`` on it that
depends on ``a`` (transitively). At any moment, one micro-batch's *contribution* to ``d``'s memory
is the sum of the memory of its blocks on ``d`` that have started (the validator's running sum,
read per micro-batch). The blocks that have started form a down-closed set (a block starts only
after every block it depends on has ended). So while ``a`` has started and ``r`` has not, the
micro-batch holds at least ``h = min { sum of m_x over S : S down-closed, a in S, r not in S }``
on ``d`` (found by enumerating the down-closed sets of the few blocks on ``d``). If no down-closed
set has a negative sum, no micro-batch ever lowers another's holding, and at most
``k = floor(C_d / h)`` micro-batches can be in that state at once (``C_d``: the device's capacity).

**The intervals.** Micro-batch ``i`` has the interval ``J_i = [start of a_i, end of r_i)``, at
least ``c`` long, where ``c`` is the longest dependency chain from ``a`` to ``r`` (both counted).
If ``J_i`` and ``J_j`` overlap and ``a_j`` starts no earlier than ``a_i``, then ``a_j`` starts
before ``r_i`` does (both run on ``d``, one at a time, and ``a_j`` starts before ``r_i`` ends). So
pairwise-overlapping intervals all contain the latest of their starts, a moment where each of them
holds at least ``h``: no more than ``k`` intervals overlap pairwise. Intervals with at most ``k``
pairwise overlapping split into ``k`` classes of disjoint intervals (interval graphs are perfect;
colouring them in order of start needs no more colours than the largest clique), and one class
has at least ``ceil(N / k)`` of the N intervals. Every ``J_i`` starts no earlier than ``head(a)``,
the longest chain before ``a``, and ends by the makespan less ``tail(r)``, the longest chain after
``r``. Hence

    makespan >= head(a) + ceil(N / k) * c + tail(r)                        (`memory_makespan_bound`)

and, as N grows, a schedule repeating q micro-batches every period P keeps ``P / q >= c / k``
(`memory_period_bound`, per micro-batch). Both hold for every schedule, whatever the search does.

**Memory slows what comes after** (`paced_bound`). Sort the starts of ``a`` over the micro-batches:
``s_1 <= s_2 <= ... <= s_N``. When the ``(m+k)``-th starts, at most ``k - 1`` earlier intervals are
still open (the argument above, at that start), so at least ``m`` intervals have ended: with
``f_1 <= f_2 <= ... <= f_N`` the ends of ``r`` sorted, ``s_{m+k} >= f_m``. The ``m`` intervals
that end first have ``m`` different starts, the latest at ``s_m`` or later, and it ends at least
``c`` after: ``f_m >= s_m + c``; also ``f_{m+1} >= f_m + t_r`` and ``s_{m+1} >= s_m + t_a`` (one
device) and ``s_1 >= head(a)``. Freeing and allocating take turns on ``d``, which costs time: in
``[f_{m-j}, s_{m+k})`` device ``d`` runs the ``j`` instances of ``r`` that end ``(m-j+1)``-th to
``m``-th (the instances of ``r`` on ``d`` follow each other, so these start after ``f_{m-j}``
and end by ``f_m``) and the ``j`` instances of ``a`` that start ``(m-j+k)``-th to
``(m+k-1)``-th (after ``s_{m-j+k} >= f_{m-j}``, and before ``s_{m+k}``): ``s_{m+k} >= f_{m-j} +
j (t_a + t_r)`` for every ``j < m``, i.e. ``s_{m+k} >= G_m`` with ``G_1 = f_1`` and ``G_m =
max(f_m, G_{m-1} + t_a + t_r)``. These give lower bounds ``L_m`` on each ``s_m`` and ``F_m`` on
each ``f_m`` (`paced_starts`), and ``makespan >= F_N + tail(r)``, which is never below the count
above (``s_{qk+1} >= head(a) + q c``). On the zoo's Mixtral 8x22B chain (16 stages, ``k = 6`` on
device 0, ``c = 3652``) with N = 8: ``s_7 >= f_1 >= c``, and ``s_8`` waits for a second end and
for ``a`` of the 7th and ``r`` of the 2nd after ``f_1``: ``s_8 >= c + 87 + 173``, so 2 c + 260 =
7564, the time-optimal solve's makespan, where ``s_{m+k} >= s_m + c`` alone gave 7511.
If every block on some device ``e`` depends on ``a``
(or is ``a``), the ``N - m + 1`` micro-batches whose ``a`` starts at ``s_m`` or later still have
all their work ``W_e`` on ``e`` to do, none of it before ``s_m`` plus the shortest chain from the
start of ``a`` to the start of a block on ``e``, and after the last of it comes at least the
shortest chain after a block on ``e``:

    makespan >= L_m + delta_e + (N - m + 1) * W_e + tail_e      for every m.

On `bench/specs/real/memchain.tsl` (D = 8, N = 24) device 0 paces the micro-batches into the
busiest device 7: 1353 ms, where the two bounds alone give 1317 and 1128.

**Memory-time** (`areas`). The counting above uses one holding at a time; a device that keeps
two activations of one micro-batch (two chunks of an interleaved pipeline) holds the first
alone for a while and both together for another while. Memory is taken when a block starts and
given back when the freeing block starts (the validator's running sum), but no block of the
device can take it again before the freeing block ends, as the device runs one block at a time.
So count a freeing block's memory as held until it ends: the device's *extended use* (the memory
in use plus that of a freeing block running on it) rises only when a block that takes memory
starts, a moment when no freeing block runs and it equals the memory in use, so it never exceeds
``C_d`` either. While one micro-batch's freeing block ``r`` runs, the blocks it has started other
than ``r`` form a down-closed set (nothing after ``r`` has started), so its part of the extended
use is that set's memory: holding ``(a, r)`` keeps at least ``need`` in extended use from the
start of ``a`` to the end of ``r``, at least ``chain`` long. Take holdings ``(a_1, r_1), (a_2,
r_2), ...`` of one device, each inside the one before (``a_{j+1}`` is ``a_j`` or depends on it,
``r_j`` is ``r_{j+1}`` or depends on it) and each needing more: during the ``j``-th interval the
micro-batch's part is at least ``need_j``, so its integral over time is at least
``A = sum_j (need_j - need_{j-1}) * chain_j``. Every micro-batch's intervals lie within
``[head(a_1), makespan - tail(r_1)]``, so ``N * A <= C_d * (makespan - head(a_1) - tail(r_1))``:

    makespan >= head(a_1) + ceil(N * A / C_d) + tail(r_1)                     (`Area.makespan`)

and a repetend of q micro-batches in P keeps ``P / q >= A / C_d``. ``C_d`` may be taken smaller:
the extended use is a sum of the micro-batches' parts, each the memory of a down-closed set of
the device's blocks, so it never exceeds the largest such sum within the capacity (`fillable`,
a knapsack over those levels). On the zoo's 405B model interleaved over 32 devices a
micro-batch holds 0.57 or 1.71 GB on device 0, and no sum of those comes within 0.13 GB of its
52 GB; where the sizes are coarse beside the room (two chunks of 2.35 GB in 14 GB: five fit,
11.75 GB) it moves the bound by up to a fifth. With a single holding this is never above the
count above (which rounds ``C_d / need`` down); with nested ones it can be: on
bench/specs/real/llama8b_interleaved8_mem.tsl (16 chunks on 8 GPUs, 14 GB free on GPU 0) it
gives 728.4 ms per micro-batch where the count gives 628.5 (`tests/unit/test_membound_area.py`
works a small case by hand).

**Filling and draining** (`Ramp`). The extended use cannot be full at the very start or end.
Every micro-batch's part is at most the memory its started blocks took, and the device starts
its taking blocks one at a time, none before the earliest of their heads ``h`` and each lasting
at least the shortest of their times ``s``: ``k`` of them have started no earlier than
``h + (k - 1) s``, so until then the extended use is at most ``(k - 1)`` times the largest of
them. When one micro-batch's blocks on the device give back all they take, its part is at most
what its freeing blocks not yet ended give back, and those end one at a time, the last no later
than the makespan less the shortest of their tails: counting back from there, the extended use
falls the same way. The memory-time left unused under these two staircases within
``[head(a_1), makespan - tail(r_1)]`` adds to ``N * A``; the makespan is the least that leaves
room for both (a few rounds: the loss grows with the makespan until the staircases no longer
meet). On bench/specs/real/llama8b_interleaved8_mem.tsl, five 2.35 GB chunks take 47 ms each to
fill GPU 0 and 94 ms each to drain it: 23311 -> 23593 ms for 32 micro-batches.

**All-device blocks.** Every bound above also holds for the spec with its all-device blocks
taking no time, plus ``N`` times their work (`barriers.py` says why: cutting their stretches out
of a schedule leaves a schedule of that spec, memory included). A holding then pays only for its
own path's other blocks, and every micro-batch's all-device blocks come on top, also those that
run while it holds. The arguments above need only ``a`` and ``r`` to take time (two instances
on one device then never share a start), so blocks of no time elsewhere are fine. On
bench/specs/real/tpmshape16.tsl with ``MEM=16`` the makespan bound goes from 2834 to 3082 ms.

**Transfer lags.** Every chain above (``c``, ``head(a)``, ``tail(r)`` and the distances
``delta_e``) counts the lag of each edge it crosses (`lags.py`): a consumer on a device its
producer is not on starts at least that long after the producer ends, in every schedule the
search keeps, so each step of the arguments above holds with the chain that much longer. No
other step uses an edge, and a spec without a link has no lags: the bounds are unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from tessel_dsl.analysis import chains, reachable
from tessel_dsl.ir import Spec
from tessel_dsl.search.barriers import without_barriers
from tessel_dsl.search.lags import edge_lags

ENUMERATE_MAX = 14  # down-closed sets are enumerated on devices with at most this many blocks


@dataclass(frozen=True)
class Holding:
    """Micro-batches on `device` hold at least `need` from the start of `alloc` to the end of
    `free`, which is at least `chain` long; at most `limit` of them at once."""

    device: int
    alloc: str
    free: str
    need: int
    limit: int
    chain: int
    head: int
    tail: int

    def makespan(self, microbatches: int) -> int:
        return self.head + -(-microbatches // self.limit) * self.chain + self.tail

    @property
    def period(self) -> Fraction:
        return Fraction(self.chain, self.limit)


def holdings(spec: Spec) -> list[Holding]:
    """Every (device, allocating block, later block) pair the module text's bound applies to."""
    time = {b.name: b.time for b in spec.blocks}
    lags = edge_lags(spec)
    reach = reachable(spec)
    head, tail = chains(spec, time, lags)
    out = []
    for d in range(spec.devices):
        on = [b.name for b in spec.blocks_on(d)]
        if not on or len(on) > ENUMERATE_MAX or not any(spec.block(x).memory > 0 for x in on):
            continue
        sums = _ideal_sums(spec, on, reach)
        mem = [spec.block(x).memory for x in on]
        if min(sums.values()) < 0:
            continue  # a micro-batch could lower another's holding: the argument does not apply
        cap = spec.capacity(d)
        for ia, a in enumerate(on):
            if mem[ia] <= 0 or time[a] <= 0:
                continue
            for ir, r in enumerate(on):
                if r not in reach[a] or time[r] <= 0:
                    continue  # blocks of no time may share a start on one device: the argument needs a, r apart
                need = min((v for s, v in sums.items() if s >> ia & 1 and not s >> ir & 1), default=0)
                if need <= 0 or cap < need:
                    continue  # (a capacity below one micro-batch's need is refused before any search)
                out.append(Holding(d, a, r, need, cap // need, _longest(spec, a, r, time, lags), head[a], tail[r]))
    return out


def _ideal_sums(spec: Spec, on: list[str], reach: dict[str, frozenset[str]]) -> dict[int, int]:
    """Each down-closed subset of `on` (a bitmask: with a block, every block of `on` it depends on)
    -> the memory of its blocks: what one micro-batch can hold on their device at a moment."""
    below = [sum(1 << j for j, y in enumerate(on) if x in reach[y]) for x in on]
    mem = [spec.block(x).memory for x in on]
    return {s: sum(m for i, m in enumerate(mem) if s >> i & 1) for s in range(1 << len(on))
            if all(below[i] & ~s == 0 for i in range(len(on)) if s >> i & 1)}


def room(spec: Spec, d: int, reach: dict[str, frozenset[str]] | None = None) -> int:
    """The most memory device `d` can have in use at once: its capacity, less what no sum of the
    micro-batches' holdings can fill (`fillable`; module text, "Memory-time"). `reach`: the
    spec's `analysis.reachable`, when the caller has it."""
    on = [b.name for b in spec.blocks_on(d)]
    if len(on) > ENUMERATE_MAX:
        return spec.capacity(d)
    levels = set(_ideal_sums(spec, on, reachable(spec) if reach is None else reach).values())
    if min(levels) < 0:
        return spec.capacity(d)  # one micro-batch may lower the sum of others: any total could be made
    return fillable(levels, spec.capacity(d))


FILL_MAX_UNITS = 1 << 22  # capacities (in memory units) up to which `fillable` sums levels exactly


def fillable(levels: set[int], capacity: int) -> int:
    """The largest total at most `capacity` that micro-batches each holding one of `levels` can
    make together (module text, "Memory-time"): a capacity a device can actually fill."""
    sizes = sorted(v for v in levels if 0 < v <= capacity)
    if not sizes:
        return capacity
    if capacity > FILL_MAX_UNITS:  # too large to sum exactly: every total is a multiple of the gcd
        g = math.gcd(*sizes)
        return capacity // g * g
    mask, reach = (1 << capacity + 1) - 1, 1
    for v in sizes:  # any number of micro-batches at level v: shifts by v, 2v, 4v, ... cover them
        step = v
        while step <= capacity:
            reach |= (reach << step) & mask
            step *= 2
    return reach.bit_length() - 1


def _longest(spec: Spec, a: str, r: str, time: dict[str, int], lags: dict[tuple[str, str], int]) -> int:
    """The longest dependency chain from the start of `a` to the end of `r` (both counted, with
    the lags of its edges)."""
    dist = {a: time[a]}
    for name in spec.topo_order:
        got = [dist[p] + lags.get((p, name), 0) for p in spec.preds[name] if p in dist]
        if got and name != a:
            dist[name] = max(got) + time[name]
    return dist[r]


@dataclass(frozen=True)
class Ramp:
    """At most `size` more memory in extended use each `step` from `at` on (module text,
    "Filling and draining"): counted from the start for `Area.rise`, back from the makespan for
    `Area.fall`."""

    at: int
    step: int
    size: int

    def most(self, since: float) -> float:
        """The extended use there can be `since` after `at` (before: none)."""
        return 0 if since < 0 else self.size * (since // self.step + 1)


@dataclass(frozen=True)
class Area:
    """Each micro-batch occupies at least `area` (memory times time) of `device`'s `capacity`,
    all of it after `head` and at least `tail` before the makespan (module text, "Memory-time"),
    where the extended use can rise only as fast as `rise` and must drain as `fall` allows."""

    device: int
    area: int
    capacity: int
    head: int
    tail: int
    rise: Ramp | None = None
    fall: Ramp | None = None

    def makespan(self, microbatches: int) -> int:
        span = self.head + -(-microbatches * self.area // self.capacity) + self.tail
        for _ in range(64):  # the least fixed point: the loss only grows with the makespan
            got = self.head + self.tail + -(-(microbatches * self.area + self.lost(span)) // self.capacity)
            if got <= span:
                return span
            span = got
        return span

    def lost(self, makespan: int) -> int:
        """Memory-time the ramps keep unused in [head, makespan - tail], rounded down."""
        lo, hi = self.head, makespan - self.tail
        cuts = {lo, hi}  # the staircases' steps: the unused memory is constant between them
        if self.rise is not None:
            cuts |= {self.rise.at + k * self.rise.step for k in range(self.capacity // self.rise.size + 2)}
        if self.fall is not None:
            end = makespan - self.fall.at
            cuts |= {end - k * self.fall.step for k in range(self.capacity // self.fall.size + 2)}
        cuts = sorted(c for c in cuts if lo <= c <= hi)
        total = 0.0
        for x, y in zip(cuts, cuts[1:]):
            mid = (x + y) / 2
            most = self.capacity
            if self.rise is not None:
                most = min(most, self.rise.most(mid - self.rise.at))
            if self.fall is not None:
                most = min(most, self.fall.most(makespan - self.fall.at - mid))
            total += (self.capacity - most) * (y - x)
        return int(total)

    @property
    def period(self) -> Fraction:
        return Fraction(self.area, self.capacity)


def areas(spec: Spec, found: list[Holding] | None = None) -> list[Area]:
    """The module text's memory-time bound of every device that has holdings, for each outermost
    holding the best sequence of nested holdings (a small dynamic programme over them)."""
    found = holdings(spec) if found is None else found
    if not found:
        return []
    reach = reachable(spec)
    time = {b.name: b.time for b in spec.blocks}
    head, tail = chains(spec, time, edge_lags(spec))

    def inside(h: Holding, g: Holding) -> bool:
        """`h`'s interval lies within `g`'s in every schedule, and `h` needs more."""
        return (h.need > g.need and (h.alloc == g.alloc or h.alloc in reach[g.alloc])
                and (h.free == g.free or g.free in reach[h.free]))

    out = []
    for d in sorted({h.device for h in found}):
        mine = sorted((h for h in found if h.device == d), key=lambda h: (h.need, h.alloc, h.free))
        best_area, best_outer = -1, None
        for g in mine:
            # from the start of `alloc` to the end of `free` (module text: the freeing block's
            # memory counts until it ends, as no block can take it before)
            got = {g: g.need * g.chain}
            for h in mine:
                outer = [got[p] + (h.need - p.need) * h.chain for p in got if inside(h, p)]
                if outer:
                    got[h] = max(outer)
            if max(got.values()) > best_area:
                best_area, best_outer = max(got.values()), g
        g = best_outer
        on = spec.blocks_on(d)
        take, give = [b for b in on if b.memory > 0], [b for b in on if b.memory < 0]
        rise = fall = None
        if all(b.time > 0 for b in take):
            rise = Ramp(min(head[b.name] for b in take), min(b.time for b in take), max(b.memory for b in take))
        if give and all(b.time > 0 for b in give) and sum(b.memory for b in on) == 0:
            fall = Ramp(min(tail[b.name] for b in give), min(b.time for b in give), max(-b.memory for b in give))
        out.append(Area(d, best_area, room(spec, d, reach), g.head, g.tail, rise, fall))
    return out


def memory_period_bound(spec: Spec) -> Fraction:
    """A lower bound on the period per micro-batch of any schedule that repeats (module text),
    also with the all-device blocks cut out of the time ("All-device blocks")."""
    found = holdings(spec)
    own = max([h.period for h in found] + [a.period for a in areas(spec, found)], default=Fraction(0))
    cut = without_barriers(spec)
    return own if cut is None else max(own, cut[1] + memory_period_bound(cut[0]))


def memory_makespan_bound(spec: Spec, microbatches: int) -> int:
    """A lower bound on the makespan of `microbatches` micro-batches from memory (module text),
    also with the all-device blocks cut out of the time ("All-device blocks")."""
    found = holdings(spec)
    own = max([h.makespan(microbatches) for h in found] + [paced_bound(spec, h, microbatches) for h in found]
              + [a.makespan(microbatches) for a in areas(spec, found)], default=0)
    cut = without_barriers(spec)
    return own if cut is None else max(own, microbatches * cut[1] + memory_makespan_bound(cut[0], microbatches))


def paced_starts(h: Holding, t_a: int, t_r: int, microbatches: int) -> tuple[list[int], list[int]]:
    """(L_m, F_m): lower bounds on the m-th earliest start of `alloc` and the m-th earliest end of
    `free` over the micro-batches (module text, "Memory slows what comes after")."""
    starts: list[int] = []
    ends: list[int] = []
    swapped: list[int] = []  # G_m: no earlier can the (m + k)-th start of `alloc` be
    k = h.limit
    for m in range(microbatches):
        s = h.head if m == 0 else starts[-1] + t_a
        if m >= k:
            s = max(s, swapped[m - k])
        starts.append(s)
        ends.append(max(s + h.chain, ends[-1] + t_r) if m else s + h.chain)
        swapped.append(max(ends[-1], swapped[-1] + t_a + t_r) if m else ends[-1])
    return starts, ends


def start_distances(spec: Spec, a: str, time: dict[str, int], lags: dict[tuple[str, str], int]) -> dict[str, int]:
    """From the start of `a` to the start of each block that depends on it, the longest chain
    (the times of `a` and the blocks between, the lags of the edges on the way); `a` itself: 0."""
    dist = {a: 0}
    for name in spec.topo_order:
        got = [dist[p] + time[p] + lags.get((p, name), 0) for p in spec.preds[name] if p in dist]
        if got and name != a:
            dist[name] = max(got)
    return dist


def paced_bound(spec: Spec, h: Holding, microbatches: int) -> int:
    """The module text's "memory slows what comes after" bound for one holding."""
    time = {b.name: b.time for b in spec.blocks}
    lags = edge_lags(spec)
    starts, ends = paced_starts(h, time[h.alloc], time[h.free], microbatches)
    dist = start_distances(spec, h.alloc, time, lags)
    _, tail = chains(spec, time, lags)
    best = ends[-1] + h.tail
    for e in range(spec.devices):
        on = [b.name for b in spec.blocks_on(e)]
        if not on or any(x not in dist for x in on):
            continue
        delta, work, after = min(dist[x] for x in on), sum(time[x] for x in on), min(tail[x] for x in on)
        best = max(best, max(starts[m] + delta + (microbatches - m) * work + after for m in range(microbatches)))
    return best
