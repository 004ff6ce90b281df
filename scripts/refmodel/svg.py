"""A line chart as a small SVG file, written by hand (matplotlib is not always installed)."""
import math
from html import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#7f7f7f"]


def ticks(lo, hi, n=6):
    """Round tick values covering lo..hi."""
    raw = (hi - lo) / max(n - 1, 1) or 1.0
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    first = math.floor(lo / step) * step
    return [first + i * step for i in range(int(math.ceil((hi - first) / step)) + 1)]


def line_chart(series, title, xlabel, ylabel, width=720, height=420):
    """series: [(label, [(x, y), ...], dashed)]. Returns the SVG text."""
    pts = [p for _, s, _ in series for p in s]
    xt = ticks(min(p[0] for p in pts), max(p[0] for p in pts))
    yt = ticks(min(p[1] for p in pts), max(p[1] for p in pts))
    left, right, top, bottom = 70, 20, 40, 50
    pw, ph = width - left - right, height - top - bottom

    def sx(x):
        return left + (x - xt[0]) / (xt[-1] - xt[0] or 1) * pw

    def sy(y):
        return top + ph - (y - yt[0]) / (yt[-1] - yt[0] or 1) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>']
    for x in xt:
        out.append(f'<line x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 16}" text-anchor="middle">{x:g}</text>')
    for y in yt:
        out.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{left + pw}" y2="{sy(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + ph / 2})">{escape(ylabel)}</text>')
    for i, (label, s, dashed) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"{dash}/>')
        ly = top + 16 + 18 * i
        out.append(f'<line x1="{left + pw - 215}" y1="{ly - 4}" x2="{left + pw - 190}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + pw - 185}" y="{ly}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
