"""The plan file: the only thing the simulator and the executor read.

A plan is self-contained: the instantiated spec, the schedule (with its repetend, so it can be
re-extended), the lowered per-device programs and how the search went. Only the standard library
and the IR are imported here, so a GPU machine with nothing but torch can load plans.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from tessel_dsl.errors import PlanError
from tessel_dsl.fileio import write_text_atomic
from tessel_dsl.ir import Spec
from tessel_dsl.limits import MAX_PLAN_BYTES
from tessel_dsl.program import Program
from tessel_dsl.schedule import Schedule
from tessel_dsl.serialize import from_json, to_json

__all__ = ["Note", "Plan", "SearchInfo", "load_plan", "make_plan", "plan_from_json", "plan_to_json", "save_plan"]

SCHEMA = "tessel-plan"
VERSION = 1


@dataclass(frozen=True)
class Note:
    """One thing the search says about its answer, as data: a kind and its values (JSON values:
    numbers, strings, booleans, lists). `tessel_dsl.search.notes.SENTENCES` words each kind; the
    plan keeps the data, so a reader can act on a kind without parsing English."""

    kind: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchInfo:
    """How the schedule was found and what of it is proven.

    `period_proven`: `period` (per micro-batch: `period / repetend_copies`) is the smallest of
    any repetend that holds each block at most `copies` times (over every N_R the search allows). `proven`: that, and no budget or time limit
    cut any solve of the search short (`notes` say which did). `makespan_bound` is a lower bound
    on the makespan for this N (`search/bounds.py`, time and memory); the makespan is optimal when it
    reaches it.
    """

    solver: str = "none"
    method: str = "none"
    proven: bool = False
    seconds: float = 0.0
    lower_bound: int = 0
    period: int = 0
    nr: int = 0
    candidates_tried: int = 0
    candidates_pruned: int = 0
    notes: tuple[Note, ...] = ()
    period_proven: bool = False
    copies: int = 1
    makespan_bound: int = 0
    # The chosen repetend holds each block this many times; `period` then covers that many
    # micro-batches (such a schedule keeps no repetend for re-extension).
    repetend_copies: int = 1
    # A lower bound on the period per micro-batch of any repeating schedule from memory (how long
    # a micro-batch holds memory on a device over how many the device holds; `search/membound.py`),
    # next to `lower_bound`, the busiest device's work. 0 when no device's memory binds.
    memory_bound: float = 0.0


@dataclass(frozen=True)
class Plan:
    spec: Spec
    schedule: Schedule
    programs: tuple[Program, ...] = ()
    search: SearchInfo = field(default_factory=SearchInfo)
    peak_memory: tuple[int, ...] = ()


def plan_to_json(plan: Plan) -> dict:
    return {"schema": SCHEMA, "version": VERSION, **to_json(plan)}


def plan_from_json(data: object, origin: str = "<plan>") -> Plan:
    """Decode and validate a plan (`tessel_dsl.plan_check`): a PlanError names the first problem."""
    from tessel_dsl.plan_check import validate_plan

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise PlanError(f"{origin}: not a Tessel plan (missing \"schema\": \"{SCHEMA}\")")
    if data.get("version") != VERSION:
        raise PlanError(f"{origin}: plan version {data.get('version')!r} is not supported (this tool reads version {VERSION})")
    body = {k: v for k, v in data.items() if k not in ("schema", "version")}
    body = _worded_note(body)
    try:
        plan = from_json(Plan, body, "plan")
    except PlanError as e:
        raise PlanError(f"{origin}: {e}") from None
    return validate_plan(plan, origin)


def _worded_note(body: dict) -> dict:
    """A plan written before notes were data stores one sentence, ``search.note``: it is kept as
    the single note of kind ``worded`` (its text as stored)."""
    info = body.get("search")
    if not isinstance(info, dict) or not isinstance(info.get("note"), str) or "notes" in info:
        return body
    text = info["note"]
    notes = [{"kind": "worded", "values": {"text": text}}] if text else []
    info = {k: v for k, v in info.items() if k != "note"} | {"notes": notes}
    return body | {"search": info}


def write_json_atomic(path: str | os.PathLike, data: object) -> None:
    """Write JSON so that a crash or error never leaves a partial file behind."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def save_plan(plan: Plan, path: str | os.PathLike) -> None:
    """Write `plan` as versioned JSON; the file is replaced atomically, never left partial."""
    write_json_atomic(path, plan_to_json(plan))


def load_plan(path: str | os.PathLike) -> Plan:
    """Read and validate a plan file; a missing, oversized, malformed, wrong-version or inconsistent
    file raises PlanError naming the problem (see `tessel_dsl.plan_check`)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_PLAN_BYTES + 1)
    except (OSError, ValueError) as e:
        raise PlanError(f"{path}: cannot read plan: {getattr(e, 'strerror', None) or e}") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanError(f"{path}: a plan file is at most {MAX_PLAN_BYTES >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(f"{path}: not a plan: byte {e.start} is not UTF-8 text") from None
    return plan_from_json(parse_plan_json(text, str(path)), str(path))


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a plan may hold")


def parse_plan_json(text: str, origin: str) -> object:
    """JSON text -> data, refusing NaN/Infinity, integers too long to convert and deep nesting."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise PlanError(f"{origin}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise PlanError(f"{origin}: invalid plan: JSON nested too deeply") from None
    except ValueError as e:  # NaN/Infinity, or an integer beyond Python's digit limit
        raise PlanError(f"{origin}: invalid plan: {e}") from None


def make_plan(spec: Spec, schedule: Schedule, info: SearchInfo | None = None, *, blocking: bool = False) -> Plan:
    """Validate `schedule`, lower it to per-device programs and bundle everything as a Plan."""
    from tessel_dsl.lower import lower
    from tessel_dsl.validate import validate

    validate(spec, schedule)
    programs = lower(spec, schedule, blocking=blocking)
    return Plan(spec, schedule, programs, info or SearchInfo(), schedule.peak_memory(spec))
