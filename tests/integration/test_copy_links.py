"""``TESSEL_TRANSPORT=copy`` on gloo ranks: the copy-engine protocol (slots in the receiver's
buffer, flags for full and free) with its CPU stand-in, checked against one process's training."""
import pytest

torch = pytest.importorskip("torch")

from tessel_dsl import executor  # noqa: E402
from tessel_dsl.errors import ExecutionError  # noqa: E402
from tests.executor_support import check_training, plan_for  # noqa: E402
from tests.integration.test_executor import split_backward_spec  # noqa: E402

CHAIN = "tessel_dsl.executor.models.chain"


@pytest.mark.parametrize("slots", ["1", "4"])
def test_copy_transport_trains_like_one_process(monkeypatch, slots):
    """One slot per link makes every sender wait for its receiver to free the slot, the default
    four rarely; both must move exactly the same tensors as one process computes."""
    monkeypatch.setenv("TESSEL_TRANSPORT", "copy")
    monkeypatch.setenv("TESSEL_COPY_SLOTS", slots)
    monkeypatch.setenv("TESSEL_PRIME", "1")  # the blocking priming pass shares the links' slots
    spec = split_backward_spec(3)
    plan = plan_for(spec, "zb-h1", 4)
    report = executor.run(plan, f"{CHAIN}:factory", collect=True, grads=True, timeout=60, steps=2)
    check_training(report, CHAIN, spec, {})
    assert report.transport == "copy" and report.summary()["transport"] == "copy"


def test_a_bad_transport_setting_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("TESSEL_TRANSPORT", "shm")
    spec = split_backward_spec(2)
    with pytest.raises(ExecutionError, match="TESSEL_TRANSPORT must be one of auto, nccl, copy"):
        executor.run(plan_for(spec, "gpipe", 2), f"{CHAIN}:factory", timeout=30)


def test_pipeline_trains_20_steps_over_copy_links_like_one_process(monkeypatch):
    """`Pipeline` maps the links' buffers at its first step (the messages' shapes come from that
    batch) and keeps the slots' order across 20 steps and two data-parallel replicas."""
    from tessel_dsl.executor.models.gpt import blocks_by_name
    from tests import pipeline_support as ps
    from tests.integration.test_pipeline import N, check

    monkeypatch.setenv("TESSEL_TRANSPORT", "copy")
    monkeypatch.setenv("TESSEL_COPY_SLOTS", "1")
    plan = ps.searched_plan(ps.mshape(2, N))
    check(plan, ps.gpt, ps.gpt_loss, blocks_by_name(plan.spec, 4), 512, replicas=2)
