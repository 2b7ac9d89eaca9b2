"""`vertisynth collab ...`: secure aggregation as separate processes that exchange only signed messages.

The whole protocol (binning rounds, measurement round, fit; vertisynth.collab.distributed), one process per role:

    vertisynth collab custodian CONFIG --name A --csv a.csv --exchange shared/    (once per custodian)
    vertisynth collab server CONFIG --index 0 --exchange shared/                 (once per server)
    vertisynth collab publish CONFIG --exchange shared/ --out release/

`--exchange` is a folder every role can reach or a URL (file://, sftp://host/path, s3://bucket/run7/; the same
transports as the deploy roles, core/transport.py and docs/network.md).

One aggregation round by hand, on ONE machine only (a teaching and debugging aid; `--local-only` says so):

    vertisynth collab share --local-only --custodian A --csv a.csv --domain d.json --marginal 0,1 --servers 2 --out inbox/
    vertisynth collab aggregate --local-only --server 0 --rho 0.05 --inbox inbox/ --out outbox/     (once per server)
    vertisynth collab reconstruct --local-only --outbox outbox/ --out noisy.npy

Their files are plain: unsigned (nothing says who wrote them, so an edited count is undetectable), not bound to a
run (an old file replays), and the shares unsealed (whoever holds every server's folder holds the counts). So
they refuse to run unless `--local-only` acknowledges that every file stays on this machine; across machines the
same round runs signed, sealed and run-bound as `collab custodian|server|publish --exchange URL` (docs/collab.md).
"""
from __future__ import annotations

from pathlib import Path

import click

from vertisynth.core.errors import ConfigError, MessageError, VertisynthError
from vertisynth.run.console import fail as _fail, progress_bar

# The protocol's modules (and numpy, pandas, the engine under them) are imported in the command bodies: `vertisynth
# collab --help` stays fast (tests/cli/test_startup.py).


@click.group()
def collab() -> None:
    """Secure aggregation of custodians' marginals across non-colluding compute servers.

    \b
    The whole protocol as separate processes, all with the same [collab] config and one
    exchange (--exchange: a shared folder, or a URL such as sftp://host/path or s3://bucket/prefix):
      custodian  each custodian, with only its own CSV
      server     each compute server (sees only random shares)
      publish    reconstructs the noisy aggregates, fits, writes the release
    One aggregation round by hand, on one machine only (--local-only): share, aggregate, reconstruct.
    The one-process simulation of the same protocol (and tuning): vertisynth run CONFIG. See docs/collab.md."""


_LOCAL_ONLY = click.option(
    "--local-only", is_flag=True,
    help="Required: acknowledges that these plain files (unsigned, not run-bound, shares unsealed) never leave "
         "this machine. Across machines run `collab custodian|server|publish --exchange URL` (signed, sealed).")


def _local_only(command: str, acknowledged: bool) -> None:
    if not acknowledged:
        _fail(ConfigError(
            f"`collab {command}` writes and reads plain files (unsigned, not bound to a run, shares unsealed): a "
            "one-machine aid only. Pass --local-only to acknowledge that no file crosses machines; across machines "
            "use `vertisynth collab custodian|server|publish --exchange URL` (signed, sealed, run-bound)"))


