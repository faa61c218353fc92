"""The cases of tests/integration/test_models.py that the suite leaves out of its sample: every
other shipped model and shape in training on 4 gloo ranks and in inference on 2, and the uneven
splits in inference, each checked against one process. `python bench/models_sweep.py` runs every
case on both rank counts."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tessel_dsl.ir import Mode  # noqa: E402
from tests.integration.test_models import (  # noqa: E402
    IDS,
    INFER,
    INFER_IDS,
    SAMPLE_INFER,
    SAMPLE_TRAIN,
    TRAIN,
    UNEVEN,
    cases,
    infer_case,
    train_case,
    uneven_case,
)


@pytest.mark.parametrize("module,shape,args,schedule", cases(IDS, TRAIN, SAMPLE_TRAIN, False))
def test_training_step_matches_single_process(module, shape, args, schedule):
    train_case(module, shape, args, schedule, 4)


@pytest.mark.parametrize("module,shape,args,schedule", cases(INFER_IDS, INFER, SAMPLE_INFER, False))
def test_inference_matches_single_process(module, shape, args, schedule):
    infer_case(module, shape, args, schedule, 2)


@pytest.mark.parametrize("module,args", UNEVEN, ids=["encdec", "branches"])
def test_uneven_chain_split_in_inference_matches_single_process(module, args):
    uneven_case(module, args, Mode.INFER)
