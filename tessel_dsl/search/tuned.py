"""The baselines the search tunes for its N, beside the plain ones (best plans in hand).

Each is a plain baseline with one of its choices searched: memory-capped 1F1B's in-flight limits
(`inflight.py`), memory-aware interleaved 1F1B's set size (`setwidth.py`), memory-capped ZB-H1's
forward depths (`zbdepth.py`), 1F1B+'s warmups (`warmups.py`) and 1F1B+ with the stages in
lockstep between all-device blocks (`lockstep.py`). `add_tuned` runs those that
can help once the plain baselines are built (`refine.best_baseline`); `rebuild` builds one that
a plan names for another N (`finish.baseline_for`): it has no fixed order to build by name, so
it is tuned again, or is its plain baseline where tuning finds nothing shorter.
"""
from __future__ import annotations

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search import inflight, lockstep, setwidth, warmups, zbdepth
from tessel_dsl.search.clock import Clock

# tuned baseline -> the plain one it is rebuilt from (for the warmups GPipe+: it always fits
# memory, in waves)
PLAIN = {inflight.NAME: "1f1b-capped", setwidth.NAME: "interleaved-1f1b", zbdepth.NAME: "zb-h1-capped",
         warmups.NAME: "gpipe+", lockstep.NAME: "gpipe+"}


def add_tuned(spec: Spec, n: int, found: list[tuple[int, int, Schedule, str]], *, large: bool,
              clock: Clock | None) -> None:
    """Append to `found` ((makespan, index, schedule, name) of each plain baseline within M) every
    tuned baseline that comes out strictly shorter than its start. `large`: the schedule is too
    large for the end re-solve, which on smaller ones finds more than a set size would
    (interleaved D=4, N=16: 142 from the extended repetend, 147 from the best set size)."""
    from tessel_dsl.search.bounds import makespan_bound

    def above(span: int) -> bool:  # (the bound only where a tuner could use it)
        return span > makespan_bound(spec, n)

    def add(tuned: Schedule | None, name: str) -> None:
        if tuned is not None:
            found.append((tuned.makespan(spec), len(found), tuned, name))

    if any(name == "1f1b-capped" for _, _, _, name in found):
        add(inflight.searched_capped(spec, n, clock=clock), inflight.NAME)
    # The others only above the bound: else nothing is shorter.
    for span, _, _, name in list(found):
        if name == "interleaved-1f1b" and large and above(span):
            add(setwidth.searched_interleaved(spec, n, span, clock=clock), setwidth.NAME)
    for span, _, _, name in list(found):
        if name == "zb-h1-capped" and above(span):
            add(zbdepth.searched_depths(spec, n, span, clock=clock), zbdepth.NAME)
    # Warmups only with multi-device blocks (on a plain chain 1F1B+ is 1F1B, whose in-flight
    # depths `inflight.py` tunes where memory binds), and only against the shortest so far.
    shortest = min((span for span, _, _, _ in found), default=None)
    if (any(b.is_multi_device for b in spec.blocks) and any(name in ("1f1b+", "gpipe+") for _, _, _, name in found)
            and above(shortest)):
        add(warmups.searched_warmups(spec, n, shortest, clock=clock), warmups.NAME)
    # Lockstep stretches (only where blocks run on every device: `lockstep.py` says why), against
    # the shortest so far, the warmup search's included; below `lockstep.WIDE_DEVICES` devices
    # only when the play reaches the makespan bound (lockstep.py, "Where it is offered").
    shortest = min((span for span, _, _, _ in found), default=None)
    if shortest is not None and above(shortest):
        got = lockstep.lockstep(spec, n, shortest, clock=clock)
        if got is not None and (spec.devices >= lockstep.WIDE_DEVICES or not above(got.makespan(spec))):
            add(got, lockstep.NAME)


def rebuild(spec: Spec, name: str, microbatches: int) -> Schedule:
    """The baseline `name` built for `microbatches`; a tuned one tuned again for it (module text)."""
    from tessel_dsl.search.baselines import build

    built = build(spec, PLAIN.get(name, name), microbatches)
    if name == inflight.NAME:
        return inflight.searched_capped(spec, microbatches) or built
    tune = {setwidth.NAME: setwidth.searched_interleaved, zbdepth.NAME: zbdepth.searched_depths,
            warmups.NAME: warmups.searched_warmups, lockstep.NAME: lockstep.lockstep}.get(name)
    return (tune(spec, microbatches, built.makespan(spec)) if tune else None) or built
