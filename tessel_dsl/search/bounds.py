"""A lower bound on the makespan of N micro-batches, stated in every plan next to the makespan.

The bound takes the larger of the time bounds below and the memory bounds of `membound.py` (a
micro-batch holds memory on a device for at least a dependency chain, and the device holds only so
many at once) and `memfill.py` (a device fills its memory before it may free any). Device ``d`` runs ``N * W_d`` of work (``W_d``
its share of one micro-batch, multi-device blocks included); before its first block can start,
at least the shortest dependency chain leading to one of its blocks has run (the *head*), and
after its last block ends at least the shortest chain leaving one of its blocks must still run
(the *tail*). So no schedule is shorter than ``head_d + N * W_d + tail_d`` for any device, nor
than the longest dependency chain of one micro-batch.

A chain counts the transfer lag of each of its edges (`lags.py`: a consumer on a device its
producer is not on starts at least that long after the producer ends, in the same whole units as
the block times): every schedule the search may return keeps those gaps, so a chain through such
an edge takes at least the lag longer, wherever the chain sits. A spec without a link has no lags
and the same bound as without them.

A block that runs on every device (an embedding split over all of them) can't overlap anything,
which sharpens the per-device bound (`idle_bound`): before device ``d`` starts its first block
that is not such a block, it can only run all-device blocks, and while a block of the chain
leading there runs on other devices only, ``d`` can run nothing at all. So ``d`` idles at least
the longest such chain counting only the blocks ``d`` is not on, and the same after its last one.
On the M- and NN-shapes this is the makespan the search reaches (the head ignored that ``d``
can't fill the wait with the all-device blocks). Here the lags do not count: during a transfer
no device is busy, so ``d`` may run an all-device block then (a source
``A`` on device 1, time 1, feeding ``B`` on device 0, time 1, with lag 5, beside an all-device
``E`` of time 5: two micro-batches take 13, each ``E`` running while an ``A``'s output
is in transfer, where counting the lag would claim 6 + 2 * 6 = 18). Without all-device blocks the
plain per-device bound, lags included, is never below this one.

The per-device bound also holds for any set ``S`` of a device's blocks (`subset_bound`): all
``N`` instances of each run one at a time on ``d``, none before the shortest head in ``S``, and
after the last of them ends comes at least the shortest tail in ``S``. The best set for a given
shortest head ``H`` and shortest tail ``T`` takes every block on ``d`` whose head is at least
``H`` and whose tail is at least ``T``, so trying each pair of ``d``'s head and tail values finds
the largest ``H + N * W_S + T``. With few micro-batches a set of blocks deep inside the chain
beats the whole device, whose shortest head and tail are those of its first and last block: on
the zero-bubble chain `specs/zerobubble.tsl` (D = 4) device 3's F3 and I3 give 16, 19, 22 for
N = 2, 3, 4, and on the zoo's interleaved 405B chain (32 devices, two chunks each) 6543, 6711,
7089, 7905 for N = 2, 4, 8, 16: the time-optimal makespans all, where the other bounds give 15,
17, 19 and 6527 to 7479.

All-device blocks can also be taken out of the time altogether (`barrier_bound`). While one runs,
no other block runs anywhere, so the instances of such blocks fill disjoint stretches of time,
``N * W_all`` in all (``W_all`` their work for one micro-batch). Cut those stretches out of a
schedule and close the gaps: every other block keeps its length, its device and the order of its
start and end against every other block's, so what is left is a schedule of the same spec with
the all-device blocks taking no time (lags aside: a transfer may run during such a block, so none
is counted here). The per-device and chain bounds of that spec, plus ``N * W_all``, bound the
makespan. With few micro-batches this is the sharper one on the M- and NN-shapes: on
bench/specs/real/nnshape16.tsl (16 devices, four all-device blocks a micro-batch, 16 ms in all)
it gives 489, 571, 653 and 735 for N = 2, 4, 6 and 8 where the others give 481, 547, 613 and
683; the time-optimal solve proves 489 and 571, and finds 653 and 748 (the search's plans too);
from N = 16 on both give the same there. `barriers.py` states the cut on its own; `membound.py`
puts its memory bounds on the cut spec too.
"""
from __future__ import annotations

from tessel_dsl.analysis import chains
from tessel_dsl.ir import Spec
from tessel_dsl.search.lags import edge_lags

# [spec, microbatches, bound, (sharper bound, its devices) or None, (spec, N) it derives from or None]
# of the last few (spec, N) asked: a search asks several times, and in between about the specs it
# derives (two copies unrolled), so one entry would make it solve the device relaxations again
_LAST: list = []
_KEEP = 4


def _entry(spec: Spec, microbatches: int) -> list | None:
    return next((e for e in _LAST if e[0] is spec and e[1] == microbatches), None)


def _kept(spec: Spec, microbatches: int) -> list:
    got = _entry(spec, microbatches)
    if got is None:
        got = [spec, microbatches, _makespan_bound(spec, microbatches), None, None]
        _LAST[:] = [*_LAST[-(_KEEP - 1):], got]
    return got


def derives(derived: Spec, m: int, spec: Spec, n: int) -> None:
    """Say that every schedule of `derived` at `m` micro-batches gives one of `spec` at `n` no
    longer (k copies unrolled, m = ceil(n / k): fold it, keep the first n). `spec`'s bound then
    holds for `derived` too, and `makespan_bound` takes it instead of solving `derived`'s own
    relaxations: those cost seconds more and gave less where measured (bench/specs/real/
    memchain.tsl, two copies: 1317 against the spec's 1416, 3 s of CPU)."""
    _kept(derived, m)[4] = (spec, n)


