"""The bound with the all-device blocks cut out of the time (`bounds.barrier_bound`, module text):
on the 16-device NN-shape it is the time-optimal makespan at small N, where the other bounds are
below it, and it is never above the time-optimal solve (TO, an independent exact model) on random
small specs whose blocks often run on every device, with links and split backwards."""
from __future__ import annotations

import random

import pytest

from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.search.bounds import barrier_bound, idle_bound, makespan_bound
from tessel_dsl.search.optimal import optimal
from tests.paths import ROOT


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


def _random_spec(rng: random.Random):
    devices = rng.choice([2, 3, 4])
    stages = rng.randint(devices, 2 * devices)
    split = rng.random() < 0.4
    places = ["all" if rng.random() < 0.35 else str(rng.randrange(devices)) for _ in range(stages)]
    mems = [rng.randint(0, 3) for _ in range(stages)]
    n = rng.randint(2, 5)
    lines = ["placement fz", f"devices {devices}", f"memory {max(3, sum(mems)) * 2}", f"microbatches {n}",
             "mode train"]
    if rng.random() < 0.3:
        lines.append(f"link latency {rng.randint(1, 3)}")
    back = []
    for s in range(stages):
        lines.append(f"forward F{s} on {places[s]} time {rng.randint(1, 4)} memory {mems[s]}")
        if split:
            lines += [f"input_grad I{s} of F{s} time {rng.randint(1, 4)}",
                      f"weight_grad W{s} of F{s} time {rng.randint(1, 3)} memory -{mems[s]}", f"I{s} -> W{s}"]
            back.append(f"I{s}")
        else:
            lines.append(f"backward B{s} of F{s} time {rng.randint(1, 6)} memory -{mems[s]}")
            back.append(f"B{s}")
    lines.append(" -> ".join([f"F{s}" for s in range(stages)] + back[::-1]))
    return parse("\n".join(lines) + "\n"), n


SEEDS = list(range(2000, 2030))


@pytest.mark.parametrize("seed", SEEDS)
def test_never_above_the_time_optimum(seed):
    spec, n = _random_spec(random.Random(seed))
    bound = barrier_bound(spec, n)
    best = optimal(spec, n, effort=5)
    # a schedule TO found bounds the optimum from above, proven or not
    assert bound <= best.schedule.makespan(spec)
