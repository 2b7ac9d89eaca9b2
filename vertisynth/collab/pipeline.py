"""The `[collab]` pipeline mode: horizontal custodians, secure aggregation, tuning, publish once.

Same order of work as the vertical pipeline (vertisynth.run.pipeline): config → plugins → public schema →
every planned charge (final run, tuning) → budget check → only then rows are read → custodians → tuning →
final run on all data (the only release) → evaluation → outputs. `make_plan` / `execute` in core dispatch
here when the config has a [collab] table, so `vertisynth run|validate|study` work unchanged.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pandas as pd

from vertisynth import __version__
from vertisynth.core.structuring import structure
from vertisynth.run.config import RunConfig, noise_for, uses_user_data
from vertisynth.run.console import progress_bar
from vertisynth.run.pipeline import RunResult, build_component, build_evaluators, check_evaluator, dataset_loader
from vertisynth.run.report import write_release
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.encoding import TableCodec
from vertisynth.core.errors import BudgetError, ConfigError, DataError
from vertisynth.core.interfaces import Evaluator, MeasuresMarginals, PlanContext
from vertisynth.core.loaded import DatasetSource
from vertisynth.core.noise import named_streams
from vertisynth.core.privacy import Charge, Composition, PrivacyLedger, ZCDP
from vertisynth.core.registry import Registry

from .horizontal import HorizontalRun, check_custodians, check_numeric_schema, simulate_custodians, stack
from .secure_aggregation import STAGE as SA_STAGE
from .secure_aggregation import InMemory, Randomness
from .tuning import (DP_METRIC, DP_METRIC_RANGE, PAPER_LABEL, TEST_LABEL, Tuner, TuningOutcome, candidates,
                     selection_rng, solve_rho_q)

STREAMS = ("split", "tuning", "fit", "sample", "decode", "evaluate")
RESERVED = "final_run_reserved"


@attrs.define
class CollabPlan:
    config: RunConfig
    source: DatasetSource
    synthesizer: Any          # run.pipeline.Component
    evaluators: list
    ledger: PrivacyLedger
    registry: Registry
    dataset_name: str
    partition: VerticalPartition
    run: HorizontalRun
    custodians: list[str]
    rho_pre: float
    rho_synth: float
    tuner: Tuner | None = None
    test_secret: bytes | None = None   # tests only: reproducible candidate draws (tuning.selection_rng)

    def who(self) -> str:
        return f"{len(self.custodians)} horizontal custodians"

    def execute(self, output_dir: str | Path | None = None, progress: bool = False):
        with progress_bar("collab run", progress):
            return execute_collab(self, output_dir)


def make_collab_plan(config: RunConfig, registry: Registry, data_dir: str | None,
                     source: DatasetSource | None) -> CollabPlan:
    cc = config.section("collab")
    if config.parties:
        raise ConfigError("[[parties]] is a vertical split, but with [collab] every custodian holds every column "
                          "(horizontal). Drop [[parties]]; docs/collab.md explains how the two settings compose")
    if config.alignment.use != "positional":
        raise ConfigError(f"[collab] custodians hold different people, so there is nothing to align: drop "
                          f"[alignment] (got use = {config.alignment.use!r})")
    if source is None:
        source = dataset_loader(config, registry, data_dir)()
    schema = source.schema
    quantile = [c.name for c in schema.columns if c.kind == "numeric" and c.binning == "quantile"]
    if quantile:
        raise ConfigError(f"[collab]: columns {quantile} use the dataset's own quantile binning; list them in "
                          "collab.numeric instead (DP quantiles over all custodians, or locally)")
    check_numeric_schema(schema.columns, cc.numeric)
    base: TableCodec = schema.fit(pd.DataFrame({c: [] for c in schema.names}), None, np.random.default_rng(0))

    synth = build_component(registry, "synthesizer", config.synthesizer.use, config.synthesizer.params, "synthesizer")
    if not isinstance(synth.instance, MeasuresMarginals):
        able = [n for n in registry.names("synthesizer") if "horizontal" in registry.get("synthesizer", n).capabilities]
        raise ConfigError(f"[collab]: synthesizer {config.synthesizer.use!r} cannot fit from securely aggregated "
                          f"marginals; choose one of {sorted(able)}")
    synth_cls = synth.spec.load_config_cls()
    factory = synth.spec.load_factory()

    def make_synth(params: dict[str, Any]) -> MeasuresMarginals:
        merged = {**config.synthesizer.params, **params}
        return factory(structure(merged, synth_cls, f"synthesizer.params of {synth.spec.name!r}"))

    budget = config.budget.to_budget()
    # the run layer's rule (make_plan): secure noise on someone's records, the custodians' own CSVs included
    ledger = PrivacyLedger(budget, noise=noise_for(config, cross_machine=False,
                                                   user_data=uses_user_data(config) or bool(cc.files)))
    ctx = PlanContext(base.domain, VerticalPartition.single(base.domain), budget)
    evals = build_evaluators(registry, config.evaluators)
    for e in evals:   # the run layer's checks, as every plan makes them
        check_evaluator(e, e.instance.plan(ctx) if isinstance(e.instance, Evaluator) else [], config)

    names = list(cc.files) if cc.files else [f"custodian{j + 1}" for j in range(cc.custodians)]
    run = HorizontalRun(base, dict(cc.numeric), cc.bins, cc.preprocessing == "local", cc.debinning, cc.servers,
                        make_synth)
    rho_total = budget.rho()
    t = cc.tuning
    sound = t is not None and t.method != "paper"
    rho_final = rho_total * (1 - t.fraction) if sound else rho_total
    frac = cc.preprocessing_fraction if cc.numeric else 0.0
    rho_pre, rho_synth = rho_final * frac, rho_final * (1 - frac)
    tuner = _plan_tuning(config, registry, run, names, base, budget, rho_total, rho_final, frac, ctx) if t else None

    if tuner is None:
        ledger.plan(run.charges({}, rho_pre, rho_synth))
    else:   # the chosen candidate's itemised charges replace this reservation (same total ρ) after tuning
        for params in tuner.grid:
            got = sum(c.cost.rho for c in run.charges(params, rho_pre, rho_synth))
            if not np.isclose(got, rho_final, rtol=1e-9):
                raise BudgetError(f"candidate {params} would spend ρ={got:.4g}, not the final run's {rho_final:.4g}")
        ledger.plan([Charge(SA_STAGE, RESERVED, ZCDP(rho_final), None,
                            "final run on all data, hyperparameters chosen by the tuning")])
        ledger.plan(tuner.charges())
    ledger.check_plan()
    part = VerticalPartition.from_lists([list(base.domain.attributes)], ["custodians"])
    return CollabPlan(config, source, synth, evals, ledger, registry, config.dataset.name, part, run, names,
                      rho_pre, rho_synth, tuner)


def _plan_tuning(config: RunConfig, registry: Registry, run: HorizontalRun, names: list[str], base: TableCodec,
                 budget, rho_total: float, rho_final: float, frac: float, ctx: PlanContext) -> Tuner:
    t = config.section("collab").tuning
    unknown = sorted(set(t.thresholds) - set(names))
    if unknown:
        raise ConfigError(f"collab.tuning.thresholds: unknown custodian(s) {unknown}; custodians: {names}")
    grid = candidates(t.grid)
    for params in grid:
        if "bins" in params and (not isinstance(params["bins"], int) or params["bins"] < 2):
            raise ConfigError(f"collab.tuning.grid.bins: bin counts must be integers >= 2, got {params['bins']!r}")
        run.charges(params, 1.0, 1.0)   # structures every candidate's params now: unknown keys fail here
    if t.method == "paper":
        ev_name, _, key = t.metric.partition(".")
        if t.metric == DP_METRIC:
            raise ConfigError("collab.tuning: method 'paper' scores folds with an evaluator on real rows (as the "
                              "paper does); set metric = 'evaluator.metric', e.g. 'ml_utility.lr_accuracy_synthetic'")
        if not key:
            raise ConfigError(f"collab.tuning.metric must look like 'evaluator.metric' (e.g. "
                              f"'workload_error.l1_1way'), got {t.metric!r}")
        spec = registry.get("evaluator", ev_name)
        cls = spec.load_config_cls()
        evaluator = spec.load_factory()(structure(t.metric_params, cls, "collab.tuning.metric_params") if cls else None)
        evaluator.plan(ctx)
        goal, lo, hi = spec.goal, spec.min_value, spec.max_value
    else:
        if t.metric != DP_METRIC:
            raise ConfigError(f"collab.tuning.metric: the sound methods vote on the DP workload score "
                              f"{DP_METRIC!r}; {t.metric!r} would read real rows without noise. Use method = "
                              "'paper' to reproduce the paper's (unsound) procedure")
        evaluator, goal, (lo, hi) = None, "minimize", DP_METRIC_RANGE
    workload = [tuple(w) for w in t.score_workload] if t.score_workload else [(a,) for a in base.domain.attributes]
    for w in workload:
        base.domain.check(w)
    tuner = Tuner(t.method, t.folds, grid, dict(t.thresholds), t.vote, goal, 0.0, 0.0, workload=workload,
                  metric=t.metric, evaluator=evaluator, metric_range=(lo, hi))
    for c, v in t.thresholds.items():
        tuner.check_threshold(c, v)
    if t.method == "paper":   # each fold run gets the final run's budget, as in the paper
        tuner.rho_pre, tuner.rho_synth = rho_final * frac, rho_final * (1 - frac)
        return tuner
    tuner.rho_score = rho_total * t.fraction * t.score_fraction
    tuner.mu = float(t.expected_runs or max(len(grid), 1))
    fixed = [ZCDP(rho_final), ZCDP(tuner.rho_score)]
    tuner.rho_q = solve_rho_q(budget, fixed, t.method, tuner.mu, len(grid))
    rho_run = tuner.rho_q / (t.folds - 1)   # a person is in K−1 training sets
    tuner.rho_pre, tuner.rho_synth = rho_run * frac, rho_run * (1 - frac)
    return tuner


# -- execution -------------------------------------------------------------------------------------------
def read_custodian_csv(name: str, path: str | Path) -> pd.DataFrame:
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"custodian {name!r}: CSV {str(p)!r} does not exist")
    try:
        # as strings, and only empty cells are missing (a category may be called "None" or "NA")
        f = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"custodian {name!r}: cannot read {str(p)!r}: {exc}") from None
    f.columns = [str(c) for c in f.columns]
    return f


def streams(seed: int | None) -> dict[str, np.random.Generator]:
    """The run's named random streams (the same in the simulation and in the separate-process publisher)."""
    return named_streams(seed, STREAMS)


