"""A :class:`flows.report.chart.RunChart` as SVG text: pure, no plotting library.

The Prefect UI's markdown shows it as an image (``![...](data:image/svg+xml;base64,...)``; an inline
``<svg>`` is dropped by its renderer, checked in Chromium with both UIs), so the run's artifact
carries its chart without matplotlib in the flow. Opaque white, so it reads in the light and the dark theme.
"""

from __future__ import annotations

import base64
from xml.sax.saxutils import escape

from flows.report.chart import RunChart

__all__ = ["HEIGHT", "WIDTH", "chart_svg", "svg_data_uri"]

WIDTH, HEIGHT = 960, 450
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, WIDTH - 24, 92, 300
_LANE_H, _LANES_TOP = 16, 310
_STEP_STYLE = {"history": 'stroke="#6c757d" stroke-width="1.5"',
               "forecast": 'stroke="#457b9d" stroke-width="2" stroke-dasharray="6 4"',
               "recorded": 'stroke="#d62828" stroke-width="3"'}
_MARKER_STYLE = {"cron": 'stroke="#495057" stroke-width="1.5" stroke-dasharray="4 3"',
                 "start": 'stroke="#1d3557" stroke-width="2"',
                 "planned": 'stroke="#1d3557" stroke-width="1.5" stroke-dasharray="1 3"',
                 "deadline": 'stroke="#c1121f" stroke-width="2"'}
_FONT = 'font-family="Helvetica, Arial, sans-serif"'


def _text(x: float, y: float, s: str, size: int = 12, anchor: str = "start", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" {_FONT} font-size="{size}" text-anchor="{anchor}" fill="#212529"{extra}>'
            f"{escape(s)}</text>")


def chart_svg(chart: RunChart) -> str:
    """The chart as a standalone SVG document, ``WIDTH`` x ``HEIGHT`` pixels."""
    sx = lambda s: _LEFT + (_RIGHT - _LEFT) * s / chart.x_max  # noqa: E731
    sy = lambda g: _BOTTOM - (_BOTTOM - _TOP) * min(g, chart.y_max) / chart.y_max  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">',
           f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
           _text(_LEFT, 24, chart.title, 16, extra=' font-weight="bold"'), _text(_LEFT, 44, chart.subtitle, 13)]
    for y, label in chart.y_ticks:
        out.append(f'<line x1="{_LEFT}" y1="{sy(y):.1f}" x2="{_RIGHT}" y2="{sy(y):.1f}" stroke="#e9ecef"/>')
        out.append(_text(_LEFT - 6, sy(y) + 4, label, 11, "end"))
    out.append(_text(16, (_TOP + _BOTTOM) / 2, "gCO2/kWh", 11, "middle",
                     f' transform="rotate(-90 16 {(_TOP + _BOTTOM) / 2:.1f})"'))
    for band in (b for b in chart.bands if b.lane == "baseline"):
        out.append(f'<rect x="{sx(band.start):.1f}" y="{_TOP}" width="{max(sx(band.end) - sx(band.start), 2):.1f}" '
                   f'height="{_BOTTOM - _TOP}" fill="{band.colour}" fill-opacity="0.22"/>')
    for step in chart.steps:
        d, last = [], None
        for a, b, g in step.pieces:
            d.append(f"{'L' if last is not None and abs(last - a) < 1e-6 else 'M'}{sx(a):.1f},{sy(g):.1f}")
            d.append(f"L{max(sx(b), sx(a) + 2):.1f},{sy(g):.1f}")
            last = b
        out.append(f'<path d="{" ".join(d)}" fill="none" {_STEP_STYLE[step.kind]}/>')
    out.append(f'<rect x="{_LEFT}" y="{_TOP}" width="{_RIGHT - _LEFT}" height="{_BOTTOM - _TOP}" fill="none" '
               'stroke="#adb5bd"/>')
    for k, lane in enumerate(chart.lanes):
        y = _LANES_TOP + k * (_LANE_H + 4)
        out.append(_text(_LEFT - 6, y + 12, lane, 11, "end"))
        out.append(f'<rect x="{_LEFT}" y="{y}" width="{_RIGHT - _LEFT}" height="{_LANE_H}" fill="#f8f9fa"/>')
        for band in (b for b in chart.bands if b.lane == lane):
            w = max(sx(band.end) - sx(band.start), 2)
            out.append(f'<rect x="{sx(band.start):.1f}" y="{y}" width="{w:.1f}" height="{_LANE_H}" fill="{band.colour}">'
                       f"<title>{escape(band.label)}</title></rect>")
            if w > 8 * len(band.label):
                out.append(_text(sx(band.start) + w / 2, y + 12, band.label, 11, "middle"))
    for m in chart.markers:
        x = sx(m.at)
        out.append(f'<line x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{_LANES_TOP + 2 * _LANE_H + 6}" {_MARKER_STYLE[m.kind]}/>')
        anchor = "end" if x > _RIGHT - 80 else "start"
        out.append(_text(x + (-3 if anchor == "end" else 3), _TOP - 6 - 14 * m.row, m.label, 11, anchor))
    tick_y = _LANES_TOP + 2 * (_LANE_H + 4) + 14
    for s, label in chart.x_ticks:
        out.append(_text(sx(s), tick_y, label, 11, "middle"))
    out += _legend(chart, tick_y + 26)
    out.append(_text(_LEFT, HEIGHT - 10, chart.note, 11, extra=' fill-opacity="0.8"'))
    out.append("</svg>")
    return "\n".join(out)


def _legend(chart: RunChart, y: float) -> list[str]:
    items: list[tuple[str, str]] = [(f'<line x1="0" y1="0" x2="22" y2="0" {_STEP_STYLE[s.kind]}/>', s.label)
                                    for s in chart.steps]
    seen: dict[str, str] = {}
    for b in chart.bands:
        seen.setdefault(b.label, b.colour)
    items += [(f'<rect x="0" y="-6" width="22" height="12" fill="{c}"/>', label) for label, c in seen.items()]
    out, x, row = [], float(_LEFT), 0
    for swatch, label in items:
        width = 30 + 6.2 * len(label) + 18
        if x + width > _RIGHT:
            x, row = float(_LEFT), row + 1
        out.append(f'<g transform="translate({x:.1f} {y + 18 * row - 4:.1f})">{swatch}</g>')
        out.append(_text(x + 28, y + 18 * row, label, 11))
        x += width
    return out


def svg_data_uri(svg: str) -> str:
    """``data:image/svg+xml;base64,...``: an image the Prefect UI's markdown shows."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
