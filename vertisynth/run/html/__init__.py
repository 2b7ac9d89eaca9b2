"""report.html: the run's (or study's) report as one self-contained page, written beside report.json.

Everything is inline (CSS, SVG figures as data URIs; no script, no font, no network), so the file opens from disk
and can be mailed. The page is a jinja2 template (templates/) filled from the report dict plus a few figures
drawn from the real and synthetic codes: the worst 1-way marginals, Cramér's V heatmaps, the model graph.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vertisynth import __version__
from vertisynth.core.errors import DataError
from vertisynth.core.outfiles import write_text

from . import figures

if TYPE_CHECKING:   # pandas is imported where a frame is built or read (docs/speed.md, fifth pass)
    import pandas as pd

if TYPE_CHECKING:
    from vertisynth.core.dataset import Dataset
    from vertisynth.run.pipeline import RunResult

HTML_FILE = "report.html"
WORST_MARGINALS = 6     # the 1-way marginals drawn, worst first
HEATMAP_MAX_ATTRIBUTES = 30   # beyond this the heatmap is unreadable (and O(d²) pairs to count)


def _env():
    import jinja2
    env = jinja2.Environment(loader=jinja2.PackageLoader("vertisynth.run.html", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             bytecode_cache=_bytecode_cache())
    env.filters["num"] = _num
    return env


def _bytecode_cache(directory: str | None = None) -> Any:
    """jinja2's own cache of compiled templates between runs (its per-user folder in the temp folder, mode 0700,
    refused unless this user owns it; keyed by the template's source checksum, so an edited template recompiles):
    compiling run.html.j2 is ≈ 0.03 CPU s of every run. None (compile each time) where that folder cannot be made;
    a cache that cannot be read or written (disk full, removed) only costs the compile, never the report."""
    import jinja2

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket: Any) -> None:
            try:
                super().load_bytecode(bucket)
            except OSError:
                pass

        def dump_bytecode(self, bucket: Any) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                pass
    try:
        return QuietCache(directory)
    except (OSError, RuntimeError):
        return None


def _num(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return f"{int(v):,}"
    return f"{float(v):.{digits}g}"


# -- a run ------------------------------------------------------------------------------------------------------

def run_warnings(report: dict[str, Any]) -> list[str]:
    """What a reader must know before reading any number (the same facts summary.md states)."""
    from vertisynth.run.report import cross_party_note

    out = []
    note = cross_party_note(report)
    if note:
        out.append(note)
    if report["dataset"].get("schema_inferred_from_data"):
        out.append(report["dataset"]["schema_note"])
    if str(report["privacy"].get("noise", "")).startswith("simulation"):
        out.append(f"noise: {report['privacy']['noise']}")
    synth = report["synthesizer"]
    if str(synth.get("mode", "")).startswith("centralised"):
        out.append(synth["mode"])
    elif synth.get("use") == "independent":
        out.append("synthesizer 'independent' is a baseline: every column is synthesised on its own, so no "
                   "association between columns survives")
    if not report["privacy"].get("within_budget", True):
        out.append("the run spent MORE than its budget")
    return out


def ledger_rows(privacy: dict[str, Any]) -> list[dict[str, Any]]:
    """The charges grouped by stage, party and mechanism: how many, and their summed cost in its own unit."""
    groups: dict[tuple, dict[str, Any]] = {}
    for c in privacy.get("charges", []):
        key = (c["stage"], str(c.get("party")), c["mechanism"], c["cost_type"])
        g = groups.setdefault(key, {"stage": key[0], "party": key[1] if c.get("party") is not None else "joint",
                                    "mechanism": key[2], "count": 0, "cost": defaultdict(float)})
        g["count"] += 1
        for k, v in c.items():
            if k in ("rho", "epsilon", "delta") and isinstance(v, (int, float)):
                g["cost"][k] += v
    rows = []
    for g in groups.values():
        g["cost"] = ", ".join(f"{'ρ' if k == 'rho' else 'ε' if k == 'epsilon' else 'δ'} = {_num(v)}"
                              for k, v in g["cost"].items())
        rows.append(g)
    return rows


def metric_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    refs = report.get("metric_references") or {}
    scored = (report.get("evaluation") or {}).get("scored_against") or {}
    return [{"evaluator": ev, "metric": m, "value": v, "against": scored.get(ev, ""),
             "independent": refs.get(ev, {}).get(m, {}).get("independent"),
             "floor": refs.get(ev, {}).get(m, {}).get("holdout_floor")}
            for ev, ms in report["metrics"].items() for m, v in ms.items() if isinstance(v, (int, float))]


def ml_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """ml_utility's `<model>_<score>_<synthetic|real|gap>` metrics as one row per model and score."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for ev, ms in report["metrics"].items():
        if not ev.startswith("ml"):
            continue
        for m, v in ms.items():
            parts = m.rsplit("_", 1)
            if len(parts) == 2 and parts[1] in ("synthetic", "real", "gap") and "_" in parts[0]:
                model, score = parts[0].split("_", 1)
                out.setdefault((model, score), {"model": model.upper(), "score": score})[parts[1]] = v
    return list(out.values())


