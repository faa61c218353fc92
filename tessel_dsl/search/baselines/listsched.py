"""List scheduling: turn per-device work queues (or priorities) into per-device block orders.

The classic schedules are defined as an order of work on each device. Two shapes of definition
occur: a fixed queue per device (1F1B, with shared blocks pinned next to a neighbour on one
"anchor" device), and a priority rule applied to whatever is ready (Chimera's basic unit). Both
are played out here on an integer clock; the resulting orders go to `compact`, which fixes the
final start times.
"""
from __future__ import annotations

from collections.abc import Callable

from tessel_dsl.errors import ScheduleError
from tessel_dsl.ir import Spec

Key = tuple[str, int]  # (block, micro-batch)


def _deps(spec: Spec, key: Key) -> list[Key]:
    return [(p, key[1]) for p in spec.preds[key[0]]]


def play_queues(spec: Spec, queues: list[list[Key]]) -> list[list[Key]]:
    """Run each device's queue in order and return what every device actually executed.

    A single-device block starts when its device reaches it and its dependencies are done. A
    multi-device block sits in the queue of one anchor device; when the anchor reaches it and its
    dependencies are done it becomes *due*: each of its devices finishes what it is running, starts
    nothing new, and the block runs once all of them are free. That is how "insert the all-device
    block next to its neighbour" becomes a consistent order on every device.
    """
    total = sum(len(q) for q in queues)
    head = [0] * spec.devices
    free_at = [0] * spec.devices
    running: list[tuple[int, Key]] = []
    done: set[Key] = set()
    due: list[tuple[Key, int]] = []  # (key, anchor device), in the order they became due
    orders: list[list[Key]] = [[] for _ in range(spec.devices)]
    t = 0

    def start(key: Key) -> None:
        b = spec.block(key[0])
        for d in b.devices:
            free_at[d] = t + b.time
            orders[d].append(key)
        running.append((t + b.time, key))

    while len(done) < total:
        for end, key in [r for r in running if r[0] <= t]:
            done.add(key)
        running[:] = [r for r in running if r[0] > t]
        progress = True
        while progress:
            progress = False
            due_keys = {k for k, _ in due}
            for d, q in enumerate(queues):
                if head[d] < len(q) and free_at[d] <= t:
                    key = q[head[d]]
                    if (spec.block(key[0]).is_multi_device and key not in due_keys
                            and all(p in done for p in _deps(spec, key))):
                        due.append((key, d))
                        due_keys.add(key)
            reserved: set[int] = set()
            for key, anchor in list(due):
                devs = spec.block(key[0]).devices
                if not reserved.intersection(devs) and all(free_at[d] <= t for d in devs):
                    start(key)
                    head[anchor] += 1
                    due.remove((key, anchor))
                    progress = True
                else:
                    reserved.update(devs)
            for d, q in enumerate(queues):
                if d in reserved or free_at[d] > t or head[d] >= len(q):
                    continue
                key = q[head[d]]
                if spec.block(key[0]).is_multi_device or not all(p in done for p in _deps(spec, key)):
                    continue
                start(key)
                head[d] += 1
                progress = True
        if not running:
            if len(done) < total:
                stuck = [f"device {d} waits on {q[head[d]][0]}:{q[head[d]][1]}"
                         for d, q in enumerate(queues) if head[d] < len(q)]
                raise ScheduleError("baseline order deadlocks: " + "; ".join(stuck))
            break
        t = min(end for end, _ in running)
    return orders


def play_greedy(spec: Spec, keys: list[Key], priority: Callable[[Key], tuple]) -> list[list[Key]]:
    """Greedy list scheduling of single-device blocks: whenever a device is free it starts the
    ready block with the smallest `priority` that still fits in its memory M."""
    pending: list[set[Key]] = [set() for _ in range(spec.devices)]
    for k in keys:
        b = spec.block(k[0])
        if b.is_multi_device:
            raise ValueError("play_greedy handles single-device blocks only")
        pending[b.devices[0]].add(k)
    mem = [0] * spec.devices
    free_at = [0] * spec.devices
    running: list[tuple[int, Key]] = []
    done: set[Key] = set()
    orders: list[list[Key]] = [[] for _ in range(spec.devices)]
    t = 0
    while len(done) < len(keys):
        for end, key in [r for r in running if r[0] <= t]:
            done.add(key)
        running[:] = [r for r in running if r[0] > t]
        for d in range(spec.devices):
            if free_at[d] > t:
                continue
            ready = [k for k in pending[d] if all(p in done for p in _deps(spec, k))
                     and mem[d] + spec.block(k[0]).memory <= spec.capacity(d)]
            if not ready:
                continue
            key = min(ready, key=priority)
            b = spec.block(key[0])
            pending[d].discard(key)
            mem[d] += b.memory
            free_at[d] = t + b.time
            orders[d].append(key)
            running.append((t + b.time, key))
        if not running:
            if len(done) < len(keys):
                raise ScheduleError("greedy baseline order is stuck (memory M too small for the ready blocks)")
            break
        t = min(end for end, _ in running)
    return orders
