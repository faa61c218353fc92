"""The --effort search of a 4-device M-shape (tests/integration/test_search_devchain.py's
`barrier_chain`), about a minute of CPU: the chain model settles the two-copy walk there. The suite
keeps the same path on a smaller chain with an embedding and a head
(`test_search_uses_two_copies_on_an_embed_head_chain` there)."""
from __future__ import annotations

from tessel_dsl.lang.parser import parse
from tessel_dsl.plan import make_plan
from tessel_dsl.simulator import simulate
from tessel_dsl.validate import validate
from tests.integration.test_search_devchain import barrier_chain


def test_search_proves_the_two_copy_period_of_an_mshape():
    # With --effort the chain model settles the two-copy walk (19, and 18 infeasible); without
    # it the general model of the unrolled spec finds 19 too but leaves the walk unsettled. At
    # N = 16 its plan (156) is not the shortest: 1F1B+ played on a clock under memory, its ends
    # re-solved, gives 155, and the plan says so; a window of time at a time then makes it 152.
    from tessel_dsl.search.driver import search

    spec = parse(barrier_chain(3))
    r = search(spec, microbatches=16, effort=1)
    validate(spec, r.schedule)
    said = {x.kind: x.values for x in r.info.notes}
    assert said["copies-unused"]["k"] == 2 and said["copies-unused"]["period"] == 19
    assert "copies-unsettled" not in said
    assert said["copies-unused"]["best_makespan"] == 155 and said["copies-unused"]["makespan"] == 156
    assert r.schedule.makespan(spec) == said["windows"]["after"] == 152 and said["windows"]["before"] == 155
    assert r.schedule.makespan(spec) >= r.info.makespan_bound
    report = simulate(make_plan(spec, r.schedule))
    assert report.ok and report.makespan == r.schedule.makespan(spec)
