"""The whole horizontal protocol as separate processes that exchange only signed messages through an exchange
(`--exchange`: a folder, or a URL such as file://, sftp://, s3://; core/transport.py, channel.py).

Three roles, each a small state machine that runs the *same* protocol code as the one-process simulation
(`HorizontalRun.measure`: DP binning rounds, then the measurement round) with the exchange in place of the
in-memory transport (message slots are named `collab_<kind>__<sender>__to__<recipient>__<tag>`, the one grammar
of core/courier.py); every secure sum is
one round of "custodians share → servers add shares and their own noise → noisy shares reconstructed". What
differs per role is what it holds:

  * custodian (`vertisynth collab custodian`): its own CSV only. It announces itself (`hello__<name>__to__all__0`,
    deploy's hello: every public setting, a fresh nonce and its CSV's column names), then for every round posts one
    `CountShare` per server (`collab_share__<name>__to__server<s>__<query>`), sealed to that server's key
    (`key__server<s>__to__all__collab`). For binning rounds it waits for the servers' noisy shares
    and reconstructs the noisy totals (the DP edges and bin means, released anyway) to bin its own rows; it
    never reconstructs the measurement round.
  * server s (`vertisynth collab server`): no rows. It publishes a fresh X25519 key for the run, opens only
    the shares addressed to it (uniformly random ring elements, sealed to it) and reads the custodians' hellos,
    adds its own discrete Gaussian noise from the OS CSPRNG (or seeded simulation noise with --seed), and
    posts its `NoisyShare` (`collab_noisy__server<s>__to__<reader>__<query>`). The noise scale of every round
    comes from the config (public), never from a custodian's message; shapes are checked against the public schema.
  * publisher (`vertisynth collab publish`): no rows. It reconstructs every round's noisy total from the
    servers' noisy shares, fits the synthesizer on the measurement round and writes the only release:
    synthetic.csv, report.json, ledger.json. Nobody holds real rows of more than one custodian, so no evaluation
    is run.

With [collab.tuning] the roles first run the tuning rounds (`tuning.tuning_protocol`, the simulation's code
with a per-role `TuningIO`): custodians label their own rows with folds, contribute to the DP test-fold
marginals and to every fold run the publisher announces (`collab_step__publisher__to__<role>__*`), score each
candidate on the fold runs' synthetic tables the publisher sends (DP outputs) and write a yes/no vote; servers aggregate
every round; the publisher draws the candidate runs, fits the fold runs, tallies the votes and announces
the choice, after which the final run above runs with the chosen hyperparameters (or nothing is published).

Servers and the publisher run the protocol code on empty tables: every count they "compute" is a zero
vector of the public shape, which the exchange rounds use only to know shapes and which custodians
contribute. Everything after a round (edges, means, the fit) is the same post-processing as in the
simulation, so with the same seeds (`server --seed`, the config's seed at the publisher) the separate
processes publish exactly the simulation's table.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar

import attrs
import numpy as np
import pandas as pd

from vertisynth import __version__
from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.courier import HELLO, check_hello, flat, hello_envelope, pattern, read_hello, run_id
from vertisynth.core.envelope import ALL
from vertisynth.core.identity import Identity, roster_of
from vertisynth.core.messages import Message
from vertisynth.core.privacy import NOISE_LABELS
from vertisynth.core.transport import Transport as Exchange, poll_wait, transport_for
from vertisynth.run.config import config_fingerprint, noise_for, public_config
from vertisynth.run.report import write_release

from .channel import PUBLISHER, Channel, Where, check_role_name, server_name, where
from .horizontal import check_custodians
from .pipeline import (CollabPlan, candidate_runs, commit_choice, costs, read_custodian_csv, streams,
                       summary_markdown, tuning_report)
from .secure_aggregation import (CountShare, NoisyShare, Randomness, Transport, aggregate_at_server, reconstruct,
                                 server_randomness, share_counts)
from .tuning import (Selection, TuningIO, TuningOutcome, fold_synthetic, party_rng, selection_rng,
                     tuning_protocol)

UNDISCLOSED = "<a column outside the schema>"   # what a hello says in place of such a column's name
MEASURE = "measure:"   # the measurement round's scope (HorizontalRun.measure): custodians do not reconstruct it


def is_measure(query: str) -> bool:
    """A measurement round, of the final run or of a tuning fold run ("tuning:run0:fold1:measure:...")."""
    return query.startswith(MEASURE) or f":{MEASURE}" in query


@attrs.frozen(eq=False)
class TuningStep(Message):
    """The publisher's announcement of candidate run `run`: try grid candidate `candidate` ("run"), or the
    loop is over ("stop") and `candidate` was chosen (−1: none passed the vote, nothing is published).
    Data-independent for private_selection (Poisson count, uniform picks) and compose_all; for the paper's
    method the stop depends on the (non-DP) votes, as the paper's label says."""

    kind: ClassVar[str] = "collab_tuning_step"
    run: int = 0
    action: str = "run"
    candidate: int = -1
    params: dict[str, Any] = attrs.field(factory=dict)

    def validate(self) -> TuningStep:
        super().validate()
        if self.action not in ("run", "stop"):
            raise self._fail(f"action must be 'run' or 'stop', got {self.action!r}")
        return self


