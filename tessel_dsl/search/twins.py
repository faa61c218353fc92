"""Devices that run exactly the same blocks, searched as one device.

The GPUs of a tensor-parallel group (`forward F{i} on 2*i..2*i+1`) run the same blocks at the
same times: a block on several devices occupies all of them at once, so two devices with the
same set of blocks are busy at the same moments in every schedule, and, since a block's memory
is the same on each of its devices, each holds the same amount at every moment. Such twins are
one device for scheduling: the spec with each group of twins folded into one device, whose room
is the smallest of theirs, has exactly the schedules of the original (a schedule lists block
starts, not devices, so it is a schedule of both), the same makespans and the same bounds.

What folding buys is a smaller problem for every model the search builds: half the devices of
a spec made of two-GPU groups, and with them the device-chain steps (`devchain.py`,
`chaincycle.py`), which a group of devices standing for one stage otherwise keeps out. On
bench/specs/real/tpmshape16.tsl with `--set MEM=16` (eight two-GPU stages, the embedding and
head on all sixteen GPUs, memory-bound) the plan went from 4693 ms to 3966 ms; without the
memory bound (54 GB) it is the same plan, at its bound, either way.

A transfer lag depends only on whether the consumer's devices ran the producer (`lags.py`),
which folding keeps, since each block's devices are whole groups; a spec whose lags differ
after folding all the same is left as it is. Devices that run nothing are left as they are.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tessel_dsl.ir import Spec
from tessel_dsl.search.lags import edge_lags


@dataclass(frozen=True)
class Folded:
    """`spec` with twins folded; `groups[k]` are the original devices that device ``k`` stands for
    (in order, the first the smallest)."""

    spec: Spec
    groups: tuple[tuple[int, ...], ...]

    def original(self, device: int) -> int:
        """The first original device of folded device `device` (notes name devices by it)."""
        return self.groups[device][0]

    def unfold(self, whole: Spec, schedule, info, said: tuple) -> tuple:
        """(`info` with its notes, `said`) naming the user's devices, once `schedule` (found on
        the folded spec) has been validated on `whole`, the spec as written."""
        from tessel_dsl.validate import validate

        validate(whole, schedule)  # (the same schedule; checked on the devices the user wrote)
        return (replace(info, notes=tuple(unfold_note(x, self) for x in info.notes)),
                tuple(unfold_note(x, self) for x in said))


def fold_twins(spec: Spec) -> Folded | None:
    """The module text's folded spec, or None when no two devices are twins (or folding would
    change a lag)."""
    runs: dict[frozenset[str], list[int]] = {}
    for d in range(spec.devices):
        key = frozenset(b.name for b in spec.blocks if d in b.devices)
        runs.setdefault(key if key else frozenset({f"#{d}"}), []).append(d)  # idle devices stay apart
    if len(runs) == spec.devices:
        return None
    groups = tuple(sorted(tuple(g) for g in runs.values()))
    where = {d: k for k, g in enumerate(groups) for d in g}
    blocks = tuple(replace(b, devices=tuple(sorted({where[d] for d in b.devices}))) for b in spec.blocks)
    room = tuple(min(spec.capacity(d) for d in g) for g in groups)
    folded = replace(spec, devices=len(groups), blocks=blocks, memory=max(room, default=spec.memory),
                     device_memory=room, reserved=())
    if edge_lags(folded) != edge_lags(spec):
        return None
    return Folded(folded, groups)


def unfold_note(said, folded: Folded):
    """A search note (`notes.Note`) with the devices it names given as the user's devices."""
    values = dict(said.values)
    if "device" in values:
        values["device"] = folded.original(values["device"])
    if "devices" in values:
        values["devices"] = [folded.original(d) for d in values["devices"]]
    return replace(said, values=values) if values != said.values else said
