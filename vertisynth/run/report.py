"""What a run writes: report.json, ledger.json, summary.md beside the synthetic CSV."""
from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from vertisynth import __version__
from vertisynth.core.capabilities import HasPrivacyNotes, ReportsBudgetSplit, ReportsModel
from vertisynth.core.dataset import Dataset
from vertisynth.core.outfiles import OUTPUTS_MANIFEST, make_folder, write_csv, write_text, written_by_tool
from vertisynth.core.processes import process_alive

if TYPE_CHECKING:
    from .pipeline import Plan, RunResult


def build_report(plan: Plan, loaded: Any, real: Dataset, synthetic: Dataset, metrics: dict, align_info: dict,
                 timings: dict[str, float]) -> dict[str, Any]:
    synth = plan.synthesizer
    twin = plan.measure is not None   # a vertical twin: the synthesizer asked its marginals of a vertical oracle
    centralized = "centralized" in synth.spec.capabilities and len(plan.partition) > 1 and not twin
    reg = plan.registry
    return {
        "vertisynth_version": __version__,
        "python": platform.python_version(),
        "seed": plan.config.seed,
        "config": plan.config.resolved(sample_size=synthetic.n, noise=plan.ledger.noise),
        "dataset": {
            "name": plan.dataset_name,
            "description": loaded.description,
            "records": real.n,
            "attributes": list(real.domain.attributes),
            "domain_sizes": list(real.domain.shape),
            "schema_inferred_from_data": bool(loaded.schema.inferred),
            "schema_note": ("the schema (categories, ranges) was read off the data and is NOT covered by the DP "
                            "guarantee; give a public schema for that") if loaded.schema.inferred else "public schema",
        },
        "parties": plan.partition.to_dict(),
        "alignment": {**plan.aligner.describe(), "info": align_info},
        "synthesizer": {
            **synth.describe(),
            "mode": (f"vertical twin: each party answers the marginals of its own columns, cross-party ones "
                     f"through {plan.measure.spec.name} (trust = {plan.measure.instance.trust})") if twin else
                    ("centralised baseline: the parties' columns were joined in one place (a comparison "
                     "point, not a vertical protocol)") if centralized else
                    f"baseline ({synth.spec.summary.removeprefix('baseline: ')}): a comparison point, not a model of "
                    "the columns' correlations" if synth.spec.summary.startswith("baseline")
                    else "vertical: parties share only messages",
            "phase_seconds": synth.instance.timings(),
            **({"budget_split": synth.instance.budget_split()} if isinstance(synth.instance, ReportsBudgetSplit) else {}),
            **({"privacy_notes": synth.instance.privacy_notes()} if isinstance(synth.instance, HasPrivacyNotes) else {}),
            **({"model": synth.instance.model_details()} if isinstance(synth.instance, ReportsModel) else {}),
        },
        "synthetic_records": synthetic.n,
        "evaluators": [e.describe() for e in plan.evaluators],
        "metrics": metrics,
        "metrics_note": "metrics compare against the real data and are not covered by the DP guarantee; "
                        "only the synthetic table and the fitted model are the DP release",
        "privacy": plan.ledger.to_dict(),
        "plugins": reg.describe(),
        "broken_plugins": [attrs.asdict(b) for b in reg.broken],
        "timings_seconds": timings,
    }




def clear_previous_outputs(out: Path) -> None:
    """Remove what the previous run in `out` wrote (its manifest), so that no stale file (a heatmap from an
    evaluator this run does not use) sits beside this run's outputs. Other files are left alone."""
    manifest = out / OUTPUTS_MANIFEST
    if not manifest.is_file():
        return
    try:
        names = json.loads(manifest.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        names = []
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and name == Path(name).name and (out / name).is_file():
            (out / name).unlink()
    manifest.unlink()


def record_outputs(out: Path, names: list[str]) -> None:
    write_text(out / OUTPUTS_MANIFEST, json.dumps(sorted(set(names))))


def write_records(out: Path, report: dict[str, Any], summary: str, ledger_extra: dict[str, Any] | None = None) -> list[str]:
    """The records every release writes, whoever builds it (the one-process run, the deploy server, collab):
    report.json, ledger.json (the report's privacy section, plus `ledger_extra`) and summary.md, each whole or not
    at all (a per-process temporary name, renamed: core/outfiles.py). Returns the names written."""
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "report.json", json.dumps(report, indent=2, default=json_default))
    write_text(out / "ledger.json", json.dumps({**report["privacy"], **(ledger_extra or {})}, indent=2,
                                               default=json_default))
    write_text(out / "summary.md", summary)
    return ["report.json", "ledger.json", "summary.md"]


RELEASE_STAGING = ".vertisynth-release"   # a release being written: <out>/.vertisynth-release.<pid>.<token>/


