"""The report's figures, drawn with matplotlib (Agg) and inlined as PNG data URIs, so report.html needs no
other file and no network."""
from __future__ import annotations

import base64
import io
import itertools
from collections.abc import Sequence

import numpy as np

PARTY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def data_uri(fig) -> str:
    """The figure as a base64 PNG data URI (the figure is closed)."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def file_uri(path) -> str:
    with open(path, "rb") as fh:
        return "data:image/png;base64," + base64.b64encode(fh.read()).decode("ascii")


def marginal_bars(items: Sequence[tuple[str, Sequence[str], np.ndarray, np.ndarray, float]]) -> str:
    """Small multiples: for each (attribute, labels, real shares, synthetic shares, TVD), grouped bars."""
    plt = _pyplot()
    cols = min(3, len(items))
    rows = -(-len(items) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, (name, labels, p, q, tvd) in zip(axes.ravel(), items):
        x = np.arange(len(p))
        ax.bar(x - 0.2, p, 0.4, label="real", color="#4c72b0")
        ax.bar(x + 0.2, q, 0.4, label="synthetic", color="#dd8452")
        ax.set_title(f"{name} (TVD {tvd:.3f})", fontsize=9)
        ticks = [str(t)[:12] for t in labels]
        ax.set_xticks(x, ticks, rotation=60 if len(x) > 4 else 0, fontsize=6, ha="right" if len(x) > 4 else "center")
        ax.tick_params(axis="y", labelsize=7)
    for ax in axes.ravel()[len(items):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    return data_uri(fig)


def heatmaps(names: Sequence[str], real: np.ndarray, synthetic: np.ndarray) -> str:
    """Cramér's V: real, synthetic and |real − synthetic| side by side, one attribute order."""
    plt = _pyplot()
    mats = [("real", real), ("synthetic", synthetic), ("|real − synthetic|", np.abs(real - synthetic))]
    size = max(3.5, 0.3 * len(names))
    fig, axes = plt.subplots(1, 3, figsize=(3 * size + 1.5, size + 0.8), sharey=True, layout="constrained")
    for i, (ax, (title, m)) in enumerate(zip(axes, mats)):
        im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"Cramér's V: {title}", fontsize=9)
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
        ax.set_yticks(range(len(names)), names, fontsize=6)
        ax.tick_params(axis="y", labelleft=i == 0)
    fig.colorbar(im, ax=axes, shrink=0.8)
    return data_uri(fig)


def model_graph(parties: dict[str, str], cliques: Sequence[Sequence[str]]) -> tuple[str, int, int]:
    """Attributes on a circle, coloured by party, joined where a clique holds both; cross-party edges red and
    dashed. Returns (data URI, within-party edges, cross-party edges)."""
    plt = _pyplot()
    names = list(parties)
    angle = 2 * np.pi * np.arange(len(names)) / max(1, len(names))
    pos = {a: (np.cos(t), np.sin(t)) for a, t in zip(names, angle)}
    edges = {tuple(sorted(e)) for c in cliques for e in itertools.combinations(c, 2) if e[0] in pos and e[1] in pos}
    owners = list(dict.fromkeys(parties.values()))
    colour = {p: PARTY_COLOURS[i % len(PARTY_COLOURS)] for i, p in enumerate(owners)}
    fig, ax = plt.subplots(figsize=(6.5, 6.5))
    cross = 0
    for a, b in sorted(edges):
        across = parties[a] != parties[b]
        cross += across
        ax.plot(*zip(pos[a], pos[b]), color="#d62728" if across else "#999999", lw=2.0 if across else 1.0,
                ls="--" if across else "-", zorder=1)
    for a in names:
        ax.scatter(*pos[a], s=160, color=colour[parties[a]], zorder=2, edgecolor="white")
        x, y = pos[a]
        ax.annotate(a, (x, y), xytext=(x * 1.13, y * 1.13), fontsize=8, ha="left" if x > 0.01 else
                    "right" if x < -0.01 else "center", va="center")
    for p in owners:
        ax.scatter([], [], color=colour[p], label=f"party {p}")
    ax.plot([], [], color="#d62728", ls="--", label="cross-party edge")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.4, 1.4)
    ax.set_aspect("equal")
    ax.axis("off")
    return data_uri(fig), len(edges) - cross, cross
