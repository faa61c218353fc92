"""Memory as users have it: sizes that add and subtract (`memory 80GB - 6GB`), a capacity per device
(`memory 12GB on 0, 7`), and memory already taken (`reserve 6GB`). Every consumer limits each
device by its own capacity less its reserve: the search, the validator, the simulator, plan files,
`tessel check` / `simulate` / `compare` and their JSON."""
from __future__ import annotations

import dataclasses
import json

import pytest

from tessel_dsl import parse, search, simulate
from tessel_dsl.errors import PlanError, ScheduleError, SpecError
from tessel_dsl.lower import lower
from tessel_dsl.plan import load_plan, make_plan, save_plan
from tessel_dsl.serialize import to_json
from tessel_dsl.validate import validate
from tests.helpers import run_cli
from tests.paths import ROOT, SPECS

SHAPES = (SPECS / "lib" / "shapes.tsl").as_posix()


def vspec(memory_lines: str, n: int = 6) -> str:
    """A 4-stage 1F1B (V-shape) training spec: each micro-batch holds 1 GB on every device from its
    forward to its backward (forward 1 ms, backward 3 ms)."""
    return (f'placement vmem\ninclude "{SHAPES}"\ndevices 4\nresolution time 1ms\n'
            f"resolution memory 1GB\n{memory_lines}\nmicrobatches {n}\nuse vshape(4)\n"
            "derive backward time 3x\n")


def running_peaks(spec, schedule) -> list[int]:
    """Per-device peak of the memory held, recomputed here from the start times alone: at equal
    start times allocations count before releases (the pessimistic order)."""
    events = sorted((d, s.start, spec.block(s.block).memory <= 0, spec.block(s.block).memory)
                    for s in schedule.slots for d in spec.block(s.block).devices)
    used, peak = [0] * spec.devices, [0] * spec.devices
    for d, _t, _free_first, delta in events:
        used[d] += delta
        peak[d] = max(peak[d], used[d])
    return peak


def codes(text: str, file: str = "m.tsl") -> list[tuple[str, int, int]]:
    with pytest.raises(SpecError) as e:
        parse(text, file)
    return [(d.code, d.location.line, d.location.column) for d in e.value.diagnostics]


# ---- the language -------------------------------------------------------------------------


def test_memory_sizes_add_and_subtract():
    assert parse(vspec("memory 80GB - 60GB")).capacities == (20, 20, 20, 20)
    assert parse(vspec("memory 8GB + 1GB - 500MB + 500MB")).memory == 9
    # Without a unit after the first number, `-` is arithmetic inside one size: (80 - 60) GB.
    assert parse(vspec("memory 80 - 60GB")).memory == 20


def test_capacity_per_device_and_range():
    spec = parse(vspec("memory 16GB\nmemory 12GB on 0, 3\nmemory 20GB on 1..1"))
    assert spec.memory == 16 and spec.capacities == (12, 20, 16, 12)
    assert [spec.capacity(d) for d in range(4)] == [12, 20, 16, 12]
    assert parse(vspec("memory 16GB\nmemory 2GB on [2, 3]")).capacities == (16, 16, 2, 2)
    # a per-device line that repeats the default changes nothing stored
    assert parse(vspec("memory 16GB\nmemory 16GB on 0")).device_memory == ()


def test_reserve_is_taken_from_the_capacity():
    spec = parse(vspec("memory 80GB reserve 6GB"))
    assert spec.capacities == (74,) * 4 and spec.reserved == (6,) * 4
    # a device line keeps the default reserve unless it gives its own
    spec = parse(vspec("memory 80GB reserve 6GB\nmemory 40GB on 0\nmemory 80GB reserve 10GB on 3"))
    assert spec.capacities == (34, 74, 74, 70)
    assert [spec.total_capacity(d) for d in range(4)] == [40, 80, 80, 80]
    assert [spec.reserved_on(d) for d in range(4)] == [6, 6, 6, 10]


