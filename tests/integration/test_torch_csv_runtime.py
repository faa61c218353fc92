"""PyTorch's pipeline runtime, on gloo ranks, runs the CSV schedules Tessel exports and matches one
process's losses and gradients."""
from __future__ import annotations

import pytest

from tessel_dsl.interop.torch_csv import export_torch_csv, stage_map
from tessel_dsl.plan import make_plan
from tests.paths import SPECS
from tests.unit.test_torch_csv import chain, greedy


def assert_runtime_matches_single_process(path, ranks: list[int], n: int, fmt: str) -> None:
    """PyTorch's pipeline runtime on the CSV at `path` gives the single-process losses and gradients."""
    import torch

    from tests.torch_pipeline_check import reference, run_pipeline

    losses, grads = run_pipeline(str(path), ranks, n, fmt)
    ref_losses, ref_grads = reference(len(ranks), n)
    assert losses == pytest.approx(ref_losses, abs=1e-5)
    for k, ref in enumerate(ref_grads):
        for got, want in zip(grads[k], ref):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("ranks, split, fmt", [
    ([0, 1], False, "compute_only"),        # Tessel's V shape (1F1B placement) on 2 ranks
    ([0, 1], False, "compute_comms"),
    ([0, 1, 1, 0], False, "compute_comms"),  # PyTorch's V-style: two stages per rank
    ([0, 1], True, "compute_only"),          # zero-bubble style: split backward, W deferred
    ([0, 1], True, "compute_comms"),
])
def test_pytorch_runtime_matches_single_process(tmp_path, ranks, split, fmt):
    pytest.importorskip("torch")

    n = 4
    spec = chain(ranks, split=split)
    path = tmp_path / "sched.csv"
    export_torch_csv(make_plan(spec, greedy(spec, n, late_w=split)), path, comms=fmt == "compute_comms")
    assert_runtime_matches_single_process(path, ranks, n, fmt)


@pytest.mark.slow
@pytest.mark.parametrize("name, fmt", [
    ("vshape", "compute_only"), ("vshape", "compute_comms"),
    ("zerobubble", "compute_only"), ("zerobubble", "compute_comms"),
    ("interleaved", "compute_comms"),
])
def test_pytorch_runtime_runs_searched_plans_of_shipped_specs(tmp_path, name, fmt):
    """Tessel's own schedules for the shipped specs (D=2), run by PyTorch, match one process."""
    pytest.importorskip("torch")
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    n = 4
    spec = parse_file(SPECS / f"{name}.tsl", sets={"D": "2"})
    result = search(spec, microbatches=n)
    path = tmp_path / "sched.csv"
    export_torch_csv(make_plan(spec, result.schedule, result.info), path, comms=fmt == "compute_comms")
    ranks = list(stage_map(spec).ranks)
    assert_runtime_matches_single_process(path, ranks, n, fmt)