@attrs.frozen(eq=False)
class FoldSynthetic(Message):
    """A tuning fold run's synthetic table (base codes), sent by the publisher to the custodians. It is the
    output of a DP fold run (DP binning and measurement of the training folds), so sending it costs nothing
    beyond what the tuning's accounting already covers."""

    kind: ClassVar[str] = "collab_fold_synthetic"
    run: int = 0
    fold: int = 0
    codes: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0), np.int64))


@attrs.frozen(eq=False)
class TuningScore(Message):
    """Sound tuning methods: the DP score of candidate run `run`, from the publisher to the custodians (who
    vote on it). It is post-processing of the DP test-fold marginals and the run's DP fold tables."""

    kind: ClassVar[str] = "collab_tuning_score"
    run: int = 0
    score: float = 0.0


@attrs.frozen(eq=False)
class Vote(Message):
    """A custodian's vote on candidate run `run`: yes or no only (never its score or threshold)."""

    kind: ClassVar[str] = "collab_tuning_vote"
    run: int = 0
    yes: bool = False


def fingerprint(plan: CollabPlan) -> str:
    """The config fingerprint every role must share: deploy's (run/config.py; custodians' CSV paths blank: they are
    local)."""
    return config_fingerprint(plan.config)


def query_file(query: str) -> str:
    """A safe, unique file stem for a query name."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", query)[:80]
    return f"{safe}-{hashlib.sha256(query.encode()).hexdigest()[:8]}"


def readers_of(query: str, contributors: list[str]) -> list[str]:
    """Who reads a round's noisy shares: the publisher, and for a binning round the custodians that contributed
    (they bin their rows with its DP totals); a measurement round is for the publisher only."""
    return [PUBLISHER] if is_measure(query) else [*contributors, PUBLISHER]


def share_slot(custodian: str, query: str) -> Where:
    """A custodian's share of `query`, one envelope to each server (the server is its recipient)."""
    return where("share", custodian, query_file(query))


def noisy_slot(server: int, query: str) -> Where:
    return where("noisy", server_name(server), query_file(query))


def _collect(channel: Channel, query: str, servers: int, contributors: list[str],
             kinds: set[str] | None = None) -> np.ndarray:
    noisy = []
    for s in range(servers):
        name = noisy_slot(s, query)
        ns = channel.receive(NoisyShare, name, f"server {s}'s noisy share of {query!r}")
        if ns.query != query or ns.server != s or ns.n_servers != servers:
            raise MessageError(f"{name}: holds server {ns.server}'s share of {ns.query!r} for {ns.n_servers} "
                               f"servers, expected server {s}'s of {query!r} for {servers}")
        if ns.custodians != contributors:
            raise MessageError(f"server {s} aggregated {query!r} over custodians {ns.custodians}, expected "
                               f"{contributors}")
        if kinds is not None:
            kinds.add(ns.noise)
        noisy.append(ns)
    return reconstruct(noisy)