def test_memory_errors_name_the_line():
    text = vspec("memory 16GB\n"                       # line 6
                 "memory 12GB reserve 13GB on 0\n"     # 7
                 "memory 2GB on 4\n"                   # 8
                 "memory 3GB on 1..2\n"                # 9
                 "memory 4GB on 2\n"                   # 10
                 "memory 8GB - 2 on 3")                # 11
    got = codes(text)
    assert got == [("reserve-too-large", 7, 1), ("device-range", 8, 1), ("duplicate-declaration", 10, 1),
                   ("unknown-unit", 11, 8)]
    with pytest.raises(SpecError) as e:
        parse(text, "m.tsl")
    msg = str(e.value)
    assert "m.tsl:7:1: error[reserve-too-large]: device 0 reserves 13 GB of its 12 GB" in msg
    assert "the memory of device 2 is given twice (first at m.tsl:9:1)" in msg
    assert "device 4 is outside 0..3" in msg


def test_negative_capacity_and_default_line_required():
    assert codes(vspec("memory 60GB - 80GB"))[0][0] == "bad-memory"
    got = codes(vspec("memory 8GB on 0..2"))  # device 3 has none
    assert got[0][0] == "missing-declaration"
    # `on all` names every device: nothing is left for a default to say.
    assert parse(vspec("memory 8GB on all")).capacities == parse(vspec("memory 8GB")).capacities


def test_one_microbatch_must_fit_each_device():
    # The V-shape's device 0 holds 1 GB per micro-batch (more while its backward runs: none here).
    with pytest.raises(SpecError) as e:
        parse(vspec("memory 4GB\nmemory 1GB reserve 1GB on 2"), "m.tsl")
    assert "memory-infeasible" in str(e.value) and "device 2 has 0 GB (1 GB less 1 GB reserved)" in str(e.value)


def test_spec_built_in_python_is_checked():
    from tessel_dsl import check

    spec = parse(vspec("memory 4GB"))
    with pytest.raises(SpecError, match="bad-memory"):
        check(dataclasses.replace(spec, device_memory=(4, 4)))
    with pytest.raises(SpecError, match="reserve-too-large"):
        check(dataclasses.replace(spec, reserved=(5, 0, 0, 0)))


# ---- search, validator, simulator ---------------------------------------------------------


@pytest.fixture(scope="module")
def searched():
    """The same placement searched with M=4 GB everywhere, with device 0 at 2 GB, and with
    device 3 (which holds one micro-batch at most in 1F1B) at 1 GB."""
    out = {}
    for key, lines in (("uniform", "memory 4GB"), ("small0", "memory 4GB\nmemory 3GB - 1GB on 0"),
                       ("small3", "memory 4GB\nmemory 2GB reserve 1GB on 3")):
        spec = parse(vspec(lines))
        out[key] = (spec, search(spec, microbatches=6).schedule)
    return out


def test_search_respects_a_smaller_device(searched):
    spec, sched = searched["small0"]
    peaks = running_peaks(spec, sched)
    assert peaks[0] <= 2 and all(p <= 4 for p in peaks)
    validate(spec, sched)
    uspec, usched = searched["uniform"]
    assert running_peaks(uspec, usched)[0] > 2  # the uniform answer would not fit device 0
    # Device 0 holding 2 micro-batches instead of 4 costs time: a round trip is 16 ms of work.
    assert sched.makespan(spec) > usched.makespan(uspec)


def test_search_uses_each_devices_own_capacity_not_the_smallest(searched):
    spec, sched = searched["small3"]
    assert spec.capacities == (4, 4, 4, 1)
    peaks = running_peaks(spec, sched)
    assert peaks[3] <= 1 and peaks[0] > 1
    uspec, usched = searched["uniform"]
    assert sched.makespan(spec) == usched.makespan(uspec)


def test_validator_rejects_what_breaks_only_device_0(searched):
    uspec, usched = searched["uniform"]
    small, _ = searched["small0"]
    validate(uspec, usched)
    with pytest.raises(ScheduleError) as e:
        validate(small, usched)
    msg = str(e.value)
    assert "memory overflow on device 0" in msg and "its capacity 2 GB" in msg and "3 GB" in msg
    assert " ms:" in msg  # the time of the overflow in the spec's time unit


def test_validator_names_the_reserve(searched):
    uspec, usched = searched["uniform"]
    reserved = parse(vspec("memory 4GB\nmemory 4GB reserve 2GB on 0"))
    with pytest.raises(ScheduleError, match=r"its capacity 2 GB \(4 GB less 2 GB reserved\)"):
        validate(reserved, usched)


