"""The config-driven pipeline.

Order of work, so that nothing touches data before the plan is known to fit the budget:
  parse config → resolve plugins → structure params → public schema and party split →
  ask every stage for its privacy cost → check the budget → load data → encode → align →
  fit (spending exactly the plan) → sample → decode → evaluate → write outputs.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from vertisynth.core.capabilities import (AlignsRows, ChoosesSampling, CrossPartyMeasure, EstimatesMemory,
                                          EvaluatesCounts, FitsOnOracle, HasGraphicalModel, NamesEncoder,
                                          PartyServerSplit, PlansProbeStages, PricesAnswers, ProbesWholeRows,
                                          ReleasesOnce, ReportsReferencePoints, StepsInChunks, SumsWholeRows,
                                          below_two_sided, wants_raw_values)
from vertisynth.core.chunks import ChunkedCounts
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.encoding import ID_LIST_MIN, TableCodec, TableSchema, identifier_list_error
from vertisynth.core.errors import BudgetError, ConfigError, DataError, VertisynthError
from vertisynth.core.interfaces import Aligner, Alignment, Evaluator, PlanContext, Synthesizer, VerticalData
from vertisynth.core.loaded import DatasetSource, LoadedData
from vertisynth.core.noise import named_streams
from vertisynth.core.outfiles import FolderLock, check_not_foreign, replace_atomically, write_csv
from vertisynth.core.privacy import Charge, PrivacyLedger
from vertisynth.core.registry import Registry, default_registry
from vertisynth.core.specs import ComponentSpec
from vertisynth.core.structuring import CONVERTER, structure
from vertisynth.pgm.model import HYPERGEOMETRIC_MAX
from vertisynth.vertical import VerticalOracle, owners, party_streams
from vertisynth.vertical.cost import answers as twin_answers

from .config import RunConfig, noise_for, uses_user_data
from .console import progress_bar
from .model import MODEL_FILE, FittedModel
from .report import build_report, write_outputs
from .spill import sweep
from .stream import coded_chunks, fit_codec, joined_chunks
from .stream_align import align_party_files, encode_party_files
from .stream_out import DecodedTable, WrittenTable, block_rows_of, decoded_table, sample_table, stream_output

if TYPE_CHECKING:   # pandas is imported where a frame is built or read (docs/speed.md, fifth pass)
    import pandas as pd

RNG_STREAMS = ("preprocessing", "alignment", "fit", "sample", "decode", "evaluate", "split")


@attrs.define
class Component:
    spec: ComponentSpec
    config: Any
    instance: Any
    provider: str
    alias: str | None = None

    @property
    def label(self) -> str:
        """The name its metrics go under: the config's `as`, else the plugin's name."""
        return self.alias or self.spec.name

    def describe(self) -> dict[str, Any]:
        return {
            "use": self.spec.name,
            **({"as": self.alias} if self.alias else {}),
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
    measure: Component | None = None   # the cross-party measure of a vertical oracle run (params.vertical)

    def who(self) -> str:
        """Who holds the data, for the CLI's first line."""
        return f"{len(self.partition)} parties"


@attrs.define
class RunResult:
    # None: a streamed run's table of several blocks, in `synthetic_path` only; a DecodedTable: numpy columns
    # whose DataFrame is built when `synthetic` is first read (a run that only writes its CSV imports no pandas)
    _synthetic: pd.DataFrame | DecodedTable | None
    synthetic_codes: Any               # a Dataset; a streamed run's table of several blocks: its counts only
    real_codes: Dataset | None   # None: the deploy server's result (it holds no real rows)
    metrics: dict[str, dict[str, float]]
    ledger: PrivacyLedger
    report: dict[str, Any]
    output_dir: Path | None = None
    model: FittedModel | None = None   # the fitted model (a DP release), when the synthesizer has one
    synthetic_path: Path | None = None   # the synthetic.csv written, if any

    @property
    def synthetic(self) -> pd.DataFrame:
        """The synthetic table. A streamed run (`stream = true`) keeps it only when it is one block
        (`sample_block_rows`); a larger one was written block by block to `synthetic_path` and is read from
        there (e.g. `pd.read_csv(result.synthetic_path, chunksize=...)`)."""
        if self._synthetic is None:
            raise DataError(f"this streamed run wrote its {self.synthetic_codes.n} synthetic rows block by block to "
                            f"{self.synthetic_path} and holds none in memory: read them from that file (e.g. "
                            "pd.read_csv(result.synthetic_path, chunksize=100_000))")
        if isinstance(self._synthetic, DecodedTable):
            return self._synthetic.frame
        return self._synthetic

    def write_synthetic_csv(self, path: Path) -> Path:
        """The synthetic table as CSV (`DataFrame.to_csv(index=False)`'s bytes), whole or not at all."""
        if isinstance(self._synthetic, DecodedTable):
            return self._synthetic.write_csv(path)
        return write_csv(path, self.synthetic)

    def sample(self, n: int | None = None, seed: int | np.random.Generator | None = None) -> pd.DataFrame:
        """More rows from the fitted model: post-processing of the release, no budget spent."""
        if self.model is None:
            raise DataError(self.report.get("privacy", {}).get("releases", {}).get(MODEL_FILE)
                            or "this run kept no model to sample from")
        return self.model.sample(n, seed)


