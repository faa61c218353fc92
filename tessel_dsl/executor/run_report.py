"""What a run returns: per-rank results merged into one measured timeline, and the numbers
(iteration time, per-device busy and wait time) measured and replayed from the plan."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from tessel_dsl.executor.trace import Event, action_durations, block_durations, replay, summarize
from tessel_dsl.plan import Plan


@dataclass
class RankResult:
    """One rank's share: timings of every measured iteration, and first-iteration values."""

    rank: int
    device: str = "cpu"
    steps: list[list[tuple[str, float, float]]] = field(default_factory=list)
    losses: dict[int, float] = field(default_factory=dict)
    outputs: dict[tuple[str, int], Any] = field(default_factory=dict)
    grads: list[tuple[str, int | None, int, Any]] = field(default_factory=list)
    transport: str = "nccl"  # how messages moved: "copy" (executor/copy_links.py) or the process group's


@dataclass
class RunReport:
    """The merged outcome of `executor.run`.

    `timelines[i]` holds iteration i's events ``(device, action, start_s, end_s)``; `iterations`
    the iteration times (slowest device); `losses` maps micro-batch to loss (training);
    `outputs` maps (sink block, micro-batch) to its output tensors (inference); `grads` lists
    ``(reference name, dim, start, grad)`` from every rank.
    """

    plan: Plan
    backend: str
    device: str
    timelines: list[list[Event]]
    losses: dict[int, float] = field(default_factory=dict)
    outputs: dict[tuple[str, int], Any] = field(default_factory=dict)
    grads: list[tuple[str, int | None, int, Any]] = field(default_factory=list)
    transport: str = "nccl"

    @classmethod
    def from_ranks(cls, plan: Plan, ranks: list[RankResult], backend: str) -> "RunReport":
        ranks = sorted(ranks, key=lambda r: r.rank)
        n = min(len(r.steps) for r in ranks)
        timelines = [[(r.rank, a, s, e) for r in ranks for a, s, e in r.steps[i]] for i in range(n)]
        rep = cls(plan, backend, ranks[0].device, timelines, transport=ranks[0].transport)
        for r in ranks:
            for mb, loss in r.losses.items():
                rep.losses.setdefault(mb, loss)
            for k, v in r.outputs.items():
                rep.outputs.setdefault(k, v)
            rep.grads.extend(r.grads)
        return rep

    # -- numbers ---------------------------------------------------------------------------
    @property
    def iterations(self) -> list[float]:
        return [summarize(t, self.plan.spec.devices)["iteration"] for t in self.timelines]

    def median_index(self) -> int:
        its = self.iterations
        med = statistics.median_low(its)
        return its.index(med)

    @property
    def loss(self) -> float | None:
        return sum(self.losses.values()) / len(self.losses) if self.losses else None

    def measured(self) -> dict:
        """Iteration time and per-device busy/wait of the median iteration."""
        return summarize(self.timelines[self.median_index()], self.plan.spec.devices)

    def block_seconds(self) -> dict[str, float]:
        """Each block's median duration in the median iteration, as the replay charges it."""
        return block_durations(self.timelines[self.median_index()], self.plan)

    def simulated(self, durations: dict[str, float] | None = None, own: bool = True) -> dict:
        """The plan replayed with free transfers. Each action takes its own duration in the median
        iteration (`own`), so the replay's busy time is the run's and its extra wait is only what
        the order of the programs forces; any difference from the measured wait is the runtime's
        (transfers, host time). With `own=False` every micro-batch of a block takes the block's
        median (`durations`), as a plan searched on those times would predict."""
        durations = self.block_seconds() if durations is None else durations
        each = action_durations(self.timelines[self.median_index()]) if own else None
        return summarize(replay(self.plan, durations, each), self.plan.spec.devices)

    def summary(self) -> dict:
        """JSON-ready numbers for `--json` and the benchmarks."""
        durations = self.block_seconds()
        m, s = self.measured(), self.simulated(durations)
        by_block = self.simulated(durations, own=False)
        mb = self.plan.schedule.microbatches
        return {
            "plan": self.plan.spec.name,
            "schedule": self.plan.schedule.name,
            "blocking": bool(self.plan.programs and self.plan.programs[0].blocking),
            "backend": self.backend,
            "transport": self.transport,
            "device": self.device,
            "devices": self.plan.spec.devices,
            "microbatches": mb,
            "iterations": self.iterations,
            "measured": m,
            "simulated": s,
            "throughput_mb_per_s": mb / m["iteration"] if m["iteration"] else 0.0,
            "wait_share_measured": _share(m),
            "wait_share_simulated": _share(s),
            # The replay with every micro-batch of a block at the block's median time.
            "simulated_block_medians": by_block,
            "loss": self.loss,
            # What the replay charged each block: a pipelined run doubles as a profile that
            # includes multi-device blocks, which `tessel profile` cannot run alone.
            "block_seconds": durations,
        }


def _share(d: dict) -> list[float]:
    it = d["iteration"]
    return [w / it if it else 0.0 for w in d["wait"]]
