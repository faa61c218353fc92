"""Every rank of one pipeline must be given the same batch: a per-rank sampler would otherwise
feed each block other micro-batches than its neighbours' and train wrong without an error.

The batch's fingerprint has two parts, each checked where it costs no wait for the GPU: its
layout (shapes, dtypes, other leaves: host data, `preflight.batch_layout`) before any block runs,
since ranks that disagree on it would exchange messages of other sizes; its contents (summed on
the device, `preflight.batch_contents`) at the end of the step, read with the loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.preflight import batch_layout


@dataclass
class BatchAgreement:
    """The checks over one pipeline's ranks (`ranks`, replica `replica`): `host_group` exchanges
    host tensors (gloo), `pp_group` device tensors."""

    ranks: tuple[int, ...]
    replica: int
    host_group: Any
    pp_group: Any
    device: torch.device

    def same_layout(self, leaves: list, step: int) -> None:
        """The batch's layout agrees over the ranks: its max and the max of its complement,
        all-reduced over the host group, give the max and the min."""
        key = batch_layout(leaves)
        both = _host_max([key, ~key], self.host_group)
        if both[0] != ~both[1]:
            every = [None] * len(self.ranks)
            dist.all_gather_object(every, key, group=self.host_group)
            self.refuse(step, every)

    def contents_differ(self, contents: torch.Tensor) -> torch.Tensor:
        """Whether the batch's contents differ over the ranks: a bool on the device, compared as
        `same_layout` compares the layout."""
        both = torch.stack([contents, ~contents])
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=self.pp_group)
        return both[0] != ~both[1]

    def refuse_contents(self, contents: torch.Tensor, step: int) -> None:
        """After `contents_differ` (summed over the world) found ranks given different batches:
        every rank stops, naming the ranks of its pipeline (a pipeline whose ranks agree names
        the other)."""
        every = torch.empty(len(self.ranks), dtype=torch.int64, device=self.device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        gather(every, contents.reshape(1), group=self.pp_group)
        self.refuse(step, every.tolist())
        raise ExecutionError(f"step {step}: the ranks of another pipeline than this one (replica {self.replica}) "
                             f"were given different batches; its ranks name them")

    def refuse(self, step: int, fingerprints: list) -> None:
        """Raise naming which of the pipeline's ranks got which batch, if they differ."""
        kinds: dict[Any, list[int]] = {}
        for d, h in enumerate(fingerprints):
            kinds.setdefault(h, []).append(self.ranks[d])
        if len(kinds) > 1:
            parts = [f"rank{'s' * (len(r) > 1)} {', '.join(map(str, r))} got {'another' if i else 'one'}"
                     for i, r in enumerate(kinds.values())]
            raise ExecutionError(
                f"step {step}: the ranks of one pipeline (replica {self.replica}, ranks "
                f"{list(self.ranks)}) were given different batches: {', '.join(parts)}. Every rank of a "
                f"pipeline must be given the same batch (each replica its own): draw it by replica "
                f"(pipe.replica), not by rank")


def _host_max(values: list[int], group) -> list[int]:
    """The element-wise max of `values` over `group`, exchanged as a host tensor (gloo)."""
    t = torch.tensor(values, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()
