"""`vertisynth party` and `vertisynth server`: VertiMRF across machines, exchanging only files.

A party runs on its own machine with the shared config (public: schema, party split, budget, plugins)
and a secret seed that the parties agreed on out of band and the server never sees (it seeds the key
agreement of the DP FM sketches and the parties' noise). It reads the dataset, keeps only its own
columns, and writes its messages (local model, value distributions, encoded columns) to a folder.
The server runs with the same config and only the message files; it writes the synthetic table, the
ledger (the public plan, which the parties' spends must match) and a report.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .config import RunConfig
from .encoding import TableSchema
from .errors import ConfigError, DataError, MessageError
from .messages import Message
from .pipeline import RNG_STREAMS, make_plan
from .privacy import PrivacyLedger


def _streams(seed: int) -> dict[str, np.random.Generator]:
    return dict(zip(RNG_STREAMS, (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(len(RNG_STREAMS)))))


def _vertical_plan(config: RunConfig, data_dir: str | None):
    plan = make_plan(config, data_dir=data_dir)
    synth = plan.synthesizer.instance
    if not hasattr(synth, "party_step") or not hasattr(synth, "server_step"):
        raise ConfigError(f"synthesizer {plan.synthesizer.spec.name!r} has no party/server split; use 'vertimrf'")
    if config.alignment.use != "positional":
        raise ConfigError("party/server runs need row-aligned parties (alignment 'positional')")
    if any(c.kind == "numeric" and c.binning == "quantile" for c in plan.source.schema.columns):
        raise ConfigError("party/server runs need public bin edges (binning 'edges' or 'equal_width'), not DP quantiles")
    return plan, synth


def run_party(config: RunConfig, party: str, secret_seed: int, out: Path, data_dir: str | None = None) -> list[Path]:
    plan, synth = _vertical_plan(config, data_dir)
    if party not in plan.partition.names:
        raise DataError(f"unknown party {party!r}; the config's parties are {list(plan.partition.names)}")
    loaded = plan.source.load()
    own = list(plan.partition.parties[plan.partition.names.index(party)].attributes)
    streams = _streams(secret_seed)
    # only this party's columns are encoded and kept: the rest of the table is dropped at once
    schema = TableSchema(tuple(c for c in loaded.schema.columns if c.name in own))
    view = schema.fit(loaded.frame[own], plan.ledger, streams["preprocessing"]).encode(loaded.frame[own])
    key_rng, rngs = synth.party_rngs(streams["fit"])
    synth.agree_keys(key_rng)
    ledger = PrivacyLedger(plan.ledger.budget, [c for c in plan.ledger.planned if c.party == party])
    messages = synth.party_step(party, view, ledger, rngs[party])
    out.mkdir(parents=True, exist_ok=True)
    paths = [m.save(out / f"{party}__{i}_{m.kind}.npz") for i, m in enumerate(messages)]
    (out / f"{party}__ledger.json").write_text(json.dumps([c.to_dict() for c in ledger.spent], indent=2))
    return paths


def run_server(config: RunConfig, messages_dir: Path, out: Path, data_dir: str | None = None) -> Path:
    plan, synth = _vertical_plan(config, data_dir)
    files = sorted(messages_dir.glob("*.npz"))
    if not files:
        raise MessageError(f"no message files in {str(messages_dir)!r}")
    messages = [Message.load(f) for f in files]
    senders = {m.party for m in messages}
    missing = [p for p in plan.partition.names if p not in senders]
    if missing:
        raise MessageError(f"no messages from parties {missing}")
    synth.server_step(messages)
    streams = _streams(config.seed)
    synthetic = synth.sample(config.sample_size, streams["sample"]).project(plan.source.schema.names)
    empty = pd.DataFrame({c.name: pd.Series(dtype=object) for c in plan.source.schema.columns})
    codec = plan.source.schema.fit(empty, None, streams["preprocessing"])
    frame = codec.decode(synthetic, streams["decode"])
    planned = plan.ledger.planned
    ledger = PrivacyLedger(plan.ledger.budget, list(planned), list(planned))
    report = {"mode": "server: built from the parties' message files only", "messages": [f.name for f in files],
              "privacy": ledger.to_dict(), "synthesizer": plan.synthesizer.describe(),
              "phase_seconds": synth.timings(), "seed": config.seed, "parties": plan.partition.to_dict()}
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "synthetic.csv", index=False)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "ledger.json").write_text(json.dumps(report["privacy"], indent=2, default=str))
    return out
