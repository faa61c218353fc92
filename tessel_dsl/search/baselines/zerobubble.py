"""Zero-bubble baselines: ZB-H1 and ZB-V, for specs whose backward is split in two.

Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism" (ICLR 2024) split each stage's backward
into B, the input gradient the previous stage waits for (`input_grad` here, I), and W, the weight
gradient nothing waits for (`weight_grad`). Facts used from the paper (cited where used):

* ZB-H1 keeps 1F1B's order of forwards and input gradients, starts the backward chain earlier
  because a stage passes its I on before running its W, and defers the W passes to fill the
  bubbles, with no stage holding more micro-batches in flight than 1F1B's first stage (§2.1).
  With equal F, B and W costs its bubble is (p-1)(T_F + T_B - T_W), a third of 1F1B's
  (p-1)(T_F + T_B + T_W) (§2.1, Figure 3).
* ZB-V (the arXiv version of the paper, 2401.10241, and the authors' repository) places two
  model chunks per device in a V: chunk 0 runs down devices 0..p-1 and chunk 1 back up p-1..0, so device 0 holds the
  first and the last stage. With equal F, B and W costs it reaches zero bubble in the steady
  state with the activation memory of 1F1B (p micro-batches' worth on a device).

Both are built here as list schedules played out on a clock (the same way `listsched` plays
1F1B+): whenever a device is free it starts the next unit its rule allows. A unit is all of one
stage's forward blocks (or input-gradient, or weight-gradient blocks) for one micro-batch, run
back to back on the stage's devices. `build` then compacts and validates the orders under M.

Memory follows the spec: a block's delta counts from its start, so in `specs/zerobubble.tsl` a
micro-batch stays resident on a device from its forward until its weight gradient.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tessel_dsl.analysis import reachable
from tessel_dsl.errors import InfeasibleError
from tessel_dsl.ir import Kind, Spec
from tessel_dsl.search.baselines.chain import NotApplicable, _ordered, _runs, adapting
from tessel_dsl.search.baselines.listsched import Key
from tessel_dsl.units import capacity_in, memory_in

F, I, W = "F", "I", "W"  # unit phases: forward, input gradient, weight gradient


@dataclass(frozen=True)
class SplitStage:
    """One pipeline stage with a split backward: consecutive forward blocks on one device or one
    tensor-parallel group, the input-gradient blocks that retrace them there, and their
    weight-gradient blocks."""

    devices: tuple[int, ...]
    forward: tuple[str, ...]
    input_grad: tuple[str, ...]
    weight_grad: tuple[str, ...]

    def blocks(self, phase: str) -> tuple[str, ...]:
        return {F: self.forward, I: self.input_grad, W: self.weight_grad}[phase]


def find_split_stages(spec: Spec, *, who: str) -> tuple[SplitStage, ...]:
    """The spec as a chain of stages whose backward is split into `input_grad` and `weight_grad`
    blocks, or NotApplicable saying why. Stages may revisit devices (ZB-V); the caller checks the
    placement it needs."""
    need = (f"{who} needs a chain of stages with the backward split into input_grad and weight_grad "
            "blocks (specs/zerobubble.tsl)")
    whole = [b.name for b in spec.blocks if b.kind is Kind.BACKWARD]
    split = any(b.kind is Kind.INPUT_GRAD for b in spec.blocks)
    if whole and not (split and adapting()):
        raise NotApplicable(f"{need}; block {whole[0]} is a whole backward")
    # A whole backward beside split ones (an embedding's or a head's, not worth splitting) is
    # what the stage before waits for, like an input gradient: it runs in its stage's input
    # gradient step, as an engineer would run ZB on such a model (`compare` says so).
    order = list(spec.topo_order)
    fwd = _runs(spec, [n for n in order if not spec.block(n).kind.is_backward])
    igr = _runs(spec, [n for n in order if spec.block(n).kind in (Kind.INPUT_GRAD, Kind.BACKWARD)])
    if not fwd or not igr:
        raise NotApplicable(f"{need}; there is no {'forward' if not fwd else 'input_grad'} block")
    sets = {devs for devs, _ in fwd}
    for a in sets:
        for b in sets:
            if a != b and set(a) & set(b):
                raise NotApplicable(f"{need}; device groups {a} and {b} share a device")
    reach = reachable(spec)
    flat = [n for _, names in fwd for n in names]
    if not _ordered(flat, reach):
        raise NotApplicable(f"{need}; the forward blocks do not form one sequence (they branch)")
    back = [n for _, names in igr for n in names]
    if ([devs for devs, _ in igr] != [devs for devs, _ in reversed(fwd)] or not _ordered(back, reach)
            or back[0] not in reach[flat[-1]]):
        raise NotApplicable(f"{need}; the input_grad blocks do not retrace the forward stages in reverse")
    stage_of = {n: k for k, (_, names) in enumerate(fwd) for n in names}
    weights: list[list[str]] = [[] for _ in fwd]
    for n in order:
        b = spec.block(n)
        if b.kind is not Kind.WEIGHT_GRAD:
            continue
        k = stage_of.get(b.forward or "")
        if k is None or tuple(sorted(b.devices)) != fwd[k][0]:
            raise NotApplicable(f"{need}; weight_grad block {n} does not belong to a forward stage's devices")
        weights[k].append(n)
    bare = next((k for k, w in enumerate(weights) if not w), None)
    if bare is not None:  # its in-flight count ends at a weight gradient
        raise NotApplicable(f"{need}; the stage of {fwd[bare][1][0]} has no weight_grad block")
    return tuple(SplitStage(devs, tuple(names), tuple(inames), tuple(weights[k]))
                 for k, ((devs, names), (_, inames)) in enumerate(zip(fwd, reversed(igr))))


def _capacity(spec: Spec, d: int) -> int:
    """Memory M of device `d` (per-device capacities where the spec has them)."""
    cap = getattr(spec, "capacity", None)
    return cap(d) if callable(cap) else spec.memory


Unit = tuple[int, str, int]  # (stage, phase, micro-batch)
# A rule picks, for one free device group at the current time, the unit to start (or None).
Rule = Callable[["_Play", tuple[int, ...]], Unit | None]


class _Play:
    """State of a list schedule of stage units being played out on a clock."""

    def __init__(self, spec: Spec, stages: tuple[SplitStage, ...], n: int):
        self.spec, self.stages, self.n = spec, stages, n
        self.next = {(k, ph): 0 for k in range(len(stages)) for ph in (F, I, W)}  # next micro-batch
        self.done: set[Key] = set()
        self.mem = [0] * spec.devices
        self.inflight = [0] * len(stages)  # forwards started minus weight gradients started
        self.orders: list[list[Key]] = [[] for _ in range(spec.devices)]
        self.unit_time = {(k, ph): sum(spec.block(b).time for b in st.blocks(ph))
                          for k, st in enumerate(stages) for ph in (F, I, W)}
        self.unit_mem = {(k, ph): sum(spec.block(b).memory for b in st.blocks(ph))
                         for k, st in enumerate(stages) for ph in (F, I, W)}

    def ready(self, k: int, ph: str) -> bool:
        """The next unit of (stage k, phase) exists and its blocks' outside dependencies are done."""
        mb = self.next[(k, ph)]
        if mb >= self.n:
            return False
        names = self.stages[k].blocks(ph)
        inside = set(names)
        return all((p, mb) in self.done for b in names for p in self.spec.preds[b] if p not in inside)

    def fits(self, k: int, extra: int = 0) -> bool:
        """Starting stage k's next forward (plus `extra` memory held back) stays within M."""
        add = self.unit_mem[(k, F)] + extra
        return all(self.mem[d] + add <= _capacity(self.spec, d) for d in self.stages[k].devices)

    def start(self, unit: Unit, t: int) -> int:
        k, ph, mb = unit
        for b in self.stages[k].blocks(ph):
            for d in self.stages[k].devices:
                self.orders[d].append((b, mb))
        for d in self.stages[k].devices:
            self.mem[d] += self.unit_mem[(k, ph)]
        self.inflight[k] += {F: 1, I: 0, W: -1}[ph]
        self.next[(k, ph)] += 1
        return t + self.unit_time[(k, ph)]