def write_release(out: Path, report: dict[str, Any], summary: str, table: Any,
                  extras: Callable[[Path], list[str]] | None = None, ledger_extra: dict[str, Any] | None = None) -> Path:
    """The one output writer of every release, whoever built it (the one-process run, the deploy server, collab in
    one process and its publisher): synthetic.csv, report.json, ledger.json and summary.md, then `extras(folder)`'s
    files (report.html, the model, an evaluator's figures: it returns their names). All or nothing: every file is
    written first into a staging folder inside `out` (same file system) and fsynced; only then does each replace
    its namesake in `out` (`os.replace`), the previous run's other files (its manifest) go, and this run's manifest
    is written last. A failure (or a crash) before that leaves the previous release as it was and no partial file
    beside it; a killed writer's staging folder is swept by the next. `table`: the DataFrame to write, a callable
    writing the table to the path it is given, the path of the table already streamed into `out` block by block
    (which cleared the folder before its first block), or None (nothing published: no table)."""
    out = make_folder(Path(out))
    streamed = isinstance(table, Path)
    if streamed and table != out / "synthetic.csv":
        raise ValueError(f"a streamed table {str(table)!r} outside its release folder {str(out)!r}")
    sweep_staging(out)
    stage = out / f"{RELEASE_STAGING}.{os.getpid()}.{secrets.token_hex(4)}"
    stage.mkdir(mode=0o700)
    try:
        names = []
        if table is not None:
            if not streamed:
                table(stage / "synthetic.csv") if callable(table) else write_csv(stage / "synthetic.csv", table)
            names.append("synthetic.csv")
        names += write_records(stage, report, summary, ledger_extra)
        names += extras(stage) if extras is not None else []
        staged = [n for n in dict.fromkeys(names) if not (streamed and n == "synthetic.csv")]
        for name in staged:
            _fsync(stage / name)
        # commit: the manifest first names every file the folder may hold meanwhile (so none reads as foreign),
        # each file replaces its namesake atomically, the previous run's others go, and the manifest is set last
        before = written_by_tool(out)
        record_outputs(out, sorted(before | set(names)))
        for name in staged:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / name, out / name)
        for name in before - set(names):
            if name == Path(name).name and (out / name).is_file():
                (out / name).unlink()
        record_outputs(out, names)
        _fsync(out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out


def _fsync(path: Path) -> None:
    """Flush a written file (or a folder's entries) to the disk: a crash after the rename keeps whole files."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sweep_staging(out: Path) -> None:
    """Remove the staging folders of release writers that are gone (killed mid-write)."""
    for stage in out.glob(f"{RELEASE_STAGING}.*"):
        pid = stage.name[len(RELEASE_STAGING) + 1:].split(".")[0]
        if stage.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(stage, ignore_errors=True)


def write_outputs(result: RunResult, out: Path, holdout: Dataset | None = None,
                  extras: Callable[[Path], list[str]] | None = None) -> Path:
    """A one-process run's release (`write_release`): its table, records, report.html and `extras(out)`'s files;
    `holdout`: the real rows the synthesizer never saw, for the HTML report's reference points."""
    from .html import write_run_html

    table = Path(out) / "synthetic.csv"
    streamed = result.synthetic_path == table   # a streamed run wrote it already, block by block

    def html(folder: Path) -> list[str]:
        write_run_html(result, folder, holdout)
        return ["report.html"] + (extras(folder) if extras is not None else [])
    # from the decoded columns, without pandas where the table needs none (docs/speed.md, fifth pass)
    written = write_release(out, result.report, summary_markdown(result),
                            table if streamed else result.write_synthetic_csv, html)
    result.synthetic_path = table
    return written


def json_default(o: Any) -> Any:
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def _alignment_line(info: dict[str, Any]) -> str:
    if info.get("protocol") not in ("psi", "psu"):
        return ""
    sizes = ", ".join(f"{p} {k}" for p, k in info["set_sizes"].items())
    if info["protocol"] == "psi":
        return f" (set sizes {sizes}; intersection {info['intersection']}; revealed: {info['revealed']})"
    fills = ", ".join(f"{p} {v:.1%}" for p, v in info["fill_rates"].items())
    return (f" (set sizes {sizes}; union {info['union']}; fill '{info['fill']}' rates {fills}; "
            f"revealed: {info['revealed']})")


def cross_party_note(report: dict[str, Any]) -> str | None:
    """A sentence when the synthesizer's model has no cross-party edge, read from its model details (VertiMRF's
    `cross_party_marginals`, with the pairs `graph_combination` scored); None otherwise."""
    if len(report.get("parties") or []) < 2:
        return None
    model = (report.get("synthesizer") or {}).get("model") or {}
    for note in model.get("notes") or []:   # the synthesizer's own account of its cross-party structure
        if "synthesised as independent" in note:
            return note
    if "cross_party_marginals" not in model or model["cross_party_marginals"]:
        return None
    edges = [g for g in model.get("graph_combination") or [] if g.get("added")]
    return (f"the model has no cross-party edge ({len(edges)} cross-party pair(s) passed GraphCom, no cross-party "
            "marginal was measured): your parties' columns are synthesised as independent")


REFERENCE_NAMES = {"independent": "independent columns", "holdout_floor": "real holdout vs training rows"}


def reference_text(report: dict[str, Any], evaluator: str, metric: str) -> str:
    """' (independent columns 0.35; real holdout vs training rows 0.10)' for a metric with reference points."""
    refs = (report.get("metric_references") or {}).get(evaluator, {}).get(metric) or {}
    parts = [f"{REFERENCE_NAMES.get(k, k)} {v:.4f}" for k, v in refs.items()]
    return f" ({'; '.join(parts)})" if parts else ""


def composition_note(privacy: dict[str, Any]) -> str | None:
    """Why the stages' ε values add up to more than the total, when they do."""
    stages = privacy.get("per_stage_epsilon") or {}
    if len(stages) < 2 or sum(stages.values()) <= privacy["spent_epsilon"] * (1 + 1e-9):
        return None
    return (f"The stages' ε values add up to {sum(stages.values()):.4g}, more than the total "
            f"{privacy['spent_epsilon']:.4g}: each is that stage's cost alone, converted to (ε, δ) on its own, while "
            "the total composes every charge first (zCDP: the ρ values add) and converts once, which is tighter. "
            "The total is what the run spent.")


def summary_markdown(result: RunResult) -> str:
    r = result.report
    p = r["privacy"]
    lines = [
        f"# vertisynth run: {r['dataset']['name']} with {r['synthesizer']['use']}",
        "",
        f"- dataset: {r['dataset']['description']} ({r['dataset']['records']} records, "
        f"{len(r['dataset']['attributes'])} attributes)",
        "- parties: " + "; ".join(f"{q['name']}: {len(q['attributes'])} attributes" for q in r["parties"]),
        f"- alignment: {r['alignment']['use']}" + _alignment_line(r["alignment"]["info"]),
        f"- synthesizer: {r['synthesizer']['use']} ({r['synthesizer']['mode']})",
        f"- synthetic records: {r['synthetic_records']}; seed {r['seed']}",
        "",
        "## Privacy",
        "",
        f"Budget ε = {p['budget']['epsilon']:.4g}, δ = {p['budget']['delta']:.3g}; "
        f"spent ε = {p['spent_epsilon']:.4g} (composed across all parties); "
        f"{'within budget' if p['within_budget'] else 'OVER BUDGET'}.",
        "",
        f"Noise: {p['noise']}.",
        "",
        "| stage | ε alone |",
        "|---|---|",
        *[f"| {s} | {e:.4g} |" for s, e in p["per_stage_epsilon"].items()],
        "",
        "| party | ε alone |",
        "|---|---|",
        *[f"| {s} | {e:.4g} |" for s, e in p["per_party_epsilon"].items()],
        "",
        "## Metrics",
        "",
        "| evaluator | metric | value |",
        "|---|---|---|",
        *[f"| {ev} | {m} | {v:.4f}{reference_text(r, ev, m)} |" for ev, ms in r["metrics"].items()
          for m, v in ms.items()],
        "",
        f"_{r['metrics_note']}._",
        "",
        "## Timings (seconds)",
        "",
        *[f"- {k}: {v:.2f}" for k, v in r["timings_seconds"].items()],
        *(["- synthesizer phases: " + "; ".join(f"{k} {v:.2f}" for k, v in r["synthesizer"]["phase_seconds"].items())]
          if r["synthesizer"]["phase_seconds"] else []),
    ]
    if r["synthesizer"].get("privacy_notes"):
        at = lines.index("## Metrics")
        lines[at:at] = [f"Note: {n}." for n in r["synthesizer"]["privacy_notes"]] + [""]
    if "budget_split" in r["synthesizer"]:
        lines[lines.index("## Metrics"):lines.index("## Metrics")] = [
            "Budget split inside the synthesizer (fractions of its zCDP ρ): "
            + ", ".join(f"{k} {v:.2f}" for k, v in r["synthesizer"]["budget_split"].items()), ""]
    comp = composition_note(p)
    if comp:
        at = lines.index("| party | ε alone |")
        lines[at:at] = [comp, ""]
    note = cross_party_note(r)
    if note:
        lines[lines.index("## Privacy"):lines.index("## Privacy")] = [f"**Warning:** {note}.", ""]
    if r["dataset"]["schema_inferred_from_data"]:
        lines += ["", f"**Note:** {r['dataset']['schema_note']}."]
    return "\n".join(lines) + "\n"
