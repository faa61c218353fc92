"""Memory-aware interleaved 1F1B with its set size searched (`search/setwidth.py`): valid,
within memory, shorter than the baseline's powers of two where memory binds, never below the
stated bound, the same answer twice, and offered to the search as its best plan in hand where
the schedule is too large for the end re-solve."""
from __future__ import annotations

from tessel_dsl.lang.parser import parse
from tessel_dsl.search.baselines import build
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.refine import REFINE_MAX_TASKS, best_baseline
from tessel_dsl.search.setwidth import NAME, searched_interleaved
from tessel_dsl.validate import validate


def looped(devices: int, chunks: int, n: int, memory: int, mode: str = "train"):
    """`chunks` chunks per device, chunk c on device c mod `devices` (Megatron's placement)."""
    lines = [f"devices {devices}", f"memory {memory}", f"microbatches {n}", f"mode {mode}"]
    lines += [f"forward F{c * devices + i} on {i} time 2 memory 1 grad time 4"
              for c in range(chunks) for i in range(devices)]
    lines += [f"chain(F{{k}} for k in 0..{chunks * devices - 1})", "derive backward"]
    return parse("\n".join(lines) + "\n")


def test_a_set_size_between_the_powers_of_two_beats_the_capped_baseline():
    # 6 groups of 3 chunks, 7 chunk activations fit per device: the baseline plays sets of 6, 3
    # and 1 micro-batches (and Megatron's order with shorter warmups); sizes 2, 4 and 5 are new.
    spec = looped(6, 3, 24, 7)
    assert 24 * len(spec.blocks) > REFINE_MAX_TASKS  # too large for the end re-solve
    base = build(spec, "interleaved-1f1b", 24)
    assert base.makespan(spec) == 1272
    got = searched_interleaved(spec, 24, base.makespan(spec))
    assert got is not None
    validate(spec, got)  # dependencies, one block at a time, memory
    assert makespan_bound(spec, 24) <= got.makespan(spec) == 912 < 1272
    assert searched_interleaved(spec, 24, base.makespan(spec)).slots == got.slots
    best, name = best_baseline(spec, 24, than=None)
    assert name == NAME and best.slots == got.slots


def test_small_schedules_are_left_to_the_end_re_solve():
    # 288 block instances: the end re-solve of the extended repetend does better than a set size
    # (interleaved D=4, N=16: 142 against 147), so the search is not offered it.
    spec = looped(6, 3, 8, 7)
    got = searched_interleaved(spec, 8, build(spec, "interleaved-1f1b", 8).makespan(spec))
    assert got is not None and got.makespan(spec) == 336
    assert best_baseline(spec, 8, than=None)[1] != NAME


def test_nothing_shorter_than_asked_and_nothing_to_do_without_memory_in_flight():
    spec = looped(6, 3, 8, 7)
    assert searched_interleaved(spec, 8, 336) is None  # strictly shorter than `than` only
    assert searched_interleaved(looped(6, 3, 8, 7, mode="infer"), 8, 10 ** 6) is None
    # One group is plain 1F1B: no sets to size.
    assert searched_interleaved(looped(1, 3, 8, 7), 8, 10 ** 6) is None