def build_component(registry: Registry, kind: str, name: str, params: dict[str, Any], where: str) -> Component:
    spec = registry.get(kind, name)
    cls = spec.load_config_cls()
    config = structure(params, cls, f"{where}.params of {name!r}") if cls is not None else None
    if cls is None and params:
        raise ConfigError(f"{where}: {kind} {name!r} takes no params, got {sorted(params)}")
    factory = spec.load_factory()
    instance = factory(config) if cls is not None else factory()
    return Component(spec, config, instance, registry.provider(kind, name))


def build_evaluators(registry: Registry, entries: list[Any], where: str = "evaluators") -> list[Component]:
    """The configured evaluators, each under its own label; a label used twice is refused (one entry's metrics
    would silently replace the other's)."""
    comps, seen = [], {}
    for i, e in enumerate(entries):
        comp = build_component(registry, "evaluator", e.use, e.params, f"{where}[{i}]")
        comp.alias = e.alias
        if comp.label in seen:
            raise ConfigError(f"{where}[{i}]: {comp.label!r} is already the name of {where}[{seen[comp.label]}]; give "
                              f'each entry its own name, e.g. as = "{comp.label}_{i + 1}"')
        seen[comp.label] = i
        comps.append(comp)
    return comps


def dataset_loader(config: RunConfig, registry: Registry, data_dir: str | None) -> Callable[[], DatasetSource]:
    """The config's [dataset]: its plugin and params resolved now (errors first), the source made when called."""
    spec = registry.get("dataset", config.dataset.name)
    cls = spec.load_config_cls()
    ds_config = structure(config.dataset.params, cls, "dataset.params") if cls else None
    return lambda: spec.load_factory()(ds_config, data_dir)


def check_evaluator(comp: Component, charges: list[Charge], config: RunConfig) -> None:
    """What every plan refuses of an evaluator (with the charges its `plan` returned), before any data: one that
    is not an Evaluator, declares raw values without scoring them, spends budget, or needs a holdout the config
    does not keep."""
    if not isinstance(comp.instance, Evaluator):
        raise DataError(f"{comp.spec.kind} {comp.spec.name!r} from {comp.provider} is not a Evaluator")
    wants_raw_values(comp.spec, comp.instance)   # a declaration without evaluate_raw: refused before data
    if charges:
        raise BudgetError(f"evaluator {comp.spec.name!r} declares privacy charges; evaluators may not spend budget")
    if comp.instance.requires_holdout and config.evaluation.holdout <= 0:
        raise ConfigError(f"evaluator {comp.spec.name!r} scores on records the synthesizer never saw: "
                          "set [evaluation] holdout = 0.2 (for example)")


def make_plan(config: RunConfig, registry: Registry | None = None, data_dir: str | None = None,
              source: DatasetSource | None = None, reproducible: bool = False) -> Plan:
    """Resolve plugins, structure params, split parties and plan the privacy spend (no data read).

    `source` replaces the config's [dataset] (the Python API passes in-memory DataFrames this way).
    `reproducible`: a simulation of a deployment under a test secret (deploy/simulate.py), which draws the
    simulation noise as the deployed parties then do, whatever the data (`noise_for`).
    """
    registry = registry or default_registry()
    modes = [name for name in registry.names("run_mode") if config.section(name) is not None]
    if len(modes) > 1:
        raise ConfigError(f"the config chooses the run modes {modes}; give one of their tables only")
    if modes:   # another run mode (e.g. [collab]: horizontal custodians) plans and runs itself
        return registry.get("run_mode", modes[0]).load_factory()(config, registry, data_dir, source)
    load_source = dataset_loader(config, registry, data_dir) if source is None else lambda: source
    aligner = build_component(registry, "aligner", config.alignment.use, config.alignment.params, "alignment")
    synth = build_component(registry, "synthesizer", config.synthesizer.use, config.synthesizer.params, "synthesizer")
    evals = build_evaluators(registry, config.evaluators)
    for comp, base in [(aligner, Aligner), (synth, Synthesizer)] + [(e, Evaluator) for e in evals]:
        if not isinstance(comp.instance, base):
            raise DataError(f"{comp.spec.kind} {comp.spec.name!r} from {comp.provider} is not a {base.__name__}")

    source = load_source()
    domain = source.schema.preview_domain()
    if config.parties:
        names = [p.name or f"party{i + 1}" for i, p in enumerate(config.parties)]
        partition = VerticalPartition.from_lists([p.attributes for p in config.parties], names)
    else:
        partition = VerticalPartition.from_lists(source.default_parties, source.party_names)
    partition.validate(domain)

    budget = config.budget.to_budget()
    ledger = PrivacyLedger(budget, noise=noise_for(config, cross_machine=False,
                                                   user_data=uses_user_data(config) and not reproducible))
    ledger.plan(source.schema.planned_charges())
    measure = cross_party_measure(registry, synth, partition)
    for comp in [aligner, synth, *evals]:
        ledger.check_plan()  # an earlier stage may already exceed the budget: say so with the split
        if comp is synth:  # a fill that copies records: later stages pay group privacy (ledger and ctx)
            ledger.group_size = aligner.instance.group_size()
        ctx = PlanContext(domain, partition, budget, tuple(c.cost for c in ledger.planned),
                          group_size=ledger.group_size)
        if comp is synth and measure is not None:
            released, ctx = plan_release(measure, synth, ctx)
            ledger.plan(released)
        try:
            charges = comp.instance.plan(ctx)
        except BudgetError as exc:
            raise BudgetError(f"{comp.spec.kind} {comp.spec.name!r} cannot plan its spend: {exc}. "
                              f"Planned before it:\n{ledger.table(ledger.planned)}") from None
        if comp in evals:
            check_evaluator(comp, charges, config)
        ledger.plan(charges)
    ledger.check_plan()
    if measure is not None and config.stream:
        raise ConfigError("synthesizer.params.vertical: a vertical oracle run reads whole party tables; "
                          "set stream = false")
    return Plan(config, source, partition, aligner, synth, evals, ledger, config.dataset.name, registry, measure)


