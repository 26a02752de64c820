"""A partition's offset line as an inline SVG: the remote segments above, the local ones below, on one
offset scale from the oldest offset to the log end, with the local log start, high watermark and LSO
marked. Pure: a PartitionView in, markup out."""

from __future__ import annotations

from html import escape

from tieredlog.console.model import PartitionView

WIDTH = 1000
_REMOTE_Y, _LOCAL_Y, _BAR_H = 14, 46, 20
_HEIGHT = 104
_STATE_CLASS = {
    "COPY_SEGMENT_STARTED": "copying",
    "COPY_SEGMENT_FINISHED": "finished",
    "DELETE_SEGMENT_STARTED": "deleting",
    "DELETE_SEGMENT_FINISHED": "deleted",
}


def fmt_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _scale(view: PartitionView) -> tuple[int, int]:
    lo = min([view.log_start_offset] + [s.start_offset for s in view.remote_segments]
             + [s.base_offset for s in view.local_segments])
    hi = max([view.log_end_offset] + [s.end_offset + 1 for s in view.remote_segments])
    return lo, max(hi, lo + 1)


def _rect(css: str, x0: float, x1: float, y: int, tip: str, attrs: str = "") -> str:
    width = max(x1 - x0, 2.0)  # a one-record segment stays visible
    return (f'<rect class="{css}" x="{x0:.1f}" y="{y}" width="{width:.1f}" height="{_BAR_H}"{attrs}>'
            f"<title>{escape(tip)}</title></rect>")


def _marker(css: str, x: float, label: str, offset: int, row: int) -> str:
    y = _LOCAL_Y + _BAR_H + 4 + 11 * row
    anchor = "end" if x > WIDTH * 0.8 else "start"  # a label near the log end stays inside the picture
    return (f'<line class="mark {css}" x1="{x:.1f}" x2="{x:.1f}" y1="{_REMOTE_Y - 4}" y2="{y}"/>'
            f'<text class="mark-label {css}" x="{x:.1f}" y="{y + 9}" text-anchor="{anchor}">{escape(label)} {offset}</text>')


def offset_line_svg(view: PartitionView) -> str:
    lo, hi = _scale(view)

    def x(offset: int) -> float:
        return (offset - lo) * WIDTH / (hi - lo)

    parts = [f'<svg class="offset-line" viewBox="0 0 {WIDTH} {_HEIGHT}" '
             f'role="img" aria-label="offset line of {escape(view.name)}">',
             f'<text class="row-label" x="2" y="{_REMOTE_Y - 3}">remote</text>',
             f'<text class="row-label" x="2" y="{_LOCAL_Y - 3}">local</text>']
    for s in view.remote_segments:
        css = "seg remote " + _STATE_CLASS.get(s.state, "other")
        tip = f"remote [{s.start_offset}, {s.end_offset}] {fmt_bytes(s.size)} {s.state} {s.segment_id}"
        parts.append(_rect(css, x(s.start_offset), x(s.end_offset + 1), _REMOTE_Y, tip,
                           f' data-start="{s.start_offset}" data-end="{s.end_offset}"'))
    for seg in view.local_segments:
        css = "seg local" + (" active" if seg.active else "") + (" tiered" if seg.tiered else "")
        what = "active" if seg.active else ("also in the remote tier" if seg.tiered else "local only")
        tip = f"local [{seg.base_offset}, {seg.end_offset}) {fmt_bytes(seg.size)} {what}"
        parts.append(_rect(css, x(seg.base_offset), x(seg.end_offset), _LOCAL_Y, tip,
                           f' data-base="{seg.base_offset}" data-end="{seg.end_offset}"'))
    parts.append(_marker("local-start", x(view.local_log_start_offset), "local start", view.local_log_start_offset, 0))
    parts.append(_marker("hw", x(view.high_watermark), "HW", view.high_watermark, 1))
    if view.last_stable_offset != view.high_watermark:
        parts.append(_marker("lso", x(view.last_stable_offset), "LSO", view.last_stable_offset, 2))
    parts.append("</svg>")
    return "".join(parts)
