"""A repetend at the period lower bound built without a solver (modulo list scheduling).

The search proves nothing it does not have to: when a schedule built by simple rules already
reaches the period lower bound (`analysis.lower_bound`) and the makespan bound
(`bounds.makespan_bound`), no solver could do better, so none needs to load or run.

**Modulo list scheduling.** One micro-batch is laid out flat: blocks in topological order, each
at the earliest time after its dependencies at which its devices are free *modulo P* (each
device's busy time is a sorted list of intervals of ``[0, P)``; instance ``k`` of the schedule
repeats the flat one ``k P`` later, so a step taken modulo P is taken in every instance), and
where the blocks still to place keep room on the devices (`_Packer`, exact: a greedy placement
alone fragments the time, e.g. on the M-shape a backward of 3 steps finds no 3 free ones). The
flat start ``sigma_i`` of every block gives the periodic schedule ``sigma_i + m P`` for
micro-batch ``m``, valid for dependencies by construction and free of overlaps on every device.

**Event points.** Nothing here walks the period step by step, so a spec whose block times differ
by a factor of 10^6 costs what a small-numbered one does. Only residues of the form ``e + s``
modulo P need trying, ``e`` the end of a busy interval (or 0) and ``s`` a sum of lengths of
blocks still to place: in any placement, slide blocks left while they can; each stops touching
a busy end or a block that stopped earlier, so its start is such a sum past an end (and a group
that never touches anything can be turned until one of its blocks starts at 0). The earliest
feasible start of the block being placed is either its dependency bound or such a point by the
same argument. A device's single-device blocks then need only the lengths of its free gaps (bin
packing, exact).

**The repetend.** Each device's window of length P starts at a block start taken modulo P (no
block of that device straddles it), placed at or below the device's latest flat start, so every
offset ``r_i = (s_i - sigma_i) / P`` is at least 0. The warmup is ``{B_i^n | n < r_i}``, the
cooldown ``{B_i^n | r_i < n < N_R}``, both at their flat times; each device's order in the flat
schedule is warmup, instances, cooldown, which is what extension joins and then compacts
(`extend.py`). Memory is not modelled while placing: the extended schedule is checked by the
validator, and a construction that breaks M (or any other rule) is simply not used.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Callable

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Schedule, Slot
from tessel_dsl.search.lags import lag

Busy = tuple[tuple[int, int], ...]  # one device's disjoint, merged [start, end) intervals in [0, P)


def _pieces(start: int, length: int, period: int) -> list[tuple[int, int]]:
    """Steps ``start .. start + length - 1`` modulo `period` as at most two intervals of [0, P)."""
    a = start % period
    if a + length <= period:
        return [(a, a + length)]
    return [(a, period), (0, a + length - period)]


def _overlaps(busy: Busy, start: int, length: int, period: int) -> bool:
    for a, b in _pieces(start, length, period):
        i = bisect_right(busy, (a, period + 1)) - 1  # the last interval starting at or before a
        if i >= 0 and busy[i][1] > a:
            return True
        if i + 1 < len(busy) and busy[i + 1][0] < b:
            return True
    return False


def _add(busy: Busy, start: int, length: int, period: int) -> Busy:
    """`busy` with the (free) steps of a block added, adjacent intervals merged."""
    out = list(busy)
    for a, b in _pieces(start, length, period):
        i = bisect_left(out, (a, a))
        if i > 0 and out[i - 1][1] == a:
            i -= 1
            a = out[i][0]
            del out[i]
        if i < len(out) and out[i][0] == b:
            b = out[i][1]
            del out[i]
        out.insert(i, (a, b))
    return tuple(out)


def _merged(pieces: list[tuple[int, int]]) -> Busy:
    """Intervals (possibly overlapping) as one sorted list of disjoint, merged ones."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(pieces):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _gaps(busy: Busy, period: int) -> tuple[int, ...]:
    """Lengths of the free stretches of a device's circle, largest first."""
    if not busy:
        return (period,)
    gaps = [busy[i + 1][0] - busy[i][1] for i in range(len(busy) - 1)]
    gaps.append(period - busy[-1][1] + busy[0][0])  # across the end of the period
    return tuple(sorted((g for g in gaps if g > 0), reverse=True))