@attrs.define
class CustodianFiles(Transport):
    me: str
    servers: int
    channel: Channel
    randomness: Randomness = attrs.field(factory=Randomness)   # no seed: shares from the OS CSPRNG
    rounds: int = 0

    def total(self, query, per_custodian, sigma):
        if self.me not in per_custodian:   # another custodian's own round (local binning): not ours
            return np.zeros(np.asarray(next(iter(per_custodian.values()))).shape, np.int64)
        counts = np.asarray(per_custodian[self.me])
        for sh in share_counts(self.me, query, counts.astype(np.int64), self.servers,
                               self.randomness.shares(self.me, query)):
            # sealed to that server's run key (channel.py): no other role, and no relay, opens it
            self.channel.post(sh, share_slot(self.me, query), [server_name(sh.server)])
        self.rounds += 1
        if is_measure(query):   # the measurement round is for the publisher only
            return np.zeros(counts.shape, np.int64)
        return _collect(self.channel, query, self.servers, sorted(per_custodian))


@attrs.define
class ServerFiles(Transport):
    index: int
    servers: int
    channel: Channel
    randomness: Randomness
    rounds: int = 0

    def total(self, query, per_custodian, sigma):
        shape = list(np.asarray(next(iter(per_custodian.values()))).shape)   # public: from the schema
        shares = []
        for c in sorted(per_custodian):
            f = share_slot(c, query)
            sh = self.channel.receive(CountShare, f, f"custodian {c!r}'s share of {query!r} for server {self.index}")
            if sh.party != c or sh.query != query or sh.server != self.index or sh.n_servers != self.servers:
                raise MessageError(f"{f}: holds {sh.party!r}'s share of {sh.query!r} for server {sh.server} of "
                                   f"{sh.n_servers}, expected {c!r}'s of {query!r} for server {self.index} of "
                                   f"{self.servers}")
            if sh.shape != shape:
                raise MessageError(f"custodian {c!r}'s share of {query!r} has shape {sh.shape}, but the public "
                                   f"schema gives {shape}: does it run a different config?")
            shares.append(sh)
        ns = aggregate_at_server(self.index, shares, sigma, self.randomness.noise(self.index, query))
        self.channel.post(ns, noisy_slot(self.index, query), readers_of(query, sorted(per_custodian)))
        self.rounds += 1
        return np.zeros(shape, np.int64)   # a server never learns the total


@attrs.define
class PublisherFiles(Transport):
    servers: int
    channel: Channel
    rounds: int = 0
    noise: set[str] = attrs.field(factory=set)   # the noise the servers report having added

    def total(self, query, per_custodian, sigma):
        self.rounds += 1
        return _collect(self.channel, query, self.servers, sorted(per_custodian), self.noise)


# -- the tuning loop as messages ------------------------------------------------------------------------------
def step_slot(run: int) -> Where:
    return where("step", PUBLISHER, f"{run:04d}")


def synthetic_slot(run: int, fold: int) -> Where:
    return where("synthetic", PUBLISHER, f"run{run:04d}", f"fold{fold}")


def score_slot(run: int) -> Where:
    return where("score", PUBLISHER, f"run{run:04d}")


def vote_slot(run: int, custodian: str) -> Where:
    return where("vote", custodian, f"run{run:04d}")


@attrs.define
class FollowerIO(TuningIO):
    """Custodians and servers: follow the publisher's steps."""

    transport: Transport
    chosen: int | None = None

    def next_run(self, run, tried):
        f = step_slot(run)
        step = self.transport.channel.receive(TuningStep, f, f"the publisher's tuning step {run}")
        if step.run != run:
            raise MessageError(f"{f} holds the publisher's step {step.run}, expected {run}")
        if step.action == "stop":
            self.chosen = None if step.candidate < 0 else step.candidate
            return None
        return step.candidate

    def synthetic(self, run, fold, measured):
        return None

    def votes(self, run, mine):
        return None

    def finish(self, outcome):
        return self.chosen