@collab.command()
@_LOCAL_ONLY
@click.option("--custodian", required=True, help="This custodian's name.")
@click.option("--csv", "csv_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="This custodian's integer-coded CSV.")
@click.option("--domain", "domain_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="PrivMRF-style JSON domain of the integer-coded CSV (public).")
@click.option("--marginal", "marginals", multiple=True, required=True, help="Comma-separated columns; repeatable.")
@click.option("--servers", type=int, default=2, show_default=True, help="Number of aggregation servers.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the share files (one sub-folder per server).")
@click.option("--seed", type=int, default=None, help="For tests only: shares must be unpredictable in real use.")
def share(local_only: bool, custodian: str, csv_path: str, domain_path: str, marginals: tuple[str, ...],
          servers: int, out: Path, seed: int | None) -> None:
    """Count this custodian's marginals and write one share file per server (one machine only: --local-only)."""
    import numpy as np

    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain
    from vertisynth.core.loaded import read_codes_csv, read_domain_json

    from .secure_aggregation import share_counts

    _local_only("share", local_only)
    try:
        sizes = read_domain_json(Path(domain_path))
        data = Dataset.from_frame(read_codes_csv(Path(csv_path), sizes), Domain.from_sizes(sizes))
        rng = None if seed is None else np.random.default_rng(seed)  # None: masks from the OS CSPRNG
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
@_LOCAL_ONLY
@click.option("--server", type=int, required=True, help="This server's index (0-based).")
@click.option("--rho", type=float, required=True, help="zCDP cost of each released marginal (sets σ).")
@click.option("--inbox", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder of share files written by `collab share`.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for this server's noisy shares.")
@click.option("--seed", type=int, default=None, help="For tests only.")
def aggregate(local_only: bool, server: int, rho: float, inbox: Path, out: Path, seed: int | None) -> None:
    """Add all custodians' shares per marginal and this server's own Gaussian noise (one machine only)."""
    import numpy as np

    from .secure_aggregation import CountShare, aggregate_at_server, sigma_for_rho

    _local_only("aggregate", local_only)
    try:
        files = sorted((inbox / f"server{server}").glob("*.npz"))
        if not files:
            raise VertisynthError(f"no share files for server {server} under {inbox}")
        by_query: dict[str, list[CountShare]] = {}
        for f in files:
            sh = CountShare.load(f)
            if f.name != f"{sh.party}__{sh.query.replace(',', '-')}.npz":   # share() names each file by its content
                raise MessageError(f"{f}: holds {sh.party!r}'s share of {sh.query!r}, not what its name says "
                                   "(renamed or replaced?); refused")
            by_query.setdefault(sh.query, []).append(sh)
        rng = None if seed is None else np.random.default_rng(seed)  # None: discrete Gaussian, OS CSPRNG
        out.mkdir(parents=True, exist_ok=True)
        for q, shares in by_query.items():
            aggregate_at_server(server, shares, sigma_for_rho(rho), rng).save(
                out / f"server{server}__{q.replace(',', '-')}.npz")
    except VertisynthError as exc:
        _fail(exc)
    click.echo(f"server {server}: aggregated {len(by_query)} marginal(s)")


@collab.command(name="reconstruct")
@_LOCAL_ONLY
@click.option("--outbox", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder with every server's noisy shares.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="File for the reconstructed noisy marginals (.npz).")
def reconstruct_cmd(local_only: bool, outbox: Path, out: Path) -> None:
    """Combine the servers' noisy shares: only the noisy totals are ever revealed (.npz by marginal; one machine)."""
    import numpy as np

    from .secure_aggregation import NoisyShare, reconstruct

    _local_only("reconstruct", local_only)
    try:
        by_query: dict[str, list[NoisyShare]] = {}
        for f in sorted(outbox.glob("*.npz")):
            ns = NoisyShare.load(f)
            if f.name != f"server{ns.server}__{ns.query.replace(',', '-')}.npz":
                raise MessageError(f"{f}: holds server {ns.server}'s noisy share of {ns.query!r}, not what its name "
                                   "says (renamed or replaced?); refused")
            by_query.setdefault(ns.query, []).append(ns)
        if not by_query:
            raise VertisynthError(f"no noisy shares under {outbox}")
        np.savez(out, **{q: reconstruct(v) for q, v in by_query.items()})
    except VertisynthError as exc:
        _fail(exc)
    click.echo(f"wrote {len(by_query)} noisy marginal(s) to {out}")


# -- the whole protocol, one role per process --------------------------------------------------------------
def _plan(config: Path, data_dir: str | None):
    from vertisynth.run.config import load_config
    from vertisynth.run.pipeline import make_plan

    from .pipeline import CollabPlan

    plan = make_plan(load_config(config), data_dir=data_dir)
    if not isinstance(plan, CollabPlan):
        raise VertisynthError(f"{config} has no [collab] table: the custodian/server/publish commands run the "
                              "horizontal protocol (docs/collab.md)")
    return plan


_CONFIG = click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
_EXCHANGE = click.option("--exchange", required=True,
                         help="Where every role posts and reads its signed messages (fresh for each run): a "
                              "shared folder, or a URL (file://, sftp://user@host/path, s3://bucket/prefix; "
                              "docs/network.md).")
_TIMEOUT = click.option("--timeout", type=float, default=600.0, show_default=True,
                        help="Seconds to wait for any one expected message before failing.")
_KEY = click.option("--key", type=click.Path(dir_okay=False, path_type=Path), required=True,
                    help="This role's signing key (`vertisynth party init --party NAME`: a custodian's name, "
                         "server<INDEX> or publisher), pinned in the config's [roster]; never in the exchange.")


def _identity(name: str, key: Path, exchange: str):
    from vertisynth.core.errors import ConfigError
    from vertisynth.core.identity import Identity, inside
    from vertisynth.core.transport import local_folder

    folder = local_folder(exchange)   # a remote store: the key cannot lie in it
    if folder is not None and inside(key, folder):
        raise ConfigError(f"signing key {str(key)!r} lies in the exchange folder; keep it private")
    return Identity.load(name, key)


_QUIET = click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
_DATA = click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
                     help="Where the dataset's public schema lives (the config's [dataset]); no rows are read.")


@collab.command()
@_CONFIG
@click.option("--name", required=True, help="This custodian's name: a key of collab.files, or custodian1..N.")
@click.option("--csv", "csv_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="This custodian's rows, with exactly the schema's columns (raw values, as in collab.files).")
@_EXCHANGE
@_TIMEOUT
@click.option("--threshold", type=float, default=None,
              help="[collab.tuning]: this custodian's quality threshold on the tuning metric, kept here "
                   "(default: collab.tuning.thresholds.NAME of the config; none: vote yes). Must lie in the "
                   "metric's range.")
@click.option("--seed", type=int, default=None,
              help="For tests only: draw this custodian's fold labels and evaluation randomness from SEED as "
                   "`vertisynth run` with config seed SEED does. Without it they come from the OS CSPRNG.")
@_KEY
@_DATA
@_QUIET
def custodian(config: Path, name: str, csv_path: Path, exchange: str, timeout: float, threshold: float | None,
              seed: int | None, key: Path, data_dir: str | None, quiet: bool) -> None:
    """Run one custodian: announce, then secret-share every round's counts to the servers.

    Reads only this custodian's CSV. Posts only shares (uniform ring elements, one message per server and
    round), a hello (name, config fingerprint, column names) and, with [collab.tuning], one yes/no vote
    per candidate run. Reconstructs the binning rounds' noisy totals (the DP bin edges and means, released
    anyway) to bin its own rows, and the tuning's DP test-fold marginals; never a measurement round.
    With [collab.tuning] it labels its own rows with folds, takes part in every fold run the publisher
    announces (collab_step__publisher__*), scores each candidate on the fold runs' synthetic tables the publisher
    sends (DP outputs) and votes: sound methods on the DP score, 'paper' on the evaluator's metric over
    its own training and held-out folds. Shares come from the OS CSPRNG."""
    from .distributed import run_custodian

    try:
        with progress_bar(f"custodian {name}: rounds", not quiet):
            info = run_custodian(_plan(config, data_dir), name, csv_path, exchange, timeout, seed=seed,
                                 threshold=threshold, identity=_identity(name, key, exchange))
    except VertisynthError as exc:
        _fail(exc)
    tuned = f"; voted on {info['candidate_runs']} candidate run(s)" if "candidate_runs" in info else ""
    click.echo(f"custodian {name}: shared {info['rounds']} round(s) of counts with the servers "
               f"({len(info['queries'])} measurement queries{tuned})"
               + ("" if info["published"] else "; no candidate passed the vote, nothing is published"))


@collab.command()
@_CONFIG
@click.option("--index", type=int, required=True, help="This server's index, 0..collab.servers-1.")
@_EXCHANGE
@_TIMEOUT
@click.option("--seed", type=int, default=None,
              help="For tests only: derive this server's noise from SEED as `vertisynth run` with config seed "
                   "SEED does (then the release equals the simulation's; needs noise = \"simulation\" in the "
                   "config). Without it: discrete Gaussian noise from the OS CSPRNG.")
@_KEY
@_DATA
@_QUIET
def server(config: Path, index: int, exchange: str, timeout: float, seed: int | None, key: Path,
           data_dir: str | None, quiet: bool) -> None:
    """Run one compute server: per round, open the shares sealed to it, add them and its own discrete Gaussian noise.

    Reads only the custodians' hellos, the shares addressed to it (collab_share__*__to__server<INDEX>__*) and, with
    [collab.tuning], the publisher's steps (which candidate each run tries: public), never another server's
    messages; the noise scale of each round comes from the config, not from the custodians. Posts its noisy
    share per round (collab_noisy__server<INDEX>__to__*; tuning: the test-fold rounds and every fold run's rounds,
    then the final run). Semi-honest, and not all servers may collude (docs/collab.md)."""
    from .distributed import run_server

    try:
        with progress_bar(f"server {index}: rounds", not quiet):
            info = run_server(_plan(config, data_dir), index, exchange, seed, timeout,
                              identity=_identity(f"server{index}", key, exchange))
    except VertisynthError as exc:
        _fail(exc)
    click.echo(f"server {index}: aggregated {info['rounds']} round(s) with {info.get('noise', 'no')} noise")


@collab.command(name="publish")
@_CONFIG
@_EXCHANGE
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Where synthetic.csv, report.json, ledger.json and summary.md go.")
@_TIMEOUT
@click.option("--test-secret", default=None,
              help="Tests only: >= 128 bits of hex from which the tuning's candidate runs are drawn (as a "
                   "one-process run given the same secret draws them). Without it they come from the OS "
                   "CSPRNG. Labelled not for production in every output.")
@_KEY
@_DATA
@_QUIET
def publish_cmd(config: Path, exchange: str, out: Path, timeout: float, test_secret: str | None, key: Path,
                data_dir: str | None, quiet: bool) -> None:
    """Reconstruct every round's noisy total from all servers' shares, fit the synthesizer, publish once.

    Sees only the servers' noisy shares (whose sum is the DP release) and, with [collab.tuning], the
    custodians' yes/no votes; holds no rows, so no evaluation runs. With [collab.tuning] it drives the
    candidate loop: draws the candidate runs (private_selection: K ~ Poisson(μ), uniform picks), announces
    each (collab_step__publisher__*), fits every fold run and sends its synthetic table to the custodians, tallies
    their votes, then runs the chosen candidate on all data and publishes it (or nothing, if no candidate
    passed). Uses the config's seed for its fits and sampling, like `vertisynth run`; private_selection's
    candidate runs come from the OS CSPRNG and their number is never shown (Papernot–Steinke needs it secret)."""
    from .distributed import run_publisher
    from vertisynth.core.identity import parse_test_secret

    from .tuning import TEST_LABEL

    try:
        plan = _plan(config, data_dir)
        secret = None if test_secret is None else parse_test_secret(test_secret, plan.config.seed)
        with progress_bar("publisher: rounds, fit", not quiet):
            info = run_publisher(plan, exchange, out, timeout,
                                 identity=_identity("publisher", key, exchange), test_secret=secret)
    except VertisynthError as exc:
        _fail(exc)
    t = info["tuning"]
    if t is not None:
        runs = t["candidate_runs"]
        runs = f"{runs} candidate run(s)" if isinstance(runs, int) else "a secret number of candidate runs"
        click.echo(f"tuning: {t['label']}; {runs}; chosen {t['chosen']}"
                   + (f" [{TEST_LABEL}]" if t["test"] else ""))
    if info["published"]:
        click.echo(f"published {info['records']} synthetic records after {info['rounds']} round(s); "
                   f"spent ε = {info['epsilon']:.4g}; wrote {info['out']}")
    else:
        click.echo(f"published nothing: no candidate passed the custodians' vote; spent ε = {info['epsilon']:.4g} "
                   f"on the tuning; wrote the report to {info['out']}")
