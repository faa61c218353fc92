"""The bound with the all-device blocks cut out of the time (`bounds.barrier_bound`, module text):
on the 16-device NN-shape it is the time-optimal makespan at small N, where the other bounds are
below it, and it is never above the time-optimal solve (TO, an independent exact model) on random
small specs whose blocks often run on every device, with links and split backwards."""
from __future__ import annotations

import random

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.bounds import barrier_bound, idle_bound, makespan_bound
from tessel_dsl.search.optimal import optimal
from tests.paths import ROOT
from tests.unit.test_bounds_subset import _random_spec


@pytest.mark.parametrize("n, expected, before", [(2, 489, 481), (4, 571, 547)])
def test_the_nn_shape_at_small_n(n, expected, before):
    # bench/specs/real/nnshape16.tsl: E1 (6 ms), E2 and E2B (2), E1B (6) on all 16 devices; the
    # encoder's devices run F 12 and B 25, the decoder's F 6 and B 11. Cut out, the blocks on
    # every device take 16 ms a micro-batch; what is left of one micro-batch is the chain
    # 8 * 12 + 8 * 6 + 8 * 11 + 8 * 25 = 432, and device 0's last B0s come one after another:
    # 432 + (N - 1) * 25 + 16 N (489 and 571), what TO proves.
    spec = parse_file(ROOT / "bench/specs/real/nnshape16.tsl")
    assert barrier_bound(spec, n) == expected == 432 + (n - 1) * 25 + 16 * n
    assert idle_bound(spec, n) == before < expected
    best = optimal(spec, n, effort=15)
    assert best.info.proven and best.schedule.makespan(spec) == expected == makespan_bound(spec, n)


# Seeds whose specs are valid, have blocks on every device and whose TO is quick.
SEEDS = [2002, 2005, 2014, 2017, 2019, 2021, 2024, 2025, 2027, 2028, 2033, 2034, 2035, 2036, 2040, 2042, 2043,
         2044, 2045, 2049, 2051, 2052, 2058, 2059, 2064, 2078, 2079, 2082, 2085, 2093]


@pytest.mark.parametrize("seed", SEEDS)
def test_never_above_the_time_optimum(seed):
    spec, n = _random_spec(random.Random(seed), everyone=0.35)
    bound = barrier_bound(spec, n)
    assert bound > 0  # the spec has blocks on every device
    best = optimal(spec, n, effort=5)
    # a schedule TO found bounds the optimum from above, proven or not
    assert bound <= best.schedule.makespan(spec)