class _Packer:
    """Can the blocks still to place find steps modulo P on their devices, given what is taken?

    Exact: blocks on several devices are tried at every event point (most devices first), then
    each device packs its own blocks into its free gaps, independently of the others (memoised).
    Every residue, gap or event point tried counts towards `WORK_LIMIT`; past it (or past the
    caller's wall-clock limit) every answer is no (the search then solves).
    """

    def __init__(self, spec: Spec, period: int, left: Callable[[], float | None] | None = None):
        self.spec, self.period = spec, period
        self.left = left
        self.time = {b.name: b.time for b in spec.blocks}
        self.devices = {b.name: b.devices for b in spec.blocks}
        self.memo: dict[tuple, bool] = {}
        self.single_memo: dict[tuple[tuple[int, ...], tuple[int, ...]], bool] = {}
        self.sums_memo: dict[frozenset[str], tuple[int, ...]] = {}
        self.work = 0
        self.out_of_time = False

    @property
    def exhausted(self) -> bool:
        return self.work > WORK_LIMIT or self.out_of_time

    def _spend(self, n: int = 1) -> bool:
        """Count `n` units of work; False once the budget (or the wall-clock limit) is spent."""
        before = self.work
        self.work += n
        if self.left is not None and before // CLOCK_EVERY != self.work // CLOCK_EVERY:
            remaining = self.left()
            if remaining is not None and remaining <= 0:
                self.out_of_time = True
        return not self.exhausted

    def sums(self, left: frozenset[str]) -> tuple[int, ...]:
        """Every sum of lengths of a subset of `left`, modulo P (0 included)."""
        if left not in self.sums_memo:
            sums = {0}
            for n in sorted(left):
                t = self.time[n]
                new = {(s + t) % self.period for s in sums} - sums
                if not self._spend(len(new) + 1):
                    break
                sums |= new
            self.sums_memo[left] = tuple(sorted(sums))
        return self.sums_memo[left]

    def events(self, taken: tuple[Busy, ...], left: frozenset[str], zero: bool) -> list[int]:
        """The residues ``e + s`` (see the module text), sorted; `zero` adds 0 to the ends ``e``."""
        ends = sorted({b % self.period for busy in taken for _, b in busy} | ({0} if zero else set()))
        sums = self.sums(left)
        if not self._spend(len(ends) * len(sums)):
            return []
        return sorted({(e + s) % self.period for e in ends for s in sums})

    def fits(self, taken: tuple[Busy, ...], left: frozenset[str]) -> bool:
        key = (taken, left)
        if key not in self.memo:
            multi = sorted((n for n in left if len(self.devices[n]) > 1), key=lambda n: (-len(self.devices[n]), n))
            singles: list[list[int]] = [[] for _ in taken]
            for n in left:
                if len(self.devices[n]) == 1:
                    singles[self.devices[n][0]].append(self.time[n])
            lengths = [tuple(sorted(x, reverse=True)) for x in singles]
            points = self.events(taken, left, zero=True) if multi else []
            ok = self._multi(list(taken), multi, lengths, points)
            if self.exhausted:
                return False  # not memoised: the answer was cut, not found
            self.memo[key] = ok
        return self.memo[key]

    def _multi(self, taken: list[Busy], multi: list[str], lengths: list[tuple[int, ...]], points: list[int]) -> bool:
        period = self.period
        if not multi:
            return all(self._pack(_gaps(busy, period), x) for busy, x in zip(taken, lengths) if x)
        name, rest = multi[0], multi[1:]
        time, devs = self.time[name], self.devices[name]
        for x in points:
            if not self._spend():
                return False
            if all(not _overlaps(taken[d], x, time, period) for d in devs):
                saved = [taken[d] for d in devs]
                for d in devs:
                    taken[d] = _add(taken[d], x, time, period)
                ok = self._multi(taken, rest, lengths, points)
                for d, busy in zip(devs, saved):
                    taken[d] = busy
                if ok:
                    return True
        return False

    def _pack(self, gaps: tuple[int, ...], lengths: tuple[int, ...]) -> bool:
        """Do blocks of these lengths (largest first) fit, non-overlapping, into free gaps of these
        lengths (largest first)?"""
        if not lengths:
            return True
        if not gaps or lengths[0] > gaps[0] or sum(lengths) > sum(gaps):
            return False
        key = (gaps, lengths)
        if key not in self.single_memo:
            ok = False
            for i, g in enumerate(gaps):
                if g < lengths[0] or (i and g == gaps[i - 1]):
                    continue  # too short, or the same as the gap just tried
                if not self._spend():
                    return False
                rest = tuple(sorted(gaps[:i] + (g - lengths[0],) + gaps[i + 1:], reverse=True))
                if self._pack(rest, lengths[1:]):
                    ok = True
                    break
            self.single_memo[key] = ok
        return self.single_memo[key]


