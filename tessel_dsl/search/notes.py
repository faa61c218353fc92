"""What the search says about its answer, as data: a `Note` is a kind and its values.

The driver's phases return notes and leave the wording to `SENTENCES`, one entry per kind;
`render` writes them, joined by "; ", as the `note` a plan stores and `tessel search` prints.
Modules that still word their own remarks (the period walk, finishing, k-copy repetends) pass
them on as kind ``text``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Note:
    kind: str
    values: dict[str, Any] = field(default_factory=dict)


def note(kind: str, **values: Any) -> Note:
    return Note(kind, values)


def _seed(v: dict[str, Any]) -> str:
    """The schedule a solve below N_R started from: a baseline, or the N_R schedule cut short."""
    if v["baseline"] is None:
        return f"the schedule for N_R micro-batches without the last {v['dropped']}"
    return f"{v['baseline'].upper()} for N={v['n']} (makespan {v['seed_makespan']})"


SENTENCES: dict[str, Callable[[dict[str, Any]], str]] = {
    "text": lambda v: v["text"],
    "constructive": lambda v: (
        "built without a solver (modulo list scheduling): the period reaches its lower bound "
        "and the makespan reaches its bound, so both are optimal"),
    "memory-grows": lambda v: (
        f"a micro-batch leaves {v['memory']} memory unit(s) on device {v['device']}, so no repetend can "
        f"repeat; all {v['n']} micro-batches "
        + ("run one after another: the direct solve found no schedule within its budget" if v["serial"]
           else "were solved directly")),
    "direct-cut": lambda v: "a budget or time limit cut the direct solve: the makespan is not proven optimal",
    "below-nr-seed": lambda v: (
        f"N={v['n']} is below the repetend's N_R={v['nr']} and "
        + ("too large to solve directly" if v["too_large"] else "its direct solve found nothing shorter within budget")
        + f": {_seed(v)} is used ({'not proven optimal' if v['truncated'] else 'at the makespan bound'}; "
        "the repetend is kept for larger N)"),
    "below-nr-solved": lambda v: (
        f"N={v['n']} is below the repetend's N_R={v['nr']}: solved the {v['n']} micro-batch(es) directly"
        + ("" if v["optimal"] else f", starting from {_seed(v)}") + " (the repetend is kept for larger N)"),
    "cut-unproven": lambda v: (
        "not proven: a budget or time limit cut " + ", ".join(v["cuts"]) + " (the best found is used)"),
    "cut-at-bound": lambda v: (
        "the makespan equals its lower bound, so it is optimal for this N although a budget cut "
        + ", ".join(v["cuts"])),
    "cut-but-proved": lambda v: f"{v['proof']}, so it is optimal for this N although a budget cut " + ", ".join(v["cuts"]),
    "time-limit": lambda v: "a solver call hit the time limit",
}


def render(notes: Iterable[Note]) -> str:
    return "; ".join(SENTENCES[n.kind](n.values) for n in notes)
