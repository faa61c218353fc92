"""Lockstep 1F1B+: every stage runs forwards together, then backwards together, between the
all-device blocks (a best plan in hand where blocks run on every device).

An all-device block (an embedding split over every GPU) stops the whole pipeline: it starts only
when every device is free. Between two such blocks each device runs at most one block of its
own, so the stretch lasts as long as the longest of them. When some stages run a forward (say
23 ms) while others run a backward (47 ms) in the same stretch, the forward stages idle 24 ms
before the next all-device block; 1F1B and its warmup-searched kin (`warmups.py`) mix the two
all through their steady state. Here each stretch between all-device blocks has a kind: in a
forward stretch every device runs its next forward, in a backward stretch its next backward, and
a device whose next block of that kind is not ready sits out. A forward then moves one stage a
forward stretch, a backward one stage a backward stretch, and no stage idles in a stretch
because another runs the other kind.

Which kind comes when: the first ``a`` stretches are forward ones (the warmup), then the kinds
alternate, and a stretch whose kind nothing is ready for gives way to the other kind. The
all-device blocks that wait on a micro-batch's blocks run as soon as they are ready; those that
start a micro-batch (an embedding before the first stage) only when some device has no forward
ready without them. Shorter blocks that are ready fill a stretch where they end within it (a
decoder stage of 10 ms twice within an encoder's 23). A device takes a new micro-batch only
when its memory holds all that micro-batch will allocate there, an all-device block's share
included (stages that filled up on forwards left no room for a vocabulary-parallel head after
the last stage, and every play deadlocked); a play that still leaves every device waiting on
memory is dropped. ``a`` runs from 0
to N + D, in two families: in the first a device with nothing of the stretch's kind ready sits
the stretch out (unless a block fills it); in the second it starts its next block of the other
kind with the rest, which mixes kinds again but only where a stage would otherwise idle the
whole stretch. The shortest play of both that fits memory is kept.

**Who sets the kind.** In the first family the stretch's own blocks start on the lead devices,
those with at least half the busiest device's work a micro-batch (`LEAD_SHARE`), whenever one
of them has a block of the kind ready; the other devices then only fill the stretch, with
ready blocks of either kind that end within it. Before, a decoder stage started its next
forward with the encoder's forwards and kept its backwards for a backward stretch, which, with
no encoder backward ready yet, it then ran alone while every encoder stage idled (19 ms each
time on bench/specs/real/ul2_nnshape16.tsl: the first family's shortest play 3357 -> 3338 ms,
which the windows take to 3258, bound 3242; every other play of `bench/search_real.py`'s
16-device rows the same or not the shortest).

**Where it is offered.** The search takes the shortest play as a best plan in hand (`tuned.py`)
from `WIDE_DEVICES` devices on, where a micro-batch crosses many stages and the mixing costs
most, and the window sweep (`windows.py`) goes on from it. `python bench/search_real.py` (16
devices, N = 32): bench/specs/real/nnshape16.tsl, the second family reaches the makespan bound,
1955 ms, where the warmup search (`warmups.py`) gave 2005 and the windows took that to 1963;
ul2_nnshape16.tsl 3462 -> 3258 (the play 3338, then the windows);
`MEM=20` 5002 -> 4710; llama70b_vocab16.tsl 106028 -> 105078. Below 16 devices a play is taken
only where it reaches the makespan bound (bench/specs/real/mshape8.tsl: 6171 ms, found in 5.0 s
of CPU where the windows took 12.5): on nnshape8.tsl the play (3148) is shorter than the
extended repetend (3151), but the windows take that repetend to 3127 and the play only to 3143.

Its budget is a count of block instances laid out (`LOCKSTEP_WORK`), so the answer does not depend
on the machine or its load; only a wall-clock limit the user gave ends it sooner.
"""
from __future__ import annotations

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.clock import Clock, PlayBudget

NAME = "1f1b+ (lockstep)"
WIDE_DEVICES = 16  # from this many devices on the search keeps a play above the bound (module text)
LOCKSTEP_WORK = 300_000  # block instances laid out over all plays (about 2 s of CPU at 16 devices, N = 32)
LEAD_SHARE = 2  # a lead device has at least 1 / LEAD_SHARE of the busiest device's work a micro-batch
_STALLS = 4  # stretches in a row with nothing to run before the play waits for the next ready time


def lockstep(spec: Spec, n: int, than: int, work: int = LOCKSTEP_WORK, clock: Clock | None = None
             ) -> Schedule | None:
    """The shortest play of the module text strictly shorter than `than`, else None. Valid:
    every dependency with its lag, one block at a time per device, within every device's memory."""
    from tessel_dsl.errors import TesselError
    from tessel_dsl.validate import validate

    everyone = set(range(spec.devices))
    if (not any(set(b.devices) == everyone for b in spec.blocks) or spec.devices < 2
            or not any(b.kind.is_backward for b in spec.blocks)):
        return None
    budget = PlayBudget(work, clock, "the lockstep 1F1B+ plays")
    best, span = None, than
    for either in (False, True):
        for a in range(n + spec.devices + 1):
            if budget.done():
                break
            budget.spend(n * len(spec.blocks))
            got = _play(spec, n, a, either)
            if got is not None and got.makespan(spec) < span:
                best, span = got, got.makespan(spec)
    if best is not None:
        try:
            validate(spec, best)
        except TesselError:  # never expected: the play keeps every rule it checks
            return None
    return best


