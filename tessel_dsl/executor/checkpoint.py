"""Checkpoints of a `Pipeline` with torch.distributed.checkpoint: every rank writes its own
parameters (and optimizer state); rank 0 adds a small file naming the plan and block mapping, so a
checkpoint is refused on load by a pipeline it was not written for."""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from tessel_dsl.errors import ExecutionError

CHECKPOINT_INFO = "tessel-plan.json"


def save_checkpoint(pipe, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None, step: int = 0) -> None:
    """Save this rank's parameters (and optimizer state) with torch.distributed.checkpoint;
    all ranks call it together."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    view = pipe._view()
    state = {"model": get_model_state_dict(view)}
    if optimizer is not None:
        state["optim"] = get_optimizer_state_dict(view, optimizer)
    path = Path(path)
    dcp.save(state, checkpoint_id=str(path))
    if pipe.rank == 0:
        info = {"plan": pipe.plan.spec.name, "fingerprint": pipe.fingerprint(), "blocks": pipe.blocks,
                "devices": pipe.devices, "replicas": pipe.replicas, "step": step,
                "optimizer": optimizer is not None}
        tmp = path / (CHECKPOINT_INFO + ".tmp")
        tmp.write_text(json.dumps(info, indent=1))
        os.replace(tmp, path / CHECKPOINT_INFO)
    dist.barrier()

def load_checkpoint(pipe, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Load a checkpoint written by `save` for the same plan and mapping; returns its step.
    Checked on every rank before anything is read."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)

    path = Path(path)
    try:
        info = json.loads((path / CHECKPOINT_INFO).read_text())
    except (OSError, ValueError) as e:
        raise ExecutionError(f"{path}: not a Tessel checkpoint ({e})") from None
    if info.get("fingerprint") != pipe.fingerprint():
        raise ExecutionError(f"{path}: written for plan {info.get('plan')!r} with blocks {info.get('blocks')}, "
                             f"not this plan ({pipe.plan.spec.name!r}, {pipe.plan.schedule.name}) and mapping")
    if optimizer is not None and not info.get("optimizer"):
        raise ExecutionError(f"{path}: holds no optimizer state")
    view = pipe._view()
    state = {"model": get_model_state_dict(view)}
    if optimizer is not None:
        state["optim"] = get_optimizer_state_dict(view, optimizer)
    dcp.load(state, checkpoint_id=str(path))
    set_model_state_dict(view, state["model"])
    if optimizer is not None:
        set_optimizer_state_dict(view, optimizer, state["optim"])
    return int(info.get("step", 0))