@attrs.define
class CustodianIO(FollowerIO):
    me: str = ""
    seed: int | None = None
    domain: Any = None
    own_thresholds: dict[str, float] | None = None
    sound: bool = True

    @property
    def local(self):  # type: ignore[override]
        return [self.me]

    @property
    def thresholds(self):  # type: ignore[override]
        return self.own_thresholds

    def fold_rng(self, custodian):
        return party_rng(self.seed, "folds", custodian)

    def eval_rng(self, custodian, run, fold):
        return party_rng(self.seed, "evaluate", custodian, run, fold)

    def synthetic(self, run, fold, measured):
        if self.sound:   # sound methods: the custodian votes on the publisher's DP score, sees no fold table
            return None
        f = synthetic_slot(run, fold)
        msg = self.transport.channel.receive(FoldSynthetic, f,
                                             f"the publisher's synthetic table of run {run}, fold {fold}")
        if (msg.run, msg.fold) != (run, fold) or msg.codes.ndim != 2 or msg.codes.shape[1] != len(self.domain):
            raise MessageError(f"{f}: holds run {msg.run}, fold {msg.fold} with shape {msg.codes.shape}, "
                               f"expected run {run}, fold {fold} with {len(self.domain)} columns")
        return Dataset(msg.codes.astype(np.int64), self.domain)

    def score(self, run, score):
        f = score_slot(run)
        msg = self.transport.channel.receive(TuningScore, f, f"the publisher's DP score of candidate run {run}")
        if msg.run != run or not np.isfinite(msg.score):
            raise MessageError(f"{f}: holds the score {msg.score!r} of run {msg.run}, expected a finite score "
                               f"of run {run}")
        return float(msg.score)

    def votes(self, run, mine):
        self.transport.channel.post(Vote(party=self.me, run=run, yes=bool(mine[self.me])),
                                    vote_slot(run, self.me), [PUBLISHER])
        return None


@attrs.define
class PublisherIO(TuningIO):
    transport: Transport
    custodians: list[str]
    selection: Selection
    seed: int | None
    grid: list[dict[str, Any]]
    decides: bool = True
    sound: bool = True

    def next_run(self, run, tried):
        g = self.selection.next(tried)
        if g is not None:
            self._step(TuningStep(party="publisher", run=run, action="run", candidate=g, params=self.grid[g]))
        return g

    def _step(self, step: TuningStep) -> None:
        self.transport.channel.post(step, step_slot(step.run), [ALL])

    def synthetic(self, run, fold, measured):
        ds = fold_synthetic(measured, party_rng(self.seed, "fit", run, fold))
        if not self.sound:   # paper: each custodian scores the fold table on its own folds
            self.transport.channel.post(
                FoldSynthetic(party=PUBLISHER, run=run, fold=fold, codes=ds.codes.astype(np.int64)),
                synthetic_slot(run, fold), self.custodians)
        return ds

    def score(self, run, score):
        self.transport.channel.post(TuningScore(party=PUBLISHER, run=run, score=float(score)),
                                    score_slot(run), self.custodians)
        return score

    def votes(self, run, mine):
        out = {}
        for c in self.custodians:
            f = vote_slot(run, c)
            v = self.transport.channel.receive(Vote, f, f"custodian {c!r}'s vote on candidate run {run}")
            if v.party != c or v.run != run:
                raise MessageError(f"{f} holds {v.party!r}'s vote on run {v.run}, expected {c!r}'s on {run}")
            out[c] = bool(v.yes)
        return out

    def finish(self, outcome):
        g = -1 if outcome.chosen_index is None else outcome.chosen_index
        self._step(TuningStep(party="publisher", run=outcome.runs, action="stop", candidate=g,
                              params=self.grid[g] if g >= 0 else {}))
        return outcome.chosen_index


# -- the roles -----------------------------------------------------------------------------------------------
def check_separable(plan: CollabPlan) -> None:
    """What the separate-process protocol covers: tuning and the final run, without evaluation."""
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


def settings(plan: CollabPlan) -> dict[str, Any]:
    """What every hello carries and every role compares: the public config, flattened (as deploy's hello)."""
    return flat(public_config(plan.config))


