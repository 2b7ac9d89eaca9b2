"""The run report's figures as inline SVG (data URIs), drawn from a few numbers without a plotting library:
report.html needs no other file and no network, and writing it costs milliseconds rather than the seconds of
importing and rendering matplotlib (docs/speed.md). The study's metric-vs-ε figures stay matplotlib PNG files
(`file_uri`)."""
from __future__ import annotations

import base64
import itertools
from collections.abc import Sequence
from html import escape as _html_escape

import numpy as np

PARTY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
REAL, SYNTHETIC, CROSS, WITHIN = "#4c72b0", "#dd8452", "#d62728", "#999999"
FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'
# matplotlib's viridis at 9 evenly spaced points, interpolated linearly in between
VIRIDIS = np.array([[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
                    [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]], dtype=float)


def escape(s: str) -> str:
    """&, < and > as entities (xml.sax.saxutils.escape's output; its import pulls in urllib.request and ssl)."""
    return _html_escape(s, quote=False)


def svg_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def _svg(width: float, height: float, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" {FONT}><rect width="100%" height="100%" fill="white"/>'
            + "".join(body) + "</svg>")


def _text(x: float, y: float, s: str, size: float = 9, anchor: str = "start", rotate: float | None = None,
          extra: str = "") -> str:
    turn = f' transform="rotate({rotate:.0f} {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{turn}{extra}>'
            f"{escape(str(s))}</text>")


def file_uri(path) -> str:
    with open(path, "rb") as fh:
        return "data:image/png;base64," + base64.b64encode(fh.read()).decode("ascii")


def viridis(v: np.ndarray) -> list[str]:
    """Colours of values in [0, 1] (clipped) as #rrggbb."""
    x = np.clip(np.asarray(v, dtype=float).ravel(), 0, 1) * (len(VIRIDIS) - 1)
    i = np.minimum(x.astype(int), len(VIRIDIS) - 2)
    rgb = VIRIDIS[i] + (VIRIDIS[i + 1] - VIRIDIS[i]) * (x - i)[:, None]
    return ["#%02x%02x%02x" % tuple(c) for c in np.rint(rgb).astype(int)]


