"""The hand-written schedules Tessel is compared with, as per-device block orders.

Each function returns per-device orders of (block, micro-batch); `tessel_dsl.search.baselines.build`
compacts them into start times and validates the result. Definitions:

* GPipe: every forward of every micro-batch in micro-batch order, then every backward in
  micro-batch order; under memory M, in waves of as many micro-batches as M holds.
* 1F1B: stage s of S first runs S-1-s forwards (fewer if memory M cannot hold them), then
  alternates one forward with one backward, then drains the remaining backwards. A stage is
  consecutive blocks on one device or on one tensor-parallel group.
* 1F1B+ and GPipe+, the same with multi-device blocks pinned into the chain: `pinned.py`.
* Chimera (direct concatenation): two chains running in opposite directions share the devices; a
  basic unit of D micro-batches (D/2 spec micro-batches, each holding one micro-batch per
  direction) is scheduled greedily with backwards first; units are concatenated per device.
"""
from __future__ import annotations

from tessel_dsl.analysis import resident_memory
from tessel_dsl.errors import InfeasibleError, ScheduleError
from tessel_dsl.ir import Spec
from tessel_dsl.search.baselines.chain import (
    GroupStage,
    NotApplicable,
    components,
    find_chain,
    find_rounds,
    find_stages,
)
from tessel_dsl.search.baselines.listsched import Key, play_greedy
from tessel_dsl.units import capacity_in, memory_in


def _gpipe_wave(spec: Spec, mbs: range) -> list[list[Key]]:
    """GPipe's order for the micro-batches `mbs`: all forward-side blocks in micro-batch order,
    then all backward-side blocks in micro-batch order; within one micro-batch, blocks go in
    dependency order.

    (phase, micro-batch, dependency order) is one total order that respects every dependency, so
    the per-device orders it induces cannot deadlock.
    """
    phase: dict[str, int] = {}
    for name in spec.topo_order:  # a block after any backward block belongs to the backward phase
        b = spec.block(name)
        phase[name] = int(b.kind.is_backward or any(phase[p] for p in spec.preds[name]))
    pos = {name: i for i, name in enumerate(spec.topo_order)}
    keys = sorted(((b.name, mb) for mb in mbs for b in spec.blocks),
                  key=lambda k: (phase[k[0]], k[1], pos[k[0]]))
    orders: list[list[Key]] = [[] for _ in range(spec.devices)]
    for k in keys:
        for d in spec.block(k[0]).devices:
            orders[d].append(k)
    return orders


