"""What `Pipeline` refuses can be refused before any rank starts: `Pipeline.check` in the
launching process, and `Pipeline(..., batch=...)` before it joins a process group."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.models.gpt import blocks_by_name  # noqa: E402
from tessel_dsl.executor.pipeline import Pipeline  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402


def _setup():
    plan = plan_for(ps.mshape(2, 4), "1f1b+", 4)
    with torch.device("meta"):  # nothing allocated: only shapes are needed
        model = ps.gpt()
    return plan, model, blocks_by_name(plan.spec, 4), ps.batches(512, 1, 8, 8)[0]


@pytest.mark.parametrize("change,message", [
    (lambda b, x, y: ({**b, "F0": ["layers.0", "layres.1"]}, (x, y), 2),
     r"no submodule 'layres.1' \(did you mean layers.1"),
    (lambda b, x, y: (b, (x[:6], y[:6]), 2), "a batch of 6 rows does not split into the plan's 4 micro-batches"),
    (lambda b, x, y: (b, (x, y[:, :5]), 2), r"loss_fn\) failed on a micro-batch of this shape"),
    (lambda b, x, y: (b, (x, y), 3), "does not divide the world of 3 ranks"),
])
def test_names_batch_and_world_are_checked_in_the_launching_process(change, message):
    plan, model, blocks, (x, y) = _setup()
    blocks, batch, world = change(blocks, x, y)
    with pytest.raises(ExecutionError, match=message):
        Pipeline.check(plan, model, ps.gpt_loss, blocks=blocks, batch=batch, world=world)
    assert not torch.distributed.is_initialized()


def test_a_passing_check_leaves_the_model_as_it_was():
    plan, _, blocks, (x, y) = _setup()
    model = ps.gpt()
    want = model(x)
    Pipeline.check(plan, model, ps.gpt_loss, blocks=blocks, batch=(x, y), world=4)
    assert not any("forward" in vars(m) for m in model.modules())  # no dispatcher left behind
    assert torch.equal(model(x), want)


def test_the_constructor_checks_an_example_batch_before_joining_a_process_group(monkeypatch):
    # Without RANK in the environment, joining would fail with "no process group": the batch's
    # error comes first.
    monkeypatch.delenv("RANK", raising=False)
    plan, model, blocks, (x, y) = _setup()
    with pytest.raises(ExecutionError, match="a batch of 6 rows does not split"):
        Pipeline(plan, model, ps.gpt_loss, blocks=blocks, batch=(x[:6], y[:6]))
    with pytest.raises(ExecutionError, match=r"loss_fn\) failed on a micro-batch"):
        Pipeline(plan, model, ps.gpt_loss, blocks=blocks, batch=(x, y[:, :5]))
    with pytest.raises(ExecutionError, match="no process group"):
        Pipeline(plan, model, ps.gpt_loss, blocks=blocks, batch=(x, y))
    assert not torch.distributed.is_initialized()


def test_without_blocks_the_binding_beside_the_plan_file_is_read(tmp_path):
    import json

    from tessel_dsl.plan import save_plan

    plan, model, blocks, (x, y) = _setup()
    with pytest.raises(ExecutionError, match="plan was passed as an object"):
        Pipeline.check(plan, model, ps.gpt_loss, batch=(x, y), world=4)
    path = tmp_path / "gpt.json"
    save_plan(plan, path)
    with pytest.raises(ExecutionError, match=r"no binding .*gpt\.blocks\.json beside the plan"):
        Pipeline.check(str(path), model, ps.gpt_loss, batch=(x, y), world=4)
    # A binding with a misspelt name beside the plan is the one read: its error names the name.
    wrong = {**blocks, "F0": ["layers.0", "layres.1"]}
    (tmp_path / "gpt.blocks.json").write_text(json.dumps(wrong))
    with pytest.raises(ExecutionError, match="no submodule 'layres.1'"):
        Pipeline.check(str(path), model, ps.gpt_loss, batch=(x, y), world=4)
    (tmp_path / "gpt.blocks.json").write_text(json.dumps(blocks))
    Pipeline.check(str(path), model, ps.gpt_loss, batch=(x, y), world=4)
    assert not torch.distributed.is_initialized()
