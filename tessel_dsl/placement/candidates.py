"""Candidate placements for a profiled model, each a `.tsl` text with costs and the block ->
submodule binding `Pipeline` takes.

* ``chain``: D stages, cut so that their forward + backward times are as even as they can be
  (embedding and head included in the first and last stage); ``chain-split`` the same with the
  backward split into input and weight gradient (what ZB-H1 and the search's split schedules use);
* ``interleaved-C``: D*C balanced chunks, chunk k on device k mod D (Megatron's interleaving);
* ``v-split``: 2D balanced chunks in a V (chunk k on device k, then back from D-1 to 0), split
  backward, ZB-V's placement;
* ``mshape-E``, ``mshape-H``, ``mshape-EH``: the embedding, the head (with the final norm), or both
  tensor-parallel over all devices and the rest a balanced chain -- only when their time or their
  weights are a large share of a stage's, where spreading them is worth asking about. `Pipeline`
  runs them sharded when given the DTensor plans of `tessel_dsl.placement.tp.tp_plans` (`tp=`),
  replicated otherwise. Their costs are what one device runs of them as sharded there (`Group`:
  the sharded units' work over D -- the embedding's weight gradient too, since `tp_plans` swaps in
  `VocabShardedEmbedding`, which builds only its own rows' -- the final norm whole) plus their collectives per micro-batch from a link model (`spread_comm`, `costs.Links`).

Each candidate's `link` is one stage-boundary transfer (`costs.Links.send` of what a stage
receives), so its search keeps that gap between a block and its consumer on another device: a V
crosses twice as many boundaries per micro-batch as a chain, and ran its transfers on the critical
path when searched without them (bench/results/gpu.md).

A block holding the head also holds the loss: the profile's cross entropy on the logits is added
to its forward and to its input gradient. An unsplit backward costs the measured unsplit backward
where the profile has one, else input + weight gradient. A split backward costs at most the
unsplit one (`split_weight_grad`: W no more than B - I), and a block whose first unit receives
nothing that needs a gradient (the embedding's token ids) has no input gradient: its whole
backward is its weight gradient, as the executor's split runs it. A run's measured block times
can replace a candidate's (`measured`, from `tessel plan --from-run`).

Each device's `reserve` is the weights, gradients and optimizer state of what it holds, so the
search sees the room really left for activations.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from tessel_dsl.placement.costs import ADAM_BYTES_PER_PARAM, Links, Profile, Unit, default_links
from tessel_dsl.placement.spec_text import SpecWriter, block_names

MAX_CHUNKS = 4
# Spreading the embedding or the head is asked about when its time or its weights are at least
# this share of a balanced stage's.
SPREAD_SHARE = 0.25


# Units a spread block shards (`tp.tp_plans`: the embeddings by vocabulary rows, the head by
# vocabulary columns); any other unit of the block (the final norm) runs whole on each device.
SHARDED = ("embedding", "head")


def split_weight_grad(u: Unit) -> float:
    """The weight pass a pipeline pays for `u`: its measured W, but no more than what its measured
    unsplit backward leaves after its input pass (B - I). The two passes do one backward's work
    (`tests/unit/test_plan_costs.py` counts the FLOPs equal); timed alone from an idle device, W
    also holds the launch gaps of its several small autograd calls and gradient additions, which a
    pipelined run hides behind other work: on 4 x H200 the GPT's layers measured W 2.0-2.7 ms a
    unit alone but 1.57 ms a layer in the run, where I + W equalled the 1F1B run's B within 1% on
    every stage (bench/results/gpu_zb_h200x4_2026-11-27b.md). A profile without an unsplit
    backward keeps W as measured."""
    if not u.unsplit_backward:
        return u.weight_grad
    return min(u.weight_grad, max(0.0, u.unsplit_backward - u.input_grad))


@dataclass(frozen=True)
class Group:
    """One forward block: units on devices. On several devices its embedding and head are
    sharded over them and the rest runs whole on each; `comm_forward` and `comm_backward` are the
    seconds its collectives take per micro-batch (`spread_comm`)."""

    name: str
    units: tuple[Unit, ...]
    devices: tuple[int, ...]
    comm_forward: float = 0.0
    comm_backward: float = 0.0
    dense_grad: bool = False    # True: a spread embedding's weight gradient built whole on each device

    def _part(self, u: Unit, x: float, whole_on_each: bool = False) -> float:
        """What one device runs of `x`, a time of unit `u`."""
        if len(self.devices) == 1 or u.kind not in SHARDED or whole_on_each:
            return x
        return x / len(self.devices)

    def _dense(self, u: Unit) -> bool:
        # RowwiseParallel's backward for an embedding builds the whole table's gradient on every
        # device and keeps its rows (torch 2.11-2.13; executor/models/common.py measured 4 ms a
        # micro-batch for a 512k x 4096 table): costed so for an embedding run that way.
        return self.dense_grad and u.kind == "embedding"

    @property
    def forward(self) -> float:
        return sum(self._part(u, u.forward + u.loss_forward) for u in self.units) + self.comm_forward

    @property
    def takes_input_grad(self) -> bool:
        """Whether anything this block receives needs a gradient. A block that begins with the
        embedding gets token ids only: the executor's input pass has nothing to differentiate and
        its weight pass runs the whole backward (`executor/split_backward.py`)."""
        first = self.units[0]
        return bool(first.input_bytes or first.input_grad)

    @property
    def input_grad(self) -> float:
        if not self.takes_input_grad:
            return self.comm_backward
        return sum(self._part(u, u.input_grad + u.loss_backward) for u in self.units) + self.comm_backward

    @property
    def weight_grad(self) -> float:
        if not self.takes_input_grad:
            return sum(self._part(u, split_weight_grad(u) + u.input_grad + u.loss_backward, self._dense(u))
                       for u in self.units)
        return sum(self._part(u, split_weight_grad(u), self._dense(u)) for u in self.units)

    @property
    def backward(self) -> float:
        """One unsplit backward (the measured one where the profile has it)."""
        if not all(u.unsplit_backward for u in self.units):
            return self.input_grad + self.weight_grad
        return sum(self._part(u, u.unsplit_backward + u.loss_backward, self._dense(u)) for u in self.units) \
            + self.comm_backward

    @property
    def activation_bytes(self) -> float:
        return self._share(sum(u.activation_bytes for u in self.units) + self.units[0].input_bytes)

    def _share(self, x: float) -> float:
        return x / len(self.devices)

    def state_bytes(self, per_param: int) -> float:
        return self._share(sum(u.state_bytes(per_param) for u in self.units))

    @property
    def modules(self) -> list[str]:
        return [m for u in self.units for m in u.modules]


def spread_comm(units: tuple[Unit, ...], devices: int, links: Links, tokens: int,
                out_bytes: int = 0) -> tuple[float, float]:
    """Seconds of the collectives a block spread over `devices` runs per micro-batch, forward and
    backward, as `Pipeline` runs it with `tp.tp_plans` (executor/models/common.py has the same):

    * a head block: its input (the last stage's output) sent to every other device; the vocabulary
      -parallel cross entropy (``loss_parallel``): three all-reduces of one fp32 number a token (the
      logits' maximum, the sum of exponentials, the target's logit); backward: the input gradient,
      partial on every device, all-reduced;
    * an embedding block: the partial lookups all-reduced into the output (`out_bytes`); backward:
      the output's gradient sent from the first stage's device to every other;

    and `links.block_overhead` each way.
    """
    if devices < 2:
        return 0.0, 0.0
    extra = links.block_overhead
    if any(u.kind == "head" for u in units):
        x = units[0].input_bytes
        fwd = links.broadcast(x, devices) + 3 * links.all_reduce(4 * tokens, devices)
        return fwd + extra, links.all_reduce(x, devices) + extra
    return links.all_reduce(out_bytes, devices) + extra, links.broadcast(out_bytes, devices) + extra


@dataclass(frozen=True)
class Candidate:
    name: str
    text: str                                  # the .tsl spec
    blocks: dict[str, list[str]]               # forward block -> submodule names
    reserve_bytes: tuple[float, ...]           # per device: weights, gradients, optimizer state
    capacity_bytes: int
    spread: tuple[str, ...] = ()               # blocks costed as sharded over their devices
    notes: tuple[str, ...] = field(default=())
    refused: str = ""                          # why it is listed but not searched


    @property
    def weights_fit(self) -> bool:
        return max(self.reserve_bytes) <= self.capacity_bytes


def balanced_cuts(costs: list[float], parts: int) -> list[int]:
    """Where each of `parts` contiguous, non-empty groups of `costs` begins, chosen to make the
    largest group sum as small as it can be (the earliest such cut wins a tie)."""
    n = len(costs)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot cut {n} units into {parts} non-empty stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = math.inf
    # best[k][i]: the smallest largest sum cutting costs[:i] into k groups; at[k][i]: its last cut
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    at = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n - (parts - k) + 1):
            for j in range(k - 1, i):
                v = max(best[k - 1][j], prefix[i] - prefix[j])
                if v < best[k][i] - 1e-15:
                    best[k][i], at[k][i] = v, j
    cuts, i = [], n
    for k in range(parts, 0, -1):
        i = at[k][i]
        cuts.append(i)
    return cuts[::-1]


def _split(units: list[Unit], parts: int) -> list[tuple[Unit, ...]]:
    cuts = balanced_cuts([u.time for u in units], parts) + [len(units)]
    return [tuple(units[a:b]) for a, b in itertools.pairwise(cuts)]


def _candidate(name: str, groups: list[Group], devices: int, capacity: int, microbatches: int, split: bool,
               per_param: int, profile: Profile, spread: tuple[str, ...] = (),
               measured: dict[str, dict[str, float]] | None = None, overhead: float = 0.0,
               links: Links | None = None) -> Candidate:
    header = (f"{name}: generated by `tessel plan` from a profile on {profile.device}, micro-batch "
              f"{'x'.join(map(str, profile.batch_shape))}")
    ran = (measured or {}).get(name)
    if ran is not None:
        unknown = sorted(set(ran) - block_names(groups, split))
        if unknown:
            raise ValueError(f"the run timed blocks that {name} does not have: {', '.join(unknown)} (was it run "
                             f"with a plan made from another profile or device count?)")
        header += "; block times measured by a run of it"
    # One stage-boundary transfer: what the stages after the first receive (the hidden states).
    sent = max((g.units[0].input_bytes for g in groups[1:]), default=0)
    w = SpecWriter(name, groups, devices, capacity, microbatches, split, per_param, header,
                profile.shared_state(per_param), ran, overhead, links.send(sent) if links and sent else 0.0)
    text = w.text(devices)
    notes = tuple(f"{b} is costed as sharded over all {devices} devices: pass Pipeline "
                  f"tp=tessel_dsl.placement.tp_plans(plan, blocks, model) or it runs replicated" for b in spread)
    notes += _tie_notes(groups, profile)
    refused = _tie_refusal(groups, profile, spread)
    return Candidate(name, text, {g.name: g.modules for g in groups}, tuple(w.reserve), capacity, spread, notes,
                     refused)


def _holders(groups: list[Group], unit: str) -> list[Group]:
    return [g for g in groups if any(u.name == unit for u in g.units)]


def _tie_notes(groups: list[Group], profile: Profile) -> tuple[str, ...]:
    out = []
    for a, b in profile.tied:
        ga, gb = _holders(groups, a), _holders(groups, b)
        devs = sorted({d for g in ga + gb for d in g.devices})
        if len(devs) > 1:
            out.append(f"{a} and {b} share a weight (tied); it is held on devices {devs} and Pipeline sums its "
                       f"gradient over them before the optimizer step")
    return tuple(out)


def _tie_refusal(groups: list[Group], profile: Profile, spread: tuple[str, ...]) -> str:
    """Why a placement cannot keep a tied weight tied: a block costed as vocabulary-sharded
    (`tp_plans` shards each module on its own) holds one of the units sharing it."""
    for a, b in profile.tied:
        for g in groups:
            if g.name in spread and any(u.name in (a, b) for u in g.units):
                return (f"{a} and {b} share a weight (tied) and {g.name} would shard it over the devices by "
                        f"itself; untie them (e.g. config.tie_word_embeddings=False) to have spread placements "
                        f"considered")
    return ""


def _chain_groups(units: list[Unit], parts: int, device_of) -> list[Group]:
    return [Group(f"F{k}", g, (device_of(k),)) for k, g in enumerate(_split(units, parts))]


def candidates(profile: Profile, devices: int, capacity_bytes: int, microbatches: int, *,
               per_param: int = ADAM_BYTES_PER_PARAM, max_chunks: int = MAX_CHUNKS,
               links: Links | None = None, dense_embedding_grad: bool = False,
               measured: dict[str, dict[str, float]] | None = None) -> list[Candidate]:
    """Every candidate placement of `profile` over `devices` devices with `capacity_bytes` each;
    `links` times a spread block's collectives (default: `costs.default_links` for the device the
    profile was measured on). A spread embedding's weight gradient is costed over D, as
    `tp.tp_plans` shards it (`VocabShardedEmbedding` builds only its own rows' gradient);
    `dense_embedding_grad=True` costs it whole on each device, as DTensor's RowwiseParallel runs
    it (what `tp_plans` still gives an embedding with a padding row or other options).

    `measured` maps a candidate's name to its blocks' seconds as a run of it measured
    (`block_seconds`): those replace the profile's costs of that candidate (`from_run`)."""
    units = list(profile.units)
    if devices > len(units):
        raise ValueError(f"{devices} devices but only {len(units)} units to place: use at most {len(units)}")
    D = devices

    links = links or default_links(profile.device)

    def make(name, groups, split, spread=()):
        return _candidate(name, groups, D, capacity_bytes, microbatches, split, per_param, profile, spread,
                          measured, links.block_overhead, links)

    out = [make("chain", _chain_groups(units, D, lambda k: k), False)]
    if D == 1:
        return out
    out.append(make("chain-split", _chain_groups(units, D, lambda k: k), True))
    for c in range(2, max_chunks + 1):
        if D * c <= len(units):
            out.append(make(f"interleaved-{c}", _chain_groups(units, D * c, lambda k: k % D), False))
    if 2 * D <= len(units):
        out.append(make("v-split", _chain_groups(units, 2 * D, lambda k: k if k < D else 2 * D - 1 - k), True))
    out += _mshapes(units, D, make, per_param, links, math.prod(profile.batch_shape) if profile.batch_shape else 1,
                    dense_embedding_grad)
    return out


def _mshapes(units: list[Unit], D: int, make, per_param: int, links: Links, tokens: int,
             dense: bool) -> list[Candidate]:
    """The embedding and/or the head spread over all devices, the rest a balanced chain."""
    stage_time = sum(u.time for u in units) / D
    stage_state = sum(u.state_bytes(per_param) for u in units) / D
    embed = [u for u in units if u.kind == "embedding"]
    k = len(units)
    while k > 0 and units[k - 1].kind in ("norm", "head"):
        k -= 1
    head = units[k:]

    def worth(us: list[Unit]) -> bool:
        return bool(us) and (sum(u.time for u in us) >= SPREAD_SHARE * stage_time
                             or sum(u.state_bytes(per_param) for u in us) >= SPREAD_SHARE * stage_state)

    every = tuple(range(D))
    out = []
    for tag, e, h in (("E", True, False), ("H", False, True), ("EH", True, True)):
        if (e and not worth(embed)) or (h and not worth(head)):
            continue
        rest = units[len(embed) if e else 0:k if h else len(units)]
        if len(rest) < D:
            continue
        groups = _chain_groups(rest, D, lambda i: i)
        if e:
            groups.insert(0, Group("E", tuple(embed), every,
                                   *spread_comm(tuple(embed), D, links, tokens, rest[0].input_bytes), dense))
        if h:
            groups.append(Group("H", tuple(head), every, *spread_comm(tuple(head), D, links, tokens)))
        out.append(make(f"mshape-{tag}", groups, False, tuple(n for n, on in (("E", e), ("H", h)) if on)))
    return out