def final_randomness(seed: int | None) -> Randomness:
    """Shares and server noise of the final run in the simulation: derived per (server, query) from the config
    seed, so `vertisynth collab server --seed SEED` reproduces it (tests); None: OS-CSPRNG shares and
    discrete Gaussian noise (noise = "secure", and real servers)."""
    return Randomness(seed, "final")


def commit_choice(plan: CollabPlan, params: dict[str, Any]) -> None:
    """After tuning: the final run's reservation becomes the chosen candidate's itemised charges (same ρ)."""
    ledger = plan.ledger
    ledger.planned = [c for c in ledger.planned if c.mechanism != RESERVED]
    ledger.plan(plan.run.charges(params, plan.rho_pre, plan.rho_synth))
    ledger.check_plan()


def _custodian_frames(plan: CollabPlan, loaded, rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    cc = plan.config.section("collab")
    names = plan.run.base.domain.attributes
    if cc.files:
        frames = {}
        for name, path in cc.files.items():
            frames[name] = read_custodian_csv(name, path)
        check_custodians(frames, names)
        return {n: f[list(names)] for n, f in frames.items()}
    if loaded.frame is None:
        raise ConfigError("[collab] splits one table among custodians, but this dataset is ID-keyed per party "
                          "(vertical); give collab.files instead")
    return simulate_custodians(loaded.frame[list(names)], cc.custodians, cc.split, rng)



def execute_collab(plan: CollabPlan, output_dir: str | Path | None = None):
    cfg, run, ledger = plan.config, plan.run, plan.ledger
    rng = streams(cfg.seed)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    loaded = plan.source.load()
    frames = _custodian_frames(plan, loaded, rng["split"])
    holdout = None
    if cfg.evaluation.holdout > 0:
        # each row is held out independently with probability `holdout` (so adding a person moves no one
        # else between the sides, unlike a fixed-size split of a shuffled table)
        keep, held = {}, []
        for name, f in frames.items():
            taken = rng["split"].random(len(f)) < cfg.evaluation.holdout
            if taken.all() or not taken.any():
                raise DataError(f"holdout {cfg.evaluation.holdout} of custodian {name!r}'s {len(f)} rows leaves an empty side")
            keep[name] = f[~taken].reset_index(drop=True)
            held.append(run.base.encode(f[taken]))
        frames, holdout = keep, stack(held)
    timings["load data"] = time.perf_counter() - t0

    outcome: TuningOutcome | None = None
    params: dict[str, Any] = {}
    if plan.tuner is not None:
        t1 = time.perf_counter()
        secure = InMemory(run.servers, Randomness(None, "tuning")) if ledger.noise == "secure" else None
        outcome = plan.tuner.run(run, frames, ledger, selection_rng(plan.test_secret), cfg.seed, transport=secure)
        if outcome.method != "private_selection":   # its wall time grows with the secret K
            timings["tuning"] = time.perf_counter() - t1
        params = outcome.chosen or {}
        commit_choice(plan, params)
    published = outcome is None or outcome.published

    real = stack([run.base.encode(f) for f in frames.values()])
    metrics: dict[str, dict[str, float]] = {}
    frame = pd.DataFrame(columns=list(run.base.domain.attributes))
    synthetic = Dataset(np.zeros((0, len(run.base.domain)), np.int64), run.base.domain)
    codec = None
    if published:
        t2 = time.perf_counter()
        codec, synth = run.fit(frames, params, plan.rho_pre, plan.rho_synth, ledger, rng["fit"],
                               InMemory(run.servers, final_randomness(None if ledger.noise == "secure" else cfg.seed)))
        timings["final run (preprocess, secure measurement, fit)"] = time.perf_counter() - t2
        codes = synth.sample(cfg.sample_size, rng["sample"])
        frame = codec.decode(codes, rng["decode"])
        synthetic = run.base.encode(frame)
        t3 = time.perf_counter()
        for comp in plan.evaluators:
            if holdout is None:
                metrics[comp.label] = comp.instance.evaluate(real, synthetic, rng["evaluate"])
            else:
                metrics[comp.label] = comp.instance.evaluate_holdout(real, holdout, synthetic, rng["evaluate"])
        timings["evaluate"] = time.perf_counter() - t3
    if ledger.spent_epsilon() > ledger.budget.epsilon * (1 + 1e-9):
        raise BudgetError(f"the run spent ε={ledger.spent_epsilon():.4g}, more than the budget {ledger.budget.epsilon:.4g}")
    report = collab_report(plan, loaded, frames, real, synthetic, metrics, codec, outcome, params, holdout, timings)
    result = RunResult(frame, synthetic, real, metrics, ledger, report)
    if output_dir is not None:
        result.output_dir = write_collab_outputs(result, Path(output_dir), published)
    return result


def costs(plan: CollabPlan, outcome: TuningOutcome | None) -> dict[str, Any]:
    """The privacy cost as accounted, and what the paper's argument would claim (final run only)."""
    delta = plan.ledger.budget.delta
    final = [c.cost for c in plan.ledger.spent if c.stage == SA_STAGE]
    out = {"accounted_epsilon": plan.ledger.spent_epsilon(),
           "paper_claimed_epsilon": Composition.of(final).epsilon(delta) if final else 0.0}
    t = plan.tuner
    if t is not None and outcome is not None and t.method == "paper":
        ran = outcome.runs * (t.folds - 1) * (t.rho_pre + t.rho_synth)   # each person: K−1 fold runs per candidate
        out["label"] = PAPER_LABEL
        out["honest_composition_epsilon"] = Composition.of(final + ([ZCDP(ran)] if ran > 0 else [])).epsilon(delta)
        out["note"] = ("the paper charges only the final run; composing the fold runs it made (without even "
                       "counting the choice) gives honest_composition_epsilon")
    return out


KEPT_SECRET = "secret: Papernot–Steinke's bound needs the number of runs K ~ Poisson(μ) hidden"


def candidate_runs(outcome: TuningOutcome) -> int | str:
    """What the outputs may say of the number of candidate runs: private_selection's K is secret."""
    return KEPT_SECRET if outcome.method == "private_selection" else outcome.runs


def tuning_report(plan: CollabPlan, outcome: TuningOutcome | None,
                  test_secret: bytes | None = None) -> dict[str, Any] | None:
    if outcome is None:
        return None
    return {"method": outcome.method, "label": outcome.label, "folds": plan.tuner.folds,
            "grid_size": len(plan.tuner.grid), "candidate_runs": candidate_runs(outcome), "chosen": outcome.chosen,
            "published": outcome.published, "notes": outcome.notes, "metric": plan.tuner.metric,
            "thresholds": plan.tuner.thresholds, "vote": plan.tuner.vote_rule,
            **({"dp_scores": outcome.tried} if outcome.method != "paper" else
               {"scores": "not reported: the paper's fold scores read real rows without noise"}),
            **({"rho_per_candidate": plan.tuner.rho_q, "expected_runs": plan.tuner.mu}
               if outcome.method != "paper" else {}),
            **({"candidate_draws": TEST_LABEL} if test_secret is not None else {})}


def collab_report(plan: CollabPlan, loaded, frames, real: Dataset, synthetic: Dataset, metrics, codec, outcome,
                  params, holdout, timings) -> dict[str, Any]:
    cc = plan.config.section("collab")
    numeric = {}
    if codec is not None:
        numeric = {c: {"edges": nb.edges.tolist(), "means": nb.means.tolist(),
                       **({"custodians": list(nb.owners)} if nb.owners else {})} for c, nb in codec.numeric.items()}
    tuning = tuning_report(plan, outcome, plan.test_secret)
    mode = (f"horizontal custodians: {len(frames)} custodians hold the same columns; marginals reach the "
            f"synthesizer only by secure aggregation across {cc.servers} non-colluding servers, each adding its "
            f"own Gaussian noise; {cc.preprocessing} DP quantile binning of {sorted(cc.numeric) or 'no columns'}")
    return {
        "vertisynth_version": __version__,
        "mode": mode,
        "seed": plan.config.seed,
        "config": plan.config.resolved(sample_size=synthetic.n, noise=plan.ledger.noise),
        "dataset": {"name": plan.dataset_name, "description": loaded.description, "records": real.n,
                    "attributes": list(real.domain.attributes), "domain_sizes": list(real.domain.shape),
                    "schema_inferred_from_data": bool(loaded.schema.inferred)},
        "collab": {"custodians": {n: len(f) for n, f in frames.items()}, "servers": cc.servers,
                   "preprocessing": cc.preprocessing, "debinning": cc.debinning, "numeric_bins": numeric,
                   "final_params": params, "tuning": tuning, "costs": costs(plan, outcome),
                   "published": outcome is None or outcome.published},
        "synthesizer": plan.synthesizer.describe(),
        "synthetic_records": synthetic.n,
        "evaluation": {"holdout_records": 0 if holdout is None else holdout.n},
        "metrics": metrics,
        "metrics_note": "metrics compare against the real data and are not covered by the DP guarantee; "
                        "only the synthetic table (and the DP bin edges and means) is the DP release",
        "privacy": {**plan.ledger.to_dict(),
                    **({"tuning_accounting": outcome.label} if outcome is not None else {})},
        "timings_seconds": timings,
    }


def summary_markdown(report: dict[str, Any]) -> str:
    c, p = report["collab"], report["privacy"]
    t = c["tuning"]
    lines = [f"# vertisynth collab run: {report['dataset']['name']} with {report['synthesizer']['use']}", "",
             f"- mode: {report['mode']}",
             "- custodians: " + ", ".join(f"{n} {k} rows" for n, k in c["custodians"].items()),
             f"- published: {'yes' if c['published'] else 'NO (no candidate met the custodians vote)'}; "
             f"synthetic records: {report['synthetic_records']}"]
    if t:
        runs = t["candidate_runs"]
        runs = f"{runs} candidate run(s)" if isinstance(runs, int) else "a secret number of candidate runs"
        lines += [f"- tuning: {t['label']}; {runs} of {t['folds']}-fold CV over {t['grid_size']} candidate(s); "
                  f"chosen {t['chosen']}" + (f" [{t['candidate_draws']}]" if "candidate_draws" in t else "")]
    lines += ["", "## Privacy", "",
              f"Budget ε = {p['budget']['epsilon']:.4g}, δ = {p['budget']['delta']:.3g}; accounted ε = "
              f"{c['costs']['accounted_epsilon']:.4g}; the paper's argument would claim ε = "
              f"{c['costs']['paper_claimed_epsilon']:.4g}"
              + (f" (composing the runs it made: ε = {c['costs']['honest_composition_epsilon']:.4g}; "
                 f"{c['costs']['label']})" if "honest_composition_epsilon" in c["costs"] else "") + ".", "",
              f"Noise: {p.get('noise', 'not recorded')}.", "",
              "| stage | ε alone |", "|---|---|",
              *[f"| {s} | {e:.4g} |" for s, e in p["per_stage_epsilon"].items()], "",
              "## Metrics", "", "| evaluator | metric | value |", "|---|---|---|",
              *[f"| {ev} | {m} | {v:.4f} |" for ev, ms in report["metrics"].items() for m, v in ms.items()], "",
              f"_{report['metrics_note']}._", "",
              "## Timings (seconds)", "",
              *[f"- {k}: {v:.2f}" for k, v in report["timings_seconds"].items()], ""]
    return "\n".join(lines)


def write_collab_outputs(result, out: Path, published: bool) -> Path:
    """Publish once: synthetic.csv is written only for the final run; the tuning's fold tables never are."""
    # the one output writer: an earlier run's synthetic.csv must not pass for this unpublished run's
    return write_release(out, result.report, summary_markdown(result.report), result.synthetic if published else None)
