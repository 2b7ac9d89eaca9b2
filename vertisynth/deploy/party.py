"""`vertisynth party`: one party's side of a cross-machine VertiMRF run, every message in a signed envelope.

Each party runs on its own machine with the shared config (public: schema, party split, budget, plugins,
[roster]) and its own CSV (`--csv`: exactly its columns, coded by the config's public schema).

0. `party init`: the party's long-term Ed25519 signing key (private folder, 0600); its public key goes into
   the config's [roster]. `party hello`: the hello round (deploy/session.py), which fixes the run id.
1. `party keys`: the DP FM sketches need hash keys common to the parties and unknown to the server. The
   parties run X25519 + HKDF (the leader wraps a group key for three or more), each ephemeral public key
   signed by its sender's roster key, every derivation bound to the run id and the config fingerprint.
2. `party synth`: local model, binning, value distributions and encoding -> envelopes to the server, and a
   signed ledger of what this party actually spent. Noise comes from the OS; only an explicit test secret
   given to `party hello` (>= 128 bits, never the config seed) makes a run reproducible (labelled so).
   One release per party and run: a second `party synth` is refused.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from vertisynth.core.chunks import counted, view_chunks
from vertisynth.core.encoding import TableSchema
from vertisynth.core.envelope import canonical
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.keys import KeyParty
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.run.config import RunConfig, noise_for
from vertisynth.run.stream import coded_chunks, fit_codec
from vertisynth.vertical import party_streams
from vertisynth.vertical.link import PartyBudget, PartySide

from .he_rounds import joint_encoder, party_rounds
from .oracle_rounds import PartyServer, agree_group_key, party_view
from .plans import oracle_run, streams as _streams, vertical_plan as _vertical_plan
from .session import (TEST_LABEL, RunState, Session, fetch_run_key, key_context, publish_party_key, session,
                      test_noise_seed)

SERVER = "server"


def schema_dtypes(plan, columns: list[str]) -> dict[str, type]:
    """Read categorical columns as text, so integer-looking labels ("1", "2") stay the schema's categories."""
    return {c.name: str for c in plan.source.schema.columns if c.name in columns and c.kind != "numeric"}


def _own_frame(plan, own: list[str], csv: Path | None) -> pd.DataFrame:
    """This party's columns: from its own CSV, or (simulation) from the config's dataset."""
    if csv is None:
        return plan.source.load().frame[own]
    if plan.source.schema.inferred:
        raise ConfigError("party synth --csv needs a public schema in the config ([dataset] csv with schema or "
                          "domain): a schema read off one party's rows would differ between parties and is not DP")
    if not csv.is_file():
        raise DataError(f"CSV {str(csv)!r} does not exist")
    try:
        frame = pd.read_csv(csv, dtype=schema_dtypes(plan, own))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read CSV {str(csv)!r}: {exc}") from None
    frame.columns = [str(c) for c in frame.columns]
    missing = [c for c in own if c not in frame.columns]
    extra = [c for c in frame.columns if c not in own]
    if missing or extra:
        raise DataError(f"CSV {str(csv)!r} must hold exactly this party's columns {own}: "
                        f"missing {missing}, not this party's {extra}")
    return frame[own]


def _fit_streamed(plan, schema: TableSchema, own: list[str], path: Path, rng, chunk_rows: int):
    """The codec of the party's columns of its CSV or Parquet file, reading it in chunks (run/stream.py)."""
    if plan.source.schema.inferred:
        raise ConfigError("party synth --csv needs a public schema in the config ([dataset] csv with schema or "
                          "domain): a schema read off one party's rows would differ between parties and is not DP")
    return fit_codec(schema, path, own, plan.ledger, rng, chunk_rows)


