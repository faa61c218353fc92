"""What the profile of a model holds, in seconds and bytes (no torch here: candidates and tests
build on it alone)."""
from __future__ import annotations

from dataclasses import dataclass, field

# Adam keeps two fp32 moments per parameter: 8 bytes per parameter beyond weights and gradients.
ADAM_BYTES_PER_PARAM = 8


@dataclass(frozen=True)
class Unit:
    """One piece a stage boundary may fall between: the embedding, a decoder layer, the final
    norm, the head. `modules` are its submodules' fully qualified names, in call order."""

    name: str
    modules: tuple[str, ...]
    forward: float              # seconds per micro-batch
    input_grad: float           # seconds: gradient with respect to its inputs
    weight_grad: float          # seconds: gradient with respect to its parameters
    activation_bytes: int       # what one micro-batch keeps from forward to backward
    input_bytes: int = 0        # the tensors it receives (kept by a stage that begins with it)
    param_bytes: int = 0
    params: int = 0             # number of parameters
    kind: str = "layer"         # embedding, layer, norm or head
    # seconds: one unsplit backward (`torch.autograd.backward`); 0 when not measured (a profile
    # saved before it was), and then taken as input_grad + weight_grad
    unsplit_backward: float = 0.0
    # seconds: a cross entropy over a head's output (its logits), forward and backward on one
    # device; 0 for other units and where not measured
    loss_forward: float = 0.0
    loss_backward: float = 0.0

    @property
    def backward(self) -> float:
        return self.input_grad + self.weight_grad

    @property
    def unsplit(self) -> float:
        """The backward as one pass: measured, else input_grad + weight_grad."""
        return self.unsplit_backward or self.backward

    @property
    def time(self) -> float:
        """Forward and backward of one micro-batch (the loss on a head included)."""
        return self.forward + self.unsplit + self.loss_forward + self.loss_backward

    def state_bytes(self, optimizer_bytes_per_param: int = ADAM_BYTES_PER_PARAM) -> int:
        """Weights, their gradients and the optimizer state."""
        return 2 * self.param_bytes + optimizer_bytes_per_param * self.params


@dataclass(frozen=True)
class Profile:
    """Every unit of a model in forward order, and where they were measured."""

    units: tuple[Unit, ...]
    device: str = "cpu"
    batch_shape: tuple[int, ...] = ()
    seconds: float = 0.0        # how long profiling took
    tied: tuple[tuple[str, str], ...] = field(default=())  # units sharing a parameter
    # per pair of `tied`: (parameters, bytes) the two units share (counted in both units' totals)
    tied_sizes: tuple[tuple[int, int], ...] = field(default=())

    @property
    def total_time(self) -> float:
        return sum(u.time for u in self.units)

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Profile:
        """A profile saved with `to_json` (e.g. measured on a GPU machine, planned elsewhere)."""
        units = tuple(Unit(**{**u, "modules": tuple(u["modules"])}) for u in data["units"])
        return cls(units, data.get("device", ""), tuple(data.get("batch_shape", ())), data.get("seconds", 0.0),
                   tuple(tuple(p) for p in data.get("tied", ())),
                   tuple(tuple(p) for p in data.get("tied_sizes", ())))

    def shared_state(self, optimizer_bytes_per_param: int = ADAM_BYTES_PER_PARAM) -> list[tuple[str, str, int]]:
        """(unit, unit, bytes): the weights, gradients and optimizer state each tied pair holds
        once, though each unit's `state_bytes` counts them (a profile saved without the sizes
        counts nothing shared)."""
        return [(a, b, 2 * nbytes + optimizer_bytes_per_param * n)
                for (a, b), (n, nbytes) in zip(self.tied, self.tied_sizes)]


@dataclass(frozen=True)
class Links:
    """How long moving bytes between devices takes: one device sends or receives at `bandwidth`
    bytes per second, and every message or collective step costs `latency` seconds besides.
    `block_overhead` is what a spread block costs per micro-batch and direction beyond its compute
    and its transfers (the host's dispatch of sharded operators, synchronisations): not modelled,
    0 unless set from a measurement."""

    bandwidth: float
    latency: float
    block_overhead: float = 0.0

    def __post_init__(self):
        if not (self.bandwidth > 0 and self.latency >= 0 and self.block_overhead >= 0):
            raise ValueError(f"link bandwidth must be positive and latency non-negative, got {self}")

    def send(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth

    def broadcast(self, nbytes: float, devices: int) -> float:
        """One device's tensor to `devices - 1` others, sent one copy each: the sender's link
        carries them all."""
        return 0.0 if devices < 2 else self.latency + (devices - 1) * nbytes / self.bandwidth

    def all_reduce(self, nbytes: float, devices: int) -> float:
        """A ring all-reduce: 2 (D - 1) steps, each moving 1/D of the tensor."""
        if devices < 2:
            return 0.0
        steps = 2 * (devices - 1)
        return steps * self.latency + steps / devices * nbytes / self.bandwidth


# Stated defaults, not measured here: NVLink 4 (H100/H200 SXM) is 450 GB/s a direction; NCCL's
# point-to-point and ring traffic reaches less, so 300 GB/s, and 20 us per message or ring step.
NVLINK = Links(bandwidth=300e9, latency=20e-6)
# gloo between processes of one CPU host (the tests' ranks): 2 GB/s and 100 us, stated, not measured.
CPU_LINKS = Links(bandwidth=2e9, latency=100e-6)


def default_links(device: str) -> Links:
    """The stated defaults for a profile measured on `device` (``cpu`` or a GPU's name)."""
    return CPU_LINKS if device in ("", "cpu") else NVLINK
