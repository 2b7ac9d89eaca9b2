"""`vertisynth party ...` and `vertisynth server`: the cross-machine roles' commands."""
from __future__ import annotations

import json
from pathlib import Path

import click

from vertisynth.core.errors import ConfigError, VertisynthError
from vertisynth.core.identity import Identity, inside
from vertisynth.run.console import fail as _fail, progress_bar

from .transport import local_folder, transport_for

# The roles' modules (and numpy, pandas, the engine under them) are imported in the command bodies: `vertisynth
# party --help` stays fast (tests/cli/test_startup.py).


class _DefaultGroup(click.Group):
    """A group whose first word may be left out: `vertisynth party CONFIG ...` means `party synth CONFIG ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["synth", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultGroup)
def party() -> None:
    """One party's side of a cross-machine run: `init` (signing key), `hello` (the run), `align` (PSI/PSU),
    `keys` (sketch keys), `synth` (default: VertiMRF messages)."""


_EXCHANGE_HELP = ("Where the roles exchange signed envelopes: a folder they all reach (e.g. synced), or a URL "
                  "(sftp://user@host/path, s3://bucket/prefix, gcs://, abfs://, file://; needs vertisynth[remote]).")
_exchange = click.option("--exchange", required=True, help=_EXCHANGE_HELP)
_out = click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
                    help="This party's private folder (signing key, run state, keys, outputs); never the exchange.")
_key = click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=None,
                    help="This party's signing key (default: OUT/<party>_signing.pem from `party init`).")
_timeout = click.option("--timeout", type=float, default=600.0, show_default=True,
                        help="Seconds to wait for the others in each round.")
_data_dir = click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
                         help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
_quiet = click.option("--quiet", "-q", is_flag=True, help="No progress bar.")


@party.command("init")
@click.option("--party", "name", required=True, help="This participant's name (a party, 'server', a collab role).")
@_out
@click.option("--exchange", default=None, help="The exchange folder, to refuse writing the key into it.")
def party_init(name: str, out: Path, exchange: str | None) -> None:
    """Make this participant's long-term Ed25519 signing key (OUT/<name>_signing.pem, 0600) and print the
    roster line every participant's config must hold."""
    from .session import identity_path

    try:
        folder = local_folder(exchange) if exchange is not None else None
        if folder is not None and (inside(out, folder) or inside(folder, out)):
            raise ConfigError(f"--out {str(out)!r} is the exchange folder or inside it: a private key never goes there")
        if out.is_dir() and any(p.suffix == ".env" for p in out.iterdir()):
            raise ConfigError(f"--out {str(out)!r} holds exchanged envelopes: it looks like an exchange folder; "
                              "a private key never goes there")
        identity = Identity.generate(name)
        path = identity.save(identity_path(out, name))
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{name}: signing key in {path} (owner-only). Add to the shared config's [roster] keys:")
    click.echo(f'{name} = "{identity.public_text()}"')


@party.command("hello")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--party", required=True, help="This party's name in the config.")
@_exchange
@_out
@_key
@click.option("--test-secret", default=None,
              help="Reproducible run (tests, deployment-equals-simulation checks only): >= 128 bits of hex shared "
                   "by the parties, never the config seed. Labelled not for production in every output.")
@_timeout
@_data_dir
def party_hello(config: Path, party: str, exchange: str, out: Path, key: Path | None, test_secret: str | None,
                timeout: float, data_dir: str | None) -> None:
    """The hello round: every party checks every other runs this same config, and the run id is agreed."""
    from vertisynth.run.config import load_config

    from vertisynth.core.identity import parse_test_secret

    from .session import TEST_LABEL, hello, load_identity, private_folder

    try:
        cfg = load_config(config)
        private_folder(out, exchange)
        secret = parse_test_secret(test_secret, cfg.seed) if test_secret is not None else None
        identity = load_identity(cfg, party, out, key, exchange)
        if cfg.parties:
            names = [p.name for p in cfg.parties]
        else:
            from vertisynth.run.pipeline import make_plan
            names = list(make_plan(cfg, data_dir=data_dir).partition.names)
        state = hello(cfg, identity, transport_for(exchange), names, out, secret, timeout)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{party}: run {state.run} with {list(state.parties)}" + (f" [{TEST_LABEL}]" if secret else ""))


@party.command("keys")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--party", required=True, help="This party's name in the config (the first party leads).")
@_exchange
@_out
@_key
@_timeout
@_data_dir
@_quiet
def party_keys(config: Path, party: str, exchange: str, out: Path, key: Path | None, timeout: float,
               data_dir: str | None, quiet: bool) -> None:
    """Agree the DP FM sketch keys with the other parties (signed X25519 + HKDF bound to the run)."""
    from vertisynth.run.config import load_config

    from .party import run_party_keys
    from .session import TEST_LABEL

    try:
        with progress_bar(f"{party}: key agreement", not quiet):
            path = run_party_keys(load_config(config), party, exchange, out, timeout, data_dir=data_dir, key=key)
    except VertisynthError as exc:
        _fail(exc)
        return
    content = json.loads(path.read_text())
    click.echo(f"{party}: group key in {path} (fingerprint {content['fingerprint']})"
               + (f" [{TEST_LABEL}]" if "test_secret" in content else ""))