def _private_json(path: Path, content: dict) -> Path:
    tmp = path.with_suffix(".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(content, fh, indent=2)
    os.replace(tmp, path)
    return path


def _read_group_key(path: Path, party: str, state: RunState) -> KeyParty:
    if not path.is_file():
        raise ConfigError(f"party synth needs the sketch keys: --keys FILE (from `vertisynth party keys`; "
                          f"{str(path)!r} does not exist)")
    try:
        raw = json.loads(path.read_text())
        key = bytes.fromhex(raw["group_key"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"key file {str(path)!r} is malformed: {exc}") from None
    if raw.get("party") != party:
        raise DataError(f"key file {str(path)!r} belongs to party {raw.get('party')!r}, not {party!r}")
    if raw.get("run") != state.run or raw.get("config") != state.config:
        raise DataError(f"key file {str(path)!r} comes from another key agreement (run {str(raw.get('run'))[:12]}..., "
                        f"this run is {state.run[:12]}...): stale keys are refused; run `vertisynth party keys`")
    return KeyParty.from_group_key(party, key)


def _test_rngs(synth, state: RunState):
    """The parties' key and noise streams of a reproducible run (from the explicit test secret only)."""
    secret = state.secret()
    seed = test_noise_seed(secret) if secret is not None else np.random.SeedSequence().entropy
    return _streams(seed)


# -- key agreement --------------------------------------------------------------------------------------------
def run_party_keys(config: RunConfig, party: str, exchange: str | Path, out: Path, timeout: float = 600.0,
                   poll: float = 0.05, data_dir: str | None = None, key: Path | None = None) -> Path:
    """One party of the authenticated DPFM key agreement; writes `<party>_keys.json` (0600) to `out`."""
    plan, synth = _vertical_plan(config, data_dir, aligned_csv=True)   # psi/psu: keys come before or after align
    if oracle_run(plan):   # a vertical twin: a release's key, if any, is agreed during `party synth`
        raise ConfigError("party keys: a vertical twin's parties agree any key at the release, inside `party synth`; "
                          "skip `party keys`")
    if not synth.needs_keys():
        raise ConfigError("party keys: the config's encoder needs no shared keys (only 'dpfm' does)")
    names = list(plan.partition.names)
    if party not in names:
        raise DataError(f"unknown party {party!r}; the config's parties are {names}")
    sess = session(config, party, exchange, out, key, timeout, poll)
    state = sess.state
    ctx = key_context(state.run, state.config)
    key_rng = None
    if state.test_secret:   # reproducible: the simulation's key stream, drawn in the simulation's order
        key_rng, _ = synth.party_rngs(_test_rngs(synth, state)["fit"])
        raw = [key_rng.bytes(32) for _ in names[:names.index(party) + 1 if party != names[0] else len(names)]]
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
        me = KeyParty(party, X25519PrivateKey.from_private_bytes(raw[names.index(party)]), None, ctx)
    else:
        me = KeyParty.create(party, None, ctx)   # OS entropy
    agree_group_key(sess, names, me, key_rng)   # the exchange itself: shared with a vertical twin's release
    out.mkdir(parents=True, exist_ok=True)
    return _private_json(out / f"{party}_keys.json", {
        "party": party, "parties": names, "run": state.run, "config": state.config,
        "group_key": me.group_key().hex(), "fingerprint": me.group_fingerprint(),
        **({"test_secret": TEST_LABEL} if state.test_secret else {})})


# -- one party's release ----------------------------------------------------------------------------------------
def rows_tag(n: int, key: KeyParty | None, run: str) -> str:
    """Lets the server check that every party holds the same number of rows without learning it (a MAC under
    the group key); with no group key (no DPFM) the count itself."""
    if key is None:
        return f"rows={n}"
    return hmac.new(key.group_key(), f"vertisynth/rows/v1|{run}|{n}".encode(), hashlib.sha256).hexdigest()


def run_party(config: RunConfig, party: str, exchange: str | Path, out: Path, data_dir: str | None = None,
              csv: Path | None = None, keys: Path | None = None, key: Path | None = None,
              scheduler: str | None = None, timeout: float = 600.0) -> list[str]:
    """`scheduler`: a Dask scheduler address; the encoder's chunks are mapped over that cluster. `timeout`: seconds
    to wait for the server's run key (every data-derived message is sealed to it)."""
    plan, synth = _vertical_plan(config, data_dir, aligned_csv=csv is not None)
    if party not in plan.partition.names:
        raise DataError(f"unknown party {party!r}; the config's parties are {list(plan.partition.names)}")
    sess: Session = session(config, party, exchange, out, key, timeout)
    state = sess.state
    marker = out / f"{party}_released.json"
    if sess.transport.names(f"synth__{party}__*") or sess.transport.names(f"ledger__{party}__*") or (
            marker.is_file() and json.loads(marker.read_text()).get("run") == state.run):
        raise MessageError(f"party {party!r} already released its messages in run {state.run[:12]}...; a second "
                           "`party synth` in the same run is a second, unplanned release: refused")
    own = list(plan.partition.parties[plan.partition.names.index(party)].attributes)
    if oracle_run(plan):   # a vertical twin: the server asks, this party answers (deploy/oracle_rounds.py)
        if keys is not None or scheduler is not None:
            raise ConfigError("party synth: a vertical twin's party answers queries; it takes no --keys or --scheduler")
        return _run_oracle_party(config, plan, sess, party, own, csv, out, marker)
    key_party = None
    if synth.needs_keys():
        key_party = _read_group_key(keys or out / f"{party}_keys.json", party, state)
        synth.set_keys({party: key_party})
    elif keys is not None:
        raise ConfigError("party synth: the config's encoder takes no shared keys; leave out --keys")
    streams = _test_rngs(synth, state)
    # only this party's columns are encoded and kept: the rest of the table is dropped at once
    schema = TableSchema(tuple(c for c in plan.source.schema.columns if c.name in own))
    if csv is None:   # simulation: the config's dataset, in memory (the party step slices it)
        frame = _own_frame(plan, own, csv)
        view = schema.fit(frame, plan.ledger, streams["preprocessing"]).encode(frame)
        domain, chunks = view.domain, view_chunks(view, synth.chunk_rows())
    else:             # the party's file, read chunk by chunk: memory bounded by chunk_rows, not by n
        codec = _fit_streamed(plan, schema, own, csv, streams["preprocessing"], synth.chunk_rows())
        domain, chunks = codec.domain, coded_chunks(csv, codec, synth.chunk_rows())
    try:   # the --csv stream's spill (its coded rows) goes when the command ends, returned or raised (issue 31)
        return _party_step(config, plan, synth, sess, party, out, marker, key_party, streams, domain, chunks,
                           scheduler)
    finally:
        if csv is not None:
            chunks.close()


def _party_step(config: RunConfig, plan, synth, sess: Session, party: str, out: Path, marker: Path, key_party,
                streams, domain, chunks, scheduler: str | None) -> list[str]:
    """`run_party` from its chunk stream on: encode, send the messages and the signed ledger."""
    state = sess.state
    counting = counted(chunks)   # the row count of the last full pass, for the rows tag
    _, rngs = synth.party_rngs(streams["fit"])
    # secure noise unless the config says otherwise; an explicit test secret reproduces the simulation's noise
    noise = noise_for(config, cross_machine=not state.test_secret)
    ledger = PrivacyLedger(plan.ledger.budget, [c for c in plan.ledger.planned if c.party == party],
                           group_size=plan.ledger.group_size, noise=noise)   # `sample` fill: group privacy
    messages = synth.party_step_chunks(party, domain, counting, ledger, rngs[party], scheduler=scheduler)
    sess.server_key = fetch_run_key(sess)   # every data-derived message below is sealed to it (session.SEALED_ROUNDS)
    if joint_encoder(synth) is not None:   # encoder "he": the protocol's rounds with the others (deploy/he_rounds.py)
        # every round sealed to its one recipient's run key, as a vertical twin's: a relay reads neither the server's
        # clique tables nor the parties' rows, sums or answers (session.py)
        sess.run_key, sess.sealed = publish_party_key(sess), True
        messages = party_rounds(sess, synth, domain, chunks, messages, ledger, rngs[party], bool(state.test_secret))
    else:
        for i, m in enumerate(messages):
            sess.send("synth", [SERVER], m.kind, m.to_bytes(), tag=f"{i:03d}")
    align_ledger = out / f"{party}_alignment_ledger.json"
    spent = (json.loads(align_ledger.read_text()) if align_ledger.is_file() else []) + [c.to_dict() for c in ledger.spent]
    sess.send("ledger", [SERVER], "ledger", canonical({
        "party": party, "spent": spent, "messages": len(messages), "rows": rows_tag(counting.rows[-1], key_party, state.run),
        "test": bool(state.test_secret), "noise": noise}))
    out.mkdir(parents=True, exist_ok=True)
    _private_json(marker, {"run": state.run, "messages": len(messages)})
    (out / f"{party}__ledger.json").write_text(json.dumps(spent, indent=2))
    return [f"synth__{party}__{i:03d}" for i in range(len(messages))]


def _run_oracle_party(config: RunConfig, plan, sess: Session, party: str, own: list[str], csv: Path | None, out: Path,
                      marker: Path) -> list[str]:
    """One party of a vertical twin: answer the server's queries from its own columns and stream, paying each on
    its own ledger (the plan's charges) first; then its signed, sealed ledger."""
    state = sess.state
    streams = _test_rngs(None, state)
    view = party_view(plan, party, _own_frame(plan, own, csv), streams["preprocessing"])
    rng = party_streams(streams["fit"], plan.partition.names)[party]   # the one-process run's stream of this party
    noise = noise_for(config, cross_machine=not state.test_secret)
    ledger = PrivacyLedger(plan.ledger.budget, list(plan.ledger.planned), group_size=plan.ledger.group_size,
                           noise=noise)
    sess.server_key = fetch_run_key(sess)   # every answer below is sealed to it
    # and this party's own run key: the server's queries and the other parties' rounds are sealed to it
    sess.run_key, sess.sealed = publish_party_key(sess), True
    server = PartyServer(sess, PartySide(party, view, rng, ledger), PartyBudget(ledger), plan.measure.instance,
                         plan.partition, plan.source.schema.preview_domain(), bool(state.test_secret))
    answered = server.serve()
    spent = [c.to_dict() for c in ledger.spent]
    sess.send("ledger", [SERVER], "ledger", canonical({
        "party": party, "spent": spent, "messages": 0, "answers": len(answered), "rows": None,
        "test": bool(state.test_secret), "noise": noise}))
    out.mkdir(parents=True, exist_ok=True)
    _private_json(marker, {"run": state.run, "answers": len(answered)})
    (out / f"{party}__ledger.json").write_text(json.dumps(spent, indent=2))
    return answered