def makespan_bound(spec: Spec, microbatches: int, above: int | None = None) -> int:
    """The largest of the per-device bounds, the critical path and the memory bound (module text).

    `above`: the makespan of a schedule in hand. When it is above those bounds, the device
    relaxations (`devrelax.py`, CP-SAT solves on a small deterministic budget) are also tried, and
    the larger is returned: they can only matter when they could prove that schedule optimal, and
    they cost up to a few seconds of CPU, so they are not paid for where the cheap bounds settle it,
    nor where the whole schedule with memory as cuts (`heldcuts.py`, which the search solves first
    for a baseline in hand) already proves it: on the zoo's 405B chain over 32 devices that spares
    3 of the search's 6.5 s of CPU."""
    got = _kept(spec, microbatches)
    if above is None or above <= got[2]:
        return got[2]
    from tessel_dsl.search.heldcuts import cached

    cut = cached(spec, microbatches)  # the whole schedule with memory as cuts, when it was solved
    if cut is not None and cut.bound >= above and got[3] is None:
        return max(got[2], cut.bound)  # it already proves the schedule in hand: no relaxations to pay for
    if got[4] is not None:
        sharper = makespan_bound(*got[4], above=above)
    else:
        if got[3] is None:
            from tessel_dsl.search.devrelax import device_relaxation

            got[3] = device_relaxation(spec, microbatches)
        sharper = got[3][0]
    return max(got[2], sharper, cut.bound if cut is not None else 0)


def source_notes(spec: Spec, microbatches: int, stated: int, unit: int = 1) -> tuple:
    """Notes saying where `stated` (the plan's makespan bound) comes from, when `makespan_bound`
    last gave `spec` at `microbatches` a sharper bound than the analytic ones: one device alone
    or a set of devices (`devrelax.py`), or the whole schedule with memory as holding cuts (`heldcuts.py`), beside
    what the others give. Times scaled by `unit` (`timescale.py`)."""
    from tessel_dsl.search.heldcuts import cached
    from tessel_dsl.search.notes import note

    got = _entry(spec, microbatches)
    if got is None:
        return ()
    cheap, (device_bound, devices) = got[2], got[3] or (0, ())
    cut = cached(spec, microbatches)
    said = ()
    if device_bound > cheap and device_bound == stated:
        cuts_too = cut is not None and cut.bound == device_bound  # then "the other bounds" are the analytic ones
        others = max(cheap, cut.bound if cut is not None and not cuts_too else 0) * unit
        extra = {"cuts_too": True} if cuts_too else {}
        if len(devices) == 1:
            said += (note("bound-one-device", bound=device_bound * unit, device=devices[0], analytic=others, **extra),)
        else:
            said += (note("bound-devices", bound=device_bound * unit, devices=list(devices), analytic=others, **extra),)
    others = max(cheap, device_bound)
    if cut is not None and cut.bound > others and cut.bound == stated:
        said += (note("bound-held-cuts", bound=cut.bound * unit, analytic=others * unit),)
    return said


def _makespan_bound(spec: Spec, microbatches: int) -> int:
    from tessel_dsl.search.membound import memory_makespan_bound
    from tessel_dsl.search.memfill import fill_bound

    time = {b.name: b.time for b in spec.blocks}
    head, tail = chains(spec, time, edge_lags(spec))
    bound = max((head[n] + time[n] + tail[n] for n in time), default=0)
    # (the whole device is one of the sets `subset_bound` tries: head_d + N * W_d + tail_d)
    return max(bound, subset_bound(spec, microbatches, time, head, tail), idle_bound(spec, microbatches),
               barrier_bound(spec, microbatches), memory_makespan_bound(spec, microbatches),
               fill_bound(spec, microbatches))


def barrier_bound(spec: Spec, microbatches: int) -> int:
    """``N * W_all`` plus the chain and per-device bounds with the all-device blocks taking no
    time and no lags (module text, `barriers.py`); 0 without such blocks."""
    from tessel_dsl.search.barriers import without_barriers

    cut = without_barriers(spec)
    if cut is None:
        return 0
    reduced, wall = cut
    time = {b.name: b.time for b in reduced.blocks}
    head, tail = chains(reduced, time)
    rest = max(max(head[n] + time[n] + tail[n] for n in time), subset_bound(reduced, microbatches, time, head, tail))
    return microbatches * wall + rest


def subset_bound(spec: Spec, microbatches: int, time: dict[str, int], head: dict[str, int],
                 tail: dict[str, int]) -> int:
    """The per-device bound over the best set of a device's blocks (module text); `head` and
    `tail` are the chains with lags."""
    bound = 0
    for d in range(spec.devices):
        on = [b.name for b in spec.blocks_on(d)]
        for h in {head[y] for y in on}:
            for t in {tail[y] for y in on}:
                work = sum(time[y] for y in on if head[y] >= h and tail[y] >= t)
                if work:
                    bound = max(bound, h + microbatches * work + t)
    return bound


def idle_bound(spec: Spec, microbatches: int) -> int:
    """``idle head + N * W_d + idle tail`` for every device (the module text says why it holds)."""
    everyone = set(range(spec.devices))
    bound = 0
    for d in range(spec.devices):
        on = spec.blocks_on(d)
        local = [b.name for b in on if not everyone <= set(b.devices)]
        if not local:
            continue
        # Only blocks `d` is not on count: during them `d` idles; not the lags (the module text).
        weight = {b.name: 0 if d in b.devices else b.time for b in spec.blocks}
        head, tail = chains(spec, weight)
        work = sum(b.time for b in on)
        bound = max(bound, min(head[n] for n in local) + microbatches * work + min(tail[n] for n in local))
    return bound
