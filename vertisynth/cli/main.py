"""The `vertisynth` command line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import click

from vertisynth import __version__
from vertisynth.core.capabilities import CostEstimate
from vertisynth.core.errors import PluginError, VertisynthError
from vertisynth.core.registry import Registry, default_registry
from vertisynth.run.config import DEFAULT_CONFIG_TOML, default_config, load_config
from vertisynth.run.console import fail as _fail
from vertisynth.run.pipeline import execute, make_plan


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
    try:
        cfg = load_config(config) if config else default_config()
        if seed is not None:
            cfg = attrs.evolve(cfg, seed=seed)
        plan = make_plan(cfg, data_dir=data_dir)
        click.echo(f"plan fits the budget: ε={plan.ledger.planned_epsilon():.4g} of {plan.ledger.budget.epsilon:.4g} "
                   f"(δ={plan.ledger.budget.delta:.3g}), {len(plan.ledger.planned)} charges, "
                   + plan.who(), err=True)
        out_dir = out or Path(cfg.output or "vertisynth-output")
        result = execute(plan, out_dir, progress=not quiet)
    except VertisynthError as exc:
        _fail(exc)
        return
    for ev, metrics in result.metrics.items():
        for m, v in metrics.items():
            click.echo(f"{ev}.{m} = {v:.4f}")
    click.echo(f"privacy: spent ε = {result.ledger.spent_epsilon():.4g} of {result.ledger.budget.epsilon:.4g}")
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
@click.option("--rows", type=int, default=100_000, show_default=True,
              help="Row count for the expected cost per party (encoders that report one, e.g. 'he').")
def validate(config: Path, data_dir: str | None, rows: int) -> None:
    """Check a CONFIG (keys, plugins, params, party split, budget plan) without reading any data rows."""
    try:
        plan = make_plan(load_config(config), data_dir=data_dir)
        syn = plan.synthesizer.instance
        cost = syn.cost_estimate(rows) if isinstance(syn, CostEstimate) else {}
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{config}: valid. Planned privacy spend:")
    click.echo(plan.ledger.table(plan.ledger.planned))
    if cost:
        click.echo(f"Expected cost per party for {rows:,} rows (upper estimate; per row in brackets):")
        for party, c in cost.items():
            click.echo(f"  {party:<12} ciphertexts {c['ciphertexts']:>14,.0f}  sent {c['bytes'] / 1e6:>10,.1f} MB "
                       f"({c['bytes'] / rows:,.0f} B)  CPU {c['cpu_s']:>9,.1f} s ({1e3 * c['cpu_s'] / rows:.2f} ms)"
                       + (f"  [{c['note']}]" if c.get("note") else ""))


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


def _add_part_commands() -> None:
    """Commands the parts contribute (party/server from deploy, collab, study...) through the registry."""
    reg = default_registry()
    for name in reg.names("command"):
        try:
            main.add_command(reg.get("command", name).load_factory(), name)
        except PluginError as exc:   # a broken third-party command must not take the whole CLI down
            click.secho(f"warning: command {name!r} skipped: {exc}", fg="yellow", err=True)


_add_part_commands()


if __name__ == "__main__":
    main()
