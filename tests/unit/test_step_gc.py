"""Python's cyclic collector stays off while a rank queues its step (``TESSEL_GC``, runtime.py):
a full collection on one rank mid-step would stall every rank waiting on its transfers."""
import gc

import pytest
import torch

from tessel_dsl.executor import runtime


def _runner(between: bool):
    # Only what `step` reads: the device and the mode; `_queue` is replaced by a probe.
    r = object.__new__(runtime.RankRunner)
    r.device, r.gc_between = torch.device("cpu"), between
    return r


@pytest.mark.parametrize("between, during", [(True, False), (False, True)])
def test_the_collector_is_off_only_while_the_step_is_queued(monkeypatch, between, during):
    seen = []
    monkeypatch.setattr(runtime.RankRunner, "_queue", lambda self, it, collect: seen.append(gc.isenabled()) or "done")
    assert gc.isenabled()
    assert _runner(between).step(0) == "done"
    assert seen == [during]
    assert gc.isenabled()  # as it was before the step


def test_a_failing_step_turns_the_collector_back_on(monkeypatch):
    def boom(self, it, collect):
        raise RuntimeError("block failed")

    monkeypatch.setattr(runtime.RankRunner, "_queue", boom)
    with pytest.raises(RuntimeError):
        _runner(True).step(0)
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off(monkeypatch):
    monkeypatch.setattr(runtime.RankRunner, "_queue", lambda self, it, collect: None)
    gc.disable()
    try:
        _runner(True).step(0)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_mode_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("TESSEL_GC", raising=False)
    assert runtime.gc_mode() == "between"
    monkeypatch.setenv("TESSEL_GC", "python")
    assert runtime.gc_mode() == "python"
    monkeypatch.setenv("TESSEL_GC", "never")
    with pytest.raises(ValueError, match="TESSEL_GC"):
        runtime.gc_mode()