def play(spec: Spec, stages: tuple[SplitStage, ...], n: int, rule: Rule, who: str) -> list[list[Key]]:
    """Per-device block orders from playing `rule` on every free device group until all is done."""
    state = _Play(spec, stages, n)
    groups = sorted({st.devices for st in stages})
    total = 3 * len(stages) * n
    started = 0
    free_at = {g: 0 for g in groups}
    running: list[tuple[int, Unit]] = []
    t = 0
    while True:
        for end, (k, ph, mb) in [r for r in running if r[0] <= t]:
            state.done.update((b, mb) for b in stages[k].blocks(ph))
        running = [r for r in running if r[0] > t]
        for g in groups:
            if free_at[g] > t:
                continue
            unit = rule(state, g)
            if unit is not None:
                free_at[g] = state.start(unit, t)
                running.append((free_at[g], unit))
                started += 1
        if not running:
            if started < total:
                raise InfeasibleError(f"{who}: no schedule of this kind fits memory "
                                      f"{capacity_in(spec)} (every device waits)")
            return state.orders
        t = min(end for end, _ in running)


def _held(spec: Spec, stages: tuple[SplitStage, ...], ks: list[int]) -> int:
    """Memory one micro-batch keeps on a device of stages `ks` between forward and weight gradient."""
    return sum(spec.block(b).memory for k in ks for b in stages[k].forward if spec.block(b).memory > 0)


