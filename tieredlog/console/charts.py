"""The overview's small charts of the last hour, as inline SVG. Pure: samples in, markup out."""

from __future__ import annotations

from html import escape

from tieredlog.console.history import SERIES, Sample, points
from tieredlog.console.offset_line import fmt_bytes

_W, _H = 240, 56


def _fmt(value: float, unit: str) -> str:
    if unit == "B/s":
        return fmt_bytes(value) + "/s"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
    return f"{value:.2f}{unit}"


def chart_svg(name: str, samples: tuple[Sample, ...]) -> str:
    title, unit, _ = SERIES[name]
    pts = points(samples, name)
    if len(pts) < 2:
        body = f'<text class="muted" x="4" y="{_H // 2}">collecting…</text>'
        latest = peak = ""
    else:
        t0, t1 = pts[0][0], pts[-1][0]
        top = max(v for _, v in pts) or 1.0
        coords = " ".join(f"{(t - t0) * _W / max(t1 - t0, 1e-9):.1f},{_H - 2 - v * (_H - 6) / top:.1f}" for t, v in pts)
        body = f'<polyline class="line" points="{coords}"/>'
        latest, peak = _fmt(pts[-1][1], unit), _fmt(max(v for _, v in pts), unit)
    return (
        f'<div class="chart" data-chart="{name}"><div class="small">{escape(title)}</div>'
        f'<svg viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}">{body}</svg>'
        f'<div class="small muted">now <span data-field="chart-{name}-now">{latest}</span>'
        f" · max {peak}</div></div>"
    )


def charts_section(samples: tuple[Sample, ...]) -> str:
    return ('<section><h2>Last hour</h2><p class="muted small">This broker, sampled every 10 s.</p>'
            '<div class="charts">' + "".join(chart_svg(n, samples) for n in SERIES) + "</div></section>")
