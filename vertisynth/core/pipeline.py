"""The config-driven pipeline.

Order of work, so that nothing touches data before the plan is known to fit the budget:
  parse config → resolve plugins → structure params → public schema and party split →
  ask every stage for its privacy cost → check the budget → load data → encode → align →
  fit (spending exactly the plan) → sample → decode → evaluate → write outputs.
"""
from __future__ import annotations

import contextlib
import json
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pandas as pd

from .. import __version__
from .config import CONVERTER, RunConfig, structure
from .dataset import Dataset, VerticalPartition
from .encoding import TableCodec, TableSchema
from .errors import BudgetError, ConfigError, DataError
from .interfaces import Aligner, Alignment, Evaluator, PlanContext, Synthesizer, VerticalData
from .loaded import DatasetSource
from .privacy import PrivacyLedger
from .registry import Registry, default_registry
from .specs import ComponentSpec

RNG_STREAMS = ("preprocessing", "alignment", "fit", "sample", "decode", "evaluate", "split")


@attrs.define
class Component:
    spec: ComponentSpec
    config: Any
    instance: Any
    provider: str

    def describe(self) -> dict[str, Any]:
        return {
            "use": self.spec.name,
            "provider": self.provider,
            "params": CONVERTER.unstructure(self.config) if self.config is not None else {},
            "capabilities": sorted(self.spec.capabilities),
        }


@attrs.define
class Plan:
    """Everything decided before any data is read."""

    config: RunConfig
    source: DatasetSource
    partition: VerticalPartition
    aligner: Component
    synthesizer: Component
    evaluators: list[Component]
    ledger: PrivacyLedger
    dataset_name: str
    registry: Registry


@attrs.define
class RunResult:
    synthetic: pd.DataFrame
    synthetic_codes: Dataset
    real_codes: Dataset
    metrics: dict[str, dict[str, float]]
    ledger: PrivacyLedger
    report: dict[str, Any]
    output_dir: Path | None = None


def _component(registry: Registry, kind: str, name: str, params: dict[str, Any], where: str) -> Component:
    spec = registry.get(kind, name)
    cls = spec.load_config_cls()
    config = structure(params, cls, f"{where}.params of {name!r}") if cls is not None else None
    if cls is None and params:
        raise ConfigError(f"{where}: {kind} {name!r} takes no params, got {sorted(params)}")
    factory = spec.load_factory()
    instance = factory(config) if cls is not None else factory()
    return Component(spec, config, instance, registry.provider(kind, name))


def make_plan(config: RunConfig, registry: Registry | None = None, data_dir: str | None = None,
              source: DatasetSource | None = None) -> Plan:
    """Resolve plugins, structure params, split parties and plan the privacy spend (no data read).

    `source` replaces the config's [dataset] (the Python API passes in-memory DataFrames this way).
    """
    registry = registry or default_registry()
    if config.collab is not None:   # horizontal custodians: vertisynth.collab.pipeline
        from vertisynth.collab.pipeline import make_collab_plan

        return make_collab_plan(config, registry, data_dir, source)
    if source is None:
        ds_spec = registry.get("dataset", config.dataset.name)
        ds_cls = ds_spec.load_config_cls()
        ds_config = structure(config.dataset.params, ds_cls, "dataset.params") if ds_cls else None
    aligner = _component(registry, "aligner", config.alignment.use, config.alignment.params, "alignment")
    synth = _component(registry, "synthesizer", config.synthesizer.use, config.synthesizer.params, "synthesizer")
    evals = [_component(registry, "evaluator", e.use, e.params, f"evaluators[{i}]") for i, e in enumerate(config.evaluators)]
    for comp, base in [(aligner, Aligner), (synth, Synthesizer)] + [(e, Evaluator) for e in evals]:
        if not isinstance(comp.instance, base):
            raise DataError(f"{comp.spec.kind} {comp.spec.name!r} from {comp.provider} is not a {base.__name__}")

    if source is None:
        source = ds_spec.load_factory()(ds_config, data_dir)
    domain = source.schema.preview_domain()
    if config.parties:
        names = [p.name or f"party{i + 1}" for i, p in enumerate(config.parties)]
        partition = VerticalPartition.from_lists([p.attributes for p in config.parties], names)
    else:
        partition = VerticalPartition.from_lists(source.default_parties, source.party_names)
    partition.validate(domain)

    budget = config.budget.to_budget()
    ledger = PrivacyLedger(budget)
    ledger.plan(source.schema.planned_charges())
    for comp in [aligner, synth, *evals]:
        ledger.check_plan()  # an earlier stage may already exceed the budget: say so with the split
        if comp is synth:  # a fill that copies records: later stages pay group privacy (ledger and ctx)
            ledger.group_size = aligner.instance.group_size()
        ctx = PlanContext(domain, partition, budget, tuple(c.cost for c in ledger.planned),
                          group_size=ledger.group_size)
        try:
            charges = comp.instance.plan(ctx)
        except BudgetError as exc:
            raise BudgetError(f"{comp.spec.kind} {comp.spec.name!r} cannot plan its spend: {exc}. "
                              f"Planned before it:\n{ledger.table(ledger.planned)}") from None
        if isinstance(comp.instance, Evaluator) and charges:
            raise BudgetError(f"evaluator {comp.spec.name!r} declares privacy charges; evaluators may not spend budget")
        if isinstance(comp.instance, Evaluator) and comp.instance.requires_holdout and config.evaluation.holdout <= 0:
            raise ConfigError(f"evaluator {comp.spec.name!r} scores on records the synthesizer never saw: "
                              "set [evaluation] holdout = 0.2 (for example)")
        ledger.plan(charges)
    ledger.check_plan()
    return Plan(config, source, partition, aligner, synth, evals, ledger, config.dataset.name, registry)