def cross_party_measure(registry: Registry, synth: Component, partition: VerticalPartition) -> Component | None:
    """The cross-party measure a synthesizer's `vertical` table names (from the registry's encoders), checked to
    offer the trust asked for; None for a central run."""
    if not isinstance(synth.instance, FitsOnOracle) or (req := synth.instance.vertical_request()) is None:
        return None
    where = "synthesizer.params.vertical"
    owners(synth.spec.name, req, partition)   # a run of one party: refused as each twin's plan refuses it
    if req.probe_whole_rows and not isinstance(synth.instance, ProbesWholeRows):
        raise ConfigError(f"{where}: probe_whole_rows is read by privmrf's probes only; {synth.spec.name} would "
                          "ignore it: drop the key")
    if req.measure not in registry.names("encoder"):
        raise ConfigError(f"{where}: unknown measure {req.measure!r}; encoders: {sorted(registry.names('encoder'))}")
    cls = registry.get("encoder", req.measure).load_config_cls()
    params = dict(req.params)
    if cls is not None and "trust" in attrs.fields_dict(cls) and "trust" not in params:
        params["trust"] = req.trust   # a measure with several trust modes picks its mode from the table
    comp = build_component(registry, "encoder", req.measure, params, where)
    if not isinstance(comp.instance, (CrossPartyMeasure, ReleasesOnce)):
        raise ConfigError(f"{where}: encoder {req.measure!r} cannot answer cross-party queries (it is not a "
                          "CrossPartyMeasure); e.g. measure = \"he\"")
    if comp.instance.trust != req.trust:
        raise ConfigError(f"{where}: measure {req.measure!r} offers trust = {comp.instance.trust!r}, "
                          f"not {req.trust!r}")
    return comp


def plan_release(measure: Component, synth: Component, ctx: PlanContext) -> tuple[list[Charge], PlanContext]:
    """For a cross-party measure that releases once (`ReleasesOnce`): its release's charges, planned before the
    synthesizer's from the public facts alone at `vertical.release` of the synthesizer's ρ, and the synthesizer's
    context on the rest (`cross_release`: it plans no charge for a cross-party marginal). ([], ctx) otherwise."""
    if not isinstance(measure.instance, ReleasesOnce):
        return [], ctx
    share = synth.instance.vertical_request().release
    try:
        released = measure.instance.release_cost(ctx, share * ctx.rho)
    except BudgetError as exc:
        raise BudgetError(f"synthesizer.params.vertical: {measure.spec.name!r} cannot plan its release: {exc}") from None
    return released, attrs.evolve(ctx.after(released), cross_release=True)


@contextlib.contextmanager
def _timed(timings: dict[str, float], name: str, progress: Any) -> Iterator[None]:
    if progress is not None:
        progress.set_description(name)
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0
    if progress is not None:
        progress.update(1)


def preflight(plan: Plan) -> None:
    """Everything a run refuses from the plan alone, before it reads a row: `vertisynth validate` calls this
    same function, so validate passes only what run accepts (issue 30). Streaming settings, an identifier
    list in the schema (against the file's row count, read from its lines, not its values), a synthetic table
    too large to draw or to hold."""
    if not isinstance(plan, Plan):
        return
    cfg = plan.config
    if cfg.stream:
        why = _stream_refusal(plan)
        if why:
            raise ConfigError(f"stream = true: {why}")
    long = [c for c in plan.source.schema.columns if c.kind == "categorical" and not c.public
            and len(c.categories or ()) > ID_LIST_MIN]
    if long:
        files = ({None: plan.source.stream_path} if plan.source.stream_path is not None else
                 dict(plan.source.stream_parties.paths) if plan.source.stream_parties is not None else {})
        for who, path in files.items():
            rows = file_rows(Path(path))
            err = rows is not None and identifier_list_error(long, rows)
            if err:
                raise err
    n = cfg.sample_size
    if n is not None:
        synth_cfg = plan.synthesizer.config
        if isinstance(synth_cfg, ChoosesSampling) and synth_cfg.sampling == "round" and n >= HYPERGEOMETRIC_MAX \
                and n > block_rows_of(cfg):
            raise ConfigError(f"sample_size {n:,}: 'round' sampling in blocks draws at most "
                              f"{HYPERGEOMETRIC_MAX - 1:,} records; sample in several runs (vertisynth sample) "
                              "or with the synthesizer's sampling = 'sample'")
        held = n * len(plan.source.schema.columns) * TABLE_BYTES_PER_CELL
        if not cfg.stream and held > physical_memory():
            raise ConfigError(f"sample_size {n:,}: the in-memory run holds the synthetic table, about "
                              f"{held / 2**30:,.0f} GB for {len(plan.source.schema.columns)} columns, more than this "
                              f"machine's {physical_memory() / 2**30:,.0f} GB: set stream = true (written in blocks) "
                              "or draw fewer rows")