def wait_for_custodians(plan: CollabPlan, channel: Channel) -> None:
    """Every custodian's hello (core/courier.py, deploy's hello): a known name, the same config (the first
    differing settings named), a clock near ours, the same columns (else a clear error); then the run id, from
    every hello's nonce, binds every later message of the run."""
    want, fp, mine = set(plan.custodians), fingerprint(plan), settings(plan)
    deadline = time.monotonic() + channel.timeout
    seen: dict[str, bytes] = {}
    while True:
        for f in channel.exchange.names(pattern(HELLO)):
            h = read_hello(channel.exchange.read(f), channel.roster, f)
            if h.sender in seen:
                continue
            _check_name(plan, h.sender)
            check_hello(h, f"custodian {h.sender!r} runs a different config", mine, fp, False)
            if h.columns is None:
                raise MessageError(f"{f}: from {h.sender!r}: a hello without its CSV's columns (not a custodian's); "
                                   "refused")
            check_custodians({h.sender: pd.DataFrame(columns=list(h.columns), index=[0])}, _attributes(plan))
            seen[h.sender] = h.nonce
        if set(seen) == want:
            channel.run = run_id(channel.config, seen)
            return
        if time.monotonic() > deadline:
            raise MessageError(f"waited {channel.timeout:.0f} s for the custodians' hellos in {channel.exchange}: "
                               f"missing {sorted(want - set(seen))}; is a custodian down?")
        time.sleep(poll_wait(channel.exchange, channel.poll))   # a remote store: fewer LISTs


def exchange_of(exchange: str | Path | Exchange) -> Exchange:
    """`--exchange`: a folder path or a URL (core/transport.py), or a transport already made."""
    return transport_for(exchange) if isinstance(exchange, (str, Path)) else exchange


def channel_for(plan: CollabPlan, identity: Identity | None, role: str, exchange: str | Path | Exchange,
                timeout: float = 600.0, poll: float = 0.05) -> Channel:
    """This role's channel: its signing key, checked against the config's [roster], on the run's exchange."""
    if identity is None:
        raise ConfigError(f"{role!r} needs its signing key (--key, from `vertisynth party init --party {role}`)")
    if identity.name != role:
        raise ConfigError(f"the signing key is {identity.name!r}'s, this role is {role!r}")
    roster = roster_of(plan.config.section("roster"))
    roster.check_own(identity)
    missing = [n for n in [*plan.custodians, *map(server_name, range(plan.run.servers)), PUBLISHER]
               if n not in roster.keys]
    if missing:
        raise ConfigError(f"the config's [roster] names no public key for {missing}")
    roles = (*plan.custodians, *map(server_name, range(plan.run.servers)), PUBLISHER)
    for n in roles:
        check_role_name(n)   # every role's name must be usable as a message name: refused before anything is sent
    return Channel(identity, roster, exchange_of(exchange), fingerprint(plan), timeout=timeout, poll=poll,
                   roles=roles)


def run_custodian(plan: CollabPlan, name: str, csv: Path, exchange: str | Path | Exchange,
                  timeout: float = 600.0, poll: float = 0.05, seed: int | None = None, threshold: float | None = None,
                  identity: Identity | None = None) -> dict[str, Any]:
    check_separable(plan)
    _check_name(plan, name)
    thresholds = None
    if threshold is not None:
        if plan.tuner is None:
            raise ConfigError("--threshold is a custodian's quality threshold for [collab.tuning]; this config "
                              "has no [collab.tuning]")
        thresholds = {name: plan.tuner.check_threshold(name, threshold)}
    frame = read_custodian_csv(name, csv)
    channel = channel_for(plan, identity, name, exchange, timeout, poll)
    if channel.exchange.names(pattern(HELLO, name)):
        raise MessageError(f"{channel.exchange} already holds custodian {name!r}'s hello from an earlier run: use a "
                           "fresh exchange for every run (old shares would be mixed into this one)")
    # announce first, so the others fail fast and clearly if this CSV has the wrong columns
    # a column outside the public schema is named only here: the hello (in clear) says that there is one
    schema = set(_attributes(plan))
    channel.exchange.send(*hello_envelope(channel.identity, fingerprint(plan), settings(plan), os.urandom(16), False,
                                          [str(c) if str(c) in schema else UNDISCLOSED for c in frame.columns]))
    check_custodians({name: frame}, _attributes(plan))
    frame = frame[_attributes(plan)]
    wait_for_custodians(plan, channel)   # the run id
    channel.publish_run_key()            # the servers seal the binning rounds' noisy shares to it
    transport = CustodianFiles(name, plan.run.servers, channel)
    # the others' tables are empty here: their counts are zero vectors of the public shapes, never sent
    frames = {**_empty_frames(plan), name: frame}
    params: dict[str, Any] = {}
    info: dict[str, Any] = {"custodian": name, "rows": len(frame)}
    if plan.tuner is not None:
        io = CustodianIO(transport, me=name, seed=seed, domain=plan.run.base.domain,
                         own_thresholds=thresholds, sound=plan.tuner.sound)
        outcome = tuning_protocol(plan.tuner, plan.run, frames, plan.ledger, io)
        secret_k = outcome.method == "private_selection"
        if not secret_k:   # private_selection: K is secret; this custodian saw it, its log does not say it
            info["candidate_runs"] = outcome.runs
        if not outcome.published:
            return {**info, "rounds": 0 if secret_k else transport.rounds, "queries": [], "published": False}
        params = outcome.chosen or {}
        commit_choice(plan, params)
    tuning_rounds = transport.rounds if plan.tuner is not None and plan.tuner.method == "private_selection" else 0
    _, codec, queries, _, _ = plan.run.measure(frames, params, plan.rho_pre, plan.rho_synth, plan.ledger, transport)
    return {**info, "rounds": transport.rounds - tuning_rounds, "queries": [q.name for q in queries],
            "published": True}