def zb_h1_orders(spec: Spec, n: int) -> list[list[Key]]:
    """ZB-H1 (Qi et al., ICLR 2024, §2.1): 1F1B's forwards and input gradients, W deferred.

    Stage s of S runs 1F1B's sequence of forwards and input gradients: S-1-s warmup forwards,
    then one forward and one input gradient alternately, then the remaining input gradients.
    Weight gradients wait: a stage runs its oldest pending W only when the next unit of that
    sequence cannot start yet (its input has not arrived, or one more forward would exceed the
    in-flight limit). The limit is the same on every stage, as in the paper: S micro-batches, the
    most 1F1B keeps on its first stage, fewer when M cannot hold that many.
    """
    stages = find_split_stages(spec, who="ZB-H1")
    owner: dict[tuple[int, ...], int] = {}
    for k, st in enumerate(stages):
        if st.devices in owner:
            raise NotApplicable(f"ZB-H1 needs a chain of stages with each device in one stage; "
                                f"device{'s' if len(st.devices) > 1 else ''} "
                                f"{','.join(map(str, st.devices))} {'run' if len(st.devices) > 1 else 'runs'} stages {owner[st.devices]} and {k} "
                                "(zb-v handles the V-shape with two chunks per device)")
        owner[st.devices] = k
    count = len(stages)
    limit = []
    for k, st in enumerate(stages):
        held = _held(spec, stages, [k])
        fit = min(_capacity(spec, d) for d in st.devices) // held if held > 0 else count
        if fit < 1:
            raise InfeasibleError(f"ZB-H1: stage {k} holds {held} memory units per micro-batch in flight, "
                                  f"more than M={memory_in(spec.units, min(_capacity(spec, d) for d in st.devices))}")
        limit.append(min(count, fit))
    # A stage never runs further ahead than the stages before it (their forwards feed its warmup).
    sequence = [_one_f_one_b_sequence(n, min(count - 1 - k, min(limit[:k + 1]) - 1)) for k in range(count)]
    head = [0] * count

    def rule(state: _Play, group: tuple[int, ...]) -> Unit | None:
        k = owner[group]
        if head[k] < len(sequence[k]):
            ph, mb = sequence[k][head[k]]
            if state.ready(k, ph) and (ph == I or (state.inflight[k] < limit[k] and state.fits(k))):
                head[k] += 1
                return (k, ph, mb)
        if state.ready(k, W):
            return (k, W, state.next[(k, W)])
        return None

    return play(spec, stages, n, rule, "ZB-H1")


