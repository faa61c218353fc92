"""What a run of a chosen plan tells the next choice: its blocks' measured times, and what a block
spread over every device cost beyond them.

A run's report (`tessel run --json`, `Pipeline`'s and the executor's `RunReport.summary()`) holds
`block_seconds` -- each block's median duration, a spread block's including its collectives -- the
measured iteration, and the iteration replayed from those median times with free transfers
(`simulated_block_medians`; `simulated` in reports written before that key). `tessel plan
--from-run REPORT` re-costs the candidate that ran with those times and searches its schedule
again on them; given several reports (the option repeated), each re-costs its own candidate, so
no candidate that has run is left on the profile's figures, which the choice would favour. When that candidate spreads
blocks over the devices, it also measures the *spread overhead*: the part of the iteration the
replay does not hold, per execution of a spread block,

    (measured - replayed iteration) / (N x 2 x spread blocks)

(each spread block runs forward and backward once per micro-batch on every device). Every spread
block of every candidate is then costed that much longer (the largest of several reports'), forward and backward. It is a
measurement of the machine and the runtime, not of the model's work: each spread block is a
rendezvous of all the devices, each of which must have issued it from its host and finished what
came before it on its GPU; where the host has work to catch up on (the DTensor dispatch of the
sharded head and loss) every device waits for the last one. The whole gap is charged to the spread
blocks, so a runtime cost the plan has elsewhere (transfers, other host time) lands on them too.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.errors import TesselError


@dataclass(frozen=True)
class RunCosts:
    """What `from_report` reads: the placement that ran, its blocks' seconds and (for a plan with
    spread blocks) the spread overhead it measured."""

    candidate: str
    block_seconds: dict[str, float]
    spread_overhead: float | None
    measured_s: float
    replayed_s: float
    spread_executions: int       # per device and iteration


def spread_overhead(measured_s: float, replayed_s: float, microbatches: int, spread_blocks: int) -> float:
    """Seconds per execution of a spread block, each direction: the iteration's gap to its replay
    spread over the 2 x N x `spread_blocks` executions a device runs (never below 0)."""
    if microbatches < 1 or spread_blocks < 1:
        raise ValueError("a spread overhead needs at least one micro-batch and one spread block")
    return max(0.0, measured_s - replayed_s) / (2 * microbatches * spread_blocks)


def from_report(report: dict, spread_of: dict[str, tuple[str, ...]], where: str = "the run report") -> RunCosts:
    """The costs a run report gives the candidate it ran. `spread_of` maps each candidate's name to
    its spread forward blocks; the report's plan is matched by its placement's name (`mshape_H`
    for the candidate mshape-H, as `tessel plan` writes it)."""
    try:
        name = str(report["plan"])
        blocks = {str(k): float(v) for k, v in report["block_seconds"].items()}
        n = int(report["microbatches"])
        # The replay on the blocks' median times (what a plan searched on `block_seconds` predicts);
        # reports written before it had its own key hold it as `simulated`.
        replay = report.get("simulated_block_medians", report["simulated"])
        measured, replayed = float(report["measured"]["iteration"]), float(replay["iteration"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise TesselError(f"{where}: not a run report (`tessel run --json`, a Pipeline run's summary): "
                          f"missing or bad {e}") from None
    by_placement = {c.replace("-", "_"): c for c in spread_of}
    if name not in by_placement:
        raise TesselError(f"{where}: its plan {name!r} is none of the candidates "
                          f"({', '.join(sorted(by_placement))}); re-costing needs a run of a plan `tessel plan` wrote")
    cand = by_placement[name]
    spread = spread_of[cand]
    over = spread_overhead(measured, replayed, n, len(spread)) if spread else None
    return RunCosts(cand, blocks, over, measured, replayed, 2 * n * len(spread))
