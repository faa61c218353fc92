"""The validator's memory-overflow message names the limit the device has: `M` when every device
has the same capacity and nothing is reserved, otherwise the device's own capacity, with what is
reserved out of how much. Checked word for word, in the spec's units."""
from __future__ import annotations

import pytest

from tessel_dsl import parse
from tessel_dsl.errors import ScheduleError
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.compact import compact
from tessel_dsl.validate import validate
from tests.paths import SPECS

SHAPES = (SPECS / "lib" / "shapes.tsl").as_posix()
# GPipe order: device 0 holds 1 GB per micro-batch and starts F0:1 at 1 ms, holding 2 GB.
ORDERS = [[("F0", 0), ("F0", 1), ("B0", 0), ("B0", 1)], [("F1", 0), ("F1", 1), ("B1", 0), ("B1", 1)]]


def _spec(memory_lines: str):
    return parse(f'placement v2\ninclude "{SHAPES}"\ndevices 2\nresolution time 1ms\nresolution memory 1GB\n'
                 f"{memory_lines}\nmicrobatches 2\nuse vshape(2)\nderive backward time 3x\n")


@pytest.mark.parametrize("memory, limit", [
    ("memory 1GB", "M=1 GB"),
    ("memory 4GB\nmemory 1GB on 0", "its capacity 1 GB"),
    ("memory 4GB\nmemory 2GB reserve 1GB on 0", "its capacity 1 GB (2 GB less 1 GB reserved)"),
    ("memory 2GB reserve 1GB", "its capacity 1 GB (2 GB less 1 GB reserved)"),
])
def test_overflow_message_names_the_devices_limit(memory, limit):
    spec = _spec(memory)
    sched = Schedule(2, compact(spec, orders=ORDERS), name="gpipe")
    with pytest.raises(ScheduleError) as e:
        validate(spec, sched)
    first = str(e.value).splitlines()[0]
    assert first == f"invalid schedule 'gpipe': memory overflow on device 0 at t=1 ms: F0:1 brings it to 2 GB > {limit}"