def twin_cost_estimate(plan: Plan, rows: int) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """A vertical twin's cross-party cost per party and for the server at `rows` rows, before any row is read:
    its planned probes and a stand-in for its adaptive answers (vertisynth/vertical/cost.py), priced by the
    measure (`PricesAnswers`); ({}, {}) where the run has no such measure."""
    measure = plan.measure   # a CrossPartyMeasure: its `trust` is declared
    if measure is None or not isinstance(measure.instance, PricesAnswers):
        return {}, {}
    req = plan.synthesizer.instance.vertical_request()
    domain = plan.source.schema.preview_domain()
    # a twin whose probes leave the side of the whole rows' party unbinned (privmrf) is priced as it asks them
    keeps = measure.instance.whole_rows_party(plan.partition.names) \
        if isinstance(measure.instance, SumsWholeRows) else None
    whole = keeps if isinstance(plan.synthesizer.instance, ProbesWholeRows) \
        and plan.synthesizer.instance.probes_whole_rows() else None
    parties = {p.name: domain.project(p.attributes) for p in plan.partition}
    # every adaptive answer is summed from whole rows where its sides allow, probes unbinned or not (the link
    # always hands the measure each party's whole view): the stand-in needs that to make the second party encrypt
    absorbed = (lambda p, side, sigma: measure.instance.in_whole_rows(parties[p], side, rows, sigma)) \
        if keeps is not None else None
    # a twin whose probes come from a filter, not the plan (aim): its probe stages, from its plan
    staged = plan.synthesizer.instance.probe_stages(below_two_sided(measure.instance)) \
        if isinstance(plan.synthesizer.instance, PlansProbeStages) else []
    asked, counted = twin_answers(domain, plan.partition, req.probe_bins, plan.ledger.planned,
                                  measure.instance.sigma_for_rho, whole, absorbed, staged)
    cost = measure.instance.answers_cost(asked, rows, parties)
    if absorbed is not None:
        # the stand-in's first answer has the second party encrypt its rows (the modal case); whether a run's answers
        # do follows its adaptive picks, so the figures without that pass go beside it (validate prints both)
        low = measure.instance.answers_cost(twin_answers(domain, plan.partition, req.probe_bins, plan.ledger.planned,
                                                         measure.instance.sigma_for_rho, whole, None, staged)[0],
                                            rows, parties)
        for p, c in cost.items():
            if p in low and low[p]["ciphertexts"] < c["ciphertexts"] / 1.25:
                c["unasked"] = {"ciphertexts": low[p]["ciphertexts"], "cpu_s": low[p]["cpu_s"]}
        # an adaptive answer none of whose sides the whole rows hold (a pair or triple each side, a binned side)
        # makes its E encrypt that side once more (NLTCS under OU, a 4,000-row run: party1 36,016 ciphertexts, the
        # stand-in 8,004): which answers do follows the picks, so each party's figure with one such pass per
        # adaptive answer goes beside it (validate prints the range; a party priced no key pair pays one there)
        sigma = next((a["sigma"] for a in asked if a.get("adaptive")), None)
        for p, c in cost.items():
            one = measure.instance.block_pass(parties[p], rows, sigma) if sigma and p in parties else None
            if one and counted.get("adaptive"):
                k = counted["adaptive"]
                c["blocks"] = {"passes": k, "block": list(one["block"]), "pass_ciphertexts": one["ciphertexts"],
                               "pass_cpu_s": one["cpu_s"],
                               "ciphertexts": c["ciphertexts"] + k * one["ciphertexts"],
                               "cpu_s": c["cpu_s"] + k * one["cpu_s"] + (0.0 if c.get("key_s") else one["key_s"])}
    # trust none: the server reads the published tables and holds no key (no ciphertext, no HE CPU)
    cost.setdefault("server", {"ciphertexts": 0.0, "bytes": 0.0, "cpu_s": 0.0, "note": "reads the published tables only"})
    return cost, counted


def run_memory_estimate(plan: Plan, rows: int) -> dict[str, int]:
    """Peak bytes of `vertisynth run` of this plan in one process (every party and the server in turn) on a
    table of `rows` rows, from the plan alone: meant as a bound, not a guess (tests/run/test_silent_cases.py
    measures the run's own peak RSS, VmHWM, under it). The real table as read (text objects, ~64 B a value) and coded
    (views, holdout: 32 B), the synthetic table held and written (TABLE_BYTES_PER_CELL, twice: codes and
    frame), the synthesizer's own estimate (every party's peak and the server's, summed: one process), the
    interpreter with its libraries, and the HTML report's figures."""
    d = len(plan.source.schema.columns)
    syn_rows = plan.config.sample_size or rows
    data = rows * d * (64 + 32)
    table = 0 if plan.config.stream else 2 * syn_rows * d * TABLE_BYTES_PER_CELL
    syn = plan.synthesizer.instance
    peaks = syn.memory_estimate() if isinstance(syn, EstimatesMemory) else None
    model = (sum(peaks["parties"].values()) + peaks["server"]) if peaks else 0
    base = 300 * 2**20
    report = 96 * 2**20   # report.html's figures (matplotlib, Agg): ~52 MB measured for a dozen figures
    return {"data": data, "table": table, "synthesizer": model, "base": base, "report": report,
            "total": data + table + model + base + report}


# a decoded synthetic cell held by an in-memory run: codes (8 B) and the DataFrame's value (object: ~8 B + the
# shared label), measured ~20 B on census; 32 as a bound
TABLE_BYTES_PER_CELL = 32


def physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**62