def test_simulator_flags_device_0(searched, capsys):
    uspec, usched = searched["uniform"]
    small, _ = searched["small0"]
    report = simulate((small, lower(small, usched), usched))
    assert not report.ok and report.over_memory() == [0]
    assert {o.device for o in report.overflows} == {0}
    assert report.capacity(0) == 2 and report.capacity(1) == 4
    assert "its capacity 2 GB" in report.problems()[0]
    data = report.to_json()
    assert data["memory_capacities"] == [2, 4, 4, 4] and data["over_memory_devices"] == [0]
    ok = simulate((uspec, lower(uspec, usched), usched))
    assert ok.ok and ok.over_memory() == []


def test_simulate_and_check_print_capacity_per_device(searched, tmp_path, capsys):
    spec, sched = searched["small0"]
    plan = tmp_path / "p.json"
    save_plan(make_plan(spec, sched), plan)
    code, out, err = run_cli(capsys, "simulate", str(plan))
    assert code == 0, err
    assert "capacity" in out and "2 GB" in out and "4 GB" in out
    assert "on device 0" in out  # the headline peak is the device nearest its own capacity
    src = tmp_path / "m.tsl"
    src.write_text(vspec("memory 4GB\nmemory 3GB reserve 1GB on 0"))
    code, out, err = run_cli(capsys, "check", str(src))
    assert code == 0, err
    assert "2 GB (3 GB - 1 GB reserved)" in out and "memory per device below" in out
    code, out, err = run_cli(capsys, "check", str(src), "--json")
    data = json.loads(out)
    assert data["capacities"] == [2, 4, 4, 4] and data["reserved_per_device"] == [1, 0, 0, 0]
    assert data["microbatch_memory"] == [1, 1, 1, 1]


def test_expect_peak_memory_within_m_is_per_device(searched):
    from tessel_dsl.ir import Expectation
    from tessel_dsl.tools.expect import judge

    uspec, usched = searched["uniform"]
    small, _ = searched["small3"]
    x = Expectation("peak_memory", "<=", "M")
    fine = simulate((uspec, lower(uspec, usched), usched))
    assert judge(uspec, x, 6, fine).passed
    # the uniform schedule keeps 1 GB on device 3 (its limit is 1 GB) and 4 GB on device 0 (4 GB):
    # within each device's own capacity, although above the smallest one
    assert judge(small, x, 6, simulate((small, lower(small, usched), usched))).passed
    tight = parse(vspec("memory 4GB\nmemory 2GB on 1"))
    out = judge(tight, x, 6, simulate((tight, lower(tight, usched), usched)))
    assert not out.passed and out.target == 2.0


def test_baselines_and_compare_use_each_device(searched):
    from tessel_dsl.search.baselines import build
    from tessel_dsl.search.baselines.compare import compare

    spec, _ = searched["small0"]
    for name in ("1f1b", "gpipe"):  # 1F1B's warmups and GPipe's waves shrink to device 0's 2 GB
        assert running_peaks(spec, build(spec, name, 6))[0] <= 2, name
    _, usched = searched["uniform"]
    rows = {r.schedule: r for r in compare(spec, 6, schedules=("1f1b",), given=(("uniform", usched),))}
    assert not rows["1f1b"].over_memory and rows["uniform"].over_memory
    assert rows["uniform"].memory_device == 0 and rows["uniform"].memory_limit == 2


# ---- plan files ---------------------------------------------------------------------------


def test_plan_round_trip_and_old_plans(searched, tmp_path):
    spec, sched = searched["small0"]
    spec = dataclasses.replace(spec, reserved=(1, 0, 0, 0), device_memory=(3, 4, 4, 4))
    path = tmp_path / "p.json"
    save_plan(make_plan(spec, sched), path)
    back = load_plan(path)
    assert back.spec == spec and back.spec.capacities == (2, 4, 4, 4)
    data = json.loads(path.read_text())
    assert data["spec"]["device_memory"] == [3, 4, 4, 4] and data["spec"]["reserved"] == [1, 0, 0, 0]
    # a plan written before per-device memory has neither field: every device has `memory`
    uspec, usched = searched["uniform"]
    save_plan(make_plan(uspec, usched), path)
    data = json.loads(path.read_text())
    del data["spec"]["device_memory"], data["spec"]["reserved"]
    path.write_text(json.dumps(data))
    assert load_plan(path).spec.capacities == (4, 4, 4, 4)


