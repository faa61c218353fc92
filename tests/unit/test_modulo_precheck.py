"""Each period's feasibility solve is first asked only to rule the period out, with more LP cuts
(`modulo.INFEASIBLE_LINEARIZATION`) on a small budget; the solve at CP-SAT's default level runs
only when that does not, so at feasible periods the repetend is the one the default solve finds."""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.search import modulo
from tessel_dsl.search.solvers import cpsat
from tests.unit.test_modulo_memory import chain


def _levels(monkeypatch) -> list:
    asked: list = []
    real = cpsat.run_model

    def run_model(model, **kw):
        asked.append((kw.get("linearization"), kw.get("effort")))
        return real(model, **kw)

    monkeypatch.setattr(cpsat, "run_model", run_model)
    return asked


def test_an_infeasible_period_is_ruled_out_by_the_first_solve_alone(monkeypatch):
    # Device 0 holds a micro-batch for 6 units and has room for one: no period below 6 fits
    # (tests/unit/test_modulo_capacity.py).
    spec = replace(chain(4), device_memory=(1, 4))
    asked = _levels(monkeypatch)
    assert modulo.solve_period_cpsat(spec, 5, 4, None, effort=1.0)[0] == "infeasible"
    assert asked == [(modulo.INFEASIBLE_LINEARIZATION, 1.0)]


def test_a_feasible_period_gets_the_default_solves_repetend(monkeypatch):
    spec = replace(chain(4), device_memory=(1, 4))
    asked = _levels(monkeypatch)
    st, rep = modulo.solve_period_cpsat(spec, 6, 4, None, effort=5.0)
    # the first solve only rules out, on at most INFEASIBLE_EFFORT; the default gets the budget
    assert st == "optimal" and asked == [(modulo.INFEASIBLE_LINEARIZATION, modulo.INFEASIBLE_EFFORT), (None, 5.0)]
    # the same model solved at the default level alone gives the same repetend
    monkeypatch.setattr(modulo, "INFEASIBLE_LINEARIZATION", None)
    again = modulo.solve_period_cpsat(spec, 6, 4, None, effort=5.0)
    assert again == (st, rep)
