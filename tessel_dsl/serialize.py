"""JSON codec for the IR's frozen dataclasses, driven by their type hints.

One generic encoder/decoder instead of a hand-written pair per class: adding a field to the IR
needs no codec change. Decoding checks every value against its declared type and reports the path
of the first mismatch (``spec.blocks[3].time: expected int, got str``).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from functools import cache
from typing import Any

from tessel_dsl.errors import Location, PlanError


def to_json(obj: Any) -> Any:
    """Plain JSON-able data for an IR object (fields excluded from equality are dropped)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.compare}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (tuple, list)):
        return [to_json(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    return obj


def from_json(cls: Any, data: Any, path: str = "$") -> Any:
    """Rebuild an object of type `cls` from `to_json` output, or raise PlanError naming the path."""
    origin = typing.get_origin(cls)
    if cls is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(cls)
        if data is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return from_json(a, data, path)
            except PlanError as e:
                errors.append(str(e))
        raise PlanError(errors[0] if len(errors) == 1 else f"{path}: no variant matched ({'; '.join(errors)})")
    if origin is tuple:
        args = typing.get_args(cls)
        if not isinstance(data, list):
            raise PlanError(f"{path}: expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], x, f"{path}[{i}]") for i, x in enumerate(data))
        if len(args) != len(data):
            raise PlanError(f"{path}: expected {len(args)} items, got {len(data)}")
        return tuple(from_json(a, x, f"{path}[{i}]") for i, (a, x) in enumerate(zip(args, data)))
    if origin is dict:
        kt, vt = typing.get_args(cls)
        if not isinstance(data, dict):
            raise PlanError(f"{path}: expected an object, got {type(data).__name__}")
        return {from_json(kt, k, path): from_json(vt, v, f"{path}.{k}") for k, v in data.items()}
    if isinstance(cls, type) and issubclass(cls, Enum):
        try:
            return cls(data)
        except ValueError:
            raise PlanError(f"{path}: {data!r} is not one of {[m.value for m in cls]}") from None
    if dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):
            raise PlanError(f"{path}: expected an object for {cls.__name__}, got {type(data).__name__}")
        hints = _hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if not f.compare or not f.init:
                continue
            if f.name in data:
                kwargs[f.name] = from_json(hints[f.name], data[f.name], f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise PlanError(f"{path}: missing field {f.name!r} of {cls.__name__}")
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise PlanError(f"{path}: unknown field(s) {sorted(unknown)} for {cls.__name__}")
        return cls(**kwargs)
    if cls is float:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data)
        raise PlanError(f"{path}: expected a number, got {type(data).__name__}")
    if cls in (int, str, bool):
        if type(data) is not cls:
            raise PlanError(f"{path}: expected {cls.__name__}, got {type(data).__name__}")
        return data
    raise PlanError(f"{path}: cannot decode type {cls!r}")


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(__import__(cls.__module__, fromlist=["*"])) | {"Location": Location})
