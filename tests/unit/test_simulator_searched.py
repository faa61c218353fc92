"""Searched plans of the paper's placements, simulated: agreement with the plan, zero steady-state bubble."""
from __future__ import annotations

from tessel_dsl.analysis import busy_time
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.driver import search
from tests.paths import SPECS

N = 24


def searched(name: str):
    spec = parse_file(SPECS / f"{name}.tsl")
    result = search(spec, microbatches=N)
    return spec, result


def steady_bubble(spec, period: float) -> float:
    """Idle share of one steady-state period: every device does one micro-batch's work per period."""
    return 1.0 - sum(busy_time(spec)) / (period * spec.devices)
