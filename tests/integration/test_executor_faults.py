"""A rank that raises or stalls makes the whole run fail with an ExecutionError that names the
rank, the step and the action -- within the timeout, never a hang and never a traceback."""
from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("torch")

from tessel_dsl import executor  # noqa: E402
from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.models import shapes  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402


def plan():
    return plan_for(shapes.vshape(2, microbatches=2), "1f1b", 2)


def test_a_raising_block_names_rank_step_and_action():
    with pytest.raises(ExecutionError) as err:
        executor.run(plan(), "tests.executor_faulty:factory", timeout=20, model_args={"how": "raise"})
    msg = str(err.value)
    assert msg.startswith("rank 1, iteration 0, step ")
    assert "(F1:0): ValueError: boom in the user's block" in msg


def test_a_stalled_rank_fails_the_run_within_the_timeout():
    # The timeout covers start-up too: every rank's watchdog allows `timeout + 1` s per phase
    # (building the model, warming up links) and the process group's collectives `timeout` s. A
    # fixed 3 s broke under heavy load ("rank 0 stalled ... at building the model"), so the
    # timeout is derived from a healthy run of the same plan on this machine, now: three times
    # its whole wall time (each start-up phase is a part of it), at least 3 s, at most 30 s.
    t0 = time.monotonic()
    executor.run(plan(), "tests.executor_faulty:factory", timeout=60, model_args={"fail_rank": -1})
    healthy = time.monotonic() - t0
    timeout = min(30.0, max(3.0, 3 * healthy))
    t0 = time.monotonic()
    with pytest.raises(ExecutionError) as err:
        executor.run(plan(), "tests.executor_faulty:factory", timeout=timeout, model_args={"how": "hang"})
    elapsed = time.monotonic() - t0
    msg = str(err.value)
    # Rank 1's own watchdog found it (not the supervisor's fallback, which says "made no
    # progress"), at the block that hangs, and not before `timeout + 1` s without progress.
    found = re.match(r"rank 1 stalled: no progress for ([0-9.]+)s at ", msg)
    assert found, msg
    assert "(F1:0)" in msg.splitlines()[0]
    assert float(found.group(1)) + 0.05 >= timeout + 1  # the message rounds to 0.1 s
    assert "rank 0" in msg  # the rank left waiting is listed too
    # Never a hang: well before even the supervisor's fallback would fire (`timeout + 30` s
    # without progress, after a start-up as long as the healthy run's, twice over).
    assert elapsed < 2 * healthy + timeout + 30


def test_a_factory_that_fails_is_reported_with_its_rank():
    with pytest.raises(ExecutionError, match=r"rank \d: RuntimeError: cannot build this model"):
        executor.run(plan(), "tests.executor_faulty:broken_factory", timeout=20)


@pytest.mark.parametrize("ref,match", [("nocolon", "MODULE:FACTORY"),
                                       ("no_such_module_x:factory", "cannot import model module"),
                                       ("tessel_dsl.executor.models.chain:nope", "no factory function 'nope'")])
def test_bad_model_references(ref, match):
    with pytest.raises(ExecutionError, match=match):
        executor.run(plan(), ref, timeout=20)


# Forked ranks here; bench/heavy/test_faults_spawn.py runs the same with spawned ones.
@pytest.mark.parametrize("start", ["fork"])
def test_a_killed_rank_is_named_without_a_library_traceback(monkeypatch, start):
    monkeypatch.setenv("TESSEL_START", start)
    with pytest.raises(ExecutionError) as err:
        executor.run(plan(), "tests.executor_faulty:factory", timeout=20, model_args={"how": "kill"})
    msg = str(err.value)
    assert msg.startswith("rank 1 died (exit code -9) at iteration 0, step "), msg
    assert "(F1:0)" in msg.splitlines()[0]
    assert "Traceback" not in msg and ".cc:" not in msg and ".cpp:" not in msg
