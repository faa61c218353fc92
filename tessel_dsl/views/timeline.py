"""Timelines in the style of the paper's figures: one row per device, blocks coloured by kind and
labelled with their micro-batch, repetend boundaries marked. Terminal (rich Text) and SVG.

A `Timeline` is plain data, so the same renderers draw a planned schedule, a simulated run and a
measured trace. Wide timelines wrap into bands; very long ones are scaled (one character for
several time units, coloured by what dominates it) so that N = 1024 still fits a screen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.units import show_time

Bar = tuple[float, float, str, int]  # (start, end, block, micro-batch)

# Two shades per kind so that neighbouring micro-batches stay distinguishable.
_STYLE = {
    "forward": ("white on #3b6fb6", "white on #5a8fd6"),
    "backward": ("white on #2e8b57", "white on #4caf78"),
    "input_grad": ("black on #7fd1d1", "black on #a6e3e3"),
    "weight_grad": ("white on #8e5aa8", "white on #a97cc0"),
    "other": ("black on #d8b24a", "black on #e8c970"),
    "multi": ("white on #b0563c", "white on #c8775f"),
}
_SVG_FILL = {
    "forward": ("#3b6fb6", "#5a8fd6"), "backward": ("#2e8b57", "#4caf78"),
    "input_grad": ("#7fd1d1", "#a6e3e3"), "weight_grad": ("#8e5aa8", "#a97cc0"),
    "other": ("#d8b24a", "#e8c970"), "multi": ("#b0563c", "#c8775f"),
}


@dataclass(frozen=True)
class Timeline:
    """Bars per device plus what colours them and where repetends begin."""

    devices: int
    rows: tuple[tuple[Bar, ...], ...]
    kinds: dict[str, str] = field(default_factory=dict)  # block -> style key
    markers: tuple[float, ...] = ()
    title: str = ""
    time_label: str = "unit"
    letters: dict[str, str] = field(default_factory=dict)  # block -> label letter
    time_seconds: float = 1.0  # seconds per time unit, with `time_label` (the spec's `Units`)


    @property
    def span(self) -> float:
        return max((b[1] for row in self.rows for b in row), default=0.0)


def style_keys(spec: Spec) -> dict[str, str]:
    """Colour class per block: multi-device blocks stand out, others follow their kind."""
    return {b.name: "multi" if b.is_multi_device else b.kind.value for b in spec.blocks}


def block_letters(spec: Spec) -> dict[str, str]:
    """Label letter per block: its kind's letter, lower case when it spans several devices."""
    return {b.name: b.kind.letter.lower() if b.is_multi_device else b.kind.letter for b in spec.blocks}


def repetend_markers(schedule: Schedule | None, span: float) -> tuple[float, ...]:
    """Start times of the repetend instances (empty when the schedule has no repetend)."""
    if schedule is None or schedule.repetend is None or schedule.repetend_start is None:
        return ()
    rep = schedule.repetend
    if rep.period <= 0:
        return ()
    count = max(0, schedule.microbatches - rep.nr + 1)
    out = []
    for k in range(count + 1):
        t = schedule.repetend_start + k * rep.period
        if t > span:
            break
        out.append(float(t))
    return tuple(out)


def from_schedule(spec: Spec, schedule: Schedule, title: str = "") -> Timeline:
    """The planned timeline of a schedule."""
    rows: list[list[Bar]] = [[] for _ in range(spec.devices)]
    for s in sorted(schedule.slots):
        b = spec.block(s.block)
        for d in b.devices:
            rows[d].append((float(s.start), float(s.start + b.time), s.block, s.mb))
    span = float(schedule.makespan(spec))
    return Timeline(spec.devices, tuple(map(tuple, rows)), style_keys(spec),
                    repetend_markers(schedule, span), title or schedule.name, spec.units.time_label,
                    block_letters(spec), spec.units.time_seconds)


