"""The whole horizontal protocol as separate processes that exchange only files in a shared folder.

Three roles, each a small state machine that runs the *same* protocol code as the one-process simulation
(`HorizontalRun.measure`: DP binning rounds, then the measurement round) with a file transport in place of
the in-memory one; every secure sum is one round of "custodians share → servers add shares and their own
noise → noisy shares reconstructed". What differs per role is what it holds:

  * custodian (`vertisynth collab custodian`): its own CSV only. It announces itself (`hello__<name>.npz`:
    its name, the config's fingerprint and its CSV's column names), then for every round writes one
    `CountShare` per server into `to_server<s>/`. For binning rounds it waits for the servers' noisy shares
    and reconstructs the noisy totals (the DP edges and bin means, released anyway) to bin its own rows; it
    never reconstructs the measurement round.
  * server s (`vertisynth collab server`): no rows. It reads only `to_server<s>/` (uniformly random ring
    elements) and the custodians' hellos, adds its own Gaussian noise from a secret root (OS CSPRNG), and
    writes its `NoisyShare` into `noisy/`. The noise scale of every round comes from the config (public),
    never from a custodian's message; shapes are checked against the public schema.
  * publisher (`vertisynth collab publish`): no rows. It reconstructs every round's noisy total from
    `noisy/`, fits the synthesizer on the measurement round and writes the only release: synthetic.csv,
    report.json, ledger.json. Nobody holds real rows of more than one custodian, so no evaluation is run.

Servers and the publisher run the protocol code on empty tables: every count they "compute" is a zero
vector of the public shape, which the file transport uses only to know shapes and which custodians
contribute. Everything after a round (edges, means, the fit) is the same post-processing as in the
simulation, so with the same seeds (`server --seed`, the config's seed at the publisher) the separate
processes publish exactly the simulation's table.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, ClassVar

import attrs
import numpy as np
import pandas as pd

from vertisynth import __version__
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.messages import Message, publish, wait_for_files

from .horizontal import check_custodians
from .pipeline import CollabPlan, costs, read_custodian_csv, streams, summary_markdown
from .secure_aggregation import (CountShare, NoisyShare, Randomness, Transport, aggregate_at_server, reconstruct,
                                 server_randomness, share_counts)

MEASURE = "measure:"   # the measurement round's scope (HorizontalRun.measure): custodians do not reconstruct it


@attrs.frozen(eq=False)
class Hello(Message):
    """A custodian's announcement: which config it runs and which columns its CSV has (no rows, no counts)."""

    kind: ClassVar[str] = "collab_hello"
    fingerprint: str = ""
    columns: list[str] = attrs.field(factory=list)