WORK_LIMIT = 200000  # residues, gaps and event points the packer may try in all (a deterministic cap on its work)
CLOCK_EVERY = 4096  # work units between two looks at the wall clock (only under a time limit)


def flat_starts(spec: Spec, period: int, left: Callable[[], float | None] | None = None) -> dict[str, int] | None:
    """``sigma``: each block's start in the flat periodic schedule at `period` (see the module
    text); None when none is found within the packer's budget (or within the time `left`
    returns, when it returns a number)."""
    if any(b.time > period for b in spec.blocks):
        return None
    packer = _Packer(spec, period, left)
    taken: tuple[Busy, ...] = ((),) * spec.devices
    rest = frozenset(spec.topo_order)
    if not packer.fits(taken, rest):
        return None
    sigma: dict[str, int] = {}
    for name in spec.topo_order:
        b = spec.block(name)
        rest = rest - {name}
        earliest = max((sigma[p] + spec.block(p).time + lag(spec, p, name) for p in spec.preds[name]), default=0)
        points = [earliest] + [earliest + (x - earliest) % period for x in packer.events(taken, rest, zero=False)]
        for t in sorted(set(points)):
            if any(_overlaps(taken[d], t, b.time, period) for d in b.devices):
                continue
            trial = tuple(_add(busy, t, b.time, period) if d in b.devices else busy for d, busy in enumerate(taken))
            if packer.fits(trial, rest):
                break
            if packer.exhausted:
                return None
        else:
            return None
        taken = trial
        sigma[name] = t
    return sigma


def _offsets(spec: Spec, sigma: dict[str, int], windows: list[int], period: int) -> dict[str, int] | None:
    """Each block's micro-batch offset for these per-device windows; None when a block on several
    devices lands at different times in their windows or an offset grows along a dependency
    (the repetend's usual shape, which completion relies on)."""
    offsets = {}
    for b in spec.blocks:
        lifted = {_lift(sigma[b.name], windows[d], period) for d in b.devices}
        if len(lifted) > 1:
            return None
        offsets[b.name] = (lifted.pop() - sigma[b.name]) // period
    if any(offsets[e.src] < offsets[e.dst] for e in spec.edges):
        return None
    return offsets


