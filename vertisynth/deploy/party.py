"""`vertisynth party` and `vertisynth server`: VertiMRF across machines, exchanging only files.

Each party runs on its own machine with the shared config (public: schema, party split, budget,
plugins) and its own CSV (`--csv`: exactly its columns, coded by the config's public schema).

1. `party keys`: the DP FM sketches need hash keys common to the parties and unknown to the server.
   The parties run X25519 + HKDF through a shared folder (public keys; for three or more parties the
   leader's AES-GCM-wrapped group key), and each keeps the group key in its private folder.
2. `party synth`: local model, binning, value distributions and encoding -> message files. Noise comes
   from the OS entropy source, unless `--secret-seed` is given: a seed agreed among the parties that
   the server never sees; with it and no `--keys`, the sketch keys are derived from the seed as in the
   one-process simulation, which the result then equals exactly (tested).
3. `server`: only the message files -> synthetic table, ledger (the public plan, which the parties'
   spends must match) and a report.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from vertisynth.core.encoding import TableSchema
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.messages import Message, publish, wait_for_files
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.plugins.encoders.keys import KeyAgreementMessage, KeyParty
from vertisynth.run.config import RunConfig

from .plans import streams as _streams, vertical_plan as _vertical_plan


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
        frame = pd.read_csv(csv)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read CSV {str(csv)!r}: {exc}") from None
    frame.columns = [str(c) for c in frame.columns]
    missing = [c for c in own if c not in frame.columns]
    extra = [c for c in frame.columns if c not in own]
    if missing or extra:
        raise DataError(f"CSV {str(csv)!r} must hold exactly this party's columns {own}: "
                        f"missing {missing}, not this party's {extra}")
    return frame[own]


def _read_group_key(path: Path, party: str):


    if not path.is_file():
        raise DataError(f"key file {str(path)!r} does not exist; run `vertisynth party keys` first")
    try:
        raw = json.loads(path.read_text())
        key = bytes.fromhex(raw["group_key"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"key file {str(path)!r} is malformed: {exc}") from None
    if raw.get("party") != party:
        raise DataError(f"key file {str(path)!r} belongs to party {raw.get('party')!r}, not {party!r}")
    return KeyParty.from_group_key(party, key)


def run_party(config: RunConfig, party: str, secret_seed: int | None, out: Path, data_dir: str | None = None,
              csv: Path | None = None, keys: Path | None = None) -> list[Path]:
    plan, synth = _vertical_plan(config, data_dir, aligned_csv=csv is not None)
    if party not in plan.partition.names:   # the first thing to tell a user who mistyped the name
        raise DataError(f"unknown party {party!r}; the config's parties are {list(plan.partition.names)}")
    if secret_seed is None and keys is None:
        raise ConfigError("party synth needs the sketch keys: --keys FILE (from `vertisynth party keys`) or "
                          "--secret-seed S (agreed among the parties, never given to the server)")
    own = list(plan.partition.parties[plan.partition.names.index(party)].attributes)
    key_party = _read_group_key(keys, party) if keys is not None else None
    frame = _own_frame(plan, own, csv)
    # a real deployment draws its noise from the OS; a shared secret seed reproduces the simulation
    streams = _streams(secret_seed if secret_seed is not None else np.random.SeedSequence().entropy)
    # only this party's columns are encoded and kept: the rest of the table is dropped at once
    schema = TableSchema(tuple(c for c in plan.source.schema.columns if c.name in own))
    view = schema.fit(frame, plan.ledger, streams["preprocessing"]).encode(frame)
    key_rng, rngs = synth.party_rngs(streams["fit"])
    if key_party is not None:
        synth.set_keys({party: key_party})
    else:
        synth.agree_keys(key_rng)
    ledger = PrivacyLedger(plan.ledger.budget, [c for c in plan.ledger.planned if c.party == party],
                           group_size=plan.ledger.group_size)   # a `sample` fill: later spends pay group privacy
    messages = synth.party_step(party, view, ledger, rngs[party])
    out.mkdir(parents=True, exist_ok=True)
    paths = [m.save(out / f"{party}__{i}_{m.kind}.npz") for i, m in enumerate(messages)]
    (out / f"{party}__ledger.json").write_text(json.dumps([c.to_dict() for c in ledger.spent], indent=2))
    return paths


# -- key agreement through a shared folder ------------------------------------------------------------
def run_party_keys(config: RunConfig, party: str, exchange: Path, out: Path, timeout: float = 600.0,
                   poll: float = 0.1, data_dir: str | None = None) -> Path:
    """One party of the DPFM key agreement (encoders/keys.py), messages as files in `exchange`.

    Writes `<party>_keys.json` (the group key, readable by its owner only) to the private folder `out`
    and returns its path. The exchange folder only ever holds public keys and wrapped (encrypted) keys."""


    plan, synth = _vertical_plan(config, data_dir)
    if not synth.needs_keys():
        raise ConfigError("party keys: the config's encoder needs no shared keys (only 'dpfm' does)")
    names = list(plan.partition.names)
    if party not in names:
        raise DataError(f"unknown party {party!r}; the config's parties are {names}")
    exchange.mkdir(parents=True, exist_ok=True)
    me = KeyParty.create(party)  # OS entropy
    pub = np.frombuffer(me.public_bytes(), np.uint8).copy()
    msg = KeyAgreementMessage(party, "*", pub).validate()
    publish(msg, exchange, msg.filename)
    files = wait_for_files(exchange, "keys__*__to__all.npz", len(names), "every party's public key", timeout, poll)
    published: dict[str, bytes] = {}
    for f in files:
        msg = Message.load(f)
        if not isinstance(msg, KeyAgreementMessage) or msg.to != "*":
            raise MessageError(f"{f.name}: not a public-key message")
        if msg.party not in names:
            raise MessageError(f"{f.name}: public key from {msg.party!r}, who is not a party of this config")
        published[msg.party] = msg.public_key.tobytes()
    leader = names[0]
    if len(names) == 2:
        other = names[1 - names.index(party)]
        me.derive_pair_group(other, published[other])
    elif party == leader:
        wrapped = me.wrap_group_for({n: published[n] for n in names[1:]}, None)
        for n, blob in wrapped.items():
            msg = KeyAgreementMessage(party, n, pub, np.frombuffer(blob, np.uint8).copy()).validate()
            publish(msg, exchange, msg.filename)
    else:
        f = wait_for_files(exchange, f"keys__{leader}__to__{party}.npz", 1, f"the group key wrapped by {leader!r}",
                           timeout, poll)[0]
        msg = Message.load(f)
        if not isinstance(msg, KeyAgreementMessage) or msg.party != leader or msg.to != party:
            raise MessageError(f"{f.name}: not the leader's wrapped key for {party!r}")
        me.unwrap_group(leader, published[leader], msg.wrapped.tobytes())
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{party}_keys.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"party": party, "parties": names, "group_key": me.group_key().hex(),
                   "fingerprint": me.group_fingerprint()}, fh, indent=2)
    return path
