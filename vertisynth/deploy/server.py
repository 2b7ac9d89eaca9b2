"""`vertisynth server`: the synthetic table from the parties' message files only (no rows)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from vertisynth.core.capabilities import HasGraphicalModel, ReportsModel
from vertisynth.core.errors import MessageError
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.run.config import RunConfig
from vertisynth.run.model import MODEL_FILE, FittedModel
from vertisynth.run.pipeline import model_privacy, release_note

from .plans import streams as _streams, vertical_plan as _vertical_plan


def run_server(config: RunConfig, messages_dir: Path, out: Path, data_dir: str | None = None) -> Path:
    plan, synth = _vertical_plan(config, data_dir, aligned_csv=True)   # the server never sees rows anyway
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
              "phase_seconds": synth.timings(), "seed": config.seed, "parties": plan.partition.to_dict(),
              **({"model": synth.model_details()} if isinstance(synth, ReportsModel) else {})}
    model = None
    if isinstance(synth, HasGraphicalModel):   # fit once, sample many: the model is part of the release
        gm, sampling = synth.fitted_model()
        model = FittedModel(gm, codec, sampling, plan.synthesizer.spec.name, model_privacy(ledger, plan.source.schema))
    report["privacy"]["releases"] = release_note(plan.synthesizer.spec.name, model)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "synthetic.csv", index=False)
    if model is not None:
        model.save(out / MODEL_FILE)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "ledger.json").write_text(json.dumps(report["privacy"], indent=2, default=str))
    return out