def run_server(plan: CollabPlan, index: int, exchange: str | Path | Exchange, seed: int | None = None,
               timeout: float = 600.0, poll: float = 0.05, identity: Identity | None = None) -> dict[str, Any]:
    check_separable(plan)
    if not 0 <= index < plan.run.servers:
        raise DataError(f"unknown server {index}; the config has collab.servers = {plan.run.servers} "
                        f"(indices 0..{plan.run.servers - 1})")
    noise = noise_for(plan.config, cross_machine=True)
    if noise == "secure" and seed is not None:
        raise ConfigError("server --seed draws reproducible simulation noise, but the config's noise is 'secure' "
                          "(the default across machines): drop --seed, or set noise = \"simulation\" for a test")
    channel = channel_for(plan, identity, server_name(index), exchange, timeout, poll)
    wait_for_custodians(plan, channel)
    channel.publish_run_key()   # this run only; the custodians seal their shares to it (signed: run-bound)
    # secure: discrete Gaussian from the OS CSPRNG; with --seed a reproducible simulation (the run label keeps
    # tuning and final noise apart)
    root = server_randomness(seed, "final")
    params: dict[str, Any] = {}
    rounds = 0
    if plan.tuner is not None:
        tt = ServerFiles(index, plan.run.servers, channel, attrs.evolve(root, run="tuning"))
        outcome = tuning_protocol(plan.tuner, plan.run, _empty_frames(plan), plan.ledger,
                                  FollowerIO(tt))
        rounds = 0 if outcome.method == "private_selection" else tt.rounds   # K is secret (tuning.py)
        if not outcome.published:
            return {"server": index, "rounds": rounds, "published": False}
        params = outcome.chosen or {}
        commit_choice(plan, params)
    transport = ServerFiles(index, plan.run.servers, channel, root)
    plan.run.measure(_empty_frames(plan), params, plan.rho_pre, plan.rho_synth, plan.ledger, transport)
    return {"server": index, "rounds": rounds + transport.rounds, "published": True, "noise": root.noise_kind}


def _noise_label(kinds: set[str]) -> str:
    """What the servers say they added (NoisyShare.noise): the report states it, whatever the config said."""
    if not kinds:
        return "none released"
    return "; ".join(NOISE_LABELS[k] for k in sorted(kinds)) + (" (servers differed)" if len(kinds) > 1 else "")


