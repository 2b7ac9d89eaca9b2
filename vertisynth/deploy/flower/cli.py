"""`vertisynth flower ...`: what an organisation needs for a Flower deployment besides Flower's own commands
(the README's three-machine walkthrough, docs/network.md)."""
from __future__ import annotations

from pathlib import Path

import click

from vertisynth.core.errors import VertisynthError
from vertisynth.run.console import fail as _fail

from .pki import node_key, trial_tls
from .project import write_app


@click.group()
def flower() -> None:
    """Run across organisations on Flower: `app` (the Flower app to `flwr run`), `node-key` (a SuperNode's
    authentication key), `tls` (a test CA and SuperLink certificate for trials)."""


@flower.command("app")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Default seconds a step, and a party's answer, may take (run config `timeout`).")
def app(folder: Path, timeout: float) -> None:
    """Write the Flower app (FOLDER/pyproject.toml) that `flwr run FOLDER` submits to the SuperLink."""
    try:
        path = write_app(folder, timeout)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"Flower app in {path}; run it with: flwr run {folder} <connection> --run-config "
               "'config=\"job.toml\" out=\"out\"' --stream")


@flower.command("node-key")
@click.option("--party", required=True, help="The party this SuperNode runs for (names the files).")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The party's private folder.")
def node_key_cmd(party: str, out: Path) -> None:
    """A SuperNode authentication key pair (ECDSA P-384, OpenSSH format): the private key stays here, the .pub
    goes to the server's operator for `flwr supernode register`."""
    try:
        private, public = node_key(out, party)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{party}: SuperNode key {private} (owner-only); send {public} to the server's operator")


@flower.command("tls")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for ca.crt, ca.key, superlink.crt and superlink.key (created; files never overwritten).")
@click.option("--host", "hosts", multiple=True, required=True,
              help="The SuperLink's address as the parties dial it (repeat for several names / IPs).")
@click.option("--days", type=int, default=30, show_default=True,
              help="Days the test CA and the SuperLink certificate stay valid.")
def tls(out: Path, hosts: tuple[str, ...], days: int) -> None:
    """A test CA and the SuperLink's TLS certificate (trials; production uses the organisation's PKI). Give
    ca.crt to every party; superlink.crt and superlink.key stay on the SuperLink; keep ca.key offline."""
    try:
        files = trial_tls(out, list(hosts), days)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(" ".join(str(p) for p in files.values()))
