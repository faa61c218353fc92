"""The plan file: the only thing the simulator and the executor read.

A plan is self-contained: the instantiated spec, the schedule (with its repetend, so it can be
re-extended), the lowered per-device programs and how the search went. Only the standard library
and the IR are imported here, so a GPU machine with nothing but torch can load plans.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tessel_dsl.errors import PlanError
from tessel_dsl.fileio import write_text_atomic
from tessel_dsl.ir import Spec
from tessel_dsl.program import Program
from tessel_dsl.schedule import Schedule
from tessel_dsl.serialize import from_json, to_json

SCHEMA = "tessel-plan"
VERSION = 1


@dataclass(frozen=True)
class SearchInfo:
    """How the schedule was found; `proven` is False when a time limit cut the search short."""

    solver: str = "none"
    method: str = "none"
    proven: bool = False
    seconds: float = 0.0
    lower_bound: int = 0
    period: int = 0
    nr: int = 0
    candidates_tried: int = 0
    candidates_pruned: int = 0
    note: str = ""


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
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise PlanError(f"{origin}: not a Tessel plan (missing \"schema\": \"{SCHEMA}\")")
    if data.get("version") != VERSION:
        raise PlanError(f"{origin}: plan version {data.get('version')!r} is not supported (this tool reads version {VERSION})")
    body = {k: v for k, v in data.items() if k not in ("schema", "version")}
    try:
        return from_json(Plan, body, "plan")
    except PlanError as e:
        raise PlanError(f"{origin}: {e}") from None


def write_json_atomic(path: str | os.PathLike, data: object) -> None:
    """Write JSON so that a crash or error never leaves a partial file behind."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def save_plan(plan: Plan, path: str | os.PathLike) -> None:
    """Write `plan` as versioned JSON; the file is replaced atomically, never left partial."""
    write_json_atomic(path, plan_to_json(plan))


def load_plan(path: str | os.PathLike) -> Plan:
    """Read a plan file; a missing, malformed or wrong-version file raises PlanError."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise PlanError(f"{path}: cannot read plan: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    return plan_from_json(data, str(path))


def make_plan(spec: Spec, schedule: Schedule, info: SearchInfo | None = None, *, blocking: bool = False) -> Plan:
    """Validate `schedule`, lower it to per-device programs and bundle everything as a Plan."""
    from tessel_dsl.lower import lower
    from tessel_dsl.validate import validate

    validate(spec, schedule)
    programs = lower(spec, schedule, blocking=blocking)
    return Plan(spec, schedule, programs, info or SearchInfo(), schedule.peak_memory(spec))
