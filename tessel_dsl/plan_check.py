"""Checking a plan before anything simulates, exports or runs it.

A plan file can be edited, truncated or produced by another tool, and the simulator and the
executor execute its programs as they are: a dropped compute would run to the end with wrong
gradients. `validate_plan` re-derives everything from the plan's own contents, cheapest first, so
an oversized plan is refused before any work that grows with its size:

1. the spec: ranges of every number, names, placements, edges (no unknown block, no cycle) and
   every backward-like block depending on its forward; then every check `tessel check` makes
   (`spec_rules`: memory that no backward frees, a micro-batch's memory below zero, an inference
   spec holding backward blocks, the limits of `tessel_dsl.limits`), so a plan file holds no spec
   that a `.tsl` file could not;
2. the schedule: micro-batch and instance limits, then the independent validator
   (`tessel_dsl.validate`), and the repetend a re-extension would use;
3. the programs against the schedule: each (block, micro-batch) computed exactly once on each of
   its devices, every SEND matched by one RECV and every RECV by one SEND, in non-blocking mode
   every RECV followed by its WAIT, and every compute placed after its inputs are on the device.

The first problem found is raised as a PlanError naming what is wrong.
"""
from __future__ import annotations

import math
import re
from collections import Counter

from tessel_dsl.analysis import forwards_not_ancestors
from tessel_dsl.errors import PlanError, ScheduleError
from tessel_dsl.ir import Kind, Spec
from tessel_dsl.limits import (
    MAX_BLOCKS,
    MAX_DEVICES,
    MAX_INSTANCES,
    MAX_MICROBATCHES,
    MAX_NAME,
    MAX_QUANTITY,
    MAX_TENSOR_BYTES,
    MAX_TENSOR_DIMS,
)
from tessel_dsl.program import Op, Program
from tessel_dsl.schedule import Schedule
from tessel_dsl.spec_rules import limit_problems, memory_problems, mode_problems
from tessel_dsl.units import memory_in, time_in

__all__ = ["validate_plan"]

_IDENT = re.compile(r"[A-Za-z_]\w*\Z", re.ASCII)
_MAX_NAME = MAX_NAME
_MAX_DIMS = MAX_TENSOR_DIMS


def validate_plan(plan, origin: str = "plan"):
    """Return `plan` unchanged if it is sound, else raise PlanError("<origin>: <what is wrong>")."""
    try:
        check_spec(plan.spec)
        check_spec_meaning(plan.spec)
        _check_search(plan.search)
        _check_schedule(plan.spec, plan.schedule)
        _check_search_vs_schedule(plan.search, plan.spec, plan.schedule)
        check_programs(plan.spec, plan.schedule, plan.programs)
        _check_peak(plan)
    except PlanError as e:
        raise PlanError(f"{origin}: {e}") from None
    return plan


def _int(value: object, what: str, lo: int, hi: int) -> None:
    if type(value) is not int:
        raise PlanError(f"{what} must be a whole number, got {value!r}")
    if not lo <= value <= hi:
        raise PlanError(f"{what} must be between {lo} and {hi}, got {value}")


