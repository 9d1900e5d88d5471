"""Small SVG charts for the benchmarks page, written here so that they depend on nothing but the
numbers: fixed sizes, fixed colours and fixed number formats, so that the same numbers give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from xml.sax.saxutils import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
W, H, L, R, T, B = 680, 320, 70, 170, 34, 46


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    """Round ticks that take in ``lo`` and ``hi``: the first is at or below ``lo``, the last at or above ``hi``."""
    if log:
        marks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
                 for m in (1, 2, 5)]
        first = max(i for i, v in enumerate(marks) if v <= lo * 1.0000001)
        last = min(i for i, v in enumerate(marks) if v >= hi * 0.9999999)
        return [float(f"{v:.6g}") for v in marks[first:last + 1]]
    raw = (hi - lo) / 5 or 1.0
    step = min((m * 10.0 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
    start, stop = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [float(f"{i * step:.6g}") for i in range(start, stop + 1)]


def _scale(lo: float, hi: float, a: float, b: float, log: bool) -> Callable[[float], float]:
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    return lambda v: a + ((math.log10(v) if log else v) - lo) / ((hi - lo) or 1.0) * (b - a)


def _frame(title: str, x_label: str, y_label: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
            'font-family="sans-serif" font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{L}" y="20" font-size="13" font-weight="bold">{escape(title)}</text>',
            f'<text x="{(L + W - R) / 2:.1f}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>',
            f'<text x="14" y="{(T + H - B) / 2:.1f}" text-anchor="middle" '
            f'transform="rotate(-90 14 {(T + H - B) / 2:.1f})">{escape(y_label)}</text>']


def _axis(out: list[str], ticks: Sequence[float], at: Callable[[float], float], vertical: bool) -> None:
    for v in ticks:
        p = at(v)
        label = f"{v:g}"
        if vertical:
            out.append(f'<line x1="{L}" x2="{W - R}" y1="{p:.1f}" y2="{p:.1f}" stroke="#ddd"/>'
                       f'<text x="{L - 6}" y="{p + 4:.1f}" text-anchor="end">{label}</text>')
        else:
            out.append(f'<line x1="{p:.1f}" x2="{p:.1f}" y1="{T}" y2="{H - B}" stroke="#ddd"/>'
                       f'<text x="{p:.1f}" y="{H - B + 14}" text-anchor="middle">{label}</text>')


def _legend(out: list[str], labels: Sequence[str]) -> None:
    for i, label in enumerate(labels):
        y = T + 8 + i * 16
        out.append(f'<rect x="{W - R + 12}" y="{y - 8}" width="10" height="10" fill="{COLOURS[i % len(COLOURS)]}"/>'
                   f'<text x="{W - R + 28}" y="{y + 1}">{escape(label)}</text>')


def lines_svg(title: str, x_label: str, y_label: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
              log_y: bool = False, limit: tuple[float, str] | None = None) -> str:
    """Lines (with points) of y over x, one per series, and a horizontal limit if given."""
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts] + ([limit[0]] if limit else [])
    y_ticks = _ticks(max(min(ys), 0.1), max(ys), True) if log_y else _ticks(min(0.0, min(ys)), max(ys) or 1.0, False)
    x_ticks = sorted(set(xs)) if len(set(xs)) <= 12 else _ticks(min(xs), max(xs), False)
    y_lo = y_ticks[0]
    fx, fy = _scale(x_ticks[0], x_ticks[-1], L, W - R, False), _scale(y_lo, y_ticks[-1], H - B, T, log_y)
    out = _frame(title, x_label, y_label)
    _axis(out, y_ticks, fy, True)
    _axis(out, x_ticks, fx, False)
    if limit:
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{fy(limit[0]):.1f}" y2="{fy(limit[0]):.1f}" stroke="black" '
                   f'stroke-dasharray="5 4"/><text x="{W - R - 4}" y="{fy(limit[0]) - 5:.1f}" '
                   f'text-anchor="end">{escape(limit[1])}</text>')
    for i, (_, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{fx(x):.1f},{fy(max(y, y_lo)):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        if len(pts) <= 40:
            out.extend(f'<circle cx="{fx(x):.1f}" cy="{fy(max(y, y_lo)):.1f}" r="3" fill="{colour}"/>' for x, y in pts)
    _legend(out, [label for label, _ in series])
    return "\n".join([*out, "</svg>"]) + "\n"


def ranges_svg(title: str, x_label: str, rows: Sequence[tuple[str, float, float]]) -> str:
    """One horizontal bar per row from its p50 (a dot) to its p99 (a tick), on a log scale."""
    ticks = _ticks(min(r[1] for r in rows), max(r[2] for r in rows), True)
    fx = _scale(ticks[0], ticks[-1], 250, W - 30, True)
    height = T + 26 * len(rows) + B
    out = _frame(title, x_label, "")
    out[0] = out[0].replace(f'viewBox="0 0 {W} {H}"', f'viewBox="0 0 {W} {height}"').replace(
        f'height="{H}"', f'height="{height}"')
    out[1], out[3] = f'<rect width="{W}" height="{height}" fill="white"/>', (
        f'<text x="{(250 + W - 30) / 2:.1f}" y="{height - 8}" text-anchor="middle">{escape(x_label)}</text>')
    for v in ticks:
        out.append(f'<line x1="{fx(v):.1f}" x2="{fx(v):.1f}" y1="{T}" y2="{height - B}" stroke="#ddd"/>'
                   f'<text x="{fx(v):.1f}" y="{height - B + 14}" text-anchor="middle">{v:g}</text>')
    for i, (label, p50, p99) in enumerate(rows):
        y = T + 13 + 26 * i
        out.append(f'<text x="244" y="{y + 4}" text-anchor="end">{escape(label)}</text>'
                   f'<line x1="{fx(p50):.1f}" x2="{fx(p99):.1f}" y1="{y}" y2="{y}" stroke="{COLOURS[0]}" stroke-width="6"/>'
                   f'<circle cx="{fx(p50):.1f}" cy="{y}" r="5" fill="{COLOURS[1]}"/>'
                   f'<line x1="{fx(p99):.1f}" x2="{fx(p99):.1f}" y1="{y - 8}" y2="{y + 8}" stroke="black" stroke-width="2"/>')
    return "\n".join([*out, "</svg>"]) + "\n"


def bars_svg(title: str, y_label: str, groups: Sequence[str], series: Sequence[tuple[str, Sequence[float]]]) -> str:
    """Grouped bars: one group per category, one bar per series."""
    ticks = _ticks(0.0, max(v for _, values in series for v in values), False)
    fy = _scale(0.0, ticks[-1], H - B, T, False)
    out = _frame(title, "", y_label)
    _axis(out, ticks, fy, True)
    slot = (W - R - L) / len(groups)
    bar = slot * 0.8 / len(series)
    for g, group in enumerate(groups):
        out.append(f'<text x="{L + slot * (g + 0.5):.1f}" y="{H - B + 14}" text-anchor="middle">{escape(group)}</text>')
        for s, (_, values) in enumerate(series):
            x = L + slot * g + slot * 0.1 + bar * s
            out.append(f'<rect x="{x:.1f}" y="{fy(values[g]):.1f}" width="{bar:.1f}" '
                       f'height="{fy(0.0) - fy(values[g]):.1f}" fill="{COLOURS[s % len(COLOURS)]}"/>')
    _legend(out, [label for label, _ in series])
    return "\n".join([*out, "</svg>"]) + "\n"