def marginal_bars(items: Sequence[tuple[str, Sequence[str], np.ndarray, np.ndarray, float]]) -> str:
    """Small multiples: for each (attribute, labels, real shares, synthetic shares, TVD), grouped bars."""
    cols = min(3, len(items))
    rows = -(-len(items) // cols)
    pw, ph = 300, 210                     # one panel
    left, top, plot_h, plot_w = 34, 22, 110, 255
    body = []
    for k, (name, labels, p, q, tvd) in enumerate(items):
        ox, oy = (k % cols) * pw, (k // cols) * ph
        peak = max(float(np.max(p, initial=0)), float(np.max(q, initial=0)), 1e-12)
        body.append(_text(ox + left + plot_w / 2, oy + 14, f"{name} (TVD {tvd:.3f})", 11, "middle"))
        x0, y0 = ox + left, oy + top + plot_h     # the axes' origin
        body.append(f'<path d="M{x0:.1f} {oy + top:.1f}V{y0:.1f}H{x0 + plot_w:.1f}" stroke="#333" fill="none"/>')
        for frac in (0.0, 0.5, 1.0):
            y = y0 - frac * plot_h
            body.append(_text(x0 - 3, y + 3, f"{frac * peak:.2g}", 8, "end"))
            if frac:
                body.append(f'<line x1="{x0:.1f}" x2="{x0 + plot_w:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        slot = plot_w / max(len(p), 1)
        bar = slot * 0.4
        tilt = len(p) > 4
        for j, (pj, qj) in enumerate(zip(p, q)):
            cx = x0 + (j + 0.5) * slot
            for off, v, colour in ((-bar, pj, REAL), (0.0, qj, SYNTHETIC)):
                h = float(v) / peak * plot_h
                body.append(f'<rect x="{cx + off:.1f}" y="{y0 - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                            f'fill="{colour}"/>')
            label = str(labels[j])[:12] if j < len(labels) else str(j)
            body.append(_text(cx, y0 + 10, label, 7, "end" if tilt else "middle", -60 if tilt else None))
    lx, ly = left + 8, top + 4   # legend in the first panel
    for i, (what, colour) in enumerate((("real", REAL), ("synthetic", SYNTHETIC))):
        body.append(f'<rect x="{lx + i * 70}" y="{ly}" width="10" height="10" fill="{colour}"/>')
        body.append(_text(lx + 14 + i * 70, ly + 9, what, 9))
    return svg_uri(_svg(cols * pw, rows * ph, body))


def heatmaps(names: Sequence[str], real: np.ndarray, synthetic: np.ndarray) -> str:
    """Cramér's V: real, synthetic and |real − synthetic| side by side, one attribute order, one colour scale."""
    mats = [("real", real), ("synthetic", synthetic), ("|real − synthetic|", np.abs(real - synthetic))]
    d = len(names)
    cell = max(8, min(22, 320 // max(d, 1)))
    margin = 8 + 6 * max((min(len(str(a)), 16) for a in names), default=1)   # room for the labels
    side = d * cell
    top = 24
    width = 3 * (side + 12) + margin + 70
    height = top + side + margin + 10
    body = []
    for k, (title, m) in enumerate(mats):
        ox = margin + k * (side + 12)
        body.append(_text(ox + side / 2, 15, f"Cramér's V: {title}", 11, "middle"))
        colours = viridis(np.nan_to_num(np.asarray(m, dtype=float)))
        for (i, j), c in zip(itertools.product(range(d), range(d)), colours):
            body.append(f'<rect x="{ox + j * cell}" y="{top + i * cell}" width="{cell}" height="{cell}" fill="{c}"/>')
        for j, a in enumerate(names):   # x labels under every matrix, y labels left of the first
            x = ox + (j + 0.5) * cell
            body.append(_text(x + 3, top + side + 4, str(a)[:16], 7, "end", -90))
            if k == 0:
                body.append(_text(ox - 3, top + (j + 0.5) * cell + 3, str(a)[:16], 7, "end"))
    bx = margin + 3 * (side + 12) + 6   # colour bar 0..1
    steps = 20
    for s, c in enumerate(viridis(np.linspace(1, 0, steps))):
        body.append(f'<rect x="{bx}" y="{top + s * side / steps:.1f}" width="12" height="{side / steps + 0.5:.1f}" '
                    f'fill="{c}"/>')
    for v in (0.0, 0.5, 1.0):
        body.append(_text(bx + 16, top + (1 - v) * side + 3, f"{v:.1f}", 8))
    return svg_uri(_svg(width, height, body))


def model_graph(parties: dict[str, str], cliques: Sequence[Sequence[str]]) -> tuple[str, int, int]:
    """Attributes on a circle, coloured by party, joined where a clique holds both; cross-party edges red and
    dashed. Returns (data URI, within-party edges, cross-party edges)."""
    names = list(parties)
    angle = 2 * np.pi * np.arange(len(names)) / max(1, len(names))
    pos = {a: (np.cos(t), np.sin(t)) for a, t in zip(names, angle)}
    edges = {tuple(sorted(e)) for c in cliques for e in itertools.combinations(c, 2) if e[0] in pos and e[1] in pos}
    owners = list(dict.fromkeys(parties.values()))
    colour = {p: PARTY_COLOURS[i % len(PARTY_COLOURS)] for i, p in enumerate(owners)}
    r, cx, cy = 170, 290, 250        # the circle in pixels; room left and right for the labels, right for the legend

    def at(a: str, scale: float = 1.0) -> tuple[float, float]:
        x, y = pos[a]
        return cx + scale * r * x, cy - scale * r * y

    body, cross = [], 0
    for a, b in sorted(edges):
        across = parties[a] != parties[b]
        cross += across
        (x1, y1), (x2, y2) = at(a), at(b)
        style = f'stroke="{CROSS}" stroke-width="2" stroke-dasharray="6 4"' if across else f'stroke="{WITHIN}"'
        body.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {style}/>')
    for a in names:
        x, y = at(a)
        body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{colour[parties[a]]}" stroke="white"/>')
        lx, ly = at(a, 1.13)
        ux = pos[a][0]
        body.append(_text(lx, ly + 3, a, 10, "start" if ux > 0.01 else "end" if ux < -0.01 else "middle"))
    lx, ly = 2 * cx - 40, 20
    for i, p in enumerate(owners):
        body.append(f'<circle cx="{lx + 6}" cy="{ly + 18 * i}" r="6" fill="{colour[p]}"/>')
        body.append(_text(lx + 18, ly + 18 * i + 4, f"party {p}", 10))
    y = ly + 18 * len(owners)
    body.append(f'<line x1="{lx}" x2="{lx + 14}" y1="{y}" y2="{y}" stroke="{CROSS}" stroke-width="2" '
                f'stroke-dasharray="4 2"/>')
    body.append(_text(lx + 18, y + 4, "cross-party edge", 10))
    return svg_uri(_svg(2 * cx + 110, 2 * cy, body)), len(edges) - cross, cross
