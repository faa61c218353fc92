"""The typed IR of one operator placement: what a `.tsl` file means once parsed and instantiated.

Everything is a frozen dataclass with integer time and memory units, so specs hash, compare and
serialise without surprises. Source spans are kept for diagnostics but excluded from equality, so a
spec read from JSON equals the one parsed from text.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property

from tessel_dsl.errors import Diagnostic, Location

__all__ = ["DTYPE_BYTES", "Block", "Edge", "Expectation", "Kind", "Link", "Mode", "Spec", "Tensor", "Units"]


class Kind(str, Enum):
    """What a block computes. Split backward follows the zero-bubble papers' I/W split."""

    FORWARD = "forward"
    BACKWARD = "backward"
    INPUT_GRAD = "input_grad"
    WEIGHT_GRAD = "weight_grad"
    OTHER = "other"

    @property
    def letter(self) -> str:
        return {"forward": "F", "backward": "B", "input_grad": "I", "weight_grad": "W", "other": "O"}[self.value]

    @property
    def is_backward(self) -> bool:
        return self in (Kind.BACKWARD, Kind.INPUT_GRAD, Kind.WEIGHT_GRAD)


class Mode(str, Enum):
    TRAIN = "train"
    INFER = "infer"


DTYPE_BYTES = {
    "f64": 8, "fp64": 8, "float64": 8,
    "f32": 4, "fp32": 4, "float32": 4,
    "bf16": 2, "f16": 2, "fp16": 2, "float16": 2, "bfloat16": 2,
    "fp8": 1, "f8": 1, "i8": 1, "int8": 1, "u8": 1, "uint8": 1, "bool": 1,
    "i32": 4, "int32": 4, "i64": 8, "int64": 8,
}


@dataclass(frozen=True)
class Tensor:
    """The tensor an edge carries: concrete shape (parameters already substituted) and dtype."""

    shape: tuple[int, ...]
    dtype: str = "f32"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES.get(self.dtype, 4)


@dataclass(frozen=True)
class Block:
    """One piece of one micro-batch's work, run on `devices` (all of them at once when several)."""

    name: str
    kind: Kind
    devices: tuple[int, ...]
    time: int
    memory: int
    # For a backward-like block: the forward block whose activations it consumes.
    forward: str | None = None
    span: Location | None = field(default=None, compare=False, repr=False)

    @property
    def is_multi_device(self) -> bool:
        return len(self.devices) > 1


@dataclass(frozen=True)
class Edge:
    """`src -> dst` inside one micro-batch; `tensor` gives the transfer size and receive shape."""

    src: str
    dst: str
    tensor: Tensor | None = None
    span: Location | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Expectation:
    """A CI assertion carried by a spec, e.g. ``expect bubble <= 5% at N=128``.

    `metric` is one of bubble, peak_memory, period, makespan, deadlock_free; `value` is a number
    (a ratio for bubble) or a symbol resolved at check time (``M``, ``lower_bound``).
    """

    metric: str
    op: str = "=="
    value: float | str | None = None
    microbatches: int | None = None
    span: Location | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Units:
    """What one integer unit of time and memory means, for reports and the executor."""

    time_seconds: float = 1.0
    time_label: str = "unit"
    memory_bytes: int = 1
    memory_label: str = "unit"


@dataclass(frozen=True)
class Link:
    """Cost of moving a tensor between two devices: latency in time units, bytes per time unit."""

    latency: float = 0.0
    bandwidth: float = 0.0  # 0 means infinitely fast

    def transfer_time(self, nbytes: int) -> float:
        return self.latency + (nbytes / self.bandwidth if self.bandwidth > 0 else 0.0)