@party.command("synth")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--party", required=True, help="This party's name in the config.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="This party's own table (CSV, or Parquet by its .parquet suffix): exactly its columns, read in "
                   "chunks of the encoder's chunk_rows (else the config's dataset, for simulations).")
@click.option("--keys", "keys_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="This party's key file from `party keys` (default: OUT/<party>_keys.json).")
@click.option("--scheduler", default=None,
              help="A Dask scheduler address (tcp://HOST:8786): map the encoding of the table's chunks over that "
                   "cluster (default: the encoder's dask_scheduler, else this process).")
@_exchange
@_out
@_key
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the server's run key (start `vertisynth server` beside the parties).")
@_data_dir
@_quiet
def party_synth(config: Path, party: str, csv_path: Path | None, keys_path: Path | None, scheduler: str | None,
                exchange: str, out: Path, key: Path | None, timeout: float, data_dir: str | None, quiet: bool) -> None:
    """Run one party's side of VertiMRF on its own columns; send its envelopes and signed ledger to the server."""
    from vertisynth.run.config import load_config

    from .party import run_party
    from .session import TEST_LABEL

    try:
        with progress_bar(f"{party}: local model, sketches", not quiet):
            names = run_party(load_config(config), party, exchange, out, data_dir, csv=csv_path, keys=keys_path, key=key,
                              scheduler=scheduler, timeout=timeout)
        test = json.loads((out / f"{party}_run.json").read_text()).get("test_secret")
    except VertisynthError as exc:
        _fail(exc)
        return
    what = "answer(s) to the server's queries" if any(n.startswith("oracle-answer-") for n in names) else "message(s)"
    click.echo(f"{party}: sent {len(names)} {what} and a signed ledger to {exchange}"
               + (f" [{TEST_LABEL}]" if test else ""))


@party.command("align")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--party", required=True, help="This party's name in the config's [[parties]] (their order is the ring).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="This party's own table: its identifier column and its attributes.")
@click.option("--id-column", default="id", show_default=True, help="Column of --csv that identifies a person.")
@_exchange
@_out
@_key
@_timeout
@click.option("--table/--no-table", default=True, show_default=True,
              help="Also write <party>_aligned.csv (its columns in the common order; PSU: filled) for "
                   "`party synth --csv`. Needs a config that plans alone: csv dataset with a public schema.")
@_data_dir
@_quiet
def party_align(config: Path, party: str, csv_path: Path, id_column: str, exchange: str, out: Path,
                key: Path | None, timeout: float, table: bool, data_dir: str | None,
                quiet: bool) -> None:
    """Run one party of the config's PSI/PSU protocol, exchanging signed envelopes with the others.

    Writes, to OUT (private): <party>_alignment.csv/.json (its rows' positions, the sizes it learned) and,
    with --table, <party>_aligned.csv, the input of `vertisynth party synth --csv`."""
    from vertisynth.run.config import load_config

    from .align import run_party_align
    from .session import TEST_LABEL

    try:
        with progress_bar(f"{party}: alignment", not quiet):
            path = run_party_align(load_config(config), party, csv_path, id_column, exchange, out, timeout,
                                   write_table=table, data_dir=data_dir, key=key)
    except VertisynthError as exc:
        _fail(exc)
        return
    test = json.loads(path.with_suffix(".json").read_text()).get("test_secret")   # keys drawn from the test secret
    click.echo(f"{party}: alignment written to {path}" + (f"; aligned table {out / (party + '_aligned.csv')}"
                                                          if table else "") + (f" [{TEST_LABEL}]" if test else ""))


@click.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--exchange", "--messages", "exchange", required=True,
              help="The exchange (folder or URL) with every party's hello, envelopes and signed ledger.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output folder: synthetic.csv, model.npz, report.json, ledger.json.")
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The server's signing key (it signs the run key the parties seal to, the model file it releases, "
                   "and with encoder 'he' its clique queries; default: OUT/server_signing.pem from `party init --party server`). The run key "
                   "is kept beside it (server_run_key.json, owner-only).")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the parties' hellos and messages.")
@click.option("--publish-key-only", is_flag=True,
              help="Publish the run key the parties seal their messages to, and stop (when the steps run one after "
                   "another; a server started beside the parties publishes it itself).")
@_data_dir
@_quiet
def server(config: Path, exchange: str, out: Path, key: Path | None, timeout: float, publish_key_only: bool,
           data_dir: str | None, quiet: bool) -> None:
    """Build the synthetic table from the parties' signed envelopes only."""
    from vertisynth.run.config import load_config

    from .server import run_server
    from .session import TEST_LABEL

    try:
        with progress_bar("server: fit the global model", not quiet):
            run_server(load_config(config), exchange, out, data_dir, key=key, timeout=timeout,
                       publish_only=publish_key_only)
        if publish_key_only:
            click.echo(f"server: run key published to {exchange}")
            return
        test = json.loads((out / "report.json").read_text()).get("test_secret")
    except VertisynthError as exc:
        _fail(exc)
        return
    model = ", model.npz" if (out / "model.npz").is_file() else ""
    click.echo(f"server: wrote {out}/synthetic.csv{model}, report.json, ledger.json, summary.md, report.html"
               + (f" [{TEST_LABEL}]" if test else ""))