def file_rows(path: Path) -> int | None:
    """Rows of a CSV (its lines less the header, counted in 1 MiB blocks: no value parsed) or a Parquet file
    (its metadata); None when it is not there (a server plans without the parties' files)."""
    if not path.is_file():
        return None
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow as pa
        import pyarrow.parquet as pq
        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"Parquet file {str(path)!r} is unreadable (truncated or not Parquet): "
                            f"{str(exc).splitlines()[0]}") from None
    lines, last = 0, b"\n"
    with open(path, "rb") as fh:
        while block := fh.read(2**20):
            lines += block.count(b"\n")
            last = block[-1:]
    return max(lines + (last != b"\n") - 1, 0)


RUN_FILES = ("synthetic.csv", "report.json", "ledger.json", "summary.md", "report.html", MODEL_FILE)   # what a run writes


def execute(plan: Plan, output_dir: str | Path | None = None, progress: bool = False,
            party_seed: int | None = None, overwrite: bool = False) -> RunResult:
    """`party_seed`: the parties' own randomness (preprocessing, alignment, fit) from a seed other than the config's,
    as a reproducible cross-machine run under a test secret draws it (deploy/simulate.py). With an `output_dir`
    the run holds its lock (a second run into it refuses, naming this one) and refuses, before any work, to
    overwrite a file there that no vertisynth run wrote, unless `overwrite` (core/outfiles.py)."""
    if not isinstance(plan, Plan):   # another run mode's plan runs itself
        return plan.execute(output_dir, progress)
    preflight(plan)
    if output_dir is None:
        return _execute_plan(plan, None, progress, party_seed)
    with FolderLock(output_dir):
        check_not_foreign(Path(output_dir), RUN_FILES, force=overwrite)
        return _execute_plan(plan, output_dir, progress, party_seed)


def _execute_plan(plan: Plan, output_dir: str | Path | None, progress: bool, party_seed: int | None) -> RunResult:
    cfg = plan.config
    streams = named_streams(cfg.seed, RNG_STREAMS)
    if party_seed is not None:
        own = named_streams(party_seed, RNG_STREAMS)
        # the parties' draws follow the test secret; a vertical twin's own draws at the server (which holds no
        # secret across machines) follow the seed, as the deployed server's do
        streams.update(preprocessing=own["preprocessing"], alignment=own["alignment"], fit=own["fit"],
                       server_fit=streams["fit"])
    timings: dict[str, float] = {}
    with progress_bar("load data", progress, total=7) as bar:
        return _execute(plan, cfg, streams, timings, bar, output_dir)


def _execute(plan: Plan, cfg: RunConfig, streams: dict[str, np.random.Generator], timings: dict[str, float],
             bar: Any, output_dir: str | Path | None) -> RunResult:
    if cfg.stream:
        return _execute_streamed(plan, cfg, streams, timings, bar, output_dir)
    with _timed(timings, "load data", bar):
        loaded = plan.source.load()
    holdout, keyed = None, loaded.party_frames is not None
    raw = None   # the real rows as read (training, holdout), for evaluators that score raw values
    # only built where an evaluator scores raw values: a codes-native dataset's frame (and pandas) is not needed
    needs_raw = any(wants_raw_values(c.spec, c.instance) for c in plan.evaluators)
    with _timed(timings, "encode", bar):
        if keyed:
            codec, views = _encode_parties(plan, loaded, streams["preprocessing"])
        else:
            codec, real = _encode_table(plan, loaded, streams["preprocessing"])
            raw = (loaded.frame.reset_index(drop=True), None) if needs_raw else None
            if cfg.evaluation.holdout > 0:  # a seeded, data-independent split: the synthesizer never sees these rows
                taken = _holdout_rows(np.arange(real.n), cfg.evaluation.holdout, streams["split"])
                kept = np.setdiff1d(np.arange(real.n), taken)
                holdout, real = real.take(taken), real.take(kept)
                if raw is not None:
                    raw = (raw[0].iloc[kept].reset_index(drop=True), raw[0].iloc[taken].reset_index(drop=True))
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
        if plan.measure is not None:   # the synthesizer asks; the parties answer (vertisynth/vertical)
            oracle = VerticalOracle(data.views, plan.partition, plan.measure.instance, plan.ledger,
                                    party_streams(streams["fit"], plan.partition.names), plan.measure.spec.name,
                                    plan.synthesizer.instance.vertical_request().group_share)
            plan.synthesizer.instance.fit_oracle(oracle, streams.get("server_fit", streams["fit"]))
        else:
            plan.synthesizer.instance.fit(data, plan.ledger, streams["fit"])
    block_rows = block_rows_of(cfg)   # sampled and decoded in the blocks a streamed run writes: the same table
    with _timed(timings, "sample", bar):
        synthetic = sample_table(plan.synthesizer.instance, cfg.sample_size, streams["sample"], block_rows,
                                 codec.domain.attributes)
    with _timed(timings, "decode", bar):
        decoded = decoded_table(codec, synthetic, streams["decode"], block_rows)
    metrics: dict[str, dict[str, float]] = {}
    # evaluators compare with the people every party holds for real (all rows unless a fill ran)
    everywhere = alignment.real_everywhere()
    real_aligned = data.joined().take(np.flatnonzero(everywhere)).project(codec.domain.attributes)
    if raw is not None and not (everywhere.all() and len(everywhere) == raw[0].shape[0]):
        raw = None   # rows were filled or dropped by the alignment: the raw rows no longer match the codes
    scored_on: dict[str, str] = {}
    with _timed(timings, "evaluate", bar):
        for comp in plan.evaluators:
            if wants_raw_values(comp.spec, comp.instance):
                if raw is not None:
                    real_raw = raw[1] if raw[1] is not None and comp.instance.prefers_holdout else raw[0]
                    metrics[comp.label] = comp.instance.evaluate_raw(real_raw[decoded.columns], decoded.frame,
                                                                     column_kinds(loaded.schema), streams["evaluate"])
                    scored_on[comp.label] = "raw values (the decoded synthetic table against the real rows as read)"
                    continue
                scored_on[comp.label] = ("codes: the raw real rows are not at hand in this run (ID-keyed or filled "
                                         "alignment), so this score is on bins and is not comparable with the "
                                         "library's published scores")
            if comp.instance.uses_alignment and any(m.any() for m in alignment.filled.values()):
                metrics[comp.label] = comp.instance.evaluate_alignment(alignment, streams["evaluate"])
            elif holdout is None:
                metrics[comp.label] = comp.instance.evaluate(real_aligned, synthetic, streams["evaluate"])
            else:
                metrics[comp.label] = comp.instance.evaluate_holdout(real_aligned, holdout, synthetic,
                                                                         streams["evaluate"])

        references = reference_points(plan, metrics, real_aligned, holdout)
    return _finish(plan, codec, loaded, decoded, synthetic, real_aligned, holdout, metrics, align_info, timings,
                   output_dir, references=references, scored_on=scored_on)


