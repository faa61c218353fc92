"""Run a Tessel plan on real devices with torch.distributed (NCCL on GPUs, gloo on CPUs).

Only torch, the standard library and the plan-side modules of `tessel_dsl` (ir, plan, program,
schedule, serialize, errors) are imported here, so a GPU machine needs nothing but torch and the
plan file. `run` spawns one process per device on this host; ``torchrun -m tessel_dsl.executor PLAN ...``
runs the same code with one process per device across hosts.
"""
from __future__ import annotations

import os

from tessel_dsl.errors import ExecutionError
from tessel_dsl.plan import Plan

__all__ = ["run", "RunReport"]


def __getattr__(name: str):
    if name == "RunReport":
        from tessel_dsl.executor.run_report import RunReport
        return RunReport
    raise AttributeError(name)


def run(plan: Plan | str | os.PathLike, model, *, nproc: int | None = None, backend: str | None = None,
        blocking: bool | None = None, timeout: float = 120.0, steps: int = 1, warmup: int = 0,
        collect: bool = False, grads: bool = False, model_args: dict | None = None, replicas: int = 1):
    """Execute `plan` with the model factory `model` (``"module:function"`` or a module-level
    function) on one process per device of this host and return a `RunReport`.

    `steps` iterations are measured after `warmup` unmeasured ones. `collect` keeps the first
    iteration's losses and sink outputs, `grads` its parameter gradients (for checks against a
    single-process run). `replicas` > 1 runs that many data-parallel copies of the plan on
    devices x replicas ranks, replica k on micro-batches k*N .. k*N+N-1, gradients averaged over
    the replicas after each iteration (the report shows replica 0). `blocking`, when given, must
    match how the plan was lowered. A failing or stalled rank raises ExecutionError naming the
    rank, the step and the action, within `timeout` seconds of the last progress.
    """
    from tessel_dsl.executor.launch import Options, load, spawn

    plan = load(plan)
    if blocking is not None and plan.programs and plan.programs[0].blocking != blocking:
        have = "blocking" if plan.programs[0].blocking else "non-blocking"
        raise ExecutionError(f"the plan was lowered for {have} communication; lower it again "
                             f"(tessel run SPEC --blocking does) to run it the other way")
    if backend is None:
        backend = _default_backend(plan.spec.devices * max(1, replicas))
    if backend not in ("gloo", "nccl"):
        raise ExecutionError(f"unknown backend {backend!r} (use gloo or nccl)")
    if replicas < 1:
        raise ExecutionError("replicas must be at least 1")
    if steps < 1 or warmup < 0:
        raise ExecutionError("steps must be at least 1 and warmup at least 0")
    if not callable(model) and ":" not in str(model):
        raise ExecutionError(f"--model must look like MODULE:FACTORY, got {model!r}")
    ref = model if isinstance(model, str) else f"{model.__module__}:{model.__qualname__}"
    opts = Options(ref, dict(model_args or {}), backend, float(timeout), steps, warmup, collect, grads, replicas)
    return spawn(plan, opts, nproc)


def _default_backend(world: int) -> str:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        return "nccl"
    return "gloo"
