"""The `vertisynth` command line."""
from __future__ import annotations

import contextlib
import gc
import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import click

from vertisynth import __version__
from vertisynth.core.errors import ConfigError, DataError, PluginError, VertisynthError
from vertisynth.core.outfiles import replace_atomically
from vertisynth.core.registry import Registry, default_registry
from vertisynth.run.console import fail as _fail
from vertisynth.run.console import warnings_as_lines

# Nothing above imports numpy, pandas or the engine: each command imports what it runs in its body, so that
# `vertisynth --help` and `vertisynth CMD --help` start fast (tests/cli/test_startup.py).


class _Root(click.Group):
    """The root group. The parts' commands (party, server, collab, study, flower, a plugin's: the registry's
    `command` specs) are imported when one is named, not for `vertisynth --help`, which lists them by their
    specs' summaries."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(default_registry().names("command")))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in default_registry().names("command"):
            try:
                self.add_command(default_registry().get("command", cmd_name).load_factory(), cmd_name)
            except PluginError as exc:   # a broken third-party command must not take the whole CLI down
                click.secho(f"warning: command {cmd_name!r} skipped: {exc}", fg="yellow", err=True)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)   # as click.Group.format_commands
        rows = []
        for name in names:
            if name in self.commands:
                if not self.commands[name].hidden:
                    rows.append((name, self.commands[name].get_short_help_str(limit)))
                continue
            try:
                summary = default_registry().get("command", name).summary
            except PluginError as exc:   # two plugins offer the name: say so here, as invoking it would
                summary = f"(unavailable: {exc})"
            rows.append((name, summary[:1].upper() + summary[1:]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vertisynth")
def main() -> None:
    """Differentially private synthetic data for parties that hold different columns of the same people.

    Start with `vertisynth run` (no arguments): it synthesises the built-in census-like data for two
    parties and writes the synthetic CSV, a report and the privacy ledger to ./vertisynth-output.
    """


# the cyclic collector's first generation after this many new container objects (Python's default: 700)
GC_GEN0_THRESHOLD = 10_000


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """While a command runs, once its modules are imported: the objects made so far (modules, classes, functions)
    are frozen out of the cyclic collector's scans, and its first generation is collected after 10,000 new
    objects, not 700: a run's data are numpy arrays, freed by reference counting, and the collections found
    nothing to free (≈ 0.04 CPU s of the default job). Cyclic garbage is still collected, a little later; both
    are undone after the command (a process that runs it in-process, e.g. a test, gets its collector back)."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(GC_GEN0_THRESHOLD, old[0]), old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


@main.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: the config's `output`, else ./vertisynth-output).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--seed", type=int, default=None, help="Override the config's seed.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--force", is_flag=True, help="Overwrite files in the output folder that no vertisynth run wrote.")
def run(config: Path | None, out: Path | None, data_dir: str | None, seed: int | None, quiet: bool,
        force: bool) -> None:
    """Run one pipeline from a TOML CONFIG (default: the built-in offline example)."""
    with warnings_as_lines():
        _run(config, out, data_dir, seed, quiet, force)


def _run(config: Path | None, out: Path | None, data_dir: str | None, seed: int | None, quiet: bool,
         force: bool = False) -> None:
    importlib.import_module("vertisynth.run.pipeline")   # the engine, imported before quiet_gc freezes what exists

    with quiet_gc():
        _run_job(config, out, data_dir, seed, force, quiet)


def _run_job(config: Path | None, out: Path | None, data_dir: str | None, seed: int | None, force: bool,
             quiet: bool) -> None:
    from vertisynth.core.privacy import NOISE_LABELS
    from vertisynth.run.config import default_config, load_config
    from vertisynth.run.pipeline import execute, make_plan
    from vertisynth.run.report import cross_party_note, reference_text

    try:
        cfg = load_config(config) if config else default_config()
        if seed is not None:
            cfg = attrs.evolve(cfg, seed=seed)
        plan = make_plan(cfg, data_dir=data_dir)
        click.echo(f"plan fits the budget: ε={plan.ledger.planned_epsilon():.4g} of {plan.ledger.budget.epsilon:.4g} "
                   f"(δ={plan.ledger.budget.delta:.3g}), {len(plan.ledger.planned)} charges, "
                   + plan.who() + f"; noise: {NOISE_LABELS[plan.ledger.noise]}", err=True)
        if plan.synthesizer.spec.summary.startswith("baseline"):   # chosen by name: say it is not the model
            click.secho(f"note: synthesizer {plan.synthesizer.spec.name!r} is a baseline ({plan.synthesizer.spec.summary}"
                        "); the default, vertimrf, models the parties' correlations", fg="yellow", err=True)
        out_dir = out or Path(cfg.output or "vertisynth-output")
        result = execute(plan, out_dir, progress=not quiet, overwrite=force)
    except VertisynthError as exc:
        _fail(exc)
        return
    for ev, metrics in result.metrics.items():
        for m, v in metrics.items():   # with its reference points, so that "0.126" means something
            click.echo(f"{ev}.{m} = {v:.4f}{reference_text(result.report, ev, m)}")
    click.echo(f"privacy: spent ε = {result.ledger.spent_epsilon():.4g} of {result.ledger.budget.epsilon:.4g}")
    note = cross_party_note(result.report)
    if note:
        click.secho(f"warning: {note}", fg="yellow", err=True)
    collab = result.report.get("collab")
    if collab:   # the [collab] mode: which mode ran, the tuning's accounting, and whether anything was published
        click.echo(f"mode: {result.report['mode']}")
        if collab["tuning"]:
            click.echo(f"tuning: {collab['tuning']['label']}; chosen {collab['tuning']['chosen']}")
        costs = collab["costs"]
        click.echo(f"cost: accounted ε = {costs['accounted_epsilon']:.4g}; the paper's argument would claim "
                   f"ε = {costs['paper_claimed_epsilon']:.4g}")
    written = "synthetic.csv, " if (out_dir / "synthetic.csv").is_file() else "(nothing published) "
    if result.model is not None:
        written += "model.npz, "
    click.echo(f"wrote {out_dir}/{written}report.json, ledger.json, summary.md, report.html")


