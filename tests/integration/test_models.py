"""Every shipped model, pipelined over CPU ranks (gloo), matches the same model run in one process:
loss and every parameter's gradient in training, sink outputs in inference. Each model and shape
runs once here; bench/models_sweep.py runs each on both 2 and 4 ranks."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl import executor  # noqa: E402
from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.models import shapes  # noqa: E402
from tessel_dsl.executor.models.common import chain_split, section_starts  # noqa: E402
from tessel_dsl.ir import Mode  # noqa: E402
from tests.executor_support import check_inference, check_training, plan_for  # noqa: E402

TRAIN = [
    ("tessel_dsl.executor.models.chain", shapes.vshape, {}, "1f1b"),
    ("tessel_dsl.executor.models.gpt", shapes.mshape, {}, "1f1b+"),
    ("tessel_dsl.executor.models.gpt", lambda d, **kw: shapes.mshape(d, head=True, **kw), {}, "1f1b+"),
    ("tessel_dsl.executor.models.encdec", shapes.nnshape, {}, "1f1b+"),
    ("tessel_dsl.executor.models.encdec", shapes.vshape, {}, "1f1b"),
    # GPipe keeps all 4 micro-batches' activations (a stage's unit and J's unit each): 8 units on a
    # device, and a plan must fit its spec's memory to be run.
    ("tessel_dsl.executor.models.branches", lambda d, **kw: shapes.kshape(d, memory=8, **kw), {}, "gpipe"),
    ("tessel_dsl.executor.models.branches", shapes.vshape, {}, "1f1b"),
]
INFER = [
    ("tessel_dsl.executor.models.chain", shapes.vshape, {}, "gpipe"),
    ("tessel_dsl.executor.models.encdec", shapes.nnshape, {}, "1f1b+"),
    ("tessel_dsl.executor.models.encdec", shapes.vshape, {}, "gpipe"),
    ("tessel_dsl.executor.models.branches", shapes.kshape, {}, "gpipe"),
    ("tessel_dsl.executor.models.branches", shapes.vshape, {}, "gpipe"),
]
IDS = ["chain-V", "gpt-M", "gpt-M-head", "encdec-NN", "encdec-V", "branches-K", "branches-V"]
INFER_IDS = ["chain-V", "encdec-NN", "encdec-V", "branches-K", "branches-V"]


def train_case(module, shape, args, schedule, devices):
    """One training step of `module` on `devices` gloo ranks, checked against one process."""
    spec = shape(devices, microbatches=4)
    report = executor.run(plan_for(spec, schedule, 4), f"{module}:factory", collect=True, grads=True, timeout=60,
                          model_args=args)
    check_training(report, module, spec, args)


def infer_case(module, shape, args, schedule, devices):
    """Inference of `module` on `devices` gloo ranks, checked against one process."""
    spec = shape(devices, mode=Mode.INFER, microbatches=4)
    report = executor.run(plan_for(spec, schedule, 4), f"{module}:factory", collect=True, timeout=60,
                          model_args=args)
    check_inference(report, module, spec, args)
    assert report.losses == {}


# Each model once in training on 4 ranks (every stage boundary of its shape), with the shape that
# exercises most (the GPT with E and H spread, the encoder-decoder's two chains, the two branches
# joining), and two in inference on 2. Training on 2 ranks is checked below (plain chain, model
# sizes) and by the Pipeline tests; inference on 4 by the uneven splits. The other cases of TRAIN
# and INFER run in bench/heavy/test_models_rest.py (`python -m pytest -q bench/heavy`), and
# `python bench/models_sweep.py` runs every case on 2 and on 4 ranks and prints the table.
SAMPLE_TRAIN = ["chain-V", "gpt-M-head", "encdec-NN", "branches-K"]
SAMPLE_INFER = ["encdec-NN", "branches-K"]


def cases(ids: list[str], rows: list, keep: list[str], sample: bool) -> list:
    """The `rows` whose id is in `keep` (`sample`) or not, as pytest params with their ids."""
    return [pytest.param(*row, id=i) for i, row in zip(ids, rows) if (i in keep) == sample]


@pytest.mark.parametrize("devices", [4])
@pytest.mark.parametrize("module,shape,args,schedule", cases(IDS, TRAIN, SAMPLE_TRAIN, True))
def test_training_step_matches_single_process(module, shape, args, schedule, devices):
    train_case(module, shape, args, schedule, devices)


@pytest.mark.parametrize("devices", [2])
@pytest.mark.parametrize("module,shape,args,schedule", cases(INFER_IDS, INFER, SAMPLE_INFER, True))
def test_inference_matches_single_process(module, shape, args, schedule, devices):
    infer_case(module, shape, args, schedule, devices)


def test_gpt_with_embedding_and_head_sharded_over_device_subsets():
    """E on devices {1, 2} and H on {2, 3} of four: each is sharded over a DeviceMesh of its own
    pair (rank 0 is in neither), and the step still equals the single-process one."""
    spec = shapes.mshape(4, microbatches=2, head=True, embed_on=(1, 2), head_on=(2, 3), memory=8)
    report = executor.run(plan_for(spec, "1f1b+", 2), "tessel_dsl.executor.models.gpt:factory", collect=True,
                          grads=True, timeout=60)
    check_training(report, "tessel_dsl.executor.models.gpt", spec, {})
    embed = [(dim, start, g.shape) for n, dim, start, g in report.grads if n == "embed.weight"]
    assert sorted(embed) == [(0, 0, (256, 32)), (0, 256, (256, 32))]


def test_gpt_on_a_plain_chain_carries_embedding_and_head_in_the_end_stages():
    spec = shapes.vshape(2, microbatches=2)
    report = executor.run(plan_for(spec, "1f1b", 2), "tessel_dsl.executor.models.gpt:factory", collect=True, grads=True,
                          timeout=60)
    check_training(report, "tessel_dsl.executor.models.gpt", spec, {})


# Layers that do not divide over 4 stages: encdec's 6 go 2/2/1/1, so F1 holds the last encoder
# layer and the first decoder layer; branches' 3 go text/vision/cross/none, so F3 only classifies.
UNEVEN = [("tessel_dsl.executor.models.encdec", {"layers": 3}), ("tessel_dsl.executor.models.branches", {"layers": 1, "cross": 1})]


# Training here (loss and every gradient); inference of the same splits in bench/heavy/test_models_rest.py.
@pytest.mark.parametrize("mode", [Mode.TRAIN], ids=["train"])
@pytest.mark.parametrize("module,args", UNEVEN, ids=["encdec", "branches"])
def test_uneven_chain_split_matches_single_process(module, args, mode):
    uneven_case(module, args, mode)


def uneven_case(module, args, mode):
    """One step (training) or the sink outputs (inference) of `module` split unevenly over 4 ranks."""
    spec = shapes.vshape(4, mode=mode, microbatches=4)
    plan = plan_for(spec, "1f1b" if mode is Mode.TRAIN else "gpipe", 4)
    train = mode is Mode.TRAIN
    report = executor.run(plan, f"{module}:factory", collect=True, grads=train, timeout=60, model_args=args)
    (check_training if train else check_inference)(report, module, spec, args)


@pytest.mark.parametrize("sections,stages,split", [
    ([("enc", 4), ("dec", 4)], 4, [{"enc": (0, 2)}, {"enc": (2, 4)}, {"dec": (0, 2)}, {"dec": (2, 4)}]),
    ([("enc", 3), ("dec", 3)], 4, [{"enc": (0, 2)}, {"enc": (2, 3), "dec": (0, 1)}, {"dec": (1, 2)}, {"dec": (2, 3)}]),
    ([("text", 4), ("vision", 4), ("cross", 4)], 4,
     [{"text": (0, 3)}, {"text": (3, 4), "vision": (0, 2)}, {"vision": (2, 4), "cross": (0, 1)}, {"cross": (1, 4)}]),
    ([("text", 1), ("vision", 1), ("cross", 1)], 4, [{"text": (0, 1)}, {"vision": (0, 1)}, {"cross": (0, 1)}, {}]),
])
def test_chain_split_lays_sections_end_to_end(sections, stages, split):
    got = [{k: (r.start, r.stop) for k, r in held.items() if r} for held in chain_split(sections, stages)]
    assert got == split


def test_sections_begin_where_their_first_layer_is():
    assert section_starts([("text", 4), ("vision", 4), ("cross", 4)], 4) == {"text": 0, "vision": 1, "cross": 2}
    # an empty section begins with the next layer, or on the last stage when none follows
    assert section_starts([("text", 1), ("vision", 0), ("cross", 0)], 2) == {"text": 0, "vision": 1, "cross": 1}


def test_model_sizes_are_arguments():
    args = {"hidden": 16, "heads": 2, "layers": 3, "vocab": 101, "seq": 5, "batch": 3}
    spec = shapes.mshape(2, microbatches=2, head=True)
    report = executor.run(plan_for(spec, "1f1b+", 2), "tessel_dsl.executor.models.gpt:factory", collect=True, grads=True,
                          timeout=60, model_args=args)
    check_training(report, "tessel_dsl.executor.models.gpt", spec, args)
    shard_rows = sorted(g.shape[0] for n, dim, _s, g in report.grads if n == "embed.weight")
    assert shard_rows == [50, 51]  # 101 vocabulary rows split over two ranks


def test_unknown_model_argument_is_a_clear_error():
    spec = shapes.vshape(2, microbatches=2)
    with pytest.raises(ExecutionError,
                       match="unknown model argument"):
        executor.run(plan_for(spec, "1f1b", 2), "tessel_dsl.executor.models.chain:factory", timeout=30,
                     model_args={"widht": 3})


def test_two_branch_chain_without_layers_is_a_clear_error():
    spec = shapes.vshape(2, mode=Mode.INFER, microbatches=2)
    with pytest.raises(ExecutionError, match="no layers to split over 2 stages"):
        executor.run(plan_for(spec, "gpipe", 2), "tessel_dsl.executor.models.branches:factory", timeout=30,
                     model_args={"layers": 0, "cross": 0})