def from_rows(spec: Spec, rows, schedule: Schedule | None = None, title: str = "") -> Timeline:
    """A timeline from measured or simulated bars per device (e.g. `Report.timeline`)."""
    rows = tuple(tuple(sorted(r)) for r in rows)
    span = max((b[1] for r in rows for b in r), default=0.0)
    return Timeline(spec.devices, rows, style_keys(spec), repetend_markers(schedule, span), title,
                    spec.units.time_label, block_letters(spec), spec.units.time_seconds)


# -- terminal ---------------------------------------------------------------------------------


def render(tl: Timeline, width: int = 100, max_bands: int = 6):
    """A rich Text drawing `tl` within `width` columns (wrapped, or scaled when too long).

    Each block starts with its kind letter and micro-batch (``F3``, ``B12``; lower case for a
    multi-device block) and continues with dots, so the picture reads even without colour.
    """
    from rich.text import Text

    out = Text()
    if tl.title:
        out.append(tl.title + "\n", style="bold")
    span = tl.span
    if span <= 0:
        out.append("(empty timeline)\n")
        return out
    prefix = len(f"dev{tl.devices - 1} ")
    avail = max(10, width - prefix - 1)
    mbs = [b[3] for row in tl.rows for b in row]
    cw = 1 + len(str(max(mbs, default=0)))  # characters per time unit: letter + micro-batch
    if _all_integral(tl) and math.ceil(span / max(1, avail // cw)) <= max_bands:
        _render_cells(out, tl, avail, cw, prefix)
        out.append(_legend(tl) + "\n", style="dim")
    else:
        _render_scaled(out, tl, avail, prefix)
        out.append(_legend(tl, scaled=True) + "\n", style="dim")
    return out


def _all_integral(tl: Timeline) -> bool:
    return all(float(b[0]).is_integer() and float(b[1]).is_integer() for row in tl.rows for b in row)


def _letter(kind: str) -> str:
    return {"forward": "F", "backward": "B", "input_grad": "I", "weight_grad": "W"}.get(kind, "O")


def _render_cells(out, tl: Timeline, avail: int, cw: int, prefix: int) -> None:
    span = int(tl.span)
    chunk = max(1, avail // cw)
    marks = {int(m) for m in tl.markers if float(m).is_integer()}
    digits = cw - 1
    for lo in range(0, span, chunk):
        hi = min(span, lo + chunk)
        ruler = [" "] * ((hi - lo) * cw)
        for t in range(lo, hi):
            at = (t - lo) * cw
            if t in marks:
                ruler[at] = "|"
            elif t % 10 == 0 and at + len(str(t)) <= len(ruler) and "|" not in ruler[at:at + len(str(t))]:
                ruler[at:at + len(str(t))] = list(str(t))
        out.append(" " * prefix + "".join(ruler) + "\n", style="dim")
        for d, row in enumerate(tl.rows):
            out.append(f"dev{d}".ljust(prefix))
            cells: list[tuple[str, str]] = [(" " * cw, "") for _ in range(hi - lo)]
            for start, end, block, mb in row:
                s, e = int(start), int(end)
                if e <= lo or s >= hi:
                    continue
                kind = tl.kinds.get(block, "other")
                style = _STYLE.get(kind, _STYLE["other"])[mb % 2]
                letter = tl.letters.get(block) or _letter(kind)
                for t in range(max(s, lo), min(e, hi)):
                    text = letter + str(mb).rjust(digits) if t == s else "\u00b7" * cw
                    cells[t - lo] = (text, style)
            for text, style in cells:
                out.append(text, style=style or "dim")
            out.append("\n")


_SHADES = " \u2591\u2592\u2593\u2588"  # idle .. fully busy


def _render_scaled(out, tl: Timeline, avail: int, prefix: int) -> None:
    span = tl.span
    per = span / avail  # time units per character
    # `per` time units, shown as a time (`435 ms`), or as units when the spec gave no resolution
    char = f"{per:.3g} units" if tl.time_label == "unit" else show_time(float(f"{per:.3g}"), tl.time_seconds,
                                                                       tl.time_label)
    out.append(" " * prefix + f"(scaled: 1 char = {char}; shade = busy share, "
               "colour = dominant kind)\n", style="dim")
    ruler = [" "] * avail
    for m in tl.markers:
        ruler[min(avail - 1, int(m / per))] = "|"
    out.append(" " * prefix + "".join(ruler) + "\n", style="dim")
    for d, row in enumerate(tl.rows):
        out.append(f"dev{d}".ljust(prefix))
        cover: list[dict[str, float]] = [{} for _ in range(avail)]
        for start, end, block, _mb in row:
            key = tl.kinds.get(block, "other")
            i0, i1 = int(start / per), min(avail - 1, int(max(start, end - 1e-9) / per))
            for i in range(i0, i1 + 1):
                ov = min(end, (i + 1) * per) - max(start, i * per)
                if ov > 0:
                    cover[i][key] = cover[i].get(key, 0.0) + ov
        for c in cover:
            share = min(1.0, sum(c.values()) / per)
            glyph = _SHADES[min(4, int(round(share * 4)))]
            if not c or glyph == " ":
                out.append(" ")
            else:
                fg = _SVG_FILL[max(c, key=c.get)][0]
                out.append(glyph, style=fg)
        out.append("\n")


def _legend(tl: Timeline, scaled: bool = False) -> str:
    used = sorted({tl.kinds.get(b[2], "other") for row in tl.rows for b in row})
    names = {"multi": "f/b multi-device", "input_grad": "I input-grad", "weight_grad": "W weight-grad",
             "forward": "F forward", "backward": "B backward", "other": "O other"}
    text = "legend: " + ", ".join(names.get(k, k) for k in used)
    if not scaled:
        text += "; number = micro-batch"
    if tl.markers:
        text += "; | = repetend boundary"
    return text


# -- SVG --------------------------------------------------------------------------------------


def to_svg(tl: Timeline, px_per_unit: float | None = None) -> str:
    """A standalone SVG picture of the timeline."""
    span = tl.span or 1.0
    left, top, rowh, gap = 48, 28 if tl.title else 10, 26, 4
    scale = px_per_unit or max(2.0, min(40.0, 1600.0 / span))
    w = int(left + span * scale + 12)
    h = int(top + tl.devices * (rowh + gap) + 24)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'font-family="monospace" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
    ]
    if tl.title:
        parts.append(f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(tl.title)}</text>')
    for d, row in enumerate(tl.rows):
        y = top + d * (rowh + gap)
        parts.append(f'<text x="4" y="{y + rowh * 0.68:.1f}">dev{d}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{span * scale:.1f}" height="{rowh}" fill="#f2f2f2"/>')
        for start, end, block, mb in row:
            fill = _SVG_FILL.get(tl.kinds.get(block, "other"), _SVG_FILL["other"])[mb % 2]
            x, bw = left + start * scale, max(0.5, (end - start) * scale)
            parts.append(f'<rect x="{x:.2f}" y="{y}" width="{bw:.2f}" height="{rowh}" fill="{fill}" '
                         f'stroke="white" stroke-width="0.5"><title>{escape(block)}:{mb} '
                         f'[{start:g}, {end:g})</title></rect>')
            if bw >= 7 * len(str(mb)):
                parts.append(f'<text x="{x + bw / 2:.2f}" y="{y + rowh * 0.68:.1f}" fill="white" '
                             f'text-anchor="middle">{mb}</text>')
    bottom = top + tl.devices * (rowh + gap)
    for m in tl.markers:
        x = left + m * scale
        parts.append(f'<line x1="{x:.2f}" y1="{top - 4}" x2="{x:.2f}" y2="{bottom}" stroke="#d22" '
                     'stroke-dasharray="4,3" stroke-width="1.2"/>')
    step = _tick_step(span)
    t = 0.0
    while t <= span + 1e-9:
        x = left + t * scale
        parts.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" fill="#555">{t:g}</text>')
        t += step
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _tick_step(span: float) -> float:
    raw = span / 10
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def write_svg(tl: Timeline, path) -> None:
    """Write the SVG atomically (no partial file on failure)."""
    from tessel_dsl.fileio import write_text_atomic

    write_text_atomic(path, to_svg(tl))