def _real(value: object, what: str, lo: float, hi: float = math.inf, *, open_lo: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"{what} must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise PlanError(f"{what} must be finite, got {value}")
    if value < lo or (open_lo and value == lo) or value > hi:
        bound = f"above {lo:g}" if open_lo else f"at least {lo:g}"
        raise PlanError(f"{what} must be {bound}" + (f" and at most {hi:g}" if hi < math.inf else "")
                        + f", got {value:g}")


def check_spec(spec: Spec) -> None:
    """Ranges, names, placements and edges of a spec taken from a plan (PlanError on the first fault)."""
    _int(spec.devices, "spec.devices", 1, MAX_DEVICES)
    _int(spec.memory, "spec.memory", 0, MAX_QUANTITY)
    _check_device_memory(spec)
    _int(spec.microbatches, "spec.microbatches", 1, MAX_MICROBATCHES)
    if not 1 <= len(spec.blocks) <= MAX_BLOCKS:
        raise PlanError(f"spec.blocks: a plan needs between 1 and {MAX_BLOCKS} blocks, got {len(spec.blocks)}")
    _real(spec.units.time_seconds, "spec.units.time_seconds", 0.0, open_lo=True)
    _int(spec.units.memory_bytes, "spec.units.memory_bytes", 1, MAX_QUANTITY)
    _real(spec.link.latency, "spec.link.latency", 0.0)
    _real(spec.link.bandwidth, "spec.link.bandwidth", 0.0)
    seen: set[str] = set()
    for i, b in enumerate(spec.blocks):
        where = f"spec.blocks[{i}] ({b.name})" if isinstance(b.name, str) and len(b.name) <= _MAX_NAME else f"spec.blocks[{i}]"
        if not isinstance(b.name, str) or len(b.name) > _MAX_NAME or not _IDENT.match(b.name):
            raise PlanError(f"{where}: block names are identifiers of at most {_MAX_NAME} characters")
        if b.name in seen:
            raise PlanError(f"{where}: block {b.name} is declared twice")
        seen.add(b.name)
        if not b.devices:
            raise PlanError(f"{where}: block {b.name} runs on no device")
        for d in b.devices:
            _int(d, f"{where}.devices", 0, spec.devices - 1)
        if len(set(b.devices)) != len(b.devices):
            raise PlanError(f"{where}: block {b.name} lists a device twice: {list(b.devices)}")
        _int(b.time, f"{where}.time", 1, MAX_QUANTITY)
        _int(b.memory, f"{where}.memory", -MAX_QUANTITY, MAX_QUANTITY)
    for i, b in enumerate(spec.blocks):
        if b.kind.is_backward:
            f = spec.by_name.get(b.forward) if b.forward else None
            if f is None or f.kind is not Kind.FORWARD:
                raise PlanError(f"spec.blocks[{i}] ({b.name}): {b.kind.value} block names "
                                f"{b.forward!r} as its forward, which is not a forward block")
    pairs: set[tuple[str, str]] = set()
    for i, e in enumerate(spec.edges):
        for end in (e.src, e.dst):
            if end not in spec.by_name:
                raise PlanError(f"spec.edges[{i}]: {e.src} -> {e.dst} names {end!r}, which is not a block")
        if e.src == e.dst:
            raise PlanError(f"spec.edges[{i}]: {e.src} depends on itself")
        if (e.src, e.dst) in pairs:
            raise PlanError(f"spec.edges[{i}]: {e.src} -> {e.dst} is listed twice")
        pairs.add((e.src, e.dst))
        if e.tensor is not None:
            if not 1 <= len(e.tensor.shape) <= _MAX_DIMS:
                raise PlanError(f"spec.edges[{i}].tensor.shape: 1 to {_MAX_DIMS} dimensions, got {len(e.tensor.shape)}")
            for n in e.tensor.shape:
                _int(n, f"spec.edges[{i}].tensor.shape", 1, MAX_QUANTITY)
            if e.tensor.nbytes > MAX_TENSOR_BYTES:
                raise PlanError(f"spec.edges[{i}].tensor: {e.tensor.nbytes} bytes is beyond any device")
    try:
        spec.topo_order
    except ValueError:
        raise PlanError("spec.edges: the dependencies form a cycle") from None
    for b in forwards_not_ancestors(spec):
        raise PlanError(f"{b.kind.value} block {b.name} does not depend on its forward {b.forward}: "
                        f"no chain of edges leads from {b.forward} to {b.name}")
    for i, x in enumerate(spec.expectations):
        if x.microbatches is not None:
            _int(x.microbatches, f"spec.expectations[{i}].microbatches", 1, MAX_MICROBATCHES)
        if isinstance(x.value, float):
            _real(x.value, f"spec.expectations[{i}].value", -math.inf)


def check_spec_meaning(spec: Spec) -> None:
    """The rules `tessel check` holds a spec to beyond its structure (`spec_rules`), for the spec
    inside a plan (after `check_spec`, so they meet no unknown name or cycle): its first problem,
    and how many more. Capacity is the exception: a baseline may overflow memory on purpose, and
    `tessel simulate` reports that (exit 1) rather than refusing the plan."""
    found = limit_problems(spec) + mode_problems(spec) + memory_problems(spec, capacity=False)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PlanError(f"spec: {found[0]}{more}")


def _check_device_memory(spec: Spec) -> None:
    """Per-device capacity and reserve: absent (plans written before them), or one whole number
    per device, and no device left with less than nothing."""
    for name in ("device_memory", "reserved"):
        values = getattr(spec, name)
        if not isinstance(values, tuple):
            raise PlanError(f"spec.{name} must be a list, got {values!r}")
        if values and len(values) != spec.devices:
            raise PlanError(f"spec.{name}: one entry per device ({spec.devices}), got {len(values)}")
        for d, v in enumerate(values):
            _int(v, f"spec.{name}[{d}]", 0, MAX_QUANTITY)
    for d in range(spec.devices if spec.reserved else 0):
        if spec.capacity(d) < 0:
            raise PlanError(f"spec.reserved[{d}]: device {d} reserves {memory_in(spec.units, spec.reserved_on(d))} "
                            f"of its {memory_in(spec.units, spec.total_capacity(d))}")


def _both(value: int, physical: str) -> str:
    """A plan field's number with its physical value when the spec declares a resolution."""
    return f"{value} ({physical})" if physical != str(value) else str(value)


def check_microbatch_count(spec: Spec, n: int) -> None:
    """Refuse a micro-batch count whose schedule would be too large, before building it."""
    if type(n) is not int or not 1 <= n <= MAX_MICROBATCHES:
        raise PlanError(f"micro-batches must be between 1 and {MAX_MICROBATCHES}, got {n}")
    if n * len(spec.blocks) > MAX_INSTANCES:
        raise PlanError(f"{n} micro-batches x {len(spec.blocks)} blocks = {n * len(spec.blocks)} block instances, "
                        f"more than the limit of {MAX_INSTANCES}")


def _check_search(info) -> None:
    _real(info.seconds, "search.seconds", 0.0)
    _real(info.memory_bound, "search.memory_bound", 0.0)
    for name in ("lower_bound", "period", "nr", "candidates_tried", "candidates_pruned", "makespan_bound"):
        _int(getattr(info, name), f"search.{name}", 0, MAX_QUANTITY)
    _int(info.copies, "search.copies", 1, MAX_QUANTITY)
    _int(info.repetend_copies, "search.repetend_copies", 1, MAX_QUANTITY)


def _check_schedule(spec: Spec, schedule: Schedule) -> None:
    n = schedule.microbatches
    _int(n, "schedule.microbatches", 1, MAX_MICROBATCHES)
    want = n * len(spec.blocks)
    if want > MAX_INSTANCES:
        raise PlanError(f"schedule: {n} micro-batches x {len(spec.blocks)} blocks = {want} block instances, "
                        f"more than the limit of {MAX_INSTANCES}")
    for s in schedule.slots:
        _int(s.start, f"schedule slot {s.block}:{s.mb} start", 0, MAX_QUANTITY)
        _int(s.mb, f"schedule slot {s.block}:{s.mb} micro-batch", 0, n - 1)
    if len(schedule.slots) != want:
        # The validator below names the first missing or repeated one; this says how many.
        counts = Counter((s.block, s.mb) for s in schedule.slots)
        missing = want - len([k for k in counts if k[0] in spec.by_name])
        if missing > 0 and len(counts) == len(schedule.slots):
            first = next((b.name, mb) for mb in range(n) for b in spec.blocks if (b.name, mb) not in counts)
            raise PlanError(f"schedule: {missing} of {want} block instances are missing "
                            f"(first: {first[0]}:{first[1]}); {n} micro-batches x {len(spec.blocks)} blocks")
    try:
        from tessel_dsl.validate import validate

        # Memory is not checked here: a baseline may exceed M on purpose, and the simulator
        # reports an overflow (exit 1 from `tessel simulate`) instead of hiding it.
        validate(spec, schedule, check_memory=False)
    except ScheduleError as e:
        raise PlanError(f"schedule: {e}") from None
    rep = schedule.repetend
    span = n
    if rep is not None:
        # The repeating core runs every block once, at micro-batch offsets 0..nr-1.
        _int(rep.nr, "schedule.repetend.nr", 1, MAX_MICROBATCHES)
        _int(rep.period, "schedule.repetend.period", 1, MAX_QUANTITY)
        names = Counter(s.block for s in rep.slots)
        if set(names) != set(spec.by_name) or max(names.values()) != 1:
            raise PlanError("schedule.repetend: must hold every block of the spec exactly once")
        for s in rep.slots:
            _int(s.start, f"schedule.repetend slot {s.block}:{s.mb} start", 0, MAX_QUANTITY)
            _int(s.mb, f"schedule.repetend slot {s.block}:{s.mb} micro-batch offset", 0, rep.nr - 1)
        span = max(n, rep.nr)
    for part in ("warmup", "cooldown"):
        for s in getattr(schedule, part):
            if s.block not in spec.by_name or type(s.mb) is not int or not 0 <= s.mb < span:
                raise PlanError(f"schedule.{part}: {s.block}:{s.mb} is not a block instance of the schedule")
            # The phases are the recipe re-extension orders blocks by; after the end re-solve they
            # need not be slots of this schedule, and any extension is validated before it is used.
            _int(s.start, f"schedule.{part} slot {s.block}:{s.mb} start", 0, MAX_QUANTITY)
    if schedule.repetend_start is not None:
        _int(schedule.repetend_start, "schedule.repetend_start", 0, MAX_QUANTITY)


def _check_search_vs_schedule(info, spec: Spec, schedule: Schedule) -> None:
    """What the plan says the search found matches the repetend it stores (reports show both)."""
    from tessel_dsl.analysis import lower_bound

    def t(x: int) -> str:
        return _both(x, time_in(spec.units, x))

    if info.lower_bound and info.lower_bound != lower_bound(spec):
        raise PlanError(f"search.lower_bound {t(info.lower_bound)} differs from the spec's lower bound "
                        f"{t(lower_bound(spec))}")
    rep = schedule.repetend
    if rep is None:
        return
    if info.period and info.period != rep.period:
        raise PlanError(f"search.period {t(info.period)} differs from the repetend's period {t(rep.period)}")
    if info.nr and info.nr != rep.nr:
        raise PlanError(f"search.nr {info.nr} differs from the repetend's {rep.nr} micro-batches")


def check_programs(spec: Spec, schedule: Schedule, programs: tuple[Program, ...]) -> None:
    """The programs do exactly what the schedule says (see the module docstring); none is fine:
    the simulator lowers the schedule itself."""
    if not programs:
        return
    if len(programs) != spec.devices or any(p.device != d for d, p in enumerate(programs)):
        raise PlanError(f"programs: expected one program per device 0..{spec.devices - 1}, in order; got "
                        f"devices {[p.device for p in programs][:8]}")
    modes = {p.blocking for p in programs}
    if len(modes) != 1:
        raise PlanError("programs: some devices are lowered blocking and others non-blocking")
    blocking = modes.pop()
    n = schedule.microbatches
    sends: dict[tuple[str, int, int, int], int] = {}   # (block, mb, src, dst) -> SEND count
    recvs: dict[tuple[str, int, int, int], int] = {}
    for prog in programs:
        d = prog.device
        here = f"program of device {d}"
        done: set[tuple[str, int]] = set()      # computed on this device
        arrived: set[tuple[str, int]] = set()   # usable here: received (and waited for)
        posted: dict[tuple[str, int], int] = {}  # received but not yet waited for -> source
        for i, a in enumerate(prog.actions):
            at = f"{here}, step {i + 1} ({a})"
            b = spec.by_name.get(a.block)
            if b is None:
                raise PlanError(f"{at}: {a.block!r} is not a block of the spec")
            if type(a.mb) is not int or not 0 <= a.mb < n:
                raise PlanError(f"{at}: micro-batch {a.mb} is outside 0..{n - 1}")
            key = (a.block, a.mb)
            if a.op is Op.COMPUTE:
                if a.peers:
                    raise PlanError(f"{at}: a compute has no peers")
                if d not in b.devices:
                    raise PlanError(f"{at}: {a.block} is not placed on it (device {d})")
                if key in done:
                    raise PlanError(f"{at}: {a.block}:{a.mb} is computed twice on device {d}")
                for p in spec.preds[a.block]:
                    if (p, a.mb) not in done and (p, a.mb) not in arrived:
                        how = "received" if blocking else "received and waited for"
                        raise PlanError(f"{at}: its input {p}:{a.mb} is neither computed on device {d} nor "
                                        f"{how} before it")
                done.add(key)
                continue
            if not a.peers or any(type(p) is not int or not 0 <= p < spec.devices or p == d for p in a.peers):
                raise PlanError(f"{at}: peers must be other devices in 0..{spec.devices - 1}, got {list(a.peers)}")
            if a.op is Op.SEND:
                if key not in done:
                    raise PlanError(f"{at}: sends {a.block}:{a.mb} before computing it on device {d}")
                if len(set(a.peers)) != len(a.peers):
                    raise PlanError(f"{at}: a peer is listed twice")
                for p in a.peers:
                    sends[(a.block, a.mb, d, p)] = sends.get((a.block, a.mb, d, p), 0) + 1
                continue
            if len(a.peers) != 1:
                raise PlanError(f"{at}: a {a.op.value} names exactly one source device")
            src = a.peers[0]
            if a.op is Op.RECV:
                if key in done or key in arrived or key in posted:
                    raise PlanError(f"{at}: {a.block}:{a.mb} is already on device {d}")
                recvs[(a.block, a.mb, src, d)] = recvs.get((a.block, a.mb, src, d), 0) + 1
                if blocking:
                    arrived.add(key)
                else:
                    posted[key] = src
                continue
            # WAIT
            if blocking:
                raise PlanError(f"{at}: a blocking program has no WAIT")
            if posted.get(key) != src:
                raise PlanError(f"{at}: waits for {a.block}:{a.mb} from device {src} without a RECV posted for it")
            del posted[key]
            arrived.add(key)
        if posted:
            (blk, mb), src = next(iter(posted.items()))
            raise PlanError(f"{here}: RECV {blk}:{mb}<{src} is never followed by its WAIT")
        want = {(b.name, m) for b in spec.blocks_on(d) for m in range(n)}
        if done != want:
            lost = sorted(want - done, key=lambda k: (k[1], k[0]))
            raise PlanError(f"{here}: {len(lost)} block instance(s) placed on device {d} are never computed "
                            f"(first: {lost[0][0]}:{lost[0][1]})")
    for k in sorted(set(sends) | set(recvs)):
        s, r = sends.get(k, 0), recvs.get(k, 0)
        if s != r or s != 1:
            blk, mb, src, dst = k
            raise PlanError(f"programs: device {src} sends {blk}:{mb} to device {dst} {s} time(s) and device {dst} "
                            f"receives it {r} time(s); each transfer needs exactly one SEND and one RECV")


def _check_peak(plan) -> None:
    if plan.peak_memory and tuple(plan.peak_memory) != plan.schedule.peak_memory(plan.spec):
        def show(peaks) -> str:
            shown = list(peaks)[:8]
            if plan.spec.units.memory_label == "unit":
                return str(shown)
            return f"{shown} ([{', '.join(memory_in(plan.spec.units, x) for x in shown)}])"

        raise PlanError(f"peak_memory {show(plan.peak_memory)} does not match the schedule's "
                        f"{show(plan.schedule.peak_memory(plan.spec))}")
