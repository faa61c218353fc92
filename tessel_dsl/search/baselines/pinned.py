"""The baselines with multi-device blocks pinned into a chain of stages: 1F1B+ and GPipe+.

Each multi-device block is pinned next to its neighbour in the chain (a forward-side one right
before the first stage that needs it, a backward-side one right after the last stage it needs),
as the Tessel paper's §6 describes for 1F1B+ (M-shape: `E` right before `F0`, `EB` right after
`B0`). The stages are single devices, or failing that tensor-parallel groups with the blocks that
span several stages pinned (Megatron's layout with a vocabulary-parallel embedding and head).

* 1F1B+: each stage's queue is 1F1B's (`classic.stage_phases`).
* GPipe+: each stage runs all forwards of a wave, then all its backwards, in waves of as many
  micro-batches as M holds. Plain GPipe orders every device's blocks by (phase, micro-batch), so
  an all-device block after a stage (E2 after F7 in specs/nnshape.tsl) comes before the next
  micro-batch's first all-device block on every device, and the forwards run one micro-batch at a
  time (448 ms a micro-batch on bench/specs/real/nnshape16.tsl). Pinned, they follow their stage.

A stage's queue goes to the first device of its stage; `listsched.play_queues` runs a pinned
block once all its devices are free, so a group's other devices follow it.
"""
from __future__ import annotations

from collections.abc import Callable

from tessel_dsl.analysis import reachable, resident_memory
from tessel_dsl.errors import InfeasibleError
from tessel_dsl.ir import Spec
from tessel_dsl.search.baselines.chain import GroupStage, NotApplicable, find_chain, find_shared_stages
from tessel_dsl.search.baselines.classic import stage_phases
from tessel_dsl.search.baselines.listsched import Key, play_queues
from tessel_dsl.units import capacity_in

# each stage's queue as ("F" | "B", micro-batch), from the chain's stages
Phases = Callable[[tuple[GroupStage, ...]], list[list[tuple[str, int]]]]


def one_f_one_b_plus_orders(spec: Spec, n: int) -> list[list[Key]]:
    """1F1B+ on a chain of single-device stages or, failing that, of tensor-parallel stages.
    Where some stage's memory holds fewer micro-batches than 1F1B's warmup keeps there, the
    queues are memory-capped 1F1B's, played on a clock (`capped._play`: a stage runs its next
    forward while it holds fewer than its cap, else its next backward once ready), as
    `1f1b-capped` plays a plain chain: 1F1B's fixed alternation with a shortened warmup waits on
    every stage (the 8-stage M-shape of a 27B model with 6 micro-batches of room: 20.3 s against
    14.0 s, tests/unit/test_baselines.py)."""
    from tessel_dsl.search.baselines.capped import _caps, _play

    def phases(stages: tuple[GroupStage, ...]) -> list[list[tuple[str, int]]]:
        fixed = stage_phases(spec, stages, n, "1F1B+")  # (its errors name 1F1B+)
        caps = _caps(spec, stages)
        # (on a plain chain 1F1B+ stays 1F1B; `1f1b-capped` is the clock-played row there)
        shared = any(b.is_multi_device for b in spec.blocks)
        if shared and all(st.backward for st in stages) and any(c < len(stages) - s for s, c in enumerate(caps)):
            return _play(spec, stages, n, caps)
        return fixed

    return pinned_orders(spec, "1F1B+", phases)


def gpipe_plus_orders(spec: Spec, n: int) -> list[list[Key]]:
    """GPipe+ (module text): the widest wave whose schedule fits M, as `classic.gpipe_orders`."""
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.compact import compact

    held = resident_memory(spec)
    widest = min([n] + [spec.capacity(d) // h for d, h in enumerate(held) if h > 0])
    for wave in range(max(widest, 1), 0, -1):
        waves = [range(first, min(n, first + wave)) for first in range(0, n, wave)]
        orders = pinned_orders(spec, "GPipe+", lambda stages: [
            [(p, mb) for mbs in waves for p in ("F", "B")[:1 + bool(st.backward)] for mb in mbs] for st in stages])
        if Schedule(n, compact(spec, orders=orders)).fits_memory(spec):
            return orders
    raise InfeasibleError(f"GPipe+: not even one micro-batch at a time fits memory {capacity_in(spec)}")


def pinned_orders(spec: Spec, who: str, phases: Phases) -> list[list[Key]]:
    """Per-device orders of the stages' queues (`phases`) with the multi-device blocks pinned
    into them, played out (module text)."""
    try:
        chain = find_chain(spec, who=who, allow_shared=True)
        stages = tuple(GroupStage((st.device,), (st.forward,), (st.backward,) if st.backward else ())
                       for st in chain.stages)
        shared = chain.shared
    except NotApplicable:
        stages, shared = find_shared_stages(spec, who=who)
    before, after = _pins(spec, who, shared, [x for st in stages for x in st.forward],
                          [x for st in reversed(stages) for x in st.backward])
    queues: list[list[Key]] = [[] for _ in range(spec.devices)]
    for st, queue in zip(stages, phases(stages)):
        q: list[Key] = []
        for phase, mb in queue:
            for blk in (st.forward if phase == "F" else st.backward):
                q += [(x, mb) for x in before.get(blk, [])] + [(blk, mb)] + [(x, mb) for x in after.get(blk, [])]
        queues[min(st.devices)] = q
    return play_queues(spec, queues)


def _anchor(spec: Spec, who: str, forwards: list[str], backwards: list[str], name: str,
            reach: dict[str, frozenset[str]]) -> tuple[str, str]:
    """(chain block, 'before' | 'after') that a multi-device block is pinned to; `forwards` and
    `backwards` are the chain's blocks in the order they run for one micro-batch."""
    b = spec.block(name)
    seq = backwards if b.kind.is_backward else forwards
    needs_it = [x for x in seq if x in reach[name]]
    if not b.kind.is_backward and needs_it:
        return needs_it[0], "before"
    needed = [x for x in seq if name in reach[x]]
    if needed:
        return needed[-1], "after"
    if needs_it:
        return needs_it[0], "before"
    raise NotApplicable(f"{who} cannot place block {name}: it is not connected to the pipeline chain")


def _pins(spec: Spec, who: str, shared: tuple[str, ...], forwards: list[str], backwards: list[str]
          ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(before, after): the shared blocks pinned right before / after each chain block."""
    reach = reachable(spec)
    before: dict[str, list[str]] = {}
    after: dict[str, list[str]] = {}
    for name in shared:  # shared is in dependency order, so pinned blocks keep it
        at, side = _anchor(spec, who, forwards, backwards, name, reach)
        (before if side == "before" else after).setdefault(at, []).append(name)
    return before, after
