"""Plans in PyTorch's pipeline CSV format: export for `torch.distributed.pipelining`, import back.

`torch.distributed.pipelining`'s `_PipelineScheduleRuntime._load_csv` reads one CSV row per rank,
each cell an action such as ``0F1`` (stage 0, forward, micro-batch 1), ``3I0`` / ``3W0`` (split
backward: input gradient, weight gradient) or ``2B0`` (full backward). Its ``compute_comms`` form
adds ``1SEND_F0`` / ``2RECV_F0`` / ``SEND_B`` / ``RECV_B`` and ``0REDUCE_GRAD``. Checked against
torch 2.13.

PyTorch can express a plan whose forward blocks form one chain of single-device stages: forward
block k in chain order is stage k, a backward block (its `forward` names the stage's forward block)
is that stage's ``B``, and a split backward is ``I`` + ``W``. Several stages may share a rank (the
looped and V-style layouts). Branches, skip connections and multi-device blocks have no PyTorch
spelling; `stage_map` says which rule a spec breaks.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tessel_dsl.analysis import reachable
from tessel_dsl.errors import Location, ScheduleError, TesselError
from tessel_dsl.fileio import write_text_atomic
from tessel_dsl.ir import Kind, Mode, Spec
from tessel_dsl.program import Op, Program
from tessel_dsl.schedule import Schedule

__all__ = ["TorchCsvError", "export_torch_csv", "schedule_from_csv"]


class TorchCsvError(TesselError):
    """A plan PyTorch cannot express, or a CSV file that is not a valid PyTorch schedule."""


@dataclass(frozen=True)
class StageMap:
    """How a spec's blocks map onto PyTorch pipeline stages.

    `stages[k]` is the forward block of stage k and `ranks[k]` its device; `actions` maps every
    block name to ``(stage, letter)`` with letter one of F, B, I, W.
    """

    stages: tuple[str, ...]
    ranks: tuple[int, ...]
    actions: dict[str, tuple[int, str]]

    def block_for(self, stage: int, letter: str) -> str | None:
        """The block that runs `letter` for `stage`, or None when the spec has no such block."""
        for name, key in self.actions.items():
            if key == (stage, letter):
                return name
        return None

    @property
    def split_backward(self) -> bool:
        return any(letter == "I" for _, letter in self.actions.values())


def _fail(spec: Spec, why: str) -> TorchCsvError:
    return TorchCsvError(f"spec '{spec.name}' cannot be expressed as a torch.distributed.pipelining schedule: {why}")


def stage_map(spec: Spec) -> StageMap:
    """Map `spec` onto PyTorch stages, or raise TorchCsvError saying which rule it breaks."""
    for b in spec.blocks:
        if b.is_multi_device:
            raise _fail(spec, f"block {b.name} runs on devices {','.join(map(str, b.devices))} at once, "
                              "but a PyTorch stage lives on exactly one rank")
        if b.kind is Kind.OTHER:
            raise _fail(spec, f"block {b.name} is neither forward nor backward; PyTorch stages only "
                              "run F, B, I and W actions")
    stages = _forward_chain(spec)
    index = {name: k for k, name in enumerate(stages)}
    actions: dict[str, tuple[int, str]] = {name: (k, "F") for k, name in enumerate(stages)}
    for b in spec.blocks:
        if not b.kind.is_backward:
            continue
        if b.forward not in index:
            raise _fail(spec, f"backward block {b.name} does not name the forward block it belongs to")
        k = index[b.forward]
        if b.devices != spec.block(b.forward).devices:
            raise _fail(spec, f"backward block {b.name} runs on device {b.devices[0]} but its stage "
                              f"({b.forward}) runs on device {spec.block(b.forward).devices[0]}")
        key = (k, b.kind.letter)
        clash = [n for n, v in actions.items() if v == key]
        if clash:
            raise _fail(spec, f"blocks {clash[0]} and {b.name} are both the {key[1]} of stage {k}")
        actions[b.name] = key
    _check_backward_shape(spec, stages, actions)
    _check_edges(spec, stages, actions)
    ranks = tuple(spec.block(n).devices[0] for n in stages)
    idle = sorted(set(range(spec.devices)) - set(ranks))
    if idle:
        raise _fail(spec, f"device {idle[0]} runs no stage, and every PyTorch rank needs one")
    return StageMap(stages, ranks, actions)


def _forward_chain(spec: Spec) -> tuple[str, ...]:
    fwd = [b.name for b in spec.blocks if b.kind is Kind.FORWARD]
    if not fwd:
        raise _fail(spec, "it has no forward blocks")
    fset = set(fwd)
    nxt: dict[str, str] = {}
    has_pred: set[str] = set()
    for e in spec.edges:
        if e.src in fset and e.dst in fset:
            if e.src in nxt:
                raise _fail(spec, f"forward block {e.src} feeds both {nxt[e.src]} and {e.dst} (a branch); "
                                  "a PyTorch stage only feeds the next stage")
            if e.dst in has_pred:
                raise _fail(spec, f"forward block {e.dst} has two forward inputs (a join); "
                                  "a PyTorch stage only reads the previous stage")
            nxt[e.src] = e.dst
            has_pred.add(e.dst)
    heads = [n for n in fwd if n not in has_pred]
    if len(heads) != 1:
        raise _fail(spec, f"its forward blocks form {len(heads)} separate chains (starting at "
                          f"{', '.join(heads)}); PyTorch runs one chain of stages")
    chain = [heads[0]]
    while chain[-1] in nxt:
        chain.append(nxt[chain[-1]])
    return tuple(chain)


def _check_backward_shape(spec: Spec, stages: tuple[str, ...], actions: dict[str, tuple[int, str]]) -> None:
    letters: dict[int, set[str]] = {k: set() for k in range(len(stages))}
    for k, letter in actions.values():
        letters[k].add(letter)
    has_bwd = [k for k, ls in letters.items() if ls - {"F"}]
    if not has_bwd:
        return  # forward only (inference)
    for k, ls in letters.items():
        if ls == {"F", "B"} or ls == {"F", "I", "W"}:
            continue
        if spec.mode is Mode.INFER:
            continue
        got = "".join(sorted(ls - {"F"})) or "nothing"
        raise _fail(spec, f"stage {k} ({stages[k]}) has backward {got}; PyTorch needs either one B "
                          "or an I and a W for every stage")


def _check_edges(spec: Spec, stages: tuple[str, ...], actions: dict[str, tuple[int, str]]) -> None:
    """Every edge must be one PyTorch carries, and every order PyTorch assumes must be implied."""
    n = len(stages)
    has_bwd = any(letter != "F" for _, letter in actions.values())

    def first_bwd(k: int) -> str | None:
        for name, (s, letter) in actions.items():
            if s == k and letter in "BI":
                return name
        return None

    for e in spec.edges:
        (ks, ls), (kd, ld) = actions[e.src], actions[e.dst]
        if ks == kd:
            if not (ls == "F" or (ls, ld) == ("I", "W")):
                raise _fail(spec, f"edge {e.src} -> {e.dst} orders two backward actions of stage {ks} "
                                  "in a way PyTorch does not (only I before W)")
            continue
        ok = (ls == "F" and ld == "F" and kd == ks + 1) or (ls in "BI" and ld in "BI" and kd == ks - 1)
        if not ok:
            raise _fail(spec, f"edge {e.src} -> {e.dst} passes a tensor from stage {ks} to stage {kd}; "
                              "PyTorch only passes activations forward to the next stage and gradients "
                              "back to the previous one")
    if not has_bwd:
        return
    reach = reachable(spec)
    need = [(stages[-1], first_bwd(n - 1))]
    need += [(first_bwd(k + 1), first_bwd(k)) for k in range(n - 1)]
    need += _iw_pairs(actions)
    for a, b in need:
        if a is not None and b is not None and b not in reach[a]:
            raise _fail(spec, f"{b} does not depend on {a}, but PyTorch always runs {a} first "
                              "(it feeds the gradient / activation the other one reads)")


def _iw_pairs(actions: dict[str, tuple[int, str]]) -> list[tuple[str, str]]:
    by_key = {v: k for k, v in actions.items()}
    return [(by_key[(k, "I")], name) for name, (k, letter) in actions.items()
            if letter == "W" and (k, "I") in by_key]


# ----------------------------------------------------------------------------------------- export

def action_text(smap: StageMap, block: str, mb: int) -> str:
    """PyTorch's spelling of one compute action, e.g. ``2I0``."""
    k, letter = smap.actions[block]
    return f"{k}{letter}{mb}"


