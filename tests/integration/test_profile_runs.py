"""`tessel profile` end to end: from a torch model or a run to a searchable spec, a bad model, and
measuring on CUDA."""
from __future__ import annotations

import pytest

from tessel_dsl.lang.parser import parse
from tests.unit.test_profile import CHAIN, _cli, factory


def test_cli_profile_bad_model_is_a_red_error(tmp_path, capsys):
    from tests.helpers import run_cli

    (tmp_path / "chain.tsl").write_text(CHAIN)
    code, _out, err = run_cli(capsys, "profile", "--model", "nope", str(tmp_path / "chain.tsl"), "-o",
                              str(tmp_path / "o.tsl"))  # in this process: a fresh one only adds the torch import
    assert code == 1 and "MODULE:FACTORY" in err and "Traceback" not in err
    assert not (tmp_path / "o.tsl").exists()


def test_cli_profile_from_run_writes_a_searchable_spec(tmp_path):
    import json

    (tmp_path / "chain.tsl").write_text(CHAIN)
    runs = {"slow_b1": {"device": "GPU", "block_seconds": {"F0": 1e-3, "F1": 1e-3, "B1": 9e-3, "B0": 3e-3}}}
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    out = tmp_path / "p.tsl"
    res = _cli("profile", str(tmp_path / "chain.tsl"), "--from-run", str(tmp_path / "runs.json"),
               "--run-key", "slow_b1", "-o", str(out))
    assert res.returncode == 0, res.stderr
    new = {b.name: (b.time, b.memory) for b in parse(out.read_text()).blocks}
    assert new == {"F0": (2, 1), "F1": (2, 1), "B1": (18, -1), "B0": (6, -1)}
    # A file of several runs without --run-key, and neither --model nor --from-run, are clear errors.
    res = _cli("profile", str(tmp_path / "chain.tsl"), "--from-run", str(tmp_path / "runs.json"))
    assert res.returncode == 1 and "--run-key" in res.stderr and "Traceback" not in res.stderr
    res = _cli("profile", str(tmp_path / "chain.tsl"))
    assert res.returncode == 2 and "--from-run" in res.stderr
    (tmp_path / "bad.json").write_text('{"block_seconds":\n  {F0: 1}}')
    res = _cli("profile", str(tmp_path / "chain.tsl"), "--from-run", str(tmp_path / "bad.json"))
    assert res.returncode == 1 and "bad.json:2:4: not a JSON run summary" in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_cli_profile_then_search_works_unchanged(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "chain.tsl").write_text(CHAIN)
    out = tmp_path / "profiled.tsl"
    res = _cli("profile", "--model", "tests.unit.test_profile:factory", str(tmp_path / "chain.tsl"), "-o", str(out),
               "--repeats", "3", "--warmup", "1", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "F0" in res.stdout and "F1" in res.stdout
    assert out.read_text().startswith("# chain")
    res = _cli("search", str(out), "-o", str(tmp_path / "plan.json"))
    assert res.returncode == 0, res.stderr
    from tessel_dsl.plan import load_plan

    plan = load_plan(tmp_path / "plan.json")
    assert plan.spec.units.time_label.endswith("s") and plan.spec.name == "chain_profiled"


@pytest.mark.gpu
def test_measure_on_cuda_uses_events_and_counts_activations():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from tessel_dsl.executor.measure import measure

    found = measure(parse(CHAIN), factory, device="cuda", repeats=5, warmup=2, model_args={"hidden": 512, "wide": 4})
    assert all(m.device.startswith("cuda") and m.forward > 0 and m.backward > 0 for m in found)
    by = {m.block: m for m in found}
    assert by["F1"].activation_bytes > by["F0"].activation_bytes