@pytest.mark.parametrize("field,value,message", [
    ("device_memory", [4, 4], "one entry per device (4), got 2"),
    ("device_memory", [4, -1, 4, 4], "spec.device_memory[1] must be between 0"),
    ("reserved", [5, 0, 0, 0], "device 0 reserves 5 GB of its 4 GB"),
    ("reserved", [0, 0, 1.5, 0], "expected int"),
])
def test_plan_with_bad_device_memory_is_refused(searched, tmp_path, field, value, message):
    uspec, usched = searched["uniform"]
    path = tmp_path / "p.json"
    save_plan(make_plan(uspec, usched), path)
    data = json.loads(path.read_text())
    data["spec"][field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match=re_escape(message)):
        load_plan(path)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_spec_json_carries_per_device_memory():
    spec = parse(vspec("memory 4GB\nmemory 3GB reserve 1GB on 0"))
    data = to_json(spec)
    assert data["device_memory"] == [3, 4, 4, 4] and data["reserved"] == [1, 0, 0, 0]


# ---- the shipped example ------------------------------------------------------------------

EXAMPLE = ROOT / "examples" / "gpt_memory.tsl"


@pytest.mark.parametrize("d", [4, 8])
@pytest.mark.parametrize("mode", ["train", "infer"])
def test_example_spec_parses_with_less_room_on_the_end_devices(d, mode):
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(EXAMPLE, sets={"D": str(d)}, mode=mode)
    # 80 GB each; 64 GB reserved, 72 on device 0 (embedding), 66 + 4 on the last (head)
    assert spec.capacities == (8,) + (16,) * (d - 2) + (10,)
    assert spec.reserved == (72,) + (64,) * (d - 2) + (70,)


def test_example_spec_search_and_simulation_keep_each_device_within_its_room():
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(EXAMPLE)
    sched = search(spec, microbatches=8).schedule
    peaks = running_peaks(spec, sched)
    assert all(p <= c for p, c in zip(peaks, spec.capacities)), (peaks, spec.capacities)
    assert peaks[0] == 8  # device 0 is full with 2 micro-batches in flight
    report = simulate((spec, lower(spec, sched), sched))
    assert report.ok and list(report.peak_memory) == peaks


# ---- profiling rescales memory per device -------------------------------------------------


