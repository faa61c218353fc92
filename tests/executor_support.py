"""Shared helpers of the executor tests: build a plan for a shipped shape, run it pipelined,
and compare with the single-process reference model."""
from __future__ import annotations

import importlib

import torch

from tessel_dsl.executor.models.common import reference_step
from tessel_dsl.ir import Mode, Spec
from tessel_dsl.lower import lower
from tessel_dsl.plan import Plan
from tessel_dsl.search import baselines


def plan_for(spec: Spec, schedule: str = "gpipe", microbatches: int = 4, blocking: bool = False) -> Plan:
    sched = baselines.build(spec, schedule, microbatches)
    return Plan(spec, sched, lower(spec, sched, blocking=blocking))


def assemble(grads: list, name: str, full_shape: torch.Size) -> list[torch.Tensor]:
    """Every rank's gradient of reference parameter `name`, each placed into a full-size tensor
    (NaN outside the rank's slice) so shards and replicas compare alike."""
    out = []
    for n, dim, start, g in grads:
        if n != name or g is None:
            continue
        if dim is None:
            out.append(g)
        else:
            full = torch.full(full_shape, float("nan"), dtype=g.dtype)
            full.narrow(dim, start, g.shape[dim]).copy_(g)
            out.append(full)
    return out


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_training(report, module: str, spec: Spec, model_args: dict, tol: float = 1e-5) -> None:
    """Pipelined loss and every parameter gradient equal the single-process step's."""
    ref = importlib.import_module(module).reference(spec, **model_args)
    loss, grads = reference_step(ref, report.plan.schedule.microbatches)
    assert report.losses and len(report.losses) == report.plan.schedule.microbatches
    assert abs(report.loss - loss) <= tol * max(1.0, abs(loss)), (report.loss, loss)
    seen = {n for n, *_ in report.grads}
    assert seen == set(grads), (sorted(set(grads) - seen), sorted(seen - set(grads)))
    for name, g in grads.items():
        parts = assemble(report.grads, name, g.shape)
        assert parts, name
        covered = torch.zeros(g.shape, dtype=torch.bool)
        for p in parts:
            mask = ~torch.isnan(p)
            covered |= mask
            assert rel_err(p[mask], g[mask]) <= tol, (name, rel_err(p[mask], g[mask]))
        assert bool(covered.all()), f"{name}: some entries have no gradient on any rank"


def check_inference(report, module: str, spec: Spec, model_args: dict, tol: float = 1e-5) -> None:
    """Every sink output of every micro-batch equals the single-process model's."""
    ref = importlib.import_module(module).reference(spec, **model_args)
    n = report.plan.schedule.microbatches
    assert len(report.outputs) >= n
    with torch.no_grad():
        for (block, mb), outs in report.outputs.items():
            expect = ref.infer(mb)
            assert rel_err(outs[0].float(), expect.float()) <= tol, (block, mb)


__all__ = ["plan_for", "check_training", "check_inference", "Mode"]
