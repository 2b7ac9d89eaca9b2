"""`vertisynth server`: the synthetic table from the parties' envelopes only (no rows).

Before a byte is used the server checks the hello round (every party ran this very config: a different
budget or setting is named), then every envelope (roster, signature, run id, config, round, recipient). The
released ledger is composed from the parties' signed ledgers of what they actually spent, each checked
against the public plan; parties whose row counts differ (their MACs under the group key differ) are refused.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pandas as pd

from vertisynth.core.capabilities import HasGraphicalModel, ReportsModel
from vertisynth.core.courier import parse_slot, pattern
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.run.config import RunConfig
from vertisynth.run.model import MODEL_FILE, FittedModel
from vertisynth.run.html import write_run_html
from vertisynth.run.pipeline import RunResult, model_privacy, release_note
from vertisynth.run.report import summary_markdown, write_release
from vertisynth.run.stream_out import stream_output

from .he_rounds import joint_encoder, serve_rounds
from .oracle_rounds import check_spends, serve_oracle
from .plans import oracle_run, streams as _streams, vertical_plan as _vertical_plan
from .session import (SERVER, TEST_LABEL, RunState, Session, config_fingerprint, identity_path, load_identity,
                      publish_run_key, read_hellos, roster_of)
from .transport import ReportsWaiting, poll_wait, transport_for

ROW_COUNT_NOTE = ("the exact number of aligned rows n, released unnoised to the server (outside the DP accounting: "
                  "the guarantee above holds for neighbouring tables of the same size)")


def _same_spend(planned: dict, reported: dict) -> bool:
    """Same stage, mechanism, party and cost (numbers to 1e-9 relative; the note is free text)."""
    keys = (set(planned) | set(reported)) - {"note"}
    for k in keys:
        a, b = planned.get(k), reported.get(k)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            if not math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0):
                return False
        elif a != b:
            return False
    return True


def _compose_ledger(plan, reports: dict[str, dict]) -> PrivacyLedger:
    """The parties' reported spends, each matched to a planned charge of that party; nothing more, nothing less."""
    planned = list(plan.ledger.planned)
    as_dict = [json.loads(json.dumps(c.to_dict())) for c in planned]
    taken = [False] * len(planned)
    spent = []
    for party, report in reports.items():
        for s in report["spent"]:
            # a charge of no one party (the he encoder's, one per stage for every pair) is the leader's to report
            mine = lambda d: d.get("party") == party or (d.get("party") is None and party == plan.partition.names[0])  # noqa: E731
            idx = next((i for i, d in enumerate(as_dict) if not taken[i] and mine(d) and _same_spend(d, s)), None)
            if idx is None:
                raise MessageError(f"ledger from {party!r}: spend {s.get('stage')}/{s.get('mechanism')} "
                                   f"({s.get('cost_type')}) is not in the plan of this config; refused")
            taken[idx] = True
            spent.append(planned[idx])
    missing = [f"{d['party']}: {d['stage']}/{d['mechanism']}" for d, t in zip(as_dict, taken) if not t]
    if missing:
        raise MessageError(f"the parties' signed ledgers do not report planned spends {missing}; refused")
    kinds = {r.get("noise", "simulation") for r in reports.values()}
    if len(kinds) > 1:
        raise MessageError(f"the parties drew different noise ({sorted(kinds)}): one release, one kind; refused")
    return PrivacyLedger(plan.ledger.budget, planned, spent, noise=kinds.pop() if kinds else "simulation")


def _wait_ledgers(transport, names: list[str], timeout: float, poll: float = 0.2) -> None:
    """Every party's signed ledger (its last message), waited for up to `timeout` s (a server started beside
    the parties waits for them); a clear line naming who sent nothing."""
    deadline = time.monotonic() + timeout
    while True:
        senders = {parse_slot(n).sender for n in transport.names(pattern("ledger"))}
        missing = [p for p in names if p not in senders]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise MessageError(f"no messages from parties {missing}" + (f" within {timeout:.0f} s" if timeout else ""))
        if isinstance(transport, ReportsWaiting):
            transport.waiting("every party's ledger")
        time.sleep(poll_wait(transport, poll))