@main.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--rows", type=int, default=100_000, show_default=True,
              help="Row count for the expected cost per party (encoders that report one, e.g. 'he').")
@click.option("--memory", default=None, help="Memory per machine, e.g. 1GB or 512MB: refuse a plan whose estimated "
              "peak (any party's, or the server's) does not fit.")
def validate(config: Path, data_dir: str | None, rows: int, memory: str | None) -> None:
    """Check a CONFIG (keys, plugins, params, party split, budget plan) without reading any data rows."""
    from vertisynth.core.capabilities import CostEstimate, EstimatesMemory
    from vertisynth.run.config import load_config
    from vertisynth.run.pipeline import Plan, make_plan, preflight, run_memory_estimate, twin_cost_estimate

    try:
        limit = parse_bytes(memory) if memory is not None else None
        with warnings_as_lines():
            plan = make_plan(load_config(config), data_dir=data_dir)
            preflight(plan)   # what run refuses from the plan, validate refuses: the same function
        syn = plan.synthesizer.instance
        cost = syn.cost_estimate(rows) if isinstance(syn, CostEstimate) else {}
        twin: dict = {}
        if not cost and isinstance(plan, Plan):   # a vertical twin: its probes and a stand-in for the rest
            cost, twin = twin_cost_estimate(plan, rows)
        peaks = syn.memory_estimate() if isinstance(syn, EstimatesMemory) else None
        if peaks is not None and limit is not None:
            over = {**{f"party {p!r}": b for p, b in peaks["parties"].items()}, "the server": peaks["server"]}
            over = {who: b for who, b in over.items() if b > limit}
            if over:
                raise ConfigError(f"the plan does not fit --memory {memory}: estimated peak " + ", ".join(
                    f"{who} {_size(b)}" for who, b in over.items()) + "; lower the encoder's chunk_rows / block_mb "
                    "or the synthesizer's max_clique_cells")
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{config}: valid. Planned privacy spend:")
    click.echo(plan.ledger.table(plan.ledger.planned))
    if cost and twin:
        click.echo(f"Expected HE cost per party for {rows:,} rows, before any row is read: {twin['probes']} probes "
                   f"(planned) and {twin['adaptive']} adaptive cross-party answers (a stand-in: {twin['marginals']} "
                   "planned marginals x the share of attribute pairs that cross parties; docs/vertical.md)"
                   + (f", {twin['pairs']} chosen pairs' tables in one stage" if twin.get("pairs") else "")
                   + ("; its rounds after the probes are not priced: which, and whether they cross parties, follows "
                      "the data (aim; docs/he.md)" if twin.get("filtered") else "")
                   + f", {twin.get('stages', 0)} protocol stages (per row in brackets):")
    elif cost:
        click.echo(f"Expected cost per party for {rows:,} rows (the run's table split; clique tables not yet chosen are "
                   "estimated on a stand-in; per row in brackets):")
    if cost:
        for party, c in cost.items():
            click.echo(f"  {party:<12} ciphertexts {c['ciphertexts']:>14,.0f}  sent {c['bytes'] / 1e6:>10,.1f} MB "
                       f"({c['bytes'] / rows:,.0f} B)  CPU {c['cpu_s']:>9,.1f} s ({1e3 * c['cpu_s'] / rows:.2f} ms)"
                       + (f", of which key pair {c['key_s']:,.1f} s" if c.get("key_s") else "")
                       + (f"  [{c['note']}]" if c.get("note") else ""))
            if c.get("unasked"):   # a twin: whether this party encrypts its rows follows the adaptive picks
                click.echo(f"  {'':<12} (this includes one pass of its rows, which a run makes only where an "
                           f"answer's other side is not in the other party's whole rows; the picks follow the data: "
                           f"without it {c['unasked']['ciphertexts']:,.0f} ciphertexts, CPU "
                           f"{c['unasked']['cpu_s']:,.1f} s)")
            if c.get("blocks"):   # a twin: answers whose sides no whole rows hold make their E encrypt that side again
                b = c["blocks"]
                click.echo(f"  {'':<12} (kept blocks: an adaptive answer whose sides neither party's whole rows hold "
                           f"(a pair or triple of each, a binned side) has its encrypting party encrypt that side once "
                           f"more, {b['pass_ciphertexts']:,.0f} ciphertexts and {b['pass_cpu_s']:,.1f} CPU s a pass of "
                           f"its smallest ({', '.join(b['block'])}); "
                           f"which answers do follows the picks: with one such pass per adaptive answer ({b['passes']}) "
                           f"up to {b['ciphertexts']:,.0f} ciphertexts, CPU {b['cpu_s']:,.1f} s)")
            if c.get("key_band"):   # one key draw per party and run: how many runs this figure holds within 25%
                k = c["key_band"]
                click.echo(f"  {'':<12} (its key pair is one draw a run: this figure is within 25% of a run whose "
                           f"draw lies in {k['low_s']:,.1f}-{k['high_s']:,.1f} s, as {100 * k['runs']:.0f}% of the "
                           "measured draws did, the other prices exact)")
            if c.get("as_encrypter"):   # trust = "server": orient picks E per answer from tables that follow the data
                click.echo(f"  {'':<12} (trust = \"server\": which party encrypts an adaptive answer follows its "
                           f"tables, which follow the data: as E of every one {c['as_encrypter']['ciphertexts']:,.0f} "
                           f"ciphertexts, CPU {c['as_encrypter']['cpu_s']:,.1f} s; as S of every one "
                           f"{c['as_summer']['ciphertexts']:,.0f}, CPU {c['as_summer']['cpu_s']:,.1f} s)")
        if any(c.get("key_s") for c in cost.values()):
            click.echo("  (a key pair is priced at its expectation; it is a prime search of random length, and one "
                       "run's took 0.3-3.4x of that in 30 draws: at small n it dominates; docs/he.md)")
    if isinstance(plan, Plan):
        whole = run_memory_estimate(plan, rows)
        click.echo(f"Estimated peak memory of `vertisynth run` (one process, every party and the server, {rows:,} "
                   f"rows; --rows): {_size(whole['total'])} (data {_size(whole['data'])}, synthetic table "
                   f"{_size(whole['table'])}, synthesizer {_size(whole['synthesizer'])})")
    if peaks is not None:
        click.echo("Estimated peak memory (streamed party phase, independent of the rows): " + ", ".join(
            f"party {p!r} {_size(b)}" for p, b in peaks["parties"].items()) + f"; the server {_size(peaks['server'])} "
            f"(largest clique {peaks['server_largest_clique_cells']:,} cells)")