def column_kinds(schema: TableSchema) -> dict[str, str]:
    """The public schema's column kinds in the words peer libraries use (SDMetrics' sdtypes)."""
    return {c.name: {"numeric": "numerical"}.get(c.kind, c.kind) for c in schema.columns}


def reference_points(plan: Plan, metrics: dict[str, dict[str, float]], real: Any,
                     holdout: Dataset | None) -> dict[str, dict[str, dict[str, float]]]:
    """Each scored evaluator's reference points (`ReportsReferencePoints`): the same metric for independent
    columns and for the holdout against the training rows, so that a score has something to stand beside."""
    return {c.label: c.instance.reference_points(real, holdout) for c in plan.evaluators
            if c.label in metrics and isinstance(c.instance, ReportsReferencePoints)}


def _finish(plan: Plan, codec: TableCodec, loaded: Any, frame: pd.DataFrame | DecodedTable | None, synthetic: Any,
            real_aligned: Any, holdout: Dataset | None, metrics: dict[str, dict[str, float]], align_info: dict[str, Any],
            timings: dict[str, float], output_dir: str | Path | None,
            written: WrittenTable | None = None, references: dict[str, Any] | None = None,
            scored_on: dict[str, str] | None = None) -> RunResult:
    """`written`: a streamed run's table, already written block by block (`stream_out.write_in_blocks`)."""
    spent = plan.ledger.spent_epsilon()
    if spent > plan.ledger.budget.epsilon * (1 + 1e-9):  # cannot happen if spend() matched the plan
        raise BudgetError(f"the run spent ε={spent:.4g}, more than the budget {plan.ledger.budget.epsilon:.4g}")
    report = build_report(plan, loaded, real_aligned, synthetic, metrics, align_info, timings)
    report["evaluation"] = {
        "holdout_records": 0 if holdout is None else holdout.n,
        "scored_against": {c.label: ("training table" if holdout is None else
                                         "training and holdout" if c.instance.requires_holdout else
                                         "holdout" if c.instance.prefers_holdout else "training table")
                           for c in plan.evaluators},
        **({"scored_on": scored_on} if scored_on else {}),
    }
    report["metric_references"] = references or {}
    model = _keep_model(plan, codec, loaded)
    report["privacy"]["releases"] = release_note(plan.synthesizer.spec.name, model)
    if written is not None:
        report["synthetic_table"] = written.describe()
    result = RunResult(frame, synthetic, real_aligned, metrics, plan.ledger, report, model=model,
                       synthetic_path=None if written is None else written.path)
    if output_dir is not None:
        def extras(out: Path) -> list[str]:
            written = []
            if model is not None:   # whole or not at all, as the other files
                with replace_atomically(out / MODEL_FILE, "path", suffix=".npz") as tmp:
                    model.save(tmp)
                written.append(MODEL_FILE)
            for comp in plan.evaluators:   # figures an evaluator made from its last scores (e.g. heatmaps)
                written += comp.instance.write_artifacts(out) or []
            return written
        result.output_dir = write_outputs(result, Path(output_dir), holdout, extras)
    return result


def _execute_streamed(plan: Plan, cfg: RunConfig, streams: dict[str, np.random.Generator], timings: dict[str, float],
                      bar: Any, output_dir: str | Path | None) -> RunResult:
    """`stream = true`: each party's columns of the dataset's file are read in chunks of the synthesizer's
    `chunk_rows` through the party step `party synth --csv` runs (`party_step_chunks`), so the table is never
    held whole; the evaluators score against counts summed over the same chunks. The same messages, model and
    synthetic table as the in-memory run of the same config (tests/run/test_stream_run.py). ID-keyed party files
    (party_csv) are aligned by PSI/PSU on their id columns alone, each party's codes read in the aligned order
    from its spill (run/stream_align.py, tests/run/test_stream_aligned.py)."""
    why = _stream_refusal(plan)
    if why:
        raise ConfigError(f"stream = true: {why}")
    # every spill the run makes (the parties' coded files, aligned replays, the synthetic codes) goes when the run
    # ends, returned or raised: not when its result is collected (the result's counts are cached; a marginal
    # not counted yet re-reads the files)
    with contextlib.ExitStack() as spills:
        spills.callback(_sweep_spills)   # last: a party process stopped mid-pass (another failed) left its own
        return _streamed(plan, cfg, streams, timings, bar, output_dir, spills)


