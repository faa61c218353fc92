"""Every shipped model, pipelined over 2 and 4 CPU ranks (gloo), matches the same model run in
one process: loss and every parameter's gradient in training, sink outputs in inference."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import executor  # noqa: E402
from executor.models import shapes  # noqa: E402
from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.ir import Mode  # noqa: E402

from .executor_support import check_inference, check_training, plan_for  # noqa: E402

TRAIN = [
    ("executor.models.chain", shapes.vshape, {}, "1f1b"),
    ("executor.models.gpt", shapes.mshape, {}, "1f1b+"),
    ("executor.models.gpt", lambda d, **kw: shapes.mshape(d, head=True, **kw), {}, "1f1b+"),
    ("executor.models.encdec", shapes.nnshape, {}, "1f1b+"),
    ("executor.models.branches", shapes.kshape, {}, "gpipe"),
]
INFER = [
    ("executor.models.chain", shapes.vshape, {}, "gpipe"),
    ("executor.models.encdec", shapes.nnshape, {}, "1f1b+"),
    ("executor.models.branches", shapes.kshape, {}, "gpipe"),
]
IDS = ["chain-V", "gpt-M", "gpt-M-head", "encdec-NN", "branches-K"]


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("module,shape,args,schedule", TRAIN, ids=IDS)
def test_training_step_matches_single_process(module, shape, args, schedule, devices):
    spec = shape(devices, microbatches=4)
    plan = plan_for(spec, schedule, 4)
    report = executor.run(plan, f"{module}:factory", collect=True, grads=True, timeout=60, model_args=args)
    check_training(report, module, spec, args)


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("module,shape,args,schedule", INFER, ids=["chain-V", "encdec-NN", "branches-K"])
def test_inference_matches_single_process(module, shape, args, schedule, devices):
    spec = shape(devices, mode=Mode.INFER, microbatches=4)
    plan = plan_for(spec, schedule, 4)
    report = executor.run(plan, f"{module}:factory", collect=True, timeout=60, model_args=args)
    check_inference(report, module, spec, args)
    assert report.losses == {}


def test_gpt_on_a_plain_chain_carries_embedding_and_head_in_the_end_stages():
    spec = shapes.vshape(2, microbatches=2)
    report = executor.run(plan_for(spec, "1f1b", 2), "executor.models.gpt:factory", collect=True, grads=True,
                          timeout=60)
    check_training(report, "executor.models.gpt", spec, {})


def test_model_sizes_are_arguments():
    args = {"hidden": 16, "heads": 2, "layers": 3, "vocab": 101, "seq": 5, "batch": 3}
    spec = shapes.mshape(2, microbatches=2, head=True)
    report = executor.run(plan_for(spec, "1f1b+", 2), "executor.models.gpt:factory", collect=True, grads=True,
                          timeout=60, model_args=args)
    check_training(report, "executor.models.gpt", spec, args)
    shard_rows = sorted(g.shape[0] for n, dim, _s, g in report.grads if n == "embed.weight")
    assert shard_rows == [50, 51]  # 101 vocabulary rows split over two ranks


def test_unknown_model_argument_is_a_clear_error():
    spec = shapes.vshape(2, microbatches=2)
    with pytest.raises(ExecutionError,
                       match="unknown model argument"):
        executor.run(plan_for(spec, "1f1b", 2), "executor.models.chain:factory", timeout=30,
                     model_args={"widht": 3})
