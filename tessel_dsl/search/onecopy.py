"""The period of a repetend holding each block once on a memory-bound chain (`one_copy_chain_bound`),
a lower bound for such repetends only, beside the bounds for every schedule in `membound.py`.

When the spec is a chain of stages, stage ``s`` on its own device running only ``F_s`` (allocating ``h_s``) and ``B_s`` (freeing it),
a repetend holding each block once makes every stage alternate ``F_{i+w_s}, B_i`` in its steady
state for a fixed ``w_s >= 0``, and:

* when ``F_{i+w_s}`` starts, micro-batches ``i .. i+w_s`` hold memory there: ``w_s <= k_s - 1``;
* ``w_{s+1} <= w_s``: otherwise stage ``s`` runs ``F_j`` (``j = i + w_{s+1}``) after ``B_i``,
  which waits for ``B_i`` on ``s+1``, which that stage runs after ``F_j``, which waits for ``F_j``
  on ``s``: a cycle;
* on a run of stages ``s..e`` with the same ``w``, the end of ``B_i`` on ``e`` waits for ``F_{i+w}``
  on ``e``, which waits for ``F_{i+w}`` on ``e-1`` ... on ``s``, each of which a stage of the run
  runs after its ``B_{i-1}``, which waits for ``B_{i-1}`` on the next stage ... on ``e``: one period
  is at least ``sum over s..e of (f_t + b_t)``.

So the period is at least the smallest, over non-increasing ``w`` within the memory limits, of the
costliest run of equal ``w``; a dynamic programme over the partitions of the chain into runs finds
it. With every ``k_s`` at least the number of stages after ``s`` plus one (1F1B's warmup), the runs
are single stages and this is the busiest stage's work, the usual bound. It binds only repetends
holding each block once; repetends of several micro-batches (or no repetend) can do better.

Transfer lags count as in `membound.py`: on a run, the cycle from ``B_{i-1}`` on ``e`` back to
``B_i`` on ``e`` crosses the edges between the run's stages once each way, so the period is at
least the run's work plus those lags.
"""
from __future__ import annotations

from functools import lru_cache

from tessel_dsl.analysis import reachable
from tessel_dsl.ir import Block, Spec
from tessel_dsl.search.lags import edge_lags


def chain_stages(spec: Spec) -> list[tuple[int, int, int, int]] | None:
    """(forward time, backward time, memory per micro-batch, capacity) of each stage in chain
    order, when the spec is the chain the module text's one-copy bound needs; else None."""
    stages = chain_stage_blocks(spec)
    if stages is None:
        return None
    return [(f.time, b.time, f.memory, spec.capacity(d)) for f, b, d in stages]


def chain_stage_blocks(spec: Spec) -> list[tuple[Block, Block, int]] | None:
    """(forward block, backward block, device) of each stage in chain order, when every device
    runs one forward stage that allocates and its backward that frees the same amount, the
    forwards form a chain and the backwards retrace it; else None."""
    if any(b.is_multi_device or b.time <= 0 for b in spec.blocks):
        return None
    reach = reachable(spec)
    stages = []
    for d in range(spec.devices):
        on = spec.blocks_on(d)
        fwd = [b for b in on if not b.kind.is_backward]
        bwd = [b for b in on if b.kind.is_backward]
        if len(on) != 2 or len(fwd) != 1 or len(bwd) != 1:
            return None
        f, b = fwd[0], bwd[0]
        if f.memory <= 0 or b.memory != -f.memory or b.name not in reach[f.name]:
            return None
        stages.append((f, b, d))
    pos = {name: i for i, name in enumerate(spec.topo_order)}
    stages.sort(key=lambda x: pos[x[0].name])
    for (f0, b0, _), (f1, b1, _) in zip(stages, stages[1:]):
        if f1.name not in reach[f0.name] or b0.name not in reach[b1.name]:
            return None
    return stages


def one_copy_chain_bound(spec: Spec) -> int:
    """The smallest period of a repetend holding each block once on a memory-bound chain (module
    text); 0 when the spec is not such a chain or no warmup fits."""
    blocks = chain_stage_blocks(spec)
    if not blocks:
        return 0
    count = len(blocks)
    work = [f.time + b.time for f, b, _ in blocks]
    limit = [spec.capacity(d) // f.memory - 1 for f, _, d in blocks]  # the largest w_s memory allows
    lags = edge_lags(spec)
    # what a run's cycle crosses between stage e-1 and e: a lag each way (module text)
    gap = [0] + [lags.get((f0.name, f1.name), 0) + lags.get((b1.name, b0.name), 0)
                 for (f0, b0, _), (f1, b1, _) in zip(blocks, blocks[1:])]
    inf = float("inf")

    @lru_cache(maxsize=None)
    def best(i: int, j: int) -> float:
        """Stages i.. as runs, the run holding stage i having value j (the last run has 0)."""
        out, cost, room = inf, 0, inf
        for e in range(i, count):
            cost, room = cost + work[e] + (gap[e] if e > i else 0), min(room, limit[e])
            if j > room:
                break
            rest = (0 if j == 0 else inf) if e == count - 1 else (best(e + 1, j - 1) if j >= 1 else inf)
            out = min(out, max(cost, rest))
        return out

    got = min(best(0, j) for j in range(count))
    return 0 if got == inf else int(got)
