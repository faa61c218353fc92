"""Checkpoints of a `Pipeline` with torch.distributed.checkpoint: every rank writes its own
parameters (and optimizer state); rank 0 adds a small file naming the plan and block mapping, so a
checkpoint is refused on load by a pipeline it was not written for.

The optimizer state is saved flattened (DCP's ``flatten_optimizer_state_dict``): each parameter's
group hyperparameters (``lr``, ``betas``, ...) under a key of its own name. Unflattened, a group is one
key holding a list of parameter names, the same key on every rank; DCP keeps one rank's copy, and the
ranks of a pipeline, which hold different parameters, would load another rank's groups.

Loading never unpickles anything but DCP's own metadata classes and plain data unless the caller
says the checkpoint is trusted (`checkpoint_safe`). Every refusal is the same `ExecutionError`
on every rank, agreed on before any rank enters a DCP collective.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from tessel_dsl.errors import ExecutionError

CHECKPOINT_INFO = "tessel-plan.json"
# 2: the optimizer state is flattened (per-parameter group keys); 1 (no "format" key) was not.
FORMAT = 2


def _options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _state(pipe, optimizer) -> tuple[torch.nn.Module, dict]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    view = pipe._view()
    state = {"model": get_model_state_dict(view)}
    if optimizer is not None:
        state["optim"] = get_optimizer_state_dict(view, optimizer, options=_options())
    return view, state


def _agree(problem: str | None) -> None:
    """Raise on every rank if any rank found a problem (the lowest such rank's), so that no rank
    goes on into a collective the others have left."""
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, problem)
    found = [(rank, p) for rank, p in enumerate(every) if p is not None]
    if found:
        rank, p = found[0]
        raise ExecutionError(p if len(set(every)) == 1 else f"rank {rank}: {p}")


def save_checkpoint(pipe, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None, step: int = 0) -> None:
    """Save this rank's parameters (and optimizer state) with torch.distributed.checkpoint;
    all ranks call it together."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    path = Path(path)
    problem = None
    if path.exists() and not path.is_dir():
        problem = f"{path}: cannot save a checkpoint there: it is a file, not a directory"
    elif pipe.rank == 0:
        # A save interrupted half-way must not leave the previous info file naming mixed data.
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / CHECKPOINT_INFO).unlink(missing_ok=True)
        except OSError as e:
            problem = f"{path}: cannot save a checkpoint there ({e.strerror or e})"
    _agree(problem)
    _, state = _state(pipe, optimizer)
    try:
        dcp.save(state, checkpoint_id=str(path))
    except CheckpointException as e:
        raise ExecutionError(f"{path}: saving the checkpoint failed: {_describe(e)}") from None
    problem = None
    if pipe.rank == 0:
        info = {"format": FORMAT, "plan": pipe.plan.spec.name, "fingerprint": pipe.fingerprint(),
                "blocks": pipe.blocks, "devices": pipe.devices, "replicas": pipe.replicas, "step": int(step),
                "optimizer": optimizer is not None}
        try:
            tmp = path / (CHECKPOINT_INFO + ".tmp")
            tmp.write_text(json.dumps(info, indent=1))
            os.replace(tmp, path / CHECKPOINT_INFO)
        except OSError as e:
            problem = f"{path}: cannot write {CHECKPOINT_INFO} ({e.strerror or e})"
    _agree(problem)