@dataclass(frozen=True)
class Spec:
    """One operator placement of one micro-batch, fully instantiated (no parameters left)."""

    name: str
    devices: int
    memory: int
    blocks: tuple[Block, ...]
    edges: tuple[Edge, ...]
    microbatches: int = 1
    mode: Mode = Mode.TRAIN
    expectations: tuple[Expectation, ...] = ()
    units: Units = Units()
    link: Link = Link()
    params: tuple[tuple[str, str], ...] = ()
    source: str | None = field(default=None, compare=False, repr=False)
    # Per-device memory (`memory 12GB on 0`, `memory 80GB reserve 6GB`): the capacity each device
    # has and what is already taken on it (framework, weights, optimizer state). Empty means
    # `memory` on every device and nothing reserved, so specs and plans without them are unchanged.
    device_memory: tuple[int, ...] = ()
    reserved: tuple[int, ...] = ()
    # What reading the spec text found worth saying without refusing it (`Diagnostic` warnings,
    # each with its file:line:col); not part of the spec's meaning, so not compared or stored.
    warnings: tuple[Diagnostic, ...] = field(default=(), compare=False, repr=False)

    def capacity(self, device: int) -> int:
        """The memory left for activations on `device`: its capacity less what is reserved there.
        Every memory limit (search, validator, simulator, reports) reads this, never `memory`."""
        cap = self.device_memory[device] if self.device_memory else self.memory
        return cap - (self.reserved[device] if self.reserved else 0)

    @cached_property
    def capacities(self) -> tuple[int, ...]:
        """`capacity(d)` for every device."""
        return tuple(self.capacity(d) for d in range(self.devices))

    @property
    def uniform_memory(self) -> bool:
        """Every device has the same room (reports then show one M)."""
        return len(set(self.capacities)) <= 1

    def within(self, peaks) -> Spec:
        """This spec with each device's room cut to `peaks[d]` where that is less (a schedule's
        peak memory) and nothing reserved: what a re-solve may hold when it must hold no more than
        the schedule it starts from."""
        return replace(self, device_memory=tuple(min(c, p) for c, p in zip(self.capacities, peaks)), reserved=())

    def total_capacity(self, device: int) -> int:
        """The device's whole capacity, reserve included (what `memory` says for it)."""
        return self.device_memory[device] if self.device_memory else self.memory

    def reserved_on(self, device: int) -> int:
        return self.reserved[device] if self.reserved else 0

    @cached_property
    def by_name(self) -> dict[str, Block]:
        return {b.name: b for b in self.blocks}

    def block(self, name: str) -> Block:
        return self.by_name[name]

    @cached_property
    def preds(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {b.name: [] for b in self.blocks}
        for e in self.edges:
            out[e.dst].append(e.src)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def succs(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {b.name: [] for b in self.blocks}
        for e in self.edges:
            out[e.src].append(e.dst)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def topo_order(self) -> tuple[str, ...]:
        """Blocks in a dependency order, ties broken by declaration order (stable, deterministic)."""
        import heapq

        indeg = {b.name: len(self.preds[b.name]) for b in self.blocks}
        order: list[str] = []
        # A heap of (declaration position, name): the earliest-declared ready block comes next,
        # in O(log n) per block (sorting the ready list each time made large specs quadratic).
        pos = {b.name: i for i, b in enumerate(self.blocks)}
        ready = [(pos[b.name], b.name) for b in self.blocks if indeg[b.name] == 0]
        heapq.heapify(ready)
        while ready:
            _, n = heapq.heappop(ready)
            order.append(n)
            for s in self.succs[n]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, (pos[s], s))
        if len(order) != len(self.blocks):
            raise ValueError("dependency cycle")  # check() reports cycles before this is reached
        return tuple(order)

    def blocks_on(self, device: int) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if device in b.devices)

    def edge_tensor(self, src: str, dst: str) -> Tensor | None:
        for e in self.edges:
            if e.src == src and e.dst == dst:
                return e.tensor
        return None

    def __hash__(self) -> int:  # cached_property needs a __dict__, so hash by identity of content
        return hash((self.name, self.devices, self.memory, self.blocks, self.edges, self.microbatches, self.mode,
                     self.device_memory, self.reserved))