def worst_marginals(real: Dataset, synthetic: Dataset, k: int = WORST_MARGINALS) -> tuple[str | None, list]:
    """The k attributes whose 1-way marginal is furthest (TVD) from the real one, drawn as small bar charts."""
    items = []
    for a in real.domain.attributes:
        p = real.counts((a,)).values.ravel()
        q = synthetic.counts((a,)).values.ravel()
        if p.sum() == 0 or q.sum() == 0:
            continue
        p, q = p / p.sum(), q / q.sum()
        labels = real.domain.labels.get(a) or [str(i) for i in range(len(p))]
        items.append((a, labels, p, q, 0.5 * float(np.abs(p - q).sum())))
    items.sort(key=lambda t: -t[4])
    table = [{"attribute": a, "tvd": t} for a, _, _, _, t in items]
    return (figures.marginal_bars(items[:k]) if items else None), table


def association_heatmaps(real: Dataset, synthetic: Dataset) -> tuple[str | None, str]:
    from vertisynth.core.capabilities import MeasuresAssociation
    from vertisynth.core.registry import default_registry
    from vertisynth.run.pipeline import build_component

    # the `correlation` evaluator's matrices, found through the registry (the page shows what it scores)
    scorer = build_component(default_registry(), "evaluator", "correlation", {}, "report").instance
    if not isinstance(scorer, MeasuresAssociation):
        return None, "the installed 'correlation' evaluator draws no association matrices"
    names = list(real.domain.attributes)
    note = ""
    if len(names) < 2:
        return None, "one attribute: no pair to show"
    if len(names) > HEATMAP_MAX_ATTRIBUTES:
        note = f"the first {HEATMAP_MAX_ATTRIBUTES} of {len(names)} attributes"
        names = names[:HEATMAP_MAX_ATTRIBUTES]
        real, synthetic = real.project(names), synthetic.project(names)
    v_real, _ = scorer.association_matrices(real)
    v_syn, _ = scorer.association_matrices(synthetic)
    return figures.heatmaps(names, v_real, v_syn), note


def model_cliques(result: RunResult) -> list[list[str]] | None:
    model = (result.report.get("synthesizer") or {}).get("model") or {}
    if model.get("cliques"):
        return [list(c) for c in model["cliques"]]
    if result.model is not None:
        return [list(c) for c in result.model.model.tree.cliques]
    return None