@contextlib.contextmanager
def _timed(timings: dict[str, float], name: str, progress: Any) -> Iterator[None]:
    if progress is not None:
        progress.set_description(name)
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0
    if progress is not None:
        progress.update(1)


def execute(plan: Plan, output_dir: str | Path | None = None, progress: bool = False) -> RunResult:
    if not isinstance(plan, Plan):   # a CollabPlan (the [collab] mode) runs itself
        return plan.execute(output_dir, progress)
    cfg = plan.config
    streams = dict(zip(RNG_STREAMS, (np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(len(RNG_STREAMS)))))
    timings: dict[str, float] = {}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=7, unit="stage", bar_format="{desc:<28}{bar}| {n_fmt}/{total_fmt} [{elapsed}]")
    try:
        with _timed(timings, "load data", bar):
            loaded = plan.source.load()
        holdout, keyed = None, loaded.party_frames is not None
        with _timed(timings, "encode", bar):
            if keyed:
                codec, views = _encode_parties(plan, loaded, streams["preprocessing"])
            else:
                codec = loaded.schema.fit(loaded.frame, plan.ledger, streams["preprocessing"])
                real = codec.encode(loaded.frame)
                if cfg.evaluation.holdout > 0:  # a seeded, data-independent split: the synthesizer never sees these rows
                    taken = _holdout_rows(np.arange(real.n), cfg.evaluation.holdout, streams["split"])
                    holdout, real = real.take(taken), real.take(np.setdiff1d(np.arange(real.n), taken))
                views = plan.partition.views(real)
        with _timed(timings, "align", bar):
            alignment = plan.aligner.instance.align(views, plan.ledger, streams["alignment"],
                                                    ids=loaded.party_ids if keyed else None)
            if isinstance(alignment, tuple):  # an aligner written against the older (views, info) contract
                alignment = Alignment(*alignment)
            views, align_info = alignment.views, alignment.info
            if keyed and cfg.evaluation.holdout > 0:  # held-out people come from those every party holds
                joined = VerticalData(plan.partition, views).joined()
                taken = _holdout_rows(np.flatnonzero(alignment.real_everywhere()), cfg.evaluation.holdout,
                                      streams["split"])
                holdout = joined.take(taken).project(codec.domain.attributes)
                keep = np.setdiff1d(np.arange(joined.n), taken)
                views = {p: v.take(keep) for p, v in views.items()}
                alignment = Alignment(views, align_info, {p: m[keep] for p, m in alignment.filled.items()})
        data = VerticalData(plan.partition, views)
        with _timed(timings, "fit", bar):
            plan.synthesizer.instance.fit(data, plan.ledger, streams["fit"])
        with _timed(timings, "sample", bar):
            synthetic = plan.synthesizer.instance.sample(cfg.sample_size, streams["sample"])
            synthetic = synthetic.project(codec.domain.attributes)
        with _timed(timings, "decode", bar):
            frame = codec.decode(synthetic, streams["decode"])
        metrics: dict[str, dict[str, float]] = {}
        # evaluators compare with the people every party holds for real (all rows unless a fill ran)
        real_aligned = data.joined().take(np.flatnonzero(alignment.real_everywhere())).project(codec.domain.attributes)
        with _timed(timings, "evaluate", bar):
            for comp in plan.evaluators:
                if comp.instance.uses_alignment and any(m.any() for m in alignment.filled.values()):
                    metrics[comp.spec.name] = comp.instance.evaluate_alignment(alignment, streams["evaluate"])
                elif holdout is None:
                    metrics[comp.spec.name] = comp.instance.evaluate(real_aligned, synthetic, streams["evaluate"])
                else:
                    metrics[comp.spec.name] = comp.instance.evaluate_holdout(real_aligned, holdout, synthetic,
                                                                             streams["evaluate"])
    finally:
        if bar is not None:
            bar.close()

    spent = plan.ledger.spent_epsilon()
    if spent > plan.ledger.budget.epsilon * (1 + 1e-9):  # cannot happen if spend() matched the plan
        raise BudgetError(f"the run spent ε={spent:.4g}, more than the budget {plan.ledger.budget.epsilon:.4g}")
    report = build_report(plan, loaded, real_aligned, synthetic, metrics, align_info, timings)
    report["evaluation"] = {
        "holdout_records": 0 if holdout is None else holdout.n,
        "scored_against": {c.spec.name: ("training table" if holdout is None else
                                         "training and holdout" if c.instance.requires_holdout else
                                         "holdout" if c.instance.prefers_holdout else "training table")
                           for c in plan.evaluators},
    }
    result = RunResult(frame, synthetic, real_aligned, metrics, plan.ledger, report)
    if output_dir is not None:
        result.output_dir = write_outputs(result, Path(output_dir))
        for comp in plan.evaluators:   # figures an evaluator made from its last scores (e.g. heatmaps)
            comp.instance.write_artifacts(result.output_dir)
    return result