def fingerprint(plan: CollabPlan) -> str:
    """Hash of the public config every role must share (custodians' CSV paths excluded: they are local)."""
    d = plan.config.to_dict()
    files = (d.get("collab") or {}).get("files")
    if files:
        d["collab"]["files"] = {k: "" for k in files}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def query_file(query: str) -> str:
    """A safe, unique file stem for a query name."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", query)[:80]
    return f"{safe}-{hashlib.sha256(query.encode()).hexdigest()[:8]}"


def _wait(path: Path, what: str, timeout: float, poll: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return wait_for_files(path.parent, path.name, 1, what, timeout, poll)[0]


def _collect(folder: Path, query: str, servers: int, contributors: list[str], timeout: float,
             poll: float) -> np.ndarray:
    noisy = []
    for s in range(servers):
        f = _wait(folder / "noisy" / f"{query_file(query)}__server{s}.npz",
                  f"server {s}'s noisy share of {query!r}", timeout, poll)
        ns = NoisyShare.load(f)
        if ns.query != query or ns.server != s or ns.n_servers != servers:
            raise MessageError(f"{f.name}: holds server {ns.server}'s share of {ns.query!r} for {ns.n_servers} "
                               f"servers, expected server {s}'s of {query!r} for {servers}")
        if ns.custodians != contributors:
            raise MessageError(f"server {s} aggregated {query!r} over custodians {ns.custodians}, expected "
                               f"{contributors}")
        noisy.append(ns)
    return reconstruct(noisy)


@attrs.define
class CustodianFiles(Transport):
    me: str
    servers: int
    folder: Path
    timeout: float = 600.0
    poll: float = 0.05
    randomness: Randomness = attrs.field(factory=Randomness)   # no seed: shares from the OS CSPRNG
    rounds: int = 0

    def total(self, query, per_custodian, sigma):
        if self.me not in per_custodian:   # another custodian's own round (local binning): not ours
            return np.zeros(np.asarray(next(iter(per_custodian.values()))).shape, np.int64)
        counts = np.asarray(per_custodian[self.me])
        for sh in share_counts(self.me, query, counts.astype(np.int64), self.servers,
                               self.randomness.shares(self.me, query)):
            d = self.folder / f"to_server{sh.server}"
            d.mkdir(parents=True, exist_ok=True)
            publish(sh, d, f"{query_file(query)}__{self.me}.npz")
        self.rounds += 1
        if query.startswith(MEASURE):   # the measurement round is for the publisher only
            return np.zeros(counts.shape, np.int64)
        return _collect(self.folder, query, self.servers, sorted(per_custodian), self.timeout, self.poll)


@attrs.define
class ServerFiles(Transport):
    index: int
    servers: int
    folder: Path
    randomness: Randomness
    timeout: float = 600.0
    poll: float = 0.05
    rounds: int = 0

    def total(self, query, per_custodian, sigma):
        shape = list(np.asarray(next(iter(per_custodian.values()))).shape)   # public: from the schema
        shares = []
        for c in sorted(per_custodian):
            f = _wait(self.folder / f"to_server{self.index}" / f"{query_file(query)}__{c}.npz",
                      f"custodian {c!r}'s share of {query!r} for server {self.index}", self.timeout, self.poll)
            sh = CountShare.load(f)
            if sh.party != c or sh.query != query or sh.server != self.index or sh.n_servers != self.servers:
                raise MessageError(f"{f.name}: holds {sh.party!r}'s share of {sh.query!r} for server {sh.server} of "
                                   f"{sh.n_servers}, expected {c!r}'s of {query!r} for server {self.index} of "
                                   f"{self.servers}")
            if sh.shape != shape:
                raise MessageError(f"custodian {c!r}'s share of {query!r} has shape {sh.shape}, but the public "
                                   f"schema gives {shape}: does it run a different config?")
            shares.append(sh)
        ns = aggregate_at_server(self.index, shares, sigma, self.randomness.noise(self.index, query))
        d = self.folder / "noisy"
        d.mkdir(parents=True, exist_ok=True)
        publish(ns, d, f"{query_file(query)}__server{self.index}.npz")
        self.rounds += 1
        return np.zeros(shape, np.int64)   # a server never learns the total


@attrs.define
class PublisherFiles(Transport):
    servers: int
    folder: Path
    timeout: float = 600.0
    poll: float = 0.05
    rounds: int = 0

    def total(self, query, per_custodian, sigma):
        self.rounds += 1
        return _collect(self.folder, query, self.servers, sorted(per_custodian), self.timeout, self.poll)


# -- the roles -----------------------------------------------------------------------------------------------
def check_separable(plan: CollabPlan) -> None:
    """What the separate-process protocol covers (so far): the final run without tuning or evaluation."""
    if plan.tuner is not None:
        raise ConfigError("[collab.tuning] runs only in the one-process simulation (vertisynth run) so far; the "
                          "separate-process commands run the final run with the config's hyperparameters. "
                          "Drop [collab.tuning] (or put the chosen values in synthesizer.params / collab.bins)")
    if plan.config.evaluation.holdout > 0:
        raise ConfigError("the separate-process protocol publishes without evaluation (no one holds every "
                          "custodian's rows); set [evaluation] holdout = 0")


def _attributes(plan: CollabPlan) -> list[str]:
    return list(plan.run.base.domain.attributes)


def _empty_frames(plan: CollabPlan) -> dict[str, pd.DataFrame]:
    return {n: pd.DataFrame({c: pd.Series([], dtype=object) for c in _attributes(plan)}) for n in plan.custodians}


def _check_name(plan: CollabPlan, name: str) -> None:
    if name not in plan.custodians:
        raise DataError(f"unknown custodian {name!r}; the config's custodians are {plan.custodians} "
                        "(collab.files keys, or custodian1..N for collab.custodians = N)")


def wait_for_custodians(plan: CollabPlan, folder: Path, timeout: float, poll: float) -> None:
    """Every custodian's hello: a known name, the same config, the same columns (else a clear error)."""
    want, fp = set(plan.custodians), fingerprint(plan)
    deadline = time.monotonic() + timeout
    seen: dict[str, Hello] = {}
    while True:
        for f in sorted(folder.glob("hello__*.npz")):
            name = f.name[len("hello__"):-len(".npz")]
            if name in seen:
                continue
            h = Hello.load(f)
            _check_name(plan, h.party)
            if h.party != name:
                raise MessageError(f"{f.name} holds the hello of {h.party!r}")
            if h.fingerprint != fp:
                raise ConfigError(f"custodian {h.party!r} runs a different config (fingerprint {h.fingerprint}, "
                                  f"this one {fp}); every role must use the same config file")
            check_custodians({h.party: pd.DataFrame(columns=h.columns, index=[0])}, _attributes(plan))
            seen[name] = h
        if set(seen) == want:
            return
        if time.monotonic() > deadline:
            raise MessageError(f"waited {timeout:.0f} s for the custodians' hellos in {str(folder)!r}: missing "
                               f"{sorted(want - set(seen))}; is a custodian down?")
        time.sleep(poll)