def _sweep_spills() -> None:
    with contextlib.suppress(VertisynthError, OSError):   # the run's own error, if any, is the one to report
        sweep()


def _streamed(plan: Plan, cfg: RunConfig, streams: dict[str, np.random.Generator], timings: dict[str, float],
              bar: Any, output_dir: str | Path | None, spills: contextlib.ExitStack) -> RunResult:
    synth = plan.synthesizer.instance
    path, keyed = plan.source.stream_path, plan.source.stream_parties
    chunk_rows = synth.chunk_rows()
    if keyed is not None:
        chunks, codecs, codec, loaded, align_info, real_chunks = _streamed_keyed_input(
            plan, streams, timings, bar, keyed, chunk_rows, spills)
    else:
        chunks, codecs, codec, loaded, align_info = _streamed_file_input(plan, streams, timings, bar, path, chunk_rows,
                                                                         spills)
        real_chunks = joined_chunks([chunks[p] for p in plan.partition.names], codec.domain)
    with _timed(timings, "fit", bar):
        key_rng, rngs = synth.party_rngs(streams["fit"])
        synth.agree_keys(key_rng)
        parent = os.getpid()

        def step(p: str, led: PrivacyLedger) -> list:
            try:
                return synth.party_step_chunks(p, codecs[p].domain, chunks[p], led, rngs[p])
            finally:
                if os.getpid() != parent:   # a party in its own forked process: its spilled chunks go with it
                    chunks[p].close()
        messages = synth.party_steps(step, plan.ledger)
        synth.server_step(messages)
    with _timed(timings, "sample", bar):   # sampling, decoding and writing interleave, one block at a time
        written = stream_output(synth, cfg, codec, streams, output_dir, count=bool(plan.evaluators))
        spills.callback(written.close)
    with _timed(timings, "decode", bar):
        pass
    timings.update(written.seconds)   # each phase's share of that loop
    synthetic = written.codes
    real = ChunkedCounts(real_chunks, codec.domain)
    if "rows" in align_info:   # positional: the file's rows, now counted (PSI/PSU report their own sizes)
        align_info["rows"] = real.n
    metrics: dict[str, dict[str, float]] = {}
    with _timed(timings, "evaluate", bar), contextlib.closing(written):   # then the spilled codes go
        for comp in plan.evaluators:
            metrics[comp.label] = comp.instance.evaluate_counts(real, synthetic, streams["evaluate"])
        references = reference_points(plan, metrics, real, None)
    return _finish(plan, codec, loaded, written.frame, synthetic, real, None, metrics, align_info, timings,
                   output_dir, written, references=references)


def _encoder_name(config: Any) -> str:
    return config.encoder if isinstance(config, NamesEncoder) else "?"


def _stream_refusal(plan: Plan) -> str | None:
    """Why `stream = true` cannot run this plan, or None (run and validate both ask: `preflight`)."""
    cfg, synth = plan.config, plan.synthesizer.instance
    path, keyed = plan.source.stream_path, plan.source.stream_parties
    rows_read = [c.label for c in plan.evaluators if not isinstance(c.instance, EvaluatesCounts)]
    counts_text = "e.g. tvd, workload_error, correlation"
    return ("the dataset is not one file with a public schema ([dataset] csv with `schema`, or party_csv with "
           "`schema`)" if path is None and keyed is None else
           f"synthesizer {plan.synthesizer.spec.name!r} has no chunked party step" if not (
               isinstance(synth, StepsInChunks) and isinstance(synth, PartyServerSplit)) else
           f"encoder {_encoder_name(plan.synthesizer.config)!r} of synthesizer "
           f"{plan.synthesizer.spec.name!r} measures in rounds between the parties, not chunk by chunk (use "
           "encoder dpfm or grr to stream, or run without stream)" if not synth.streams_parties() else f"alignment {plan.aligner.spec.name!r} needs the identifiers (use positional: rows aligned)"
           if keyed is None and plan.aligner.spec.name != "positional" else
           "ID-keyed party files need alignment psi or psu" if keyed is not None and not isinstance(
               plan.aligner.instance, AlignsRows) else
           "a holdout needs the rows ([evaluation] holdout = 0)" if cfg.evaluation.holdout > 0 else
           f"evaluator {rows_read[0]!r} reads the real rows; a streamed run scores from marginal counts only "
           f"({counts_text}): drop it or run without stream" if rows_read else None)


