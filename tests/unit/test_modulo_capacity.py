"""The cyclic model's memory rows hold each device to its own capacity (`memory 4 on 1`), not to
the spec's default: the two-stage chain of `tests/unit/test_modulo_memory.py` with one small device."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tessel_dsl.search.modulo import solve_period
from tests.unit.test_modulo_memory import chain
from tests.unit.test_search_memory import unrolled_peak


@pytest.mark.parametrize("solver", ["cpsat", "z3"])
@pytest.mark.parametrize("capacities, shortest", [((1, 4), 6), ((4, 1), 3)])
def test_each_device_is_held_to_its_own_capacity(solver, capacities, shortest):
    # Device 0 holds a micro-batch for 6 units (F0 to B0): with 1 unit there only P >= 6 fits;
    # device 1 holds one for 3 (F1 to B1), so 1 unit there still allows the lower bound P = 3.
    spec = replace(chain(4), device_memory=capacities)
    for period in range(3, shortest + 1):
        st, rep = solve_period(spec, period, 4, solver, None)
        assert st == ("optimal" if period == shortest else "infeasible"), (period, st)
        if st == "optimal":
            peaks = unrolled_peak(spec, rep)
            assert all(peaks[d] <= capacities[d] for d in range(2)), peaks
