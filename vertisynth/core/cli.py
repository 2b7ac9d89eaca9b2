"""The `vertisynth` command line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import click

from .. import __version__
from .config import DEFAULT_CONFIG_TOML, default_config, load_config
from .errors import ConfigError, VertisynthError


def _fail(exc: VertisynthError) -> None:
    click.secho(f"error: {exc}", fg="red", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vertisynth")
def main() -> None:
    """Differentially private synthetic data for parties that hold different columns of the same people.

    Start with `vertisynth run` (no arguments): it synthesises the built-in census-like data for two
    parties and writes the synthetic CSV, a report and the privacy ledger to ./vertisynth-output.
    """


@main.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: the config's `output`, else ./vertisynth-output).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--seed", type=int, default=None, help="Override the config's seed.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def run(config: Path | None, out: Path | None, data_dir: str | None, seed: int | None, quiet: bool) -> None:
    """Run one pipeline from a TOML CONFIG (default: the built-in offline example)."""
    from .pipeline import make_plan, execute

    try:
        cfg = load_config(config) if config else default_config()
        if seed is not None:
            cfg = attrs.evolve(cfg, seed=seed)
        plan = make_plan(cfg, data_dir=data_dir)
        click.echo(f"plan fits the budget: ε={plan.ledger.planned_epsilon():.4g} of {plan.ledger.budget.epsilon:.4g} "
                   f"(δ={plan.ledger.budget.delta:.3g}), {len(plan.ledger.planned)} charges, "
                   + (f"{len(plan.custodians)} horizontal custodians" if hasattr(plan, "custodians")
                      else f"{len(plan.partition)} parties"), err=True)
        out_dir = out or Path(cfg.output or "vertisynth-output")
        result = execute(plan, out_dir, progress=not quiet)
    except VertisynthError as exc:
        _fail(exc)
        return
    for ev, metrics in result.metrics.items():
        for m, v in metrics.items():
            click.echo(f"{ev}.{m} = {v:.4f}")
    click.echo(f"privacy: spent ε = {result.ledger.spent_epsilon():.4g} of {result.ledger.budget.epsilon:.4g}")
    for note in result.report.get("synthesizer", {}).get("model", {}).get("notes", []):
        click.secho(f"note: {note}", fg="yellow")   # e.g. no cross-party edge: the parties come out independent
    collab = result.report.get("collab")
    if collab:   # the [collab] mode: which mode ran, the tuning's accounting, and whether anything was published
        click.echo(f"mode: {result.report['mode']}")
        if collab["tuning"]:
            click.echo(f"tuning: {collab['tuning']['label']}; chosen {collab['tuning']['chosen']}")
        costs = collab["costs"]
        click.echo(f"cost: accounted ε = {costs['accounted_epsilon']:.4g}; the paper's argument would claim "
                   f"ε = {costs['paper_claimed_epsilon']:.4g}")
    written = "synthetic.csv, " if (out_dir / "synthetic.csv").is_file() else "(nothing published) "
    click.echo(f"wrote {out_dir}/{written}report.json, ledger.json, summary.md")


@main.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA")
def validate(config: Path, data_dir: str | None) -> None:
    """Check a CONFIG (keys, plugins, params, party split, budget plan) without reading any data rows."""
    from .pipeline import make_plan

    try:
        plan = make_plan(load_config(config), data_dir=data_dir)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{config}: valid. Planned privacy spend:")
    click.echo(plan.ledger.table(plan.ledger.planned))


@main.command()
@click.option("--strict", is_flag=True, help="Fail on the first broken plugin instead of skipping it.")
def plugins(strict: bool) -> None:
    """List installed plugins: distribution, version and the components each provides."""
    from .registry import Registry

    try:
        reg = Registry.load(strict=strict)
    except VertisynthError as exc:
        _fail(exc)
        return
    for p in sorted(reg.plugins, key=lambda p: (p.distribution, p.name)):
        click.echo(f"{p.distribution} {p.version}  [{p.name}] {p.module}")
        for kind, names in sorted(p.components.items()):
            for name in names:
                spec = reg.get(kind, name) if len(reg._specs[kind][name]) == 1 else None
                summary = f" - {spec.summary}" if spec is not None and spec.summary else ""
                click.echo(f"    {kind:<12} {name}{summary}")
    for b in reg.broken:
        click.secho(f"BROKEN {b.distribution} [{b.name}]: {b.error}", fg="yellow")


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default="vertisynth.toml")
def init(path: Path) -> None:
    """Write the default config to PATH (default: vertisynth.toml) as a starting point."""
    if path.exists():
        click.secho(f"error: {path} exists; not overwriting", fg="red", err=True)
        sys.exit(2)
    path.write_text(DEFAULT_CONFIG_TOML)
    click.echo(f"wrote {path}; edit it, then run: vertisynth run {path}")


class _DefaultGroup(click.Group):
    """A group whose first word may be left out: `vertisynth party CONFIG ...` means `party synth CONFIG ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["synth", *args]
        return super().parse_args(ctx, args)


@main.group(cls=_DefaultGroup)
def party() -> None:
    """One party's side of a cross-machine run: `keys` (sketch keys), `synth` (default: VertiMRF messages),
    `align` (PSI/PSU)."""


@party.command("keys")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--party", required=True, help="This party's name in the config (the first party leads).")
@click.option("--exchange", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder shared by the parties (e.g. synced): public keys and wrapped keys only.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Private folder for this party's group key (<party>_keys.json, owner-only).")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds to wait for the others.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA")
def party_keys(config: Path, party: str, exchange: Path, out: Path, timeout: float, data_dir: str | None) -> None:
    """Agree the DP FM sketch keys with the other parties (X25519 + HKDF) through shared files."""
    from .deploy import run_party_keys

    try:
        path = run_party_keys(load_config(config), party, exchange, out, timeout, data_dir=data_dir)
    except VertisynthError as exc:
        _fail(exc)
        return
    fingerprint = json.loads(path.read_text())["fingerprint"]
    click.echo(f"{party}: group key in {path} (fingerprint {fingerprint}: every party should see the same)")


@party.command("synth")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--party", required=True, help="This party's name in the config.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="This party's own table: exactly its columns (else the config's dataset, for simulations).")
@click.option("--keys", "keys_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="This party's key file from `vertisynth party keys`.")
@click.option("--secret-seed", type=int, default=None,
              help="Seed the parties agreed on out of band (the server must never see it): reproducible noise, "
                   "and the sketch keys when --keys is not given. Without it noise comes from the OS.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA")
def party_synth(config: Path, party: str, csv_path: Path | None, keys_path: Path | None, secret_seed: int | None,
                out: Path, data_dir: str | None) -> None:
    """Run one party's side of VertiMRF on its own columns; write its messages to OUT."""
    from .deploy import run_party

    try:
        paths = run_party(load_config(config), party, secret_seed, out, data_dir, csv=csv_path, keys=keys_path)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{party}: wrote {len(paths)} message file(s) to {out}")


@party.command("align")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--party", required=True, help="This party's name in the config's [[parties]] (their order is the ring).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="This party's own table: its identifier column and its attributes.")
@click.option("--id-column", default="id", show_default=True)
@click.option("--exchange", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder shared by the parties (e.g. synced): protocol messages, blinded elements only.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Private folder for this party's alignment (rows, positions, sizes learned).")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds to wait for each round.")
@click.option("--table/--no-table", default=True, show_default=True,
              help="Also write <party>_aligned.csv (its columns in the common order; PSU: filled) for "
                   "`party synth --csv`. Needs a config that plans alone: csv dataset with a public schema.")
@click.option("--data-dir", default=None, type=click.Path(file_okay=False))
def party_align(config: Path, party: str, csv_path: Path, id_column: str, exchange: Path, out: Path,
                timeout: float, table: bool, data_dir: str | None) -> None:
    """Run one party of the config's PSI/PSU protocol, exchanging message files with the others.

    Writes, to OUT (private): <party>_alignment.csv/.json (its rows' positions, the sizes it learned) and,
    with --table, <party>_aligned.csv, the input of `vertisynth party synth --csv`."""
    from vertisynth.plugins.alignment.exchange import run_party_align

    try:
        path = run_party_align(load_config(config), party, csv_path, id_column, exchange, out, timeout,
                               write_table=table, data_dir=data_dir)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{party}: alignment written to {path}" + (f"; aligned table {out / (party + '_aligned.csv')}"
                                                          if table else ""))


@main.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--messages", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder with every party's message files.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA")
def server(config: Path, messages: Path, out: Path, data_dir: str | None) -> None:
    """Build the synthetic table from the parties' message files only."""
    from .deploy import run_server

    try:
        run_server(load_config(config), messages, out, data_dir)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"server: wrote {out}/synthetic.csv, report.json, ledger.json")


@main.command()
@click.argument("study_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: study-output/<file name>); finished cells are cached there.")
@click.option("--quick", is_flag=True, help="Run the file's smaller [study.quick] variant.")
@click.option("--jobs", "-j", type=int, default=None, help="Local joblib workers (default: the file's n_jobs, -1).")
@click.option("--scheduler", default=None, help="tcp://host:port of an existing Dask cluster to run cells on.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def study(study_file: Path, out: Path | None, quick: bool, jobs: int | None, scheduler: str | None,
          data_dir: str | None, quiet: bool) -> None:
    """Run (or resume) a comparison study: one pipeline run per [study] grid cell x repeat."""
    import tomllib

    from ..study import run_study

    try:
        if not study_file.is_file():
            raise ConfigError(f"study file {str(study_file)!r} does not exist")
        try:
            data = tomllib.loads(study_file.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"study file {str(study_file)!r} is not valid TOML: {exc}") from None
        out_dir = out or Path("study-output") / (study_file.stem + ("-quick" if quick else ""))
        table = run_study(data, out_dir, quick=quick, n_jobs=jobs, scheduler=scheduler, data_dir=data_dir,
                          progress=not quiet)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{table['cell'].nunique() if len(table) else 0} cells, {len(table)} rows -> "
               f"{out_dir}/results.csv, results.parquet, summary.md, figures/")


def _register_subgroups() -> None:
    from vertisynth.collab.cli import collab

    main.add_command(collab)


_register_subgroups()


if __name__ == "__main__":
    main()
