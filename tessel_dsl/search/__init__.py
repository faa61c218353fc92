"""The Tessel search and the schedules it is compared with.

driver      the search end to end (paper Algorithm 1): bounds, repetend, completion, extension
result      what a search returns (`SearchResult`) and reports while it runs (`Progress`)
notes       what the search says about its answer, as data (a kind and values), and its wording
finish      finishing for one N (baseline orders, end re-solve); re-extending a plan to another N
incumbent   the best baseline first: the answer when it reaches the bound or no repetend can beat it
inflight    memory-capped 1F1B with each stage's in-flight limit searched (a best plan in hand)
setwidth    memory-aware interleaved 1F1B with its micro-batch set size searched (a best plan in hand)
warmups     1F1B+ with each stage's warmup searched, between 1F1B+ and GPipe+ (a best plan in hand)
lockstep    1F1B+ with every stage running forwards, then backwards, together between all-device blocks (a best plan in hand)
zbdepth     memory-capped ZB-H1 with each stage's forward depth searched (a best plan in hand)
windows     the schedule re-solved a window of time at a time, the rest held (shorter plans where memory binds)
tuned       the baselines the search tunes for its N: which run, and rebuilt for another N
bounds      the lower bound on the makespan of N micro-batches that plans state
membound    lower bounds from memory (how long a micro-batch holds memory, how many fit at once)
onecopy     the period of repetends holding each block once on a memory-bound chain
memfill     a lower bound from a device that fills its memory before it may free any
barriers    the spec with its all-device blocks taking no time, under which the bounds also hold
devrelax    a makespan bound from one memory-bound device alone, the rest of the pipeline as delays (CP-SAT)
heldcuts    every block instance again with memory as holding cuts: a bound, and often a shorter or proven plan
timescale   the search's time unit: block times over their common divisor, answers scaled back
twins       devices that run the same blocks (a tensor-parallel group) searched as one device
kcopy       the search over repetends holding every block k times (unrolled with `copies`)
copies      unrolling a spec k times, folding its schedule back
chaincycle  k-copy repetends of a memory-bound chain from one small cyclic model
devchain    device chains (a block on one device or on all, a forward path visiting each device once), memory as holds
clock       the user's wall-clock limit and the time unit notes speak in
repetend    repetend construction by enumerating offsets (paper §4.1)
modulo      repetend construction with one cyclic model per period
period_walk  the smallest period: a floor, then galloping and bisection over the cyclic model
findrep     the repetend step: the walk or the enumeration, and what is kept when nothing settles
listrep     the list-scheduled repetend at the shortest valid period a bisection meets (kept when nothing settles)
construct   a repetend at the period bound without a solver (modulo list scheduling)
completion  time-optimal warmup and cooldown for a repetend (paper §4.2)
periodic    warmup and cooldown read off the periodic schedule (completion checks, no solver)
extend      the repetend repeated to N micro-batches, then compacted
direct      all N micro-batches in one solve (small N), with a budget that grows with its size
compact     every block as early as its dependencies, transfers and devices allow, keeping the order
lags        transfer lags: the gap a spec's link puts between a block and a consumer elsewhere
refine      finishing for one N: better baseline orders, end re-solve
optimal     the time-optimal schedule (TO) for comparison
solvers/    one small scheduling problem, answered by CP-SAT or Z3
baselines/  GPipe, 1F1B, 1F1B+, GPipe+, Chimera-direct, zero-bubble, and the comparison table

`search` is imported on first use, so importing a module of this package stays cheap.
"""
from __future__ import annotations

from typing import Any

_LAZY = {"search": "driver", "SearchResult": "result", "Progress": "result", "METHODS": "driver",
         "reextend": "finish"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