def _play(spec: Spec, n: int, warm: int, either: bool = False, share: float = LEAD_SHARE) -> Schedule | None:
    """One play with `warm` forward stretches first (module text); with `either`, a device with
    nothing of the stretch's kind ready starts its next block of the other kind with it. None
    when memory stalls it. `share`: `LEAD_SHARE`, which devices lead the first family's stretches."""
    from tessel_dsl.search.lags import edge_lags

    everyone = set(range(spec.devices))
    blocks = {b.name: b for b in spec.blocks}
    barrier = {x for x, b in blocks.items() if set(b.devices) == everyone}
    backward = {x for x, b in blocks.items() if b.kind.is_backward}
    preds, succs, lags = spec.preds, spec.succs, edge_lags(spec)
    cap = [spec.capacity(d) for d in range(spec.devices)]
    used = [0] * spec.devices
    free = [0] * spec.devices
    start: dict[tuple[str, int], int] = {}
    waiting = {(x, i): len(preds[x]) for x in blocks for i in range(n)}
    ready_at = dict.fromkeys(waiting, 0)
    ready = {k for k, c in waiting.items() if c == 0}

    # A micro-batch is admitted on a device by its first block there that allocates, and from
    # then on the device keeps room for all it allocates there (an all-device head's share
    # included) until all its blocks there have started: a device that filled itself with
    # forwards could otherwise leave no room for the all-device block every one of them waits on
    # (a vocabulary-parallel head after the last stage), and the play would deadlock.
    need = [sum(max(0, b.memory) for b in spec.blocks_on(d)) for d in range(spec.devices)]
    count = [len(spec.blocks_on(d)) for d in range(spec.devices)]
    kept = [0] * spec.devices
    admitted: set[tuple[int, int]] = set()
    begun: dict[tuple[int, int], int] = {}

    def run(x: str, i: int, at: int) -> int:
        b = blocks[x]
        start[x, i] = at
        ready.discard((x, i))
        for d in b.devices:
            free[d] = at + b.time
            used[d] += b.memory
            begun[d, i] = begun.get((d, i), 0) + 1
            if b.memory > 0 and (d, i) not in admitted:
                admitted.add((d, i))
                kept[d] += need[d]
            if begun[d, i] == count[d] and (d, i) in admitted:
                kept[d] -= need[d]
        for y in succs[x]:
            waiting[y, i] -= 1
            ready_at[y, i] = max(ready_at[y, i], at + b.time + lags.get((x, y), 0))
            if waiting[y, i] == 0:
                ready.add((y, i))
        return at + b.time

    def fits(x: str, i: int) -> bool:
        m = blocks[x].memory
        return all(used[d] + m <= cap[d] and (m <= 0 or (d, i) in admitted or kept[d] + need[d] <= cap[d])
                   for d in blocks[x].devices)

    def local(kind_backward: bool | None, t: int) -> list[tuple[int, str]]:
        """Ready own blocks (of the kind, or of either with None) that may start by `t`, by micro-batch."""
        return sorted((i, x) for x, i in ready if x not in barrier and ready_at[x, i] <= t and fits(x, i)
                      and (kind_backward is None or (x in backward) == kind_backward))

    def fitting(back: bool, end: int) -> tuple[int, bool, int, str] | None:
        """(start, other kind, mb, block) of the earliest ready own block that ends by `end`."""
        best = None
        for x, i in ready:
            if x in barrier or not fits(x, i):
                continue
            at = max([ready_at[x, i]] + [free[d] for d in blocks[x].devices])
            key = (at, (x in backward) != back, i, x)
            if at + blocks[x].time <= end and (best is None or key < best):
                best = key
        return best

    owners = {d for x, b in blocks.items() if x not in barrier for d in b.devices}
    # The lead devices (module text, "Who sets the kind"): at least half the busiest one's work.
    work = [sum(b.time for b in spec.blocks_on(d) if b.name not in barrier) for d in range(spec.devices)]
    lead = {d for d in owners if work[d] * share >= max(work)}

    def open_microbatches(now: int) -> None:
        """Run the all-device blocks that start a micro-batch (no predecessors), lowest first,
        while some device with blocks of its own has no forward ready at the time reached."""
        while True:
            sources = sorted((i, x) for x, i in ready if x in barrier and not preds[x] and fits(x, i))
            if not sources or owners <= {d for _, x in local(False, now) for d in blocks[x].devices}:
                return
            now = run(sources[0][1], sources[0][0], now)

    t, stretch, stalls = 0, 0, 0
    while len(start) < len(waiting):
        while True:  # all-device blocks that wait on a micro-batch's blocks: as soon as ready
            due = sorted((i, x) for x, i in ready if x in barrier and preds[x] and ready_at[x, i] <= t and fits(x, i))
            if not due:
                break
            t = run(due[0][1], due[0][0], t)
        back = stretch >= warm and (stretch - warm) % 2 == 1
        stretch += 1
        if not back:
            open_microbatches(t)
            t = max([t] + [free[d] for d in range(spec.devices)])
        taken: set[int] = set()
        for kind in (back, not back) if either else (back,):
            mine = local(kind, t)
            if not either:  # the other devices only fill a stretch a lead device runs in
                mine = [(i, x) for i, x in mine if lead & set(blocks[x].devices)] or mine
            for i, x in mine:
                if not taken & set(blocks[x].devices):
                    run(x, i, t)
                    taken |= set(blocks[x].devices)
            if not taken:
                break  # nothing of the stretch's kind: the stretch gives way, as without `either`
        if not taken:
            stalls += 1
            if stalls > _STALLS:
                later = [ready_at[k] for k in ready if ready_at[k] > t]
                if not later:
                    return None  # every device waits on memory: this warmup deadlocks
                t, stalls = min(later), 0
            continue
        stalls = 0
        end = max(free)
        while True:  # fill the stretch with whatever ready block ends within it
            fill = fitting(back, end)
            if fill is None:
                break
            run(fill[3], fill[2], fill[0])
        t = end
    return Schedule(n, tuple(sorted(Slot(s, x, i) for (x, i), s in start.items())), name=NAME)

