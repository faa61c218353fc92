"""The search's last step, the whole schedule with memory as holding cuts (`search/heldcuts.py`):
it shortens a plan to the analytic bound on a zero-bubble chain, proves a memory-capped 1F1B
shortest where the analytic bounds cannot, and a plan that keeps a tuned baseline's order still
re-extends to another N."""
from __future__ import annotations

from types import SimpleNamespace

from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.baselines import build
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.driver import search
from tessel_dsl.search.finish import reextend
from tessel_dsl.search.inflight import NAME, searched_capped
from tessel_dsl.search.notes import note, render
from tessel_dsl.validate import validate
from tests.paths import ROOT
from tests.unit.test_membound import chain


def test_a_zero_bubble_chain_reaches_its_bound():
    # bench/specs/real/zerobubble8.tsl at N = 32: the repetend's extension and ZB-H1 give 5394;
    # the model finds 5385, the analytic bound (the busiest device's work and its chains).
    spec = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl")
    result = search(spec)
    validate(spec, result.schedule)
    assert result.schedule.makespan(spec) == 5385 == makespan_bound(spec, 32) == result.info.makespan_bound
    assert result.info.proven
    assert "with memory as holding cuts shortened the makespan from 5394 to 5385, proven shortest" in render(
        result.info.notes)
    # Its order is not the repetend's: the repetend is kept for other N only, so no period is
    # claimed for this N, and the plan still re-extends.
    sched = result.schedule
    assert sched.repetend is not None and sched.repetend_start is None
    longer = reextend(spec, sched, 40, info=result.info)
    validate(spec, longer)
    assert longer.microbatches == 40


def test_a_plan_is_proven_where_the_analytic_bound_is_below_it():
    # The 4-stage chain of tests/unit/test_membound_area.py, two micro-batches in flight, N = 6:
    # the analytic bounds give 138, TO proves 141 (that test); the search's plan is 141, and the
    # model proves it, so the stated bound is 141.
    spec = chain([4, 3, 4, 3], 2, n=6)
    assert makespan_bound(spec, 6) == 138
    result = search(spec)
    validate(spec, result.schedule)
    assert result.schedule.makespan(spec) == result.info.makespan_bound == 141 and result.info.proven
    said = render(result.info.notes)
    assert "holding cuts proved that no schedule is shorter" in said
    # ... and where the stated bound comes from, beside what the other bounds give
    assert "lower bound 141 is proven on every block instance with memory as holding cuts (the other " \
           "bounds give 138)" in said


def test_a_plan_naming_a_tuned_baseline_reextends():
    # A plan that keeps memory-capped 1F1B with searched in-flight limits and no repetend names
    # that baseline; for another N it is tuned again (it has no order to build by name).
    spec = chain([3, 2, 3, 2, 3, 2, 3, 2], 2, n=8)
    tuned = searched_capped(spec, 8)
    plan = Schedule(8, tuned.slots, name="tessel")
    info = SimpleNamespace(notes=(note("baseline-at-bound", baseline=NAME, n=8, makespan=tuned.makespan(spec),
                                       repetend=False),))
    for n in (6, 12):
        got = reextend(spec, plan, n, info=info)
        validate(spec, got)
        assert got.microbatches == n
        again = searched_capped(spec, n)
        assert got.makespan(spec) == (again or build(spec, "1f1b-capped", n)).makespan(spec)



# bench/zb_heads.py's spec 2 (`python bench/zb_heads.py --print 2`): a zero-bubble chain with an
# embedding on device 0 and a head on device 7, 80 GB a device, so no memory binds.
ZB_HEADS = """\
placement zb_heads2
resolution time 1ms
resolution memory 10MB
devices 8
memory 80GB
microbatches 32
mode train
forward EMB on 0 time 7ms memory 0.1GB
backward EMBB of EMB on 0 time 7ms memory -0.1GB
forward F0 on 0 time 30ms memory 0.88GB
input_grad I0 of F0 time 33ms
weight_grad W0 of F0 time 26ms memory -0.88GB
I0 -> W0
forward F1 on 1 time 30ms memory 1.22GB
input_grad I1 of F1 time 31ms
weight_grad W1 of F1 time 26ms memory -1.22GB
I1 -> W1
forward F2 on 2 time 30ms memory 1.38GB
input_grad I2 of F2 time 33ms
weight_grad W2 of F2 time 26ms memory -1.38GB
I2 -> W2
forward F3 on 3 time 31ms memory 1.01GB
input_grad I3 of F3 time 35ms
weight_grad W3 of F3 time 26ms memory -1.01GB
I3 -> W3
forward F4 on 4 time 26ms memory 1.11GB
input_grad I4 of F4 time 30ms
weight_grad W4 of F4 time 24ms memory -1.11GB
I4 -> W4
forward F5 on 5 time 29ms memory 1.21GB
input_grad I5 of F5 time 34ms
weight_grad W5 of F5 time 28ms memory -1.21GB
I5 -> W5
forward F6 on 6 time 30ms memory 1.13GB
input_grad I6 of F6 time 28ms
weight_grad W6 of F6 time 27ms memory -1.13GB
I6 -> W6
forward F7 on 7 time 31ms memory 1.33GB
input_grad I7 of F7 time 29ms
weight_grad W7 of F7 time 27ms memory -1.33GB
I7 -> W7
forward H on 7 time 20ms memory 0.5GB
input_grad HI of H time 20ms
weight_grad HW of H time 16ms memory -0.5GB
HI -> HW
EMB -> chain(F{k} for k in 0..7) -> H -> HI -> chain(I{7-k} for k in 0..7) -> EMBB
"""


def test_the_model_runs_where_no_memory_binds():
    # The search's own schedule there is 4906, above the analytic bound 4789; with no holding
    # binding the model is TO without memory, and it finds a schedule at that bound.
    spec = parse(ZB_HEADS)
    assert makespan_bound(spec, 32) == 4789
    result = search(spec)
    validate(spec, result.schedule)
    assert result.schedule.makespan(spec) == 4789 == result.info.makespan_bound and result.info.proven
    assert "shortened the makespan from 4906 to 4789, proven shortest" in render(result.info.notes)
