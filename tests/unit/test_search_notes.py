"""The search's notes: each kind worded once (search/notes.py), checked against sentences written
out by hand, including the cases a quick search does not reach."""
from __future__ import annotations

import pytest

from tessel_dsl.search.notes import note, render

SEED = dict(n=3, nr=4, dropped=1)
CASES = [
    (note("memory-grows", memory=2, device=1, n=5, serial=False),
     "a micro-batch leaves 2 memory unit(s) on device 1, so no repetend can repeat; all 5 micro-batches "
     "were solved directly"),
    (note("memory-grows", memory=2, device=1, n=5, serial=True),
     "a micro-batch leaves 2 memory unit(s) on device 1, so no repetend can repeat; all 5 micro-batches "
     "run one after another: the direct solve found no schedule within its budget"),
    (note("below-nr-seed", too_large=True, truncated=True, baseline=None, seed_makespan=None, **SEED),
     "N=3 is below the repetend's N_R=4 and too large to solve directly: the schedule for N_R micro-batches "
     "without the last 1 is used (not proven optimal; the repetend is kept for larger N)"),
    (note("below-nr-seed", too_large=False, truncated=False, baseline="1f1b", seed_makespan=40, **SEED),
     "N=3 is below the repetend's N_R=4 and its direct solve found nothing shorter within budget: 1F1B for "
     "N=3 (makespan 40) is used (at the makespan bound; the repetend is kept for larger N)"),
    (note("below-nr-solved", optimal=False, baseline=None, seed_makespan=None, **SEED),
     "N=3 is below the repetend's N_R=4: solved the 3 micro-batch(es) directly, starting from the schedule "
     "for N_R micro-batches without the last 1 (the repetend is kept for larger N)"),
    (note("cut-unproven", cuts=("the warmup", "the cooldown")),
     "not proven: a budget or time limit cut the warmup, the cooldown (the best found is used)"),
    (note("cut-but-proved", proof="the end re-solve proved it", cuts=("the warmup",)),
     "the end re-solve proved it, so it is optimal for this N although a budget cut the warmup"),
]


@pytest.mark.parametrize("given, sentence", CASES, ids=[c[0].kind for c in CASES])
def test_each_note_reads_as_written(given, sentence):
    assert render([given]) == sentence


def test_notes_join_in_order():
    assert render([note("text", text="first"), note("direct-cut")]) == (
        "first; a budget or time limit cut the direct solve: the makespan is not proven optimal")
    assert render([]) == ""