_UNITS = {"": 1, "B": 1, "KB": 2**10, "K": 2**10, "MB": 2**20, "M": 2**20, "GB": 2**30, "G": 2**30, "TB": 2**40}


def parse_bytes(text: str) -> int:
    """'1GB', '512 MB', '2.5G', '1000000' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper().replace("IB", "B") not in _UNITS or float(m.group(1)) <= 0:
        raise ConfigError(f"--memory {text!r}: give a positive size such as 1GB or 512MB")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper().replace("IB", "B")])


def _size(b: int) -> str:
    return f"{b / 2**30:.2f} GB" if b >= 2**30 else f"{b / 2**20:.0f} MB"


@main.command()
@click.option("--strict", is_flag=True, help="Fail on the first broken plugin instead of skipping it.")
def plugins(strict: bool) -> None:
    """List installed plugins: distribution, version and the components each provides."""
    try:
        reg = Registry.load(strict=strict)
    except VertisynthError as exc:
        _fail(exc)
        return
    for p in sorted(reg.plugins, key=lambda p: (p.distribution, p.name)):
        click.echo(f"{p.distribution} {p.version}  [{p.name}] {p.module}")
        for kind, names in sorted(p.components.items()):
            for name in names:
                spec = reg.get(kind, name) if reg.providers(kind, name) == 1 else None
                summary = f" - {spec.summary}" if spec is not None and spec.summary else ""
                click.echo(f"    {kind:<12} {name}{summary}")
    for b in reg.broken:
        click.secho(f"BROKEN {b.distribution} [{b.name}]: {b.error}", fg="yellow")


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default="vertisynth.toml")
@click.option("--force", "-f", is_flag=True, help="Overwrite PATH if it exists.")
@click.option("--from", "from_csv", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A CSV: write a config for it, its schema read off the data with a REVIEW note on every "
                   "column that needs a public decision (bounds, categories, identifiers).")
def init(path: Path, force: bool, from_csv: Path | None) -> None:
    """Write a starting config to PATH (default: vertisynth.toml): the built-in example, or one for --from CSV."""
    if path.exists() and not force:
        click.secho(f"error: {path} exists; not overwriting (pass --force to replace it)", fg="red", err=True)
        sys.exit(2)
    if from_csv is None:
        from vertisynth.run.config import DEFAULT_CONFIG_TOML

        path.write_text(DEFAULT_CONFIG_TOML)
        click.echo(f"wrote {path}; edit it, then run: vertisynth run {path}")
        return
    from vertisynth.run.schema_review import review_config

    try:
        with warnings_as_lines():
            text = review_config(from_csv)
    except VertisynthError as exc:
        _fail(exc)
        return
    path.write_text(text)
    notes = text.count("# REVIEW ")
    click.echo(f"wrote {path}: {notes} REVIEW note(s) to settle (the schema was read off the data and is not DP "
               f"until its bounds and categories are public); then run: vertisynth run {path}")


@main.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-n", "--rows", type=click.IntRange(min=1), default=None,
              help="Number of rows to draw (default: the model's DP record count).")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="CSV file to write the rows to.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed for reproducible draws (default: fresh entropy from the OS).")
@click.option("--block-rows", type=click.IntRange(min=1), default=None,
              help="Rows drawn, decoded and appended at a time (memory: one block; default 131072, the blocks "
                   "of `FittedModel.sample`, whose table this then is).")
@click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A cross-machine run's config: accept the model only if signed by a role its [roster] pins.")
def sample(model: Path, rows: int | None, out: Path, seed: int | None, block_rows: int | None,
           config_path: Path | None) -> None:
    """Draw more rows from a fitted MODEL file (model.npz beside a run's table): post-processing, no budget."""
    from vertisynth.run.model import FittedModel

    written = 0
    try:
        if out.is_dir():
            raise DataError(f"--out {str(out)!r} is a folder; give a CSV file name")
        fitted = FittedModel.load(model, config_path)
        # a per-process temporary name beside `out`, renamed when complete: no half-written table under `out`,
        # and two samplers into one name leave one whole table (core/outfiles.py)
        with replace_atomically(out) as fh:
            for frame in fitted.sample_frames(rows, seed, block_rows):
                frame.to_csv(fh, index=False, header=written == 0)
                written += len(frame)
    except VertisynthError as exc:
        _fail(exc)
        return
    eps = fitted.privacy.get("spent_epsilon")
    click.echo(f"wrote {written} rows to {out} from {fitted.synthesizer or 'the'} model"
               + (f" (released under ε = {eps:.4g}; sampling spent nothing)" if isinstance(eps, (int, float)) else ""))


@main.command()
@click.argument("real", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("synthetic", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A TOML file: its [[evaluators]] and, for a csv dataset, its public schema (e.g. from `init --from`).")
@click.option("--use", "uses", multiple=True, help="An evaluator by name, with its default params (repeatable).")
@click.option("--holdout", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Records the synthesizer never saw, for evaluators that score on unseen data.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the evaluators' own sampling (e.g. which marginals).")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for metrics.json and the evaluators' figures.")
def evaluate(real: Path, synthetic: Path, config_path: Path | None, uses: tuple[str, ...], holdout: Path | None,
             seed: int, out: Path | None) -> None:
    """Score a SYNTHETIC CSV against a REAL one with the evaluator plugins (not DP: it reads the real rows)."""
    import tomllib

    from vertisynth.run.evaluate import evaluate_tables

    try:
        entries: list = [{"use": u} for u in uses]
        schema = None
        if config_path is not None:
            if not config_path.is_file():
                raise ConfigError(f"config file {str(config_path)!r} does not exist")
            try:
                raw = tomllib.loads(config_path.read_text())
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {str(config_path)!r} is not valid TOML: {exc}") from None
            entries = list(raw.get("evaluators", [])) + entries
            schema = (raw.get("dataset") or {}).get("params", {}).get("schema")
        with warnings_as_lines():
            metrics = evaluate_tables(real, synthetic, schema=schema, evaluators=entries or None, holdout=holdout,
                                      seed=seed, output_dir=out)
    except VertisynthError as exc:
        _fail(exc)
        return
    for ev, values in metrics.items():
        for m, v in values.items():
            click.echo(f"{ev}.{m} = {v:.4f}" if isinstance(v, (int, float)) else f"{ev}.{m} = {v}")
    if out is not None:
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
        click.echo(f"wrote {out}/metrics.json")


if __name__ == "__main__":
    main()
