"""Tessel DSL: describe a pipeline placement, search a Tessel schedule, simulate and run it.

The whole pipeline is a handful of plain functions, one per step::

    import tessel_dsl as tsl

    spec = tsl.parse_file("specs/vshape.tsl")      # .tsl text -> Spec (typed IR)
    tsl.check(spec)                                 # semantic checks, one SpecError with all issues
    result = tsl.search(spec, microbatches=8)       # Tessel search -> SearchResult(schedule, info)
    plan = tsl.make_plan(spec, result.schedule, result.info)   # validate + lower -> Plan
    report = tsl.simulate(plan)                     # discrete-event run: bubble, memory, deadlock
    tsl.save_plan(plan, "plan.json")
    tsl.export_torch_csv(plan, "sched.csv")         # for torch.distributed.pipelining

=====================  ===========================================================
name                   what it does
=====================  ===========================================================
parse, parse_file      .tsl text or file -> `Spec` (``sets=`` overrides parameters)
check                  semantic checks of a parsed spec
search                 the Tessel search (repetend + completion) for N micro-batches
validate               independent check of a schedule against its spec
validate_plan          every check a loaded plan gets: spec, schedule, programs
lower                  schedule -> one `Program` (compute + send/recv) per device
make_plan              validate + lower + bundle as a `Plan`
save_plan, load_plan   versioned JSON plan files (atomic writes)
simulate               SimPy run of a plan's programs -> report
run                    execute a plan with torch.distributed (the executor)
export_torch_csv       plan -> PyTorch pipeline CSV (compute-only or with comms)
schedule_from_csv      PyTorch pipeline CSV -> `Schedule` for a spec
profile_spec           time and measure a model's blocks -> spec with measured costs
=====================  ===========================================================

Names are imported on first use, so ``import tessel_dsl`` stays cheap: z3, OR-Tools, SimPy and
torch are only loaded by the functions that need them. Every user-facing failure raises a
`TesselError` subclass (also exported here).

A schedule can be built and checked without any solver::

    >>> from tessel_dsl.ir import Block, Edge, Kind, Spec
    >>> from tessel_dsl.schedule import Schedule, Slot
    >>> spec = Spec("pair", devices=2, memory=2,
    ...     blocks=(Block("F0", Kind.FORWARD, (0,), 1, 1), Block("F1", Kind.FORWARD, (1,), 1, 1),
    ...             Block("B1", Kind.BACKWARD, (1,), 2, -1, forward="F1"),
    ...             Block("B0", Kind.BACKWARD, (0,), 2, -1, forward="F0")),
    ...     edges=(Edge("F0", "F1"), Edge("F1", "B1"), Edge("B1", "B0")))
    >>> sched = Schedule(1, (Slot(0, "F0", 0), Slot(1, "F1", 0), Slot(2, "B1", 0), Slot(4, "B0", 0)))
    >>> validate(spec, sched)           # raises ScheduleError when a rule is broken
    >>> plan = make_plan(spec, sched)
    >>> [str(a) for a in plan.programs[0].actions if a.op.value != "WAIT"]
    ['F0:0', 'SEND F0:0>1', 'RECV B1:0<1', 'B0:0']
    >>> print(export_torch_csv(plan), end="")
    0F0,0B0
    1F0,1B0
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from tessel_dsl.errors import (
    ExecutionError,
    InfeasibleError,
    PlanError,
    ScheduleError,
    SimulationError,
    SpecError,
    TesselError,
    TslSyntaxError,
)

__version__ = "0.1.0"

# Public name -> module that defines it; imported on first attribute access.
_LAZY = {
    "parse": "tessel_dsl.lang.parser",
    "parse_file": "tessel_dsl.lang.parser",
    "check": "tessel_dsl.lang.spec_check",
    "search": "tessel_dsl.search.driver",
    "lower": "tessel_dsl.lower",
    "validate": "tessel_dsl.validate",
    "validate_plan": "tessel_dsl.plan_check",
    "load_plan": "tessel_dsl.plan",
    "save_plan": "tessel_dsl.plan",
    "make_plan": "tessel_dsl.plan",
    "simulate": "tessel_dsl.simulator",
    "run": "tessel_dsl.executor",
    "export_torch_csv": "tessel_dsl.interop.torch_csv",
    "schedule_from_csv": "tessel_dsl.interop.torch_csv",
    "profile_spec": "tessel_dsl.tools.profiling",
}

__all__ = sorted(_LAZY) + [
    "TesselError", "TslSyntaxError", "SpecError", "InfeasibleError", "ScheduleError",
    "SimulationError", "ExecutionError", "PlanError",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module 'tessel_dsl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """The package object. Several public functions share a submodule's name (`lower` in
    `tessel_dsl.lower`, `search` in `tessel_dsl.search`), and importing a submodule normally rebinds
    the package attribute to the module; this keeps the public name bound to the function whatever
    was imported first."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in _LAZY:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