def _read_info(pipe, path: Path, optimizer) -> dict:
    """The checkpoint's info file, checked against this pipeline; ExecutionError if refused."""
    if not path.exists():
        raise ExecutionError(f"{path}: no such checkpoint directory")
    if not path.is_dir():
        raise ExecutionError(f"{path}: not a checkpoint directory (a checkpoint is the directory `save` wrote)")
    try:
        info = json.loads((path / CHECKPOINT_INFO).read_text())
    except FileNotFoundError:
        raise ExecutionError(f"{path}: not a Tessel checkpoint: it has no {CHECKPOINT_INFO} (written last by "
                             f"`save`, so a save that did not finish has none)") from None
    except (OSError, ValueError) as e:
        raise ExecutionError(f"{path}/{CHECKPOINT_INFO}: unreadable ({e})") from None
    if not isinstance(info, dict) or not isinstance(info.get("step", 0), int):
        raise ExecutionError(f"{path}/{CHECKPOINT_INFO}: not a Tessel checkpoint's info (expected an object with "
                             f"the plan's fingerprint and an integer step)")
    if info.get("fingerprint") != pipe.fingerprint():
        raise ExecutionError(f"{path}: written for plan {info.get('plan')!r} with blocks {info.get('blocks')}, "
                             f"not this plan ({pipe.plan.spec.name!r}, {pipe.plan.schedule.name}) and mapping")
    if optimizer is not None and not info.get("optimizer"):
        raise ExecutionError(f"{path}: holds no optimizer state")
    if optimizer is not None and info.get("format", 1) != FORMAT:
        raise ExecutionError(f"{path}: its optimizer state was saved by an earlier version, whose parameter "
                             f"groups cannot be restored on every rank; load the model alone (no optimizer)")
    return info


def load_checkpoint(pipe, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None,
                    trusted: bool = False) -> int:
    """Load a checkpoint written by `save` for the same plan and mapping; returns its step.
    Checked on every rank before anything is read. Without `trusted`, nothing in the checkpoint
    is unpickled beyond DCP's metadata classes and plain data (`checkpoint_safe`)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    from tessel_dsl.executor.checkpoint_safe import SafePlanner, SafeReader, UnsafeCheckpoint

    path = Path(path)
    problem, info = None, {}
    reader = SafeReader(str(path), trusted)
    try:
        info = _read_info(pipe, path, optimizer)
        reader.prefetch()
    except ExecutionError as e:
        problem = str(e)
    except FileNotFoundError:
        problem = f"{path}: the checkpoint's .metadata file is missing (a save that did not finish?)"
    except UnsafeCheckpoint as e:
        problem = (f"{path}/.metadata: refused, {e}: loading it would run code from the checkpoint. "
                   f"Load only checkpoints you wrote yourself with trusted=True")
    except (OSError, ValueError) as e:
        problem = f"{path}/.metadata: {e}"
    _agree(problem)
    view, state = _state(pipe, optimizer)
    try:
        dcp.load(state, storage_reader=reader, planner=None if trusted else SafePlanner())
    except CheckpointException as e:
        raise ExecutionError(f"{path}: loading the checkpoint failed: {_describe(e)}") from None
    set_model_state_dict(view, state["model"])
    if optimizer is not None:
        set_optimizer_state_dict(view, optimizer, state["optim"], options=_options())
    return int(info.get("step", 0))


def _describe(e) -> str:
    """The first failing rank's error, in one line without DCP's traceback, for the errors a
    damaged or foreign checkpoint gives."""
    from tessel_dsl.executor.checkpoint_safe import UnsafeCheckpoint

    failed = sorted(e.failures)
    if not failed:
        return str(e).strip().splitlines()[0]
    failure = e.failures[failed[0]]
    exc = failure[0] if isinstance(failure, tuple) else failure
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.split(". ")[0]  # torch's advice after the first sentence is about its own files
    if isinstance(exc, UnsafeCheckpoint):
        what = f"refused, {text}: loading it would run code from the checkpoint (trusted=True loads it)"
    elif isinstance(exc, FileNotFoundError):
        what = f"a data file is missing ({Path(exc.filename or '?').name})"
    elif isinstance(exc, OSError):
        what = f"{exc.strerror or text} ({exc.filename or ''})"
    elif text.startswith("Size mismatch"):
        what = f"{text} (the checkpoint is of a model of other sizes)"
    elif text.startswith("Missing key in checkpoint state_dict"):
        what = (f"{text.rstrip('.')}: the checkpoint is of another model or optimizer (or was saved "
                f"without the optimizer's state)")
    else:
        what = f"{type(exc).__name__}: {text} (a damaged data file?)"
    others = f"; ranks {', '.join(map(str, failed))} failed" if len(failed) > 1 else ""
    return f"rank {failed[0]}: {what}{others}"