def _one_f_one_b_sequence(n: int, warm: int) -> list[tuple[str, int]]:
    """1F1B's (phase, micro-batch) sequence of forwards and input gradients of one stage: `warm`
    forwards, then one forward and one input gradient alternately, then the remaining ones."""
    warm = min(warm, n)
    seq = [(F, mb) for mb in range(warm)]
    for i in range(n - warm):
        seq += [(F, warm + i), (I, i)]
    return seq + [(I, mb) for mb in range(n - warm, n)]


def v_stages(spec: Spec, who: str) -> tuple[tuple[SplitStage, ...], dict[tuple[int, ...], list[int]]]:
    """The split stages of a V (chunk 0 down the devices, chunk 1 back up; the middle two stages
    share a device and form one run) and, per device group, its stages in chain order."""
    stages = find_split_stages(spec, who=who)
    seq = [st.devices for st in stages]
    p = (len(seq) + 1) // 2
    if len(seq) < 3 or len(seq) % 2 == 0 or seq != seq[::-1] or len(set(seq[:p])) != p:
        shown = " ".join(",".join(map(str, s)) for s in seq)
        raise NotApplicable(f"{who} needs a chain of stages in a V: two chunks per device, chunk 0 down the "
                            f"devices and chunk 1 back up (stage devices here: {shown})")
    of_group: dict[tuple[int, ...], list[int]] = {}
    for k, g in enumerate(seq):
        of_group.setdefault(g, []).append(k)
    return stages, of_group


def zb_v_orders(spec: Spec, n: int) -> list[list[Key]]:
    """ZB-V (Qi et al., arXiv 2401.10241): two chunks per device in a V, split backward.

    The chain's stages must visit devices g_0 .. g_{p-1} and then g_{p-1} .. g_0 (the middle two
    stages share a device and form one run). Each of the 2p-1 stages follows 1F1B's sequence of
    forwards and input gradients for a chain of that many stages (stage k warms up with
    2p-2-k forwards), and a device interleaves the sequences of its two stages: when free it
    starts a ready input gradient (the critical path) before a ready forward, the deeper stage
    first, and otherwise its oldest ready weight gradient, so W fills what would be a bubble.
    A forward starts only if the device stays within its limit: 1F1B's activation memory, p
    micro-batches' worth of both chunks, and never above M. When M holds less, the warmups are
    shortened together until the play no longer stalls.
    """
    stages, of_group = v_stages(spec, "ZB-V")
    seq = [st.devices for st in stages]
    p = len(of_group)
    cap: dict[int, int] = {}
    for g, ks in of_group.items():
        per_mb = _held(spec, stages, ks)
        for d in g:
            cap[d] = min(_capacity(spec, d), p * per_mb) if per_mb > 0 else _capacity(spec, d)
    count = len(stages)
    ideal = [count - 1 - k for k in range(count)]
    for most in range(max(ideal), -1, -1):
        sequence = [_one_f_one_b_sequence(n, min(w, most)) for w in ideal]
        head = [0] * count

        def rule(state: _Play, group: tuple[int, ...], sequence=sequence, head=head) -> Unit | None:
            options = []
            for k in of_group[group]:
                if head[k] < len(sequence[k]):
                    ph, mb = sequence[k][head[k]]
                    add = state.unit_mem[(k, F)]
                    if state.ready(k, ph) and (ph == I or all(state.mem[d] + add <= cap[d]
                                                               for d in stages[k].devices)):
                        options.append((ph != I, -k, k, ph, mb))
            if options:
                *_, k, ph, mb = min(options)
                head[k] += 1
                return (k, ph, mb)
            weights = [(state.next[(k, W)], k) for k in of_group[group] if state.ready(k, W)]
            if weights:
                mb, k = min(weights, key=lambda x: (x[0], -x[1]))
                return (k, W, mb)
            return None

        try:
            return play(spec, stages, n, rule, "ZB-V")
        except InfeasibleError:
            continue
    raise InfeasibleError(f"ZB-V: no warmup fits memory {capacity_in(spec)} (device "
                          f"{seq[0][0]} runs the first and the last stage and must hold both chunks of a "
                          "micro-batch)")
