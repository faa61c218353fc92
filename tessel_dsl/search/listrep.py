"""What the search keeps when no solve settles a period: a list-scheduled repetend.

The period walk (`period_walk.py`) starts from the one-micro-batch repetend
(`repetend.serial_repetend`) and kept it when its budget settled no shorter period. On a
memory-bound spec over 16 devices that happens: the cyclic model is too large for the walk's few
units of solver budget anywhere between the floor and the one-micro-batch period, so a plan kept a
repetend far slower than its own schedule for N (bench/specs/real/llama70b_vocab16.tsl: 9144 ms a
micro-batch where the plan runs 3331). Extended to another N (`tessel simulate -n`, `tessel run
-n`), such a repetend loses to any baseline, and the plan states it as its period.

Modulo list scheduling (`construct.py`) builds a repetend at a given period without a solver,
but it does not model memory: where memory binds it is valid only above some period. So the
shortest valid one is looked for by bisection between the period floor and the one-micro-batch
period, each candidate extended and checked by the validator (memory included), and kept when
it is shorter (`findrep.py`; 9144 -> 3444 ms on that spec). Validity need not be monotone in the
period, so the answer is the shortest valid period the bisection met, not a proven minimum. It is
looked for only once the walk has settled nothing: the packing costs seconds on 16-device M- and
NN-shapes, where the walk finds shorter periods anyway.
"""
from __future__ import annotations

from typing import Callable

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Slot


def list_repetend(spec: Spec, floor: int, above: int, left: Callable[[], float | None] | None = None
                  ) -> tuple[Repetend, tuple[Slot, ...], tuple[Slot, ...]] | None:
    """(repetend, warmup, cooldown numbered for N = N_R) of the shortest valid list-scheduled
    repetend the bisection over ``[floor, above)`` meets, or None when it meets none (module text).
    `left` returns the wall-clock seconds left (None: no limit); once they run out, the best so far."""
    best = None
    lo, hi = floor, above
    while lo < hi:
        remaining = left() if left is not None else None
        if remaining is not None and remaining <= 0:
            break
        mid = (lo + hi) // 2
        got = _valid_at(spec, mid, left)
        if got is None:
            lo = mid + 1
        else:
            best, hi = got, mid
    return best


def _valid_at(spec: Spec, period: int, left) -> tuple[Repetend, tuple[Slot, ...], tuple[Slot, ...]] | None:
    """The list-scheduled repetend at `period` if its extension over a few periods is a valid
    schedule: memory on a device depends only on the order of its blocks, which repeats from the
    second instance of the repetend on, so three instances and the ends show every level it
    reaches (`extend.py`)."""
    from tessel_dsl.search.construct import modulo_list_repetend
    from tessel_dsl.search.extend import Parts, extend

    built = modulo_list_repetend(spec, period, left)
    if built is None:
        return None
    rep, warm, cool = built
    try:
        extend(spec, Parts(warm, rep, cool), 2 * rep.nr + 2)  # compacted and validated
    except TesselError:
        return None
    return built