def _streamed_file_input(plan: Plan, streams: dict[str, np.random.Generator], timings: dict[str, float], bar: Any,
                         path: Path, chunk_rows: int, spills: contextlib.ExitStack) -> tuple:
    """One file, rows aligned: each party's columns coded chunk by chunk (positional alignment)."""
    loaded = LoadedData(None, plan.source.schema, plan.source.default_parties, plan.source.party_names,
                        f"{plan.source.description} (read in chunks of {chunk_rows} rows)", None,
                        {"source": str(path), "schema_inferred_from_data": plan.source.schema.inferred,
                         "streamed": {"chunk_rows": chunk_rows}})
    with _timed(timings, "load data", bar):
        pass   # nothing is loaded: each pass below reads the file chunk by chunk
    with _timed(timings, "encode", bar):
        codecs, chunks = {}, {}
        for party in plan.partition:
            own = list(party.attributes)
            sub = TableSchema(tuple(c for c in plan.source.schema.columns if c.name in own))
            codecs[party.name] = fit_codec(sub, path, own, plan.ledger, streams["preprocessing"], chunk_rows,
                                           exact=False)
            chunks[party.name] = coded_chunks(path, codecs[party.name], chunk_rows)
            spills.callback(chunks[party.name].close)
        by_name = {c.schema.name: c for pc in codecs.values() for c in pc.columns}
        codec = TableCodec(tuple(by_name[c.name] for c in plan.source.schema.columns))
    with _timed(timings, "align", bar):
        align_info = {"protocol": "positional", "rows": "counted while fitting (the rows of the file, in order)"}
    return chunks, codecs, codec, loaded, align_info


def _streamed_keyed_input(plan: Plan, streams: dict[str, np.random.Generator], timings: dict[str, float], bar: Any,
                          files: Any, chunk_rows: int, spills: contextlib.ExitStack) -> tuple:
    """ID-keyed party files (run/stream_align.py): each party's file coded once into its spill, PSI/PSU on the
    identifier column alone (row maps), then each party's chunks in the aligned order from its spill."""
    loaded = LoadedData(None, plan.source.schema, plan.source.default_parties, plan.source.party_names,
                        f"{plan.source.description} (read in chunks of {chunk_rows} rows)", None,
                        {"source": {p: str(v) for p, v in files.paths.items()},
                         "schema_inferred_from_data": plan.source.schema.inferred,
                         "streamed": {"chunk_rows": chunk_rows}})
    with _timed(timings, "load data", bar):
        pass   # nothing is loaded: each party's file is read chunk by chunk below
    with _timed(timings, "encode", bar):
        codecs, coded, codec = encode_party_files(files, plan.source.schema, plan.partition, plan.ledger,
                                                  streams["preprocessing"], chunk_rows)
        for stream in coded.values():
            spills.callback(stream.close)
    with _timed(timings, "align", bar):
        chunks, align_info, real_chunks = align_party_files(files, plan.aligner.instance, coded, codecs, plan.ledger,
                                                            streams["alignment"], chunk_rows, plan.aligner.spec.name,
                                                            codec.domain)
        for stream in (*chunks.values(), real_chunks):   # their replays of the aligned order
            spills.callback(stream.close)
    return chunks, codecs, codec, loaded, align_info, real_chunks


def _keep_model(plan: Plan, codec: TableCodec, loaded: Any) -> FittedModel | None:
    synth = plan.synthesizer.instance
    if not isinstance(synth, HasGraphicalModel):
        return None
    gm, sampling = synth.fitted_model()
    return FittedModel(gm, codec, sampling, plan.synthesizer.spec.name, model_privacy(plan.ledger, loaded.schema))


def model_privacy(ledger: PrivacyLedger, schema: TableSchema) -> dict[str, Any]:
    """What a model file says about its own privacy (the full ledger stays in ledger.json)."""
    return {"spent_epsilon": ledger.spent_epsilon(), "budget": {"epsilon": ledger.budget.epsilon,
                                                                 "delta": ledger.budget.delta},
            "schema_inferred_from_data": bool(schema.inferred), "noise": ledger.noise,
            "note": "fitted under this budget; sampling it is post-processing and spends nothing"}


def release_note(synthesizer: str, model: FittedModel | None) -> dict[str, str]:
    """The files of the DP release, for the ledger and the report."""
    return {"synthetic.csv": "the synthetic table",
            MODEL_FILE: ("the fitted model (cliques, potentials, DP record count, public decoding): "
                         "`vertisynth sample` draws more rows from it without spending budget")
            if model is not None else
            (f"not written: synthesizer {synthesizer!r} keeps no graphical model to sample from (it synthesises "
             "records directly); run it again with a larger sample_size, or use a model-based synthesizer "
             "(private_pgm, privmrf, vertimrf, independent)")}


def _encode_table(plan: Plan, loaded: LoadedData, rng: np.random.Generator) -> tuple[TableCodec, Dataset]:
    """The table's codec and codes. A codes-native dataset (`LoadedData.codes`, e.g. the built-in census) whose
    schema fixes its coding is coded without its frame (`TableSchema.fit_public`: the codec `fit` gives on that
    frame, and its codes are those `encode` gives); any other through its frame."""
    if loaded.codes is not None and loaded.dtypes is not None and loaded.schema.coding_is_public:
        codec = loaded.schema.fit_public(loaded.codes.n, loaded.dtypes)
        if loaded.codes.n == 0:
            raise DataError("the table is empty: there is nothing to synthesise")
        if list(loaded.codes.domain.attributes) != list(codec.domain.attributes) or \
                loaded.codes.domain.shape != codec.domain.shape:
            raise DataError(f"the dataset's codes are on {list(loaded.codes.domain.attributes)} with sizes "
                            f"{loaded.codes.domain.shape}, its schema codes {list(codec.domain.attributes)} with "
                            f"sizes {codec.domain.shape}")
        return codec, Dataset(loaded.codes.codes, codec.domain)
    codec = loaded.schema.fit(loaded.frame, plan.ledger, rng)
    return codec, codec.encode(loaded.frame)


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
