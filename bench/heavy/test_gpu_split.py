"""bench/gpu_split.py --tiny on every layer kind (the suite's tests/integration/test_bench_split.py
runs the chain alone): split and whole backward give the same gradients for each."""
from __future__ import annotations

import importlib.util

import pytest

from tests.integration.test_bench_split import check_gpu_split

pytest.importorskip("torch")


def test_gpu_split_tiny_times_every_kind_and_its_split_gradients_match_the_whole_backward(tmp_path):
    # The Hugging Face layer needs transformers, which the development environment has.
    kinds = ["chain", "gpt"] + (["llama"] if importlib.util.find_spec("transformers") else [])
    check_gpu_split(tmp_path, kinds)