def run_publisher(plan: CollabPlan, exchange: str | Path | Exchange, out: Path, timeout: float = 600.0,
                  poll: float = 0.05, identity: Identity | None = None,
                  test_secret: bytes | None = None) -> dict[str, Any]:
    """The publisher. private_selection draws its candidate runs from the OS CSPRNG (`test_secret`: a
    reproducible run for tests, labelled in every output) and reports neither K nor a count or time that
    grows with it."""
    check_separable(plan)
    cfg = plan.config
    channel = channel_for(plan, identity, PUBLISHER, exchange, timeout, poll)
    wait_for_custodians(plan, channel)
    channel.publish_run_key()   # the servers seal their noisy shares to it, the custodians their votes
    rng = streams(cfg.seed)
    timings: dict[str, float] = {}
    hidden_rounds = 0
    transport = PublisherFiles(plan.run.servers, channel)
    outcome: TuningOutcome | None = None
    params: dict[str, Any] = {}
    if plan.tuner is not None:
        t0 = time.perf_counter()
        io = PublisherIO(transport, list(plan.custodians),
                         Selection.draw(plan.tuner, selection_rng(test_secret)), cfg.seed, plan.tuner.grid,
                         sound=plan.tuner.sound)
        outcome = tuning_protocol(plan.tuner, plan.run, _empty_frames(plan), plan.ledger, io)
        if outcome.method == "private_selection":   # K is secret: neither its rounds nor its time are shown
            hidden_rounds = transport.rounds
        else:
            timings["tuning (rounds, fold fits, waiting on votes)"] = time.perf_counter() - t0
        params = outcome.chosen or {}
        commit_choice(plan, params)
    published = outcome is None or outcome.published
    frame, codec = None, None
    if published:
        t0 = time.perf_counter()
        synth, codec, queries, answers, variances = plan.run.measure(_empty_frames(plan), params, plan.rho_pre,
                                                                     plan.rho_synth, plan.ledger, transport)
        t1 = time.perf_counter()
        synth.fit_marginals(codec.domain, queries, answers, variances, rng["fit"])
        frame = codec.decode(synth.sample(cfg.sample_size, rng["sample"]), rng["decode"])
        timings["rounds (waiting on custodians and servers)"] = t1 - t0
        timings["fit and sample"] = time.perf_counter() - t1
        if plan.ledger.unspent():
            raise MessageError(f"the protocol ended with planned releases never made: {plan.ledger.unspent()}")
    cc = cfg.section("collab")
    numeric = {} if codec is None else {
        c: {"edges": nb.edges.tolist(), "means": nb.means.tolist(), **({"custodians": list(nb.owners)} if nb.owners else {})}
        for c, nb in codec.numeric.items()}
    report = {
        "vertisynth_version": __version__,
        "mode": (f"horizontal custodians, separate processes: {len(plan.custodians)} custodians, {cc.servers} "
                 f"non-colluding servers and this publisher exchanged only signed messages through the exchange "
                 f"{str(channel.exchange)!r}; "
                 f"{cc.preprocessing} DP quantile binning of {sorted(cc.numeric) or 'no columns'}"),
        "seed": cfg.seed,
        "config": cfg.resolved(noise=transport.noise, **({} if frame is None else {"sample_size": len(frame)})),
        "dataset": {"name": plan.dataset_name, "attributes": _attributes(plan)},
        "collab": {"custodians": {n: "undisclosed" for n in plan.custodians}, "servers": cc.servers,
                   "preprocessing": cc.preprocessing, "debinning": cc.debinning, "numeric_bins": numeric,
                   "final_params": params, "tuning": tuning_report(plan, outcome, test_secret),
                   "costs": costs(plan, outcome), "published": published, "rounds": transport.rounds - hidden_rounds},
        "synthesizer": plan.synthesizer.describe(),
        "synthetic_records": 0 if frame is None else len(frame),
        "evaluation": {"holdout_records": 0},
        "metrics": {},
        "metrics_note": "no metrics: in the separate-process protocol no one holds the custodians' real rows",
        "privacy": {**plan.ledger.to_dict(), "noise": _noise_label(transport.noise),
                    **({"tuning_accounting": outcome.label} if outcome is not None else {})},
        "timings_seconds": timings,
    }
    # the one output writer: an earlier run's table in `out` must not pass for this one's (an unpublished tuning)
    write_release(out, report, summary_markdown(report), frame)
    return {"rounds": transport.rounds - hidden_rounds, "records": 0 if frame is None else len(frame),
            "out": str(out), "epsilon": plan.ledger.spent_epsilon(), "published": published,
            "tuning": None if outcome is None else {"label": outcome.label, "chosen": outcome.chosen,
                                                    "candidate_runs": candidate_runs(outcome),
                                                    "test": test_secret is not None}}