def run_custodian(plan: CollabPlan, name: str, csv: Path, folder: Path, timeout: float = 600.0,
                  poll: float = 0.05) -> dict[str, Any]:
    check_separable(plan)
    _check_name(plan, name)
    frame = read_custodian_csv(name, csv)
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / f"hello__{name}.npz").exists():
        raise MessageError(f"{str(folder)!r} already holds custodian {name!r}'s hello from an earlier run: use a "
                           "fresh exchange folder for every run (old shares would be mixed into this one)")
    # announce first, so the others fail fast and clearly if this CSV has the wrong columns
    publish(Hello(party=name, fingerprint=fingerprint(plan), columns=[str(c) for c in frame.columns]), folder,
            f"hello__{name}.npz")
    check_custodians({name: frame}, _attributes(plan))
    frame = frame[_attributes(plan)]
    transport = CustodianFiles(name, plan.run.servers, folder, timeout, poll)
    # the others' tables are empty here: their counts are zero vectors of the public shapes, never sent
    frames = {**_empty_frames(plan), name: frame}
    _, codec, queries, _, _ = plan.run.measure(frames, {}, plan.rho_pre, plan.rho_synth, plan.ledger, transport)
    return {"custodian": name, "rows": len(frame), "rounds": transport.rounds, "queries": [q.name for q in queries]}


def run_server(plan: CollabPlan, index: int, folder: Path, seed: int | None = None, timeout: float = 600.0,
               poll: float = 0.05) -> dict[str, Any]:
    check_separable(plan)
    if not 0 <= index < plan.run.servers:
        raise DataError(f"unknown server {index}; the config has collab.servers = {plan.run.servers} "
                        f"(indices 0..{plan.run.servers - 1})")
    folder.mkdir(parents=True, exist_ok=True)
    wait_for_custodians(plan, folder, timeout, poll)
    transport = ServerFiles(index, plan.run.servers, folder, server_randomness(seed, "final"), timeout, poll)
    plan.run.measure(_empty_frames(plan), {}, plan.rho_pre, plan.rho_synth, plan.ledger, transport)
    return {"server": index, "rounds": transport.rounds}


def run_publisher(plan: CollabPlan, folder: Path, out: Path, timeout: float = 600.0,
                  poll: float = 0.05) -> dict[str, Any]:
    check_separable(plan)
    cfg = plan.config
    folder.mkdir(parents=True, exist_ok=True)
    wait_for_custodians(plan, folder, timeout, poll)
    rng = streams(cfg.seed)
    t0 = time.perf_counter()
    transport = PublisherFiles(plan.run.servers, folder, timeout, poll)
    synth, codec, queries, answers, variances = plan.run.measure(_empty_frames(plan), {}, plan.rho_pre,
                                                                 plan.rho_synth, plan.ledger, transport)
    t1 = time.perf_counter()
    synth.fit_marginals(codec.domain, queries, answers, variances, rng["fit"])
    frame = codec.decode(synth.sample(cfg.sample_size, rng["sample"]), rng["decode"])
    t2 = time.perf_counter()
    if plan.ledger.unspent():
        raise MessageError(f"the protocol ended with planned releases never made: {plan.ledger.unspent()}")
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "synthetic.csv", index=False)
    cc = cfg.collab
    numeric = {c: {"edges": nb.edges.tolist(), "means": nb.means.tolist(),
                   **({"custodians": list(nb.owners)} if nb.owners else {})} for c, nb in codec.numeric.items()}
    report = {
        "vertisynth_version": __version__,
        "mode": (f"horizontal custodians, separate processes: {len(plan.custodians)} custodians, {cc.servers} "
                 f"non-colluding servers and this publisher exchanged only files in {str(folder)!r}; "
                 f"{cc.preprocessing} DP quantile binning of {sorted(cc.numeric) or 'no columns'}"),
        "seed": cfg.seed,
        "config": cfg.to_dict(),
        "dataset": {"name": plan.dataset_name, "attributes": _attributes(plan)},
        "collab": {"custodians": {n: "undisclosed" for n in plan.custodians}, "servers": cc.servers,
                   "preprocessing": cc.preprocessing, "debinning": cc.debinning, "numeric_bins": numeric,
                   "final_params": {}, "tuning": None, "costs": costs(plan, None), "published": True,
                   "rounds": transport.rounds},
        "synthesizer": plan.synthesizer.describe(),
        "synthetic_records": len(frame),
        "evaluation": {"holdout_records": 0},
        "metrics": {},
        "metrics_note": "no metrics: in the separate-process protocol no one holds the custodians' real rows",
        "privacy": plan.ledger.to_dict(),
        "timings_seconds": {"rounds (waiting on custodians and servers)": t1 - t0, "fit and sample": t2 - t1},
    }
    from vertisynth.core.pipeline import _json_default

    (out / "report.json").write_text(json.dumps(report, indent=2, default=_json_default))
    (out / "ledger.json").write_text(json.dumps(report["privacy"], indent=2, default=_json_default))
    (out / "summary.md").write_text(summary_markdown(report))
    return {"rounds": transport.rounds, "records": len(frame), "out": str(out),
            "epsilon": plan.ledger.spent_epsilon()}
