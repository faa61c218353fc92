"""A repetend at the period lower bound built without a solver (modulo list scheduling).

The search proves nothing it does not have to: when a schedule built by simple rules already
reaches the period lower bound (`analysis.lower_bound`) and the makespan bound
(`bounds.makespan_bound`), no solver could do better, so none needs to load or run.

**Modulo list scheduling.** One micro-batch is laid out flat: blocks in topological order, each
at the earliest time after its dependencies at which its devices are free *modulo P* (a
per-device table of P time steps; instance ``k`` of the schedule repeats the flat one ``k P``
later, so a step taken modulo P is taken in every instance), and where the blocks still to place
keep room in the table (`_Packer`, exact: a greedy placement alone fragments the table, e.g. on
the M-shape a backward of 3 steps finds no 3 free ones). The flat start ``sigma_i`` of every
block gives the periodic schedule ``sigma_i + m P`` for micro-batch ``m``, valid for dependencies
by construction and free of overlaps on every device.

**The repetend.** Each device's window of length P starts at a block start taken modulo P (no
block of that device straddles it), placed at or below the device's latest flat start, so every
offset ``r_i = (s_i - sigma_i) / P`` is at least 0. The warmup is ``{B_i^n | n < r_i}``, the
cooldown ``{B_i^n | r_i < n < N_R}``, both at their flat times; each device's order in the flat
schedule is warmup, instances, cooldown, which is what extension joins and then compacts
(`extend.py`). Memory is not modelled while placing: the extended schedule is checked by the
validator, and a construction that breaks M (or any other rule) is simply not used.
"""
from __future__ import annotations

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Schedule, Slot


def _mask(start: int, length: int, period: int) -> int:
    """The steps ``start .. start + length - 1`` modulo `period`, as a bit set."""
    bits = 0
    for k in range(length):
        bits |= 1 << ((start + k) % period)
    return bits


class _Packer:
    """Can the blocks still to place find steps modulo P on their devices, given what is taken?

    Exact: blocks on several devices are tried at every residue (most devices first), then each
    device packs its own blocks into what is left, independently of the others (memoised). Every
    residue tried counts towards `WORK_LIMIT`; past it every answer is no (the search then solves).
    """

    def __init__(self, spec: Spec, period: int):
        self.spec, self.period = spec, period
        self.by_length: dict[int, list[int]] = {}
        for b in spec.blocks:
            if b.time not in self.by_length:
                self.by_length[b.time] = list(dict.fromkeys(_mask(x, b.time, period) for x in range(period)))
        self.masks = {b.name: [_mask(x, b.time, period) for x in range(period)] for b in spec.blocks}
        self.memo: dict[tuple, bool] = {}
        self.single_memo: dict[tuple[int, tuple[int, ...]], bool] = {}
        self.work = 0

    @property
    def exhausted(self) -> bool:
        return self.work > WORK_LIMIT

    def fits(self, taken: tuple[int, ...], left: frozenset[str]) -> bool:
        key = (taken, left)
        if key not in self.memo:
            multi = sorted((n for n in left if len(self.spec.block(n).devices) > 1),
                           key=lambda n: (-len(self.spec.block(n).devices), n))
            single = [n for n in left if len(self.spec.block(n).devices) == 1]
            self.memo[key] = self._multi(list(taken), multi, single)
        return self.memo[key]

    def _multi(self, taken: list[int], multi: list[str], single: list[str]) -> bool:
        if not multi:
            return all(self._pack(taken[d], tuple(sorted((self.spec.block(n).time for n in single
                                                          if self.spec.block(n).devices[0] == d), reverse=True)))
                       for d in range(self.spec.devices))
        name, rest = multi[0], multi[1:]
        devs = self.spec.block(name).devices
        for m in self.by_length[self.spec.block(name).time]:
            self.work += 1
            if self.exhausted:
                return False
            if all(not taken[d] & m for d in devs):
                for d in devs:
                    taken[d] |= m
                ok = self._multi(taken, rest, single)
                for d in devs:
                    taken[d] &= ~m
                if ok:
                    return True
        return False

    def _pack(self, taken: int, lengths: tuple[int, ...]) -> bool:
        """Do blocks of these lengths fit, non-overlapping, into the steps not in `taken`?"""
        if not lengths:
            return True
        key = (taken, lengths)
        if key not in self.single_memo:
            ok = False
            for m in self.by_length[lengths[0]]:
                self.work += 1
                if self.exhausted:
                    return False
                if not taken & m and self._pack(taken | m, lengths[1:]):
                    ok = True
                    break
            self.single_memo[key] = ok
        return self.single_memo[key]


WORK_LIMIT = 200000  # residues the packer may try in all (a deterministic cap on its work)


def flat_starts(spec: Spec, period: int) -> dict[str, int] | None:
    """``sigma``: each block's start in the flat periodic schedule at `period` (see the module
    text); None when none is found within the packer's budget."""
    if any(b.time > period for b in spec.blocks):
        return None
    packer = _Packer(spec, period)
    taken = [0] * spec.devices
    left = set(spec.topo_order)
    if not packer.fits(tuple(taken), frozenset(left)):
        return None
    sigma: dict[str, int] = {}
    for name in spec.topo_order:
        b = spec.block(name)
        left.discard(name)
        rest = frozenset(left)
        earliest = max((sigma[p] + spec.block(p).time for p in spec.preds[name]), default=0)
        for t in range(earliest, earliest + period):
            m = packer.masks[name][t % period]
            if any(taken[d] & m for d in b.devices):
                continue
            trial = list(taken)
            for d in b.devices:
                trial[d] |= m
            if packer.fits(tuple(trial), rest):
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
    inside = set()
    for b in spec.blocks:
        inside |= {(sigma[b.name] + k) % period for k in range(1, b.time)}
    for x in sorted({sigma[n] % period for n in sigma} - inside):
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


def modulo_list_repetend(spec: Spec, period: int) -> tuple[Repetend, tuple[Slot, ...], tuple[Slot, ...]] | None:
    """(repetend, warmup, cooldown numbered for N = N_R) at `period`, or None (see the module text).

    Nothing here checks memory: the caller validates the extended schedule.
    """
    sigma = flat_starts(spec, period)
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


def bound_reaching_schedule(spec: Spec, n: int) -> Schedule | None:
    """The schedule for `n` micro-batches extended from the modulo-list repetend at the period
    lower bound, when it is valid (memory included) and its makespan reaches the makespan bound,
    so nothing shorter exists and no repetend has a shorter period; None otherwise (then the
    solver-based search runs as usual)."""
    from tessel_dsl.analysis import lower_bound
    from tessel_dsl.errors import TesselError
    from tessel_dsl.search.bounds import makespan_bound
    from tessel_dsl.search.extend import Parts, extend

    if any(sum(b.memory for b in spec.blocks_on(d)) > 0 for d in range(spec.devices)):
        return None  # memory left behind per micro-batch: no repetend can repeat
    built = modulo_list_repetend(spec, lower_bound(spec))
    if built is None or n < built[0].nr:
        return None
    try:
        sched = extend(spec, Parts(built[1], built[0], built[2]), n)  # compacted and validated
    except TesselError:
        return None  # e.g. more memory in flight than the spec allows
    return sched if sched.makespan(spec) <= makespan_bound(spec, n) else None
