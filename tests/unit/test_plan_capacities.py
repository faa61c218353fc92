"""A plan file keeps each device's capacity and reserve: the fields after `Spec.source` (which the
codec skips, being left out of equality) must still be read back."""
from __future__ import annotations

from tessel_dsl import parse
from tessel_dsl.plan import load_plan, make_plan, save_plan
from tessel_dsl.schedule import Schedule, Slot
from tests.paths import SPECS

SHAPES = (SPECS / "lib" / "shapes.tsl").as_posix()


def test_capacity_and_reserve_of_one_device_survive_save_and_load(tmp_path):
    spec = parse(f'placement vmem\ninclude "{SHAPES}"\ndevices 2\nresolution time 1ms\n'
                 "resolution memory 1GB\nmemory 8GB\nmemory 4GB reserve 1GB on 1\nmicrobatches 1\n"
                 "use vshape(2)\nderive backward time 3x\n")
    assert spec.capacities == (8, 3)  # 4 GB less 1 GB reserved on device 1
    # one micro-batch run sequentially: F0, F1, B1, B0
    order = [(b.name, 0) for b in spec.blocks]
    assert [n for n, _ in order] == ["F0", "F1", "B1", "B0"]
    starts, t = [], 0
    for name, mb in order:
        starts.append(Slot(t, name, mb))
        t += spec.block(name).time
    save_plan(make_plan(spec, Schedule(1, tuple(starts))), tmp_path / "p.json")
    back = load_plan(tmp_path / "p.json").spec
    assert back.capacities == (8, 3)
    assert back.device_memory == (8, 4) and back.reserved == (0, 1)
    assert [back.total_capacity(d) for d in range(2)] == [8, 4]
