"""`vertisynth party ...` and `vertisynth server`: the cross-machine roles' commands."""
from __future__ import annotations

import json
from pathlib import Path

import click

from vertisynth.core.errors import VertisynthError
from vertisynth.run.config import load_config
from vertisynth.run.console import fail as _fail, progress_bar

from .align import run_party_align
from .party import run_party, run_party_keys
from .server import run_server


class _DefaultGroup(click.Group):
    """A group whose first word may be left out: `vertisynth party CONFIG ...` means `party synth CONFIG ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["synth", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultGroup)
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
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def party_keys(config: Path, party: str, exchange: Path, out: Path, timeout: float, data_dir: str | None,
               quiet: bool) -> None:
    """Agree the DP FM sketch keys with the other parties (X25519 + HKDF) through shared files."""
    try:
        with progress_bar(f"{party}: key agreement", not quiet):
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
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for this party's message files (to hand to the server).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def party_synth(config: Path, party: str, csv_path: Path | None, keys_path: Path | None, secret_seed: int | None,
                out: Path, data_dir: str | None, quiet: bool) -> None:
    """Run one party's side of VertiMRF on its own columns; write its messages to OUT."""
    try:
        with progress_bar(f"{party}: local model, sketches", not quiet):
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
@click.option("--id-column", default="id", show_default=True, help="Column of --csv that identifies a person.")
@click.option("--exchange", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder shared by the parties (e.g. synced): protocol messages, blinded elements only.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Private folder for this party's alignment (rows, positions, sizes learned).")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds to wait for each round.")
@click.option("--table/--no-table", default=True, show_default=True,
              help="Also write <party>_aligned.csv (its columns in the common order; PSU: filled) for "
                   "`party synth --csv`. Needs a config that plans alone: csv dataset with a public schema.")
@click.option("--data-dir", default=None, type=click.Path(file_okay=False), envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def party_align(config: Path, party: str, csv_path: Path, id_column: str, exchange: Path, out: Path,
                timeout: float, table: bool, data_dir: str | None, quiet: bool) -> None:
    """Run one party of the config's PSI/PSU protocol, exchanging message files with the others.

    Writes, to OUT (private): <party>_alignment.csv/.json (its rows' positions, the sizes it learned) and,
    with --table, <party>_aligned.csv, the input of `vertisynth party synth --csv`."""
    try:
        with progress_bar(f"{party}: alignment", not quiet):
            path = run_party_align(load_config(config), party, csv_path, id_column, exchange, out, timeout,
                                   write_table=table, data_dir=data_dir)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{party}: alignment written to {path}" + (f"; aligned table {out / (party + '_aligned.csv')}"
                                                          if table else ""))


@click.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--messages", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder with every party's message files.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output folder: synthetic.csv, report.json, ledger.json.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def server(config: Path, messages: Path, out: Path, data_dir: str | None, quiet: bool) -> None:
    """Build the synthetic table from the parties' message files only."""
    try:
        with progress_bar("server: fit the global model", not quiet):
            run_server(load_config(config), messages, out, data_dir)
    except VertisynthError as exc:
        _fail(exc)
        return
    model = ", model.npz" if (out / "model.npz").is_file() else ""
    click.echo(f"server: wrote {out}/synthetic.csv{model}, report.json, ledger.json")
