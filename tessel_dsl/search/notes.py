"""What the search says about its answer, as data: a `Note` is a kind and its values.

The search's phases return notes (`SearchInfo.notes`, stored as such in plans) and leave the
wording to `SENTENCES`, one entry per kind; `render` writes them, joined by "; ", for the command
line (`tessel search`, `tessel compare`). Times in values are in the spec's time unit.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tessel_dsl.plan import Note

__all__ = ["SENTENCES", "Note", "note", "render", "stopped_by"]


def _plain(v: Any) -> Any:
    # Values are stored as JSON: a tuple would come back a list, so the note is built with lists.
    return [_plain(x) for x in v] if isinstance(v, (tuple, list)) else v


def note(kind: str, **values: Any) -> Note:
    if kind not in SENTENCES:
        raise KeyError(f"no wording for note kind {kind!r}")
    return Note(kind, {k: _plain(v) for k, v in values.items()})


def _cuts_too(v: dict) -> str:
    return "; the whole schedule with memory as holding cuts proves the same" if v.get("cuts_too") else ""


def _g(x: float) -> str:
    return f"{x:g}"


def _seed(v: dict[str, Any]) -> str:
    """The schedule a solve below N_R started from: a baseline, or the N_R schedule cut short."""
    if v["baseline"] is None:
        return f"the schedule for N_R micro-batches without the last {v['dropped']}"
    return f"{v['baseline'].upper()} for N={v['n']} (makespan {v['seed_makespan']})"


def stopped_by(v: dict[str, Any]) -> str:
    """What stopped an unfinished time-optimal solve: the wall clock, the budget or the solver."""
    if v["cause"] == "time limit":
        return f"the time limit ({_g(v['limit'])} s)"
    return f"the solver budget (effort {_g(v['effort'])})" if v["cause"] == "budget" else "the solver"


SENTENCES: dict[str, Callable[[dict[str, Any]], str]] = {
    # A plan written before notes were data keeps its one sentence (`plan._worded_note`).
    "worded": lambda v: v["text"],
    "imported": lambda v: f"imported from {v['file']} (torch CSV); start times by compaction",
    "walk-rejected": lambda v: f"the cyclic model's repetend at P={v['period']} has no valid warmup/cooldown",
    "walk-unsettled": lambda v: (
        ("time limit reached" if v["cause"] == "time limit" else "the solver budget ran out")
        + (f" before periods {v['low']}..{v['high']} were settled" if v["low"] < v["high"]
           else f" before period {v['low']} was settled")),
    "enumerating": lambda v: "enumerating",
    "enumerate-time-limit": lambda v: f"time limit reached while trying period {v['period']}",
    "one-mb-repetend": lambda v: "using a one-micro-batch repetend",
    "list-repetend": lambda v: (
        f"using the repetend list scheduling builds at period {v['period']} (N_R={v['nr']}), "
        + ("the period's lower bound" if v.get("floor") else
           "the shortest valid one a bisection met; no solve settled a shorter period")),
    "baseline-beats": lambda v: (
        f"{v['baseline'].upper()} for N={v['n']} (makespan {v['makespan']}) beats the extended repetend "
        f"({v['extended']}): its block order is used for this N; the repetend is kept for other N"),
    "ends-resolved": lambda v: (
        f"re-solving the warmup and cooldown regions for N={v['n']} shortened the makespan "
        f"from {v['before']} to {v['after']}"),
    "polished": lambda v: (
        f"re-solving the whole schedule for N={v['n']} on effort {_g(v['effort'])} shortened the makespan "
        f"from {v['before']} to {v['after']}"),
    "held-cuts": lambda v: (
        f"re-solving the whole schedule for N={v['n']} with memory as holding cuts shortened the makespan "
        f"from {v['before']} to {v['after']}" + (", proven shortest" if v["optimal"] else "")),
    "windows": lambda v: (
        f"re-solving the schedule for N={v['n']} a window of time at a time shortened the makespan "
        f"from {v['before']} to {v['after']}"),
    "held-cuts-proof": lambda v: (
        f"the whole schedule for N={v['n']} with memory as holding cuts proved that no schedule is shorter"),
    "polished-lean": lambda v: (
        f"a schedule of the same length ({v['after']}) re-solved within the peak memory of {v['baseline'].upper()} "
        f"for N={v['n']} is used: it holds less"),
    "copies-beat": lambda v: (
        f"a repetend holding each block {v['k']} times (period {v['period']} for {v['k']} micro-batches, "
        f"{_g(v['period'] / v['k'])} each) beats the one-copy repetend (period {v['one_copy_period']}): "
        f"makespan {v['makespan']} against {v['one_copy_makespan']}; such a plan does not re-extend "
        "to another N (search again)"),
    "copies-cut": lambda v: (
        f"two micro-batches repeat every {v['period']} ({_g(v['period'] / 2)} each, against "
        f"{v['one_copy_period'] or 'none'} for one): that periodic schedule cut to N={v['n']} takes {v['makespan']} "
        f"against {v['before']}, and is this N's plan; the plan keeps the one-copy repetend for other N"),
    "copies-unused": lambda v: (
        f"a repetend holding each block {v['k']} times has period {v['period']} "
        f"({_g(v['period'] / v['k'])} per micro-batch) but its makespan for N={v['n']} is {v['makespan']}, "
        f"not below {v['best_makespan']}"),
    "copies-unsettled": lambda v: (
        f"the solver budget ran out before every period of {v['k']} copies below {v['period']} was settled"),
    "copies-with-effort": lambda v: (
        f"repetends holding each block up to {v['k']} times on this chain come from an exact model that "
        "`tessel search --effort 1` runs (tens of seconds of CPU at 8 devices); the default runs only a "
        "short walk of its periods and cuts what it finds to N"),
    "to-proven": lambda v: "optimum proven",
    "to-cut": lambda v: f"{stopped_by(v)} ran out: best found, not proven optimal",
    "to-hint": lambda v: (
        f"{stopped_by(v)} ran out before the solver returned a schedule: the hint is the best known, not proven optimal"),
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
    "time-limit-skipped": lambda v: (
        f"the time limit ({_g(v['limit'])} s) ran out, so the search left out " + ", ".join(v["steps"])),
    "baseline-at-bound": lambda v: (
        f"{v['baseline'].upper()} for N={v['n']} reaches the makespan lower bound ({v['makespan']}), so nothing "
        "is shorter and the search stopped there"
        + ("; its steady state is kept as the repetend for other N" if v["repetend"]
           else "; the time limit left none to look for a steady state, so the plan does not re-extend to another "
           "N (search again)" if v.get("cut")
           else "; it has no fixed-period steady state, so the plan does not re-extend to another N (search again)")),
    "bound-one-device": lambda v: (
        f"the makespan lower bound {v['bound']} is device {v['device']}'s alone: its blocks for every "
        f"micro-batch within its memory, the other devices' only as delays (the other bounds give {v['analytic']}"
        f"{_cuts_too(v)})"),
    "bound-devices": lambda v: (
        f"the makespan lower bound {v['bound']} is devices {', '.join(map(str, v['devices']))} together: "
        f"their blocks for every micro-batch within their memory, the other devices' only as delays "
        f"(the other bounds give {v['analytic']}{_cuts_too(v)})"),
    "bound-held-cuts": lambda v: (
        f"the makespan lower bound {v['bound']} is proven on every block instance with memory as holding cuts "
        f"(the other bounds give {v['analytic']})"),
    "baseline-unbeaten": lambda v: (
        f"{v['baseline'].upper()} for N={v['n']} (makespan {v['makespan']}) is used: an extended repetend holding "
        f"each block once, starting a micro-batch every period, would need a period below {v['cap']} to beat it, "
        f"and none is below {v['floor']}"
        + ("; its steady state is kept as the repetend for other N" if v["repetend"]
           else "; the plan does not re-extend to another N (search again)")
        + (f"; {v['proof']}" if v.get("proof") else "")),
}


def _sentence(n: Note) -> str:
    said = SENTENCES.get(n.kind)
    if said is not None:
        try:
            return said(n.values)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            pass  # values this version does not expect (a plan from another version): shown as data
    values = ", ".join(f"{k}={v}" for k, v in n.values.items())
    return f"{n.kind} ({values})" if values else n.kind


def render(notes: Iterable[Note]) -> str:
    """The notes as one line of English, in order, joined by "; "."""
    return "; ".join(_sentence(n) for n in notes)


def budget_verdict(cuts: list[str], at_bound: bool, proofs: list[str]) -> Note | None:
    """What the budget cuts (if any) mean for the schedule: unproven, or optimal all the same
    because it reaches the makespan bound or a solve of the whole schedule proved it shortest."""
    if cuts and not at_bound and not proofs:
        return note("cut-unproven", cuts=tuple(cuts))
    if cuts and at_bound:
        return note("cut-at-bound", cuts=tuple(cuts))
    if cuts:
        return note("cut-but-proved", proof=proofs[0], cuts=tuple(cuts))
    return None