def test_profiled_spec_keeps_each_devices_in_flight_count():
    from tessel_dsl.analysis import resident_memory
    from tessel_dsl.interop.profiled_spec import Measurement, apply_measurements, spec_to_tsl

    spec = parse(vspec("memory 4GB\nmemory 3GB - 1GB on 0").replace("resolution memory 1GB\n", "")
                 .replace("GB", ""))
    assert spec.capacities == (2, 4, 4, 4)
    found = [Measurement(f"F{i}", 1e-3, 3e-3, activation_bytes=8000) for i in range(4)]
    new = apply_measurements(spec, found)
    held = resident_memory(new)
    # device 0 let 2 micro-batches be in flight, the others 4: still so in the new memory unit
    assert [new.capacity(d) // held[d] for d in range(4)] == [2, 4, 4, 4]
    assert parse(spec_to_tsl(new), "p.tsl") == replace_params(new, parse(spec_to_tsl(new), "p.tsl"))
    physical = parse(vspec("memory 4GB\nmemory 4GB reserve 2GB on 0"))
    new = apply_measurements(physical, found, capacity_bytes=80 * 10**9)
    assert new.capacity(1) == 80 * 10**9 // new.units.memory_bytes
    assert new.reserved_on(0) * new.units.memory_bytes == 2 * 10**9


def replace_params(spec, like):
    return dataclasses.replace(spec, params=like.params)


def test_readme_memory_example_gives_the_capacities_it_states():
    text = (ROOT / "README.md").read_text()
    start = text.index("#### Memory per device")
    block = text[text.index("```\n", start) + 4:text.index("```", text.index("```\n", start) + 4)]
    spec = parse(f"devices 8\n{block}forward A on all time 1\n")
    assert spec.capacities == (46,) + (58,) * 5 + (50, 50)


def test_zero_bubble_baseline_fits_a_smaller_first_device():
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.baselines import build

    spec = parse_file(SPECS / "zerobubble.tsl")
    small = dataclasses.replace(spec, device_memory=(3,) + spec.capacities[1:])
    for name in ("zb-h1", "gpipe"):
        s = build(small, name, 8)
        assert running_peaks(small, s)[0] <= 3 and all(p <= 4 for p in running_peaks(small, s)), name


def test_one_error_per_memory_line_however_many_devices():
    text = vspec("memory 4GB\nmemory 2GB on 4..4000\nmemory 3GB on 1, 1\nmemory 3GB on 0..3")
    got = codes(text)
    assert got == [("device-range", 7, 1), ("duplicate-declaration", 8, 1), ("duplicate-declaration", 9, 1)]
    with pytest.raises(SpecError) as e:
        parse(text, "m.tsl")
    assert "device 4 is outside 0..3 (and 3996 more)" in str(e.value)
    assert "m.tsl:8:1: error[duplicate-declaration]: the memory of device 1 is given twice (first at m.tsl:8:1)\n" \
        in str(e.value)
    assert "m.tsl:9:1: error[duplicate-declaration]: the memory of device 1 is given twice (first at m.tsl:8:1)" \
        in str(e.value)


def test_plan_messages_show_the_spec_units(searched, tmp_path):
    spec, sched = searched["uniform"]
    plan = make_plan(spec, sched)
    path = tmp_path / "p.json"
    save_plan(plan, path)
    data = json.loads(path.read_text())
    data["search"]["period"] = data["schedule"]["repetend"]["period"] + 1
    path.write_text(json.dumps(data))
    p = data["schedule"]["repetend"]["period"]
    with pytest.raises(PlanError, match=re_escape(f"search.period {p + 1} ({p + 1} ms) differs from the "
                                                  f"repetend's period {p} ({p} ms)")):
        load_plan(path)
    save_plan(plan, path)
    data = json.loads(path.read_text())
    data["peak_memory"][0] += 1
    path.write_text(json.dumps(data))
    peaks = list(plan.peak_memory)
    with pytest.raises(PlanError, match=re_escape(f"([{peaks[0] + 1} GB, {peaks[1]} GB")):
        load_plan(path)


def test_a_size_without_a_unit_beside_one_with_a_unit_is_refused():
    # `reserve 35` beside `memory 80GB` would be 35 units of the 1 GB resolution: refused at the 35
    text = vspec("memory 80GB reserve 35\n"             # line 6
                 "memory 40 reserve 2GB on 1\n"         # 7
                 "memory 40GB, infer 30 on 2")          # 8
    assert codes(text) == [("missing-unit", 6, 21), ("missing-unit", 7, 8), ("missing-unit", 8, 20)]
    with pytest.raises(SpecError) as e:
        parse(text, "m.tsl")
    assert "m.tsl:6:21: error[missing-unit]: `reserve` has no unit beside `GB`" in str(e.value)
    assert "write the unit (e.g. `35GB`)" in str(e.value)
    # the same sizes all with units, or all without, are accepted
    assert parse(vspec("memory 80GB reserve 35GB"), "m.tsl").capacity(0) == 45
    assert parse(vspec("memory 80 reserve 35"), "m.tsl").capacity(0) == 45


def test_a_memory_line_for_every_device_needs_no_default():
    spec = parse(vspec("memory 5GB reserve 1GB on 0\nmemory 4GB on 1..3"))
    assert spec.capacities == (4, 4, 4, 4) and spec.total_capacity(0) == 5
    # The same with a default line gives the same spec.
    same = parse(vspec("memory 4GB\nmemory 5GB reserve 1GB on 0"))
    assert same.capacities == spec.capacities
    with pytest.raises(SpecError, match="devices 2, 3 have no memory capacity"):
        parse(vspec("memory 5GB on 0\nmemory 4GB on 1"))
