"""`vertisynth collab ...`: secure aggregation as separate processes that exchange only files.

    vertisynth collab share --custodian A --csv a.csv --domain d.json --marginal 0,1 --servers 2 --out inbox/
    vertisynth collab aggregate --server 0 --rho 0.05 --inbox inbox/ --out outbox/     (once per server)
    vertisynth collab reconstruct --outbox outbox/ --out noisy.npy
"""
from __future__ import annotations

import sys
from pathlib import Path

import click
import numpy as np

from vertisynth.core.errors import VertisynthError

from .secure_aggregation import CountShare, NoisyShare, aggregate_at_server, reconstruct, share_counts, sigma_for_rho


def _fail(exc: Exception) -> None:
    click.secho(f"error: {exc}", fg="red", err=True)
    sys.exit(2)


@click.group()
def collab() -> None:
    """Secure aggregation of custodians' marginals across non-colluding compute servers (files only).

    The whole horizontal pipeline (DP binning, secure measurement, tuning, publish once) runs from a config
    with a [collab] table: vertisynth run CONFIG (docs/collab.md)."""


@collab.command()
@click.option("--custodian", required=True, help="This custodian's name.")
@click.option("--csv", "csv_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--domain", "domain_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="PrivMRF-style JSON domain of the integer-coded CSV (public).")
@click.option("--marginal", "marginals", multiple=True, required=True, help="Comma-separated columns; repeatable.")
@click.option("--servers", type=int, default=2, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--seed", type=int, default=None, help="For tests only: shares must be unpredictable in real use.")
def share(custodian: str, csv_path: str, domain_path: str, marginals: tuple[str, ...], servers: int, out: Path,
          seed: int | None) -> None:
    """Count this custodian's marginals and write one share file per server."""
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain
    from vertisynth.plugins.datasets.files import read_codes_csv, read_domain_json

    try:
        sizes = read_domain_json(Path(domain_path))
        data = Dataset.from_frame(read_codes_csv(Path(csv_path), sizes), Domain.from_sizes(sizes))
        rng = np.random.default_rng(seed)  # None: fresh OS entropy
        for m in marginals:
            attrs_ = m.split(",")
            counts = data.counts(attrs_).values.astype(np.int64)
            for sh in share_counts(custodian, m, counts, servers, rng):
                d = out / f"server{sh.server}"
                d.mkdir(parents=True, exist_ok=True)
                sh.save(d / f"{custodian}__{m.replace(',', '-')}.npz")
    except VertisynthError as exc:
        _fail(exc)
    click.echo(f"{custodian}: wrote shares of {len(marginals)} marginal(s) for {servers} servers under {out}")


@collab.command()
@click.option("--server", type=int, required=True)
@click.option("--rho", type=float, required=True, help="zCDP cost of each released marginal (sets σ).")
@click.option("--inbox", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--seed", type=int, default=None, help="For tests only.")
def aggregate(server: int, rho: float, inbox: Path, out: Path, seed: int | None) -> None:
    """Add all custodians' shares per marginal and this server's own Gaussian noise."""
    try:
        files = sorted((inbox / f"server{server}").glob("*.npz"))
        if not files:
            raise VertisynthError(f"no share files for server {server} under {inbox}")
        by_query: dict[str, list[CountShare]] = {}
        for f in files:
            sh = CountShare.load(f)
            by_query.setdefault(sh.query, []).append(sh)
        rng = np.random.default_rng(seed)
        out.mkdir(parents=True, exist_ok=True)
        for q, shares in by_query.items():
            aggregate_at_server(server, shares, sigma_for_rho(rho), rng).save(
                out / f"server{server}__{q.replace(',', '-')}.npz")
    except VertisynthError as exc:
        _fail(exc)
    click.echo(f"server {server}: aggregated {len(by_query)} marginal(s)")


@collab.command(name="reconstruct")
@click.option("--outbox", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
def reconstruct_cmd(outbox: Path, out: Path) -> None:
    """Combine the servers' noisy shares: only the noisy totals are ever revealed (saved as .npz by marginal)."""
    try:
        by_query: dict[str, list[NoisyShare]] = {}
        for f in sorted(outbox.glob("*.npz")):
            ns = NoisyShare.load(f)
            by_query.setdefault(ns.query, []).append(ns)
        if not by_query:
            raise VertisynthError(f"no noisy shares under {outbox}")
        np.savez(out, **{q: reconstruct(v) for q, v in by_query.items()})
    except VertisynthError as exc:
        _fail(exc)
    click.echo(f"wrote {len(by_query)} noisy marginal(s) to {out}")