def gpipe_orders(spec: Spec, n: int) -> list[list[Key]]:
    """GPipe under memory M: micro-batches go in waves of as many as M holds, each wave in
    GPipe's order (all forwards, then all backwards), and a device starts a wave's forwards only
    after its backwards of the previous wave (GPipe's gradient accumulation over mini-batches).
    When M holds all N micro-batches this is plain GPipe, one wave.

    The wave starts at what every device's resident memory allows and shrinks until the
    compacted schedule's peak fits M (blocks that allocate and free within a micro-batch can
    need more than the resident memory alone).
    """
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.compact import compact

    held = resident_memory(spec)
    widest = n
    for d, h in enumerate(held):
        if h > 0:
            if spec.capacity(d) < h:
                raise InfeasibleError(f"GPipe: device {d} holds {_mem(spec, h)} per micro-batch in flight, "
                                      "more than " + (f"M={memory_in(spec.units, spec.capacity(d))}"
                                                      if spec.uniform_memory else
                                                      f"its memory {memory_in(spec.units, spec.capacity(d))}"))
            widest = min(widest, spec.capacity(d) // h)
    for wave in range(widest, 0, -1):
        orders: list[list[Key]] = [[] for _ in range(spec.devices)]
        for first in range(0, n, wave):
            for d, row in enumerate(_gpipe_wave(spec, range(first, min(n, first + wave)))):
                orders[d] += row
        if Schedule(n, compact(spec, orders=orders)).fits_memory(spec):
            return orders
    raise InfeasibleError(f"GPipe: not even one micro-batch at a time fits memory "
                          f"{capacity_in(spec)}")


def _mem(spec: Spec, x: int) -> str:
    """Memory in the spec's unit (``8 GB``), or ``8 memory units`` without a resolution."""
    return f"{x} memory units" if spec.units.memory_label == "unit" else memory_in(spec.units, x)


def _inflight_cap(spec: Spec, device: int, who: str) -> int:
    held = resident_memory(spec)[device]
    if held <= 0:
        return 1 << 30
    cap = spec.capacity(device)
    if cap < held:
        raise InfeasibleError(f"{who}: device {device} holds {_mem(spec, held)} per micro-batch in flight, "
                              "more than " + (f"M={memory_in(spec.units, cap)}" if spec.uniform_memory
                                              else f"its memory {memory_in(spec.units, cap)}"))
    return cap // held


def one_f_one_b_orders(spec: Spec, n: int) -> list[list[Key]]:
    """1F1B over the spec's chain of stages (`chain.find_stages`): a stage may be several
    consecutive blocks on one device (an embedding before the first layer) or one
    tensor-parallel group (every device of the group runs the stage's queue)."""
    stages = find_stages(spec, who="1F1B")
    orders: list[list[Key]] = [[] for _ in range(spec.devices)]
    for st, queue in zip(stages, stage_phases(spec, stages, n, "1F1B")):
        row = [(name, mb) for phase, mb in queue for name in (st.forward if phase == "F" else st.backward)]
        for d in st.devices:
            orders[d] = list(row)
    return orders


def stage_phases(spec: Spec, stages: tuple[GroupStage, ...], n: int, who: str) -> list[list[tuple[str, int]]]:
    """Each stage's 1F1B queue as ("F" | "B", micro-batch): warmup forwards, one forward one
    backward, cooldown backwards; a warmup no deeper than the memory of this stage and every
    stage before it holds (a stage never runs further ahead than the ones feeding it)."""
    out = []
    ahead = n
    for s, st in enumerate(stages):
        if not st.backward:
            out.append([("F", mb) for mb in range(n)])
            continue
        cap = min(_inflight_cap(spec, d, who) for d in st.devices)
        ahead = min(ahead, cap - 1)
        warm = min(len(stages) - 1 - s, n, ahead)
        queue = [("F", mb) for mb in range(warm)]
        for i in range(n - warm):
            queue += [("F", warm + i), ("B", i)]
        queue += [("B", mb) for mb in range(n - warm, n)]
        out.append(queue)
    return out


def chimera_orders(spec: Spec, n: int) -> list[list[Key]]:
    need = "Chimera needs two independent chains running in opposite directions over the devices (X-shape)"
    groups = components(spec)
    if len(groups) != 2:
        raise NotApplicable(f"{need}; this placement has {len(groups)} independent part(s)")
    down, up = (find_chain(spec, g, who="Chimera") for g in groups)
    if up.devices != tuple(reversed(down.devices)):
        raise NotApplicable(f"{need}; the chains visit devices {down.devices} and {up.devices}")
    depth = {st.forward: i for chain in (down, up) for i, st in enumerate(chain.stages)}
    depth.update({st.backward: i for chain in (down, up) for i, st in enumerate(chain.stages) if st.backward})
    unit = max(1, len(down.stages) // 2)

    def priority(k: Key) -> tuple:
        # backwards first (they free memory), then the oldest micro-batch, then the deepest stage
        return (not spec.block(k[0]).kind.is_backward, k[1], -depth[k[0]], k[0])

    orders: list[list[Key]] = [[] for _ in range(spec.devices)]
    for first in range(0, n, unit):
        keys = [(b.name, mb) for mb in range(first, min(n, first + unit)) for b in spec.blocks]
        try:
            unit_orders = play_greedy(spec, keys, priority)
        except ScheduleError:
            raise NotApplicable(f"Chimera's basic unit ({unit} micro-batches per direction) does not fit "
                                f"memory {capacity_in(spec)}") from None
        for d, row in enumerate(unit_orders):
            orders[d] += row
    return orders


def _interleaved_queue(n: int, groups: int, chunks: int, g: int, warm: int) -> list[tuple[str, int, int]]:
    """Megatron's interleaved 1F1B work queue of device group `g`: ("F" | "B", chunk, micro-batch).

    Forward units go group by group of `groups` micro-batches, every chunk in turn; backward
    units the same with the chunks reversed; `warm` forwards first, then one forward and one
    backward alternately, then the remaining backwards."""
    fwd, bwd = _unit_sets(n, groups, chunks)
    q = [("F", c, mb) for c, mb in fwd[:warm]]
    for i in range(len(fwd) - warm):
        q += [("F", *fwd[warm + i]), ("B", *bwd[i])]
    q += [("B", c, mb) for c, mb in bwd[len(fwd) - warm:]]
    return q


def _unit_sets(n: int, width: int, chunks: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(forward units, backward units) of one device group as (chunk, micro-batch): micro-batches
    in sets of `width`, every chunk in turn for each set (backwards with the chunks reversed)."""
    fwd, bwd = [], []
    for first in range(0, n, width):
        mbs = range(first, min(n, first + width))
        fwd += [(c, mb) for c in range(chunks) for mb in mbs]
        bwd += [(c, mb) for c in reversed(range(chunks)) for mb in mbs]
    return fwd, bwd


def _played_interleaved(spec: Spec, stages, groups: int, chunks: int, n: int, width: int
                        ) -> list[list[tuple[str, int, int]]] | None:
    """Interleaved 1F1B played out in time under each device's memory, as `capped.py` plays 1F1B:
    a free device group runs its next backward unit when it is ready, else its next forward unit
    if its devices have room for what that unit keeps until its backward. Units run in the
    interleaved order (`_unit_sets`). None when the groups wait on each other with nothing
    running (memory too small for this width)."""
    count = len(stages)
    keep = [[sum(max(spec.block(x).memory, 0) for x in st.forward if d in spec.block(x).devices)
             for d in range(spec.devices)] for st in stages]
    f_time = [sum(spec.block(x).time for x in st.forward) for st in stages]
    b_time = [sum(spec.block(x).time for x in st.backward) for st in stages]
    units = [_unit_sets(n, width, chunks) for _ in range(groups)]
    f_end: list[dict[int, int]] = [{} for _ in stages]
    b_end: list[dict[int, int]] = [{} for _ in stages]
    nf, nb, busy = [0] * groups, [0] * groups, [0] * groups
    used = [0] * spec.devices
    frees: list[tuple[int, int]] = []  # (time, stage): a backward ending then frees what its forward kept
    seq: list[list[tuple[str, int, int]]] = [[] for _ in range(groups)]
    total = n * chunks
    t = 0
    while any(nb[g] < total for g in range(groups)):
        for _end, k in [x for x in frees if x[0] <= t]:
            for d in range(spec.devices):
                used[d] -= keep[k][d]
        frees = [x for x in frees if x[0] > t]
        for g in range(groups):
            if busy[g] > t:
                continue
            fwd, bwd = units[g]
            if nb[g] < total:
                c, mb = bwd[nb[g]]
                k = c * groups + g
                if f_end[k].get(mb, t + 1) <= t and (k == count - 1 or b_end[k + 1].get(mb, t + 1) <= t):
                    b_end[k][mb] = busy[g] = t + b_time[k]
                    frees.append((busy[g], k))
                    nb[g] += 1
                    seq[g].append(("B", c, mb))
                    continue
            if nf[g] < total:
                c, mb = fwd[nf[g]]
                k = c * groups + g
                if ((k == 0 or f_end[k - 1].get(mb, t + 1) <= t)
                        and all(used[d] + keep[k][d] <= spec.capacity(d) for d in stages[g].devices)):
                    f_end[k][mb] = busy[g] = t + f_time[k]
                    for d in range(spec.devices):
                        used[d] += keep[k][d]
                    nf[g] += 1
                    seq[g].append(("F", c, mb))
        later = [x for x in busy if x > t] + [x[0] for x in frees if x[0] > t]
        if not later:
            return None
        t = min(later)
    return seq


def spread_rounds(spec: Spec, stages, groups: int, rows: list[list[tuple[str, int, int]]]) -> list[list[Key]]:
    """Per-device orders of (block, micro-batch) from each device group's interleaved work queue
    of ("F" | "B", chunk, micro-batch)."""
    orders: list[list[Key]] = [[] for _ in range(spec.devices)]
    for g, row in enumerate(rows):
        keys = [(name, mb) for phase, c, mb in row
                for name in (stages[c * groups + g].forward if phase == "F" else stages[c * groups + g].backward)]
        for d in stages[g].devices:
            orders[d] = list(keys)
    return orders


def interleaved_orders(spec: Spec, n: int) -> list[list[Key]]:
    """Interleaved 1F1B (Megatron-LM): each device group runs several chunks of one chain. Group
    g starts with ``(groups - g - 1) * 2 + (chunks - 1) * groups`` forwards, forwards taken in sets
    of `groups` micro-batches per chunk.

    When memory M cannot hold that, the order is made memory-aware, and the shortest that fits is
    used (`compare` labels it capped to memory): Megatron's order with the warmups shortened
    together, and the order played out in time under each device's memory
    (`_played_interleaved`) with forwards in sets of `groups` micro-batches, then half as many,
    down to one (fewer micro-batches in flight before the first backward). Shortening the
    warmups alone deadlocks below about ``(chunks - 1) * groups`` forwards (a group waits for a
    backward whose last-chunk forward it has not run), hence the smaller sets."""
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.compact import compact

    stages, groups = find_rounds(spec)
    chunks = len(stages) // groups
    best: tuple[int, list[list[Key]]] | None = None

    def fitting(orders: list[list[Key]]) -> int | None:
        """The compacted makespan of `orders`, or None if they deadlock or exceed memory."""
        try:
            sched = Schedule(n, compact(spec, orders=orders))
        except ScheduleError:
            return None
        return sched.makespan(spec) if sched.fits_memory(spec) else None

    ideal = [min(n * chunks, (groups - g - 1) * 2 + (chunks - 1) * groups) for g in range(groups)]
    for cap in range(max(ideal), 0, -1):
        queues = [_interleaved_queue(n, groups, chunks, g, min(ideal[g], cap)) for g in range(groups)]
        orders = spread_rounds(spec, stages, groups, queues)
        span = fitting(orders)
        if span is None:
            continue
        if cap == max(ideal):
            return orders  # Megatron's own order fits
        best = (span, orders)
        break  # a shorter warmup only adds bubbles
    if all(st.backward for st in stages):
        for width in sorted({max(1, groups >> k) for k in range(groups.bit_length())}, reverse=True):
            played = _played_interleaved(spec, stages, groups, chunks, n, width)
            if played is None:
                continue
            orders = spread_rounds(spec, stages, groups, played)
            span = fitting(orders)
            if span is not None and (best is None or span < best[0]):
                best = (span, orders)
    if best is None:
        raise InfeasibleError(f"interleaved 1F1B: no warmup fits memory {capacity_in(spec)}")
    return best[1]