def compute_rows(spec: Spec, schedule: Schedule, smap: StageMap | None = None) -> list[list[str]]:
    """Compute-only rows: each rank's actions in the schedule's start-time order."""
    smap = smap or stage_map(spec)
    return [[action_text(smap, s.block, s.mb) for s in row] for row in schedule.per_device(spec)]


def comms_rows(spec: Spec, schedule: Schedule, programs: tuple[Program, ...] = (),
               smap: StageMap | None = None) -> list[list[str]]:
    """Compute + comms rows, taken from the plan's lowered programs (lowered here if absent).

    SEND/RECV keep the lowering's order, so the pairing PyTorch's runtime posts is the one the
    simulator proved deadlock-free; WAIT has no PyTorch action (the runtime waits at the compute
    that consumes the tensor). ``REDUCE_GRAD`` follows each stage's last backward action, where it
    applies PyTorch's gradient scaling.
    """
    smap = smap or stage_map(spec)
    if not programs:
        from tessel_dsl.lower import lower

        programs = lower(spec, schedule)
    n = len(smap.stages)
    remaining = {k: schedule.microbatches for k in range(n)}
    rows: list[list[str]] = []
    for prog in sorted(programs, key=lambda p: p.device):
        row: list[str] = []
        for a in prog.actions:
            k, letter = smap.actions[a.block]
            if a.op is Op.COMPUTE:
                row.append(f"{k}{letter}{a.mb}")
                if letter in "BW" and spec.mode is Mode.TRAIN:
                    remaining[k] -= 1
                    if remaining[k] == 0:
                        row.append(f"{k}REDUCE_GRAD")
            elif a.op is Op.WAIT:
                continue
            else:
                fwd = letter == "F"
                peer = k + 1 if fwd else k - 1
                if a.op is Op.SEND:
                    ok = 0 <= peer < n and a.peers == (smap.ranks[peer],)
                else:
                    ok = 0 <= peer < n and prog.device == smap.ranks[peer] and a.peers == (smap.ranks[k],)
                if not ok:
                    raise _fail(spec, f"the plan moves {a.block}:{a.mb} between devices "
                                      f"{prog.device} and {','.join(map(str, a.peers))}, which is not a "
                                      "transfer between neighbouring stages")
                if a.op is Op.SEND:
                    row.append(f"{k}SEND_{'F' if fwd else 'B'}{a.mb}")
                else:
                    row.append(f"{peer}RECV_{'F' if fwd else 'B'}{a.mb}")
        rows.append(row)
    return rows


