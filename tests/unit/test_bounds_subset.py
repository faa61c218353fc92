"""The per-device bound over a set of a device's blocks (`bounds.subset_bound`, module text):
worked by hand on the zero-bubble chain, where it is the time-optimal makespan for small N, equal
to the time-optimal solve (TO, an independent exact model) on interleaved chains, and never above
TO on random small specs with split backwards, blocks on several devices and links."""
from __future__ import annotations

import random

import pytest

from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.optimal import optimal
from tests.paths import ROOT


@pytest.mark.parametrize("n", [2, 3, 4])
def test_zero_bubble_chain_by_hand(n):
    # D = 4, F 1, I 2, W 1. Device 3 runs F3 and I3 of every micro-batch (3 each), none before
    # F0 F1 F2 (3), and after its last I3 the chain I2 I1 I0 W0 (7) still runs: 3 + 3 N + 7,
    # which is what TO proves; the whole device's head 3 + 4 N + shortest tail 0 is below it.
    spec = parse_file(ROOT / "specs" / "zerobubble.tsl", sets={"N": str(n)})
    assert makespan_bound(spec, n) == 3 + 3 * n + 7
    best = optimal(spec, n)
    assert best.info.proven and best.schedule.makespan(spec) == 3 + 3 * n + 7


@pytest.mark.parametrize("path, n", [("specs/interleaved.tsl", 2), ("bench/specs/zoo/tune/llama3_405b_interleaved32.tsl", 2),
                                     ("bench/specs/zoo/tune/llama3_405b_interleaved32.tsl", 4)])
def test_interleaved_chains_reach_the_time_optimum(path, n):
    # Two chunks per device: the set of a device's blocks deep in the chain (its second chunk's
    # forward and backward, say) has a longer head and tail than the device's first and last block.
    spec = parse_file(ROOT / path)
    best = optimal(spec, n)
    assert best.info.proven and makespan_bound(spec, n) == best.schedule.makespan(spec)


def _devset(rng: random.Random, devices: int, everyone: float) -> str:
    r = rng.random()
    if r < everyone:
        return "all"
    if r < everyone + 0.13:
        a = rng.randrange(devices - 1)
        return f"{a}..{a + 1}"
    return str(rng.randrange(devices))


def _random_spec(rng: random.Random, everyone: float = 0.12):
    """A random spec and its N; `everyone`: the share of blocks on every device."""
    devices = rng.choice([2, 3, 4])
    stages = rng.randint(devices, 2 * devices)
    split = rng.random() < 0.4
    places = [_devset(rng, devices, everyone) for _ in range(stages)]
    if rng.random() < 0.4:
        places = [str(s % devices) for s in range(stages)]
    mems = [rng.randint(0, 3) for _ in range(stages)]
    n = rng.randint(3, 6)
    memory = max(3, sum(mems)) * rng.choice([1, 1, 2]) // rng.choice([1, 2]) + rng.randint(0, 2)
    lines = ["placement fz", f"devices {devices}", f"memory {memory}", f"microbatches {n}", "mode train"]
    if rng.random() < 0.3:
        lines.append(f"link latency {rng.randint(1, 2)}")
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


# Seeds whose specs are valid and whose TO is quick.
@pytest.mark.parametrize("seed", [1000, 1001, 1002, 1003, 1004, 1005, 1007, 1008, 1009, 1010, 1021, 1029, 1033, 1045])
def test_never_above_the_time_optimum(seed):
    spec, n = _random_spec(random.Random(seed))
    best = optimal(spec, n)
    assert best.info.proven
    assert makespan_bound(spec, n) <= best.schedule.makespan(spec)