def run_context(result: RunResult, holdout: Dataset | None = None) -> dict[str, Any]:
    from vertisynth.run.report import composition_note

    r = result.report
    p = r["privacy"]
    owner = {a: q["name"] for q in r["parties"] for a in q["attributes"]}
    real, synthetic = result.real_codes, result.synthetic_codes
    try:
        if real is None:   # the deploy server: it builds the table from the parties' messages, never their rows
            raise DataError("no real rows here to compare the synthetic table with")
        marg_fig, marg_table = worst_marginals(real, synthetic)
        heat_fig, heat_note = association_heatmaps(real, synthetic)
    except DataError as exc:   # a streamed run of several blocks keeps no synthetic codes once evaluated
        marg_fig, marg_table, heat_fig, heat_note = None, [], None, f"no figure: {exc}"
    cliques = model_cliques(result)
    graph = None
    if cliques is not None and owner:
        names = real.domain.attributes if real is not None else r["dataset"]["attributes"]
        uri, within, cross = figures.model_graph({a: owner.get(a, "?") for a in names}, cliques)
        graph = {"uri": uri, "within": within, "cross": cross, "cliques": len(cliques)}
    stages = p.get("per_stage_epsilon") or {}
    return {
        "r": r, "p": p, "version": __version__,
        "warnings": run_warnings(r),
        "stages": [{"stage": s, "epsilon": e, "share": e / p["budget"]["epsilon"]} for s, e in stages.items()],
        "parties_eps": [{"party": s, "epsilon": e, "share": e / p["budget"]["epsilon"]}
                        for s, e in (p.get("per_party_epsilon") or {}).items()],
        "composition": composition_note(p),
        "ledger_rows": ledger_rows(p),
        "metrics": metric_rows(r),
        "has_floor": holdout is not None,
        "ml": ml_rows(r),
        "marginals": {"uri": marg_fig, "table": marg_table[:WORST_MARGINALS]},
        "heatmap": {"uri": heat_fig, "note": heat_note},
        "graph": graph,
        "timings": r.get("timings_seconds") or {},
        "phases": (r.get("synthesizer") or {}).get("phase_seconds") or {},
    }


def render_run_html(result: RunResult, holdout: Dataset | None = None) -> str:
    return _env().get_template("run.html.j2").render(**run_context(result, holdout))


def write_run_html(result: RunResult, out: Path, holdout: Dataset | None = None) -> Path:
    path = Path(out) / HTML_FILE
    write_text(path, render_run_html(result, holdout))   # whole or not at all
    return path


# -- a study ----------------------------------------------------------------------------------------------------

def _goal(evaluator: str) -> str | None:
    from vertisynth.core.registry import default_registry

    try:
        return default_registry().get("evaluator", evaluator).goal
    except Exception:   # an alias or a plugin no longer installed: no direction to rank by
        return None


def leaderboard(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (dataset, metric): methods × ε, the mean over repeats and its 95% t-interval (none with one repeat).
    `table` has the columns dataset, method (with its grid point), epsilon, evaluator, metric, value."""
    from scipy import stats

    agg = (table.assign(name=table["evaluator"] + "." + table["metric"])
           .groupby(["dataset", "name", "evaluator", "method", "epsilon"])["value"]
           .agg(["mean", "std", "count"]).reset_index())
    half = stats.t.ppf(0.975, (agg["count"] - 1).clip(lower=1)) * agg["std"] / np.sqrt(agg["count"])
    agg["half"] = np.where(agg["count"] > 1, half, np.nan)
    boards = []
    for (dataset, name, evaluator), part in agg.groupby(["dataset", "name", "evaluator"], sort=True):
        eps = sorted(part["epsilon"].unique())
        goal = _goal(evaluator)
        best = {}
        if goal in ("minimize", "maximize"):
            for e, col in part.groupby("epsilon"):
                best[e] = col["mean"].min() if goal == "minimize" else col["mean"].max()
        rows = []
        for method, m in part.groupby("method", sort=True):
            cells = {r.epsilon: r for r in m.itertuples()}
            rows.append({"method": method, "cells": [
                None if e not in cells else {"mean": cells[e].mean, "half": cells[e].half, "n": cells[e].count,
                                             "best": e in best and cells[e].mean == best[e]} for e in eps]})
        boards.append({"dataset": dataset, "name": name, "goal": goal, "eps": eps, "rows": rows})
    return boards


def render_study_html(table: pd.DataFrame, figure_files: list[tuple[str, str, Path]]) -> str:
    """`figure_files`: (dataset, metric name, PNG path) of the metric-vs-ε figures."""
    cells = int(table["cell"].nunique()) if len(table) else 0
    return _env().get_template("study.html.j2").render(
        version=__version__, cells=cells, rows=len(table),
        datasets=sorted(table["dataset"].unique()) if len(table) else [],
        boards=leaderboard(table) if len(table) else [],
        figures=[{"dataset": d, "name": n, "uri": figures.file_uri(p)} for d, n, p in figure_files])


def write_study_html(table: pd.DataFrame, out: Path, figure_files: list[tuple[str, str, Path]]) -> Path:
    path = Path(out) / HTML_FILE
    write_text(path, render_study_html(table, figure_files))
    return path
