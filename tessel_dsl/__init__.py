"""Tessel DSL: describe a pipeline placement, search a Tessel schedule, simulate and run it.

The public API is imported lazily so that `import tessel_dsl` stays cheap and never pulls in z3,
simpy or torch until a function that needs them is called.
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import (
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

_LAZY = {
    "parse": "tessel_dsl.parser",
    "parse_file": "tessel_dsl.parser",
    "check": "tessel_dsl.check",
    "search": "tessel_dsl.search",
    "lower": "tessel_dsl.lower",
    "validate": "tessel_dsl.validate",
    "load_plan": "tessel_dsl.plan",
    "save_plan": "tessel_dsl.plan",
    "make_plan": "tessel_dsl.plan",
    "simulate": "simulator",
    "run": "executor",
}

__all__ = sorted(_LAZY) + [
    "TesselError", "TslSyntaxError", "SpecError", "InfeasibleError", "ScheduleError",
    "SimulationError", "ExecutionError", "PlanError",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tessel_dsl' has no attribute {name!r}")