def _encode_parties(plan: Plan, loaded: Any, rng: np.random.Generator) -> tuple[TableCodec, dict[str, Dataset]]:
    """ID-keyed data: each party encodes its own table with its part of the schema."""
    frames = loaded.party_frames
    names = list(plan.partition.names)
    if set(frames) != set(names):
        raise DataError(f"the dataset has tables for parties {sorted(frames)} but the config's parties are {names}")
    by_name, views = {}, {}
    for party in plan.partition:
        own = list(party.attributes)
        frame = frames[party.name]
        lacking = [a for a in own if a not in frame.columns]
        if lacking:
            raise DataError(f"party {party.name!r}'s table lacks its columns {lacking}")
        sub = TableSchema(tuple(c for c in loaded.schema.columns if c.name in own))
        codec = sub.fit(frame[own], plan.ledger, rng)
        views[party.name] = codec.encode(frame[own])
        by_name.update({c.schema.name: c for c in codec.columns})
    return TableCodec(tuple(by_name[c.name] for c in loaded.schema.columns)), views


def _holdout_rows(candidates: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A seeded, data-independent share of the `candidates` rows to hold out (sorted indices)."""
    k = int(round(fraction * len(candidates)))
    if k < 1 or k >= len(candidates):
        raise DataError(f"holdout {fraction} of {len(candidates)} records leaves an empty side")
    return np.sort(rng.permutation(candidates)[:k])


def run(config: RunConfig, output_dir: str | Path | None = None, registry: Registry | None = None,
        data_dir: str | None = None, progress: bool = False) -> RunResult:
    """Plan, check the budget, then execute. The pandas-in/pandas-out entry point for configs."""
    return execute(make_plan(config, registry, data_dir), output_dir, progress)


def build_report(plan: Plan, loaded: Any, real: Dataset, synthetic: Dataset, metrics: dict, align_info: dict,
                 timings: dict[str, float]) -> dict[str, Any]:
    synth = plan.synthesizer
    centralized = "centralized" in synth.spec.capabilities and len(plan.partition) > 1
    reg = plan.registry
    return {
        "vertisynth_version": __version__,
        "python": platform.python_version(),
        "seed": plan.config.seed,
        "config": plan.config.to_dict(),
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
            "mode": ("centralised baseline: the parties' columns were joined in one place (a comparison "
                     "point, not a vertical protocol)") if centralized else "vertical: parties share only messages",
            "phase_seconds": synth.instance.timings(),
            **({"budget_split": synth.instance.budget_split()} if hasattr(synth.instance, "budget_split") else {}),
            **({"privacy_notes": synth.instance.privacy_notes()} if hasattr(synth.instance, "privacy_notes") else {}),
            **({"model": synth.instance.model_details()} if hasattr(synth.instance, "model_details") else {}),
        },
        "synthetic_records": synthetic.n,
        "evaluators": [e.describe() for e in plan.evaluators],
        "metrics": metrics,
        "metrics_note": "metrics compare against the real data and are not covered by the DP guarantee; "
                        "only the synthetic table is the DP release",
        "privacy": plan.ledger.to_dict(),
        "plugins": reg.describe(),
        "broken_plugins": [attrs.asdict(b) for b in reg.broken],
        "timings_seconds": timings,
    }


def write_outputs(result: RunResult, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    result.synthetic.to_csv(out / "synthetic.csv", index=False)
    (out / "report.json").write_text(json.dumps(result.report, indent=2, default=_json_default))
    (out / "ledger.json").write_text(json.dumps(result.report["privacy"], indent=2, default=_json_default))
    (out / "summary.md").write_text(summary_markdown(result))
    return out


def _json_default(o: Any) -> Any:
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
        *[f"- **note**: {n}" for n in r["synthesizer"].get("model", {}).get("notes", [])],
        "",
        "## Privacy",
        "",
        f"Budget ε = {p['budget']['epsilon']:.4g}, δ = {p['budget']['delta']:.3g}; "
        f"spent ε = {p['spent_epsilon']:.4g} (composed across all parties); "
        f"{'within budget' if p['within_budget'] else 'OVER BUDGET'}.",
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
        *[f"| {ev} | {m} | {v:.4f} |" for ev, ms in r["metrics"].items() for m, v in ms.items()],
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
    if r["dataset"]["schema_inferred_from_data"]:
        lines += ["", f"**Note:** {r['dataset']['schema_note']}."]
    return "\n".join(lines) + "\n"