def run_server(config: RunConfig, exchange: str | Path, out: Path, data_dir: str | None = None,
               key: Path | None = None, timeout: float = 600.0, publish_only: bool = False) -> Path:
    """`timeout`: seconds to wait for the parties' hellos and messages. `publish_only`: publish the run key the
    parties seal to, and return (runs whose steps are run one after another)."""
    t_start = time.perf_counter()
    plan, synth = _vertical_plan(config, data_dir, aligned_csv=True)   # the server never sees rows anyway
    names = list(plan.partition.names)
    transport = transport_for(exchange)
    run = read_hellos(config, transport, names, "server", timeout)
    if SERVER not in roster_of(config).keys:
        raise ConfigError("the config's [roster] pins no key for 'server': the server signs the run key the parties "
                          "seal their messages to; make one with `vertisynth party init --party server` and add its line")
    identity = load_identity(config, SERVER, out, key, exchange)
    sess = Session(identity, roster_of(config), transport, RunState(SERVER, run, config_fingerprint(config), tuple(names)),
                   timeout)
    sess.run_key = publish_run_key(sess, key or identity_path(out, SERVER))
    if publish_only:
        return out
    if oracle_run(plan):   # a vertical twin: the synthesizer runs here, the parties answer its queries
        serve_oracle(plan, synth, sess, plan.source.schema.preview_domain(), _streams(config.seed)["fit"], timeout)
        _wait_ledgers(transport, names, timeout)
        reports = {}
        for name in transport.names("ledger__*"):
            header, body = sess.open(name, ("ledger",))
            reports[header.sender] = json.loads(body)
        ledger = plan.ledger   # what the oracle paid for each query, each party's report checked against it
        ledger.noise = check_spends(ledger, reports)
        files, unnoised = [], []
        test = any(r.get("test") for r in reports.values())
    else:
        ledger, files, unnoised, test = _from_messages(plan, synth, sess, names, timeout)
    streams = _streams(config.seed)
    empty = pd.DataFrame({c.name: pd.Series(dtype=object) for c in plan.source.schema.columns})
    codec = plan.source.schema.fit(empty, None, streams["preprocessing"])
    # sampled, decoded and written in the run's blocks (`sample_block_rows`): the one-process run's table
    written = stream_output(synth, config, codec, streams, out, count=False)
    report = {"mode": "server: built from the parties' signed envelopes only", "run": run,
              **({"test_secret": TEST_LABEL} if test else {}), "messages": files,
              "privacy": ledger.to_dict(), "phase_seconds": synth.timings(), "seed": config.seed,
              "parties": plan.partition.to_dict(), **_run_shape(plan, synth, written.n, t_start)}
    if "model" in report["synthesizer"]:
        report["model"] = report["synthesizer"]["model"]
    model = None
    if isinstance(synth, HasGraphicalModel):   # fit once, sample many: the model is part of the release
        gm, sampling = synth.fitted_model()
        model = FittedModel(gm, codec, sampling, plan.synthesizer.spec.name, model_privacy(ledger, plan.source.schema),
                            run=run, config=config_fingerprint(config))
    report["privacy"]["releases"] = release_note(plan.synthesizer.spec.name, model)
    if unnoised:
        report["privacy"]["unnoised_releases"] = unnoised
    # the run's one output writer; no real rows here, so no metric and no real-vs-synthetic figure
    result = RunResult(None, None, None, {}, ledger, report, out, model, out / "synthetic.csv")

    def extras(folder: Path) -> list[str]:
        write_run_html(result, folder)
        if model is None:
            return ["report.html"]
        model.save(folder / MODEL_FILE, identity=sess.identity)   # signed when the roster pins the server
        return ["report.html", MODEL_FILE]
    return write_release(out, report, summary_markdown(result), out / "synthetic.csv", extras,
                         {"run": run, **({"test_secret": TEST_LABEL} if test else {})})


def _from_messages(plan, synth, sess: Session, names: list[str], timeout: float):
    """The party/server split's fit (VertiMRF): the parties' messages (and the he rounds), their ledgers composed."""
    transport = sess.transport
    joint = joint_encoder(synth) is not None
    cross_party: list[dict] = []
    if joint:   # encoder "he": the server takes part in the rounds (it signs its clique queries, sealed to each party)
        sess.sealed = True
        used = serve_rounds(synth, sess, names, cross_party)
    _wait_ledgers(transport, names, timeout)
    reports = {}
    for name in transport.names("ledger__*"):
        header, body = sess.open(name, ("ledger",))
        reports[header.sender] = json.loads(body)
    messages, files = [], []
    for name in transport.names("synth__*"):
        header, body = sess.open(name, ("synth",))
        msg = Message.from_bytes(body, name)
        if msg.party != header.sender:
            raise MessageError(f"{name}: from {header.sender!r} but holds a message of {msg.party!r}; refused")
        messages.append(msg)
        files.append(name)
    counts = {p: sum(m.party == p for m in messages) for p in names}
    wrong = {p: (counts[p], reports[p]["messages"]) for p in names if counts[p] != reports[p]["messages"]}
    if wrong:
        raise MessageError(f"message counts (found, signed ledger says) differ: {wrong}; refused")
    tags = {p: reports[p]["rows"] for p in names}
    if len(set(tags.values())) > 1:
        raise MessageError("party tables of different lengths (their row counts differ: "
                           + ", ".join(f"{p}: {t if t.startswith('rows=') else 'MAC ' + t[:8]}" for p, t in tags.items())
                           + "); align them first (`vertisynth party align`); refused")
    ledger = _compose_ledger(plan, reports)
    ledger.cross_party.extend(cross_party)   # the cross-party tables the server received, as the one-process run lists them
    counts_n = {t for t in tags.values() if t.startswith("rows=")}
    # GRR columns and the he encoder's rounds show the server n itself (no group key to MAC it): said so
    unnoised = [{"release": "row count n", "value": int(counts_n.pop()[5:]), "epsilon": 0.0, "noised": False,
                 "note": ROW_COUNT_NOTE}] if counts_n else []
    test = any(r.get("test") for r in reports.values())
    if not joint:
        synth.server_step(messages)
    elif sorted(used) != sorted(files):
        raise MessageError(f"the exchange holds messages the rounds did not use ({sorted(set(files) - set(used))}); refused")
    return ledger, files, unnoised, test


def _run_shape(plan, synth, rows: int, t_start: float) -> dict:
    """The fields of a run's report that summary.md and report.html read, as the server knows them."""
    return {"dataset": {"name": plan.dataset_name, "description": plan.source.description, "records": None,
                        "attributes": list(plan.source.schema.names), "schema_inferred_from_data": False},
            "alignment": {"use": plan.config.alignment.use, "info": {}},
            "synthesizer": {**plan.synthesizer.describe(), "mode": "vertical: parties share only messages",
                            "phase_seconds": synth.timings(),
                            **({"model": synth.model_details()} if isinstance(synth, ReportsModel) else {})},
            "synthetic_records": rows, "metrics": {},
            "metrics_note": "no metrics: the server holds no real rows (score the table with `vertisynth evaluate` "
                            "where the real rows are)",
            "timings_seconds": {"server": time.perf_counter() - t_start}}