def rows_text(rows: list[list[str]]) -> str:
    """CSV text, one line per rank (cells never need quoting: no commas or quotes in actions)."""
    return "".join(",".join(r) + "\n" for r in rows)


def export_torch_csv(plan, path: str | os.PathLike | None = None, *, comms: bool = False) -> str:
    """The plan as PyTorch CSV text; also written atomically to `path` when given.

    `comms=False` gives the ``compute_only`` form (PyTorch adds its own communication),
    `comms=True` the ``compute_comms`` form with this plan's send/receive order.
    """
    smap = stage_map(plan.spec)
    if comms:
        rows = comms_rows(plan.spec, plan.schedule, plan.programs, smap)
    else:
        rows = compute_rows(plan.spec, plan.schedule, smap)
    text = rows_text(rows)
    if path is not None:
        write_text_atomic(path, text)
    return text



# ----------------------------------------------------------------------------------------- import

_ACTION = re.compile(r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)")
_OVERLAP = re.compile(r"\((.*)\)OVERLAP_F_B")
_COMPUTE = {"F", "I", "B", "W"}


@dataclass(frozen=True)
class CsvAction:
    """One compute action read from a CSV cell, with where it was."""

    stage: int
    letter: str
    mb: int
    where: Location


def read_torch_csv(text: str, file: str = "<csv>") -> list[list[CsvAction]]:
    """Each rank's compute actions; communication and FSDP actions are skipped.

    Raises TorchCsvError with file:line:column for a cell that is not a PyTorch action.
    """
    rows: list[list[CsvAction]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        row: list[CsvAction] = []
        col = 1
        for cell in line.split(","):
            where = Location(file, lineno, col + len(cell) - len(cell.lstrip()))
            col += len(cell) + 1
            token = cell.strip().strip('"').strip()
            if not token:
                continue
            m = _OVERLAP.fullmatch(token)
            parts = m.group(1).split(";") if m else [token]
            for part in parts:
                row.extend(_parse_cell(part.strip(), where, line))
        rows.append(row)
    while rows and not rows[-1] and not text.splitlines()[len(rows) - 1].strip():
        rows.pop()
    if not rows:
        raise TorchCsvError(f"{file}: empty schedule (expected one row of actions per rank)")
    return rows


def _parse_cell(token: str, where: Location, line: str) -> list[CsvAction]:
    m = _ACTION.fullmatch(token)
    if not m:
        raise TorchCsvError(
            f"{where}: {token!r} is not a PyTorch pipeline action (expected e.g. 0F1, 2B0, 1I3, 1W3, "
            f"0SEND_F1)\n    {line}\n    {' ' * (where.column - 1)}^")
    stage, kind, mb = m.groups()
    if kind not in _COMPUTE:
        return []
    if not mb:
        raise TorchCsvError(f"{where}: {token!r} has no micro-batch number\n    {line}\n    "
                            f"{' ' * (where.column - 1)}^")
    return [CsvAction(int(stage), kind, int(mb), where)]


def orders_from_csv(spec: Spec, rows: list[list[CsvAction]], file: str = "<csv>") -> list[list[tuple[str, int]]]:
    """Per-device (block, micro-batch) orders for `spec` from parsed CSV rows."""
    smap = stage_map(spec)
    if len(rows) != spec.devices:
        raise TorchCsvError(f"{file}: {len(rows)} rank rows but spec '{spec.name}' has {spec.devices} devices")
    orders: list[list[tuple[str, int]]] = [[] for _ in range(spec.devices)]
    for rank, row in enumerate(rows):
        for a in row:
            if a.stage >= len(smap.stages):
                raise TorchCsvError(f"{a.where}: stage {a.stage} does not exist (spec '{spec.name}' has "
                                    f"{len(smap.stages)} stages: {', '.join(smap.stages)})")
            if smap.ranks[a.stage] != rank:
                raise TorchCsvError(f"{a.where}: stage {a.stage} ({smap.stages[a.stage]}) runs on device "
                                    f"{smap.ranks[a.stage]} in the spec, but this action is on rank {rank}")
            letters = [a.letter]
            if a.letter == "B" and smap.block_for(a.stage, "B") is None:
                letters = ["I", "W"]  # a full backward is I then W when the spec splits it
            for letter in letters:
                block = smap.block_for(a.stage, letter)
                if block is None:
                    raise TorchCsvError(f"{a.where}: spec '{spec.name}' has no {letter} block for stage {a.stage}")
                orders[rank].append((block, a.mb))
    return orders


def schedule_from_csv(spec: Spec, path: str | os.PathLike, *, name: str | None = None) -> Schedule:
    """Read a PyTorch CSV schedule for `spec` and give it start times by compaction.

    Each rank's action order is kept and every block starts as early as its dependencies and the
    previous block on its device allow, so `simulate` and `compare` can judge the result.
    """
    from tessel_dsl.search.compact import compact
    from tessel_dsl.validate import validate

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise TorchCsvError(f"{path}: cannot read: {e.strerror}") from None
    rows = read_torch_csv(text, str(path))
    orders = orders_from_csv(spec, rows, str(path))
    mbs = {mb for row in orders for _, mb in row}
    n = max(mbs) + 1 if mbs else 0
    missing = sorted(set(range(n)) - mbs)
    if missing:
        raise TorchCsvError(f"{path}: micro-batch {missing[0]} never appears (micro-batches go 0..{n - 1})")
    try:
        slots = compact(spec, orders=orders)
        schedule = Schedule(n, slots, name=name or Path(path).stem)
        validate(spec, schedule, check_memory=False)
    except ScheduleError as e:
        raise TorchCsvError(f"{path}: not a valid schedule for spec '{spec.name}': {e}") from None
    return schedule