def _window_choices(spec: Spec, sigma: dict[str, int], period: int) -> list[list[int]]:
    """Candidate per-device window starts, each a block start on that device (so no block of the
    device straddles it), lifted to at most the latest block start there (offsets >= 0):

    1. per device, the cut that gives that device the fewest micro-batches in flight;
    2. one common cut for every device, at each step no block of any device straddles;
    3. the first choice with the windows of producers raised, one block start at a time, until
       no offset grows along a dependency (a bounded number of raises).
    """
    on = [[b.name for b in spec.blocks_on(d)] for d in range(spec.devices)]
    tops = [max((sigma[n] for n in names), default=0) for names in on]
    first = []
    for d, names in enumerate(on):
        best = None
        for c in names:  # ties: the earliest block in spec order, so the choice is deterministic
            a = tops[d] - (tops[d] - sigma[c]) % period
            span = max((_lift(sigma[n], a, period) - sigma[n]) // period for n in names)
            if best is None or span < best[0]:
                best = (span, a)
        first.append(0 if best is None else best[1])
    out = [first]
    top = max(tops, default=0)
    # The steps strictly inside some block, which a common cut must avoid.
    inside = _merged([piece for b in spec.blocks if b.time > 1
                      for piece in _pieces(sigma[b.name] + 1, b.time - 1, period)])
    for x in sorted(x for x in {sigma[n] % period for n in sigma} if not _overlaps(inside, x, 1, period)):
        a = top - (top - x) % period
        out.append([a] * spec.devices)
    cuts = [sorted({sigma[n] % period for n in names}) for names in on]
    windows, dev_of = list(first), {b.name: b.devices[0] for b in spec.blocks}
    for _ in range(RAISE_LIMIT):
        offsets = {n: (_lift(sigma[n], windows[dev_of[n]], period) - sigma[n]) // period for n in sigma}
        bad = next((e for e in spec.edges if offsets[e.src] < offsets[e.dst]), None)
        if bad is None:
            out.append(windows)
            break
        d = dev_of[bad.src]
        windows = list(windows)
        windows[d] += min((c - windows[d]) % period or period for c in cuts[d])
    return out


RAISE_LIMIT = 64  # window raises the third choice may make before it gives up


def _lift(sigma: int, window: int, period: int) -> int:
    """The time congruent to `sigma` modulo `period` inside ``[window, window + period)``."""
    return window + (sigma - window) % period


def modulo_list_repetend(spec: Spec, period: int, left: Callable[[], float | None] | None = None
                         ) -> tuple[Repetend, tuple[Slot, ...], tuple[Slot, ...]] | None:
    """(repetend, warmup, cooldown numbered for N = N_R) at `period`, or None (see the module text;
    `left` as in `flat_starts`).

    Nothing here checks memory: the caller validates the extended schedule.
    """
    sigma = flat_starts(spec, period, left)
    if sigma is None:
        return None
    return flat_repetend(spec, sigma, period)


def flat_repetend(spec: Spec, sigma: dict[str, int], period: int
                  ) -> tuple[Repetend, tuple[Slot, ...], tuple[Slot, ...]] | None:
    """(repetend, warmup, cooldown numbered for N = N_R) cut from a flat periodic schedule:
    block ``i`` of micro-batch ``m`` at ``sigma[i] + m * period``, which must respect every
    dependency and never overlap itself modulo `period` on a device (see the module text)."""
    best = None
    for windows in _window_choices(spec, sigma, period):
        offsets = _offsets(spec, sigma, windows, period)
        if offsets is None:
            continue
        low = min(offsets.values())  # raised windows may lift every offset: renumber from 0
        offsets = {n: r - low for n, r in offsets.items()}
        nr = max(offsets.values()) + 1
        if best is None or nr < best[0]:
            best = (nr, offsets, {n: t + low * period for n, t in sigma.items()})
    if best is None:
        return None
    _, offsets, sigma = best
    lifted = {n: sigma[n] + period * offsets[n] for n in sigma}
    nr = max(offsets.values()) + 1
    base = min(lifted.values())
    rep = Repetend(nr, period, tuple(sorted(Slot(lifted[n] - base, n, offsets[n]) for n in lifted)))
    warm = tuple(sorted(Slot(sigma[n] + m * period, n, m) for n in sigma for m in range(offsets[n])))
    cool = tuple(sorted(Slot(sigma[n] + m * period, n, m) for n in sigma for m in range(offsets[n] + 1, nr)))
    return rep, warm, cool


def bound_reaching_schedule(spec: Spec, n: int, left: Callable[[], float | None] | None = None) -> Schedule | None:
    """The schedule for `n` micro-batches extended from the modulo-list repetend at the period
    lower bound, when it is valid (memory included) and its makespan reaches the makespan bound,
    so nothing shorter exists and no repetend has a shorter period; None otherwise (then the
    solver-based search runs as usual), also when the wall-clock time `left` returns runs out."""
    from tessel_dsl.analysis import lower_bound
    from tessel_dsl.errors import TesselError
    from tessel_dsl.search.bounds import makespan_bound
    from tessel_dsl.search.extend import Parts, extend

    if any(sum(b.memory for b in spec.blocks_on(d)) > 0 for d in range(spec.devices)):
        return None  # memory left behind per micro-batch: no repetend can repeat
    built = modulo_list_repetend(spec, lower_bound(spec), left)
    if built is None or n < built[0].nr:
        return None
    try:
        sched = extend(spec, Parts(built[1], built[0], built[2]), n)  # compacted and validated
    except TesselError:
        return None  # e.g. more memory in flight than the spec allows
    return sched if sched.makespan(spec) <= makespan_bound(spec, n) else None
