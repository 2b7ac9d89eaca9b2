"""The horizontal protocol as separate OS processes exchanging only files (vertisynth.collab.distributed):
equal to the one-process simulation under the same seeds, servers see only shares, clear errors."""
import time
from pathlib import Path

import pandas as pd
import pytest
from deploy_helpers import cli, collab_census_job, parallel

from vertisynth.core.courier import parse_slot
from vertisynth.core.transport import FolderTransport

from vertisynth.collab.distributed import fingerprint, run_custodian, run_publisher, run_server
from vertisynth.run.config import load_config
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.run.pipeline import make_plan, run

ROLES = ["A", "B", "server0", "server1", "publisher"]


def _keys(tmp_path):
    """Every role's signing key (as `vertisynth party init` writes them) and the config's [roster]."""
    from vertisynth.core.identity import Identity

    folder = tmp_path / "keys"
    lines = []
    for n in ROLES:
        path = folder / f"{n}_signing.pem"
        if not path.exists():
            Identity.generate(n).save(path)
        lines.append(f'{n} = "{Identity.load(n, path).public_text()}"')
    return "\n[roster.keys]\n" + "\n".join(lines) + "\n"


def _id(tmp_path, name):
    from vertisynth.core.identity import Identity

    return Identity.load(name, tmp_path / "keys" / f"{name}_signing.pem")


def _key(cfg, name):
    return ["--key", str(cfg.parent / "keys" / f"{name}_signing.pem")]


def _channel(cfg, name, ex, run=""):
    """A role's channel, to write (or read) a file the way that role does."""
    from vertisynth.collab.channel import Channel
    from vertisynth.core.identity import roster_of

    from vertisynth.core.transport import transport_for

    plan = _plan(cfg)
    return Channel(_id(cfg.parent, name), roster_of(plan.config.section("roster")), transport_for(ex),
                   fingerprint(plan), run, timeout=0.3, roles=tuple(ROLES))


def _hello(cfg, name, ex, fp=None, columns=None):
    """Custodian `name`'s hello on exchange `ex`, as `run_custodian` posts it (core/courier.py's one hello)."""
    import os

    from vertisynth.collab.distributed import settings
    from vertisynth.core.courier import hello_envelope
    from vertisynth.core.transport import transport_for

    plan = _plan(cfg)
    transport_for(ex).send(*hello_envelope(_id(cfg.parent, name), fp or fingerprint(plan), settings(plan),
                                           os.urandom(16), False, columns or list(plan.run.base.domain.attributes)))


def _header(exchange, name, cfg):
    from vertisynth.core.envelope import open_envelope
    from vertisynth.core.identity import roster_of

    return open_envelope(exchange.read(name), roster_of(load_config(cfg).section("roster")), None, name)[0]


def _setup(tmp_path, preprocessing="combined", extra=""):
    text, csvs = collab_census_job(tmp_path, 600, preprocessing=preprocessing, extra=extra)
    cfg = tmp_path / "c.toml"
    cfg.write_text(text + _keys(tmp_path))
    return cfg, csvs


SECRET = "5e0b9d3c71a2f4e8c6b1d0a9e7f35c24"  # the tuning's candidate draws in a reproducible test (never the config seed)


def _spawn(cfg, csvs, ex, out, seed=3, extra_custodian=()):
    """Every role its own OS process (in a thread of this one under the `in_process` fixture); they meet only in
    the exchange folder. The roles' stdout, in the order started."""
    argvs = [["collab", "server", str(cfg), "--index", str(s), "--exchange", str(ex), "--seed", str(seed),
              "--timeout", "120", *_key(cfg, f"server{s}")] for s in (0, 1)]
    argvs += [["collab", "custodian", str(cfg), "--name", n, "--csv", str(p), "--exchange", str(ex),
               "--timeout", "120", "--seed", str(seed), *extra_custodian, *_key(cfg, n)] for n, p in csvs.items()]
    argvs.append(["collab", "publish", str(cfg), "--exchange", str(ex), "--out", str(out),
                  "--timeout", "120", "--test-secret", SECRET, *_key(cfg, "publisher")])
    outs = []
    for code, o, e in parallel(argvs, Path(cfg).parent, timeout=300):
        assert code == 0, e
        outs.append(o)
    return outs


def _plan(cfg):
    return make_plan(load_config(cfg))


@pytest.mark.parametrize("preprocessing", ["combined", "local"])
def test_separate_processes_publish_exactly_the_simulation(tmp_path, preprocessing, request):
    # collab's end-to-end flow from cold `python -m vertisynth.cli` starts; the local preprocessing's roles in threads
    # of this process over the same exchange (issue 33: one process flow per deployment kind)
    request.getfixturevalue("cold_start" if preprocessing == "combined" else "in_process")
    cfg, csvs = _setup(tmp_path, preprocessing)
    sim = run(load_config(cfg), tmp_path / "sim")
    ex = tmp_path / "exchange"
    # every role on its own; they meet only in the exchange folder
    argvs = [["collab", "server", str(cfg), "--index", str(s), "--exchange", str(ex), "--seed", "3",
              "--timeout", "120", *_key(cfg, f"server{s}")] for s in (0, 1)]
    argvs += [["collab", "custodian", str(cfg), "--name", n, "--csv", str(p), "--exchange", str(ex),
               "--timeout", "120", *_key(cfg, n)] for n, p in csvs.items()]
    argvs.append(["collab", "publish", str(cfg), "--exchange", str(ex), "--out", str(tmp_path / "dist"),
                  "--timeout", "120", *_key(cfg, "publisher")])
    for code, out, err in parallel(argvs, tmp_path, timeout=300):
        assert code == 0, err
    assert "published" in out
    assert (tmp_path / "dist" / "synthetic.csv").read_bytes() == (tmp_path / "sim" / "synthetic.csv").read_bytes()
    import json
    rep = json.loads((tmp_path / "dist" / "report.json").read_text())
    assert rep["collab"]["numeric_bins"] == sim.report["collab"]["numeric_bins"]
    assert rep["privacy"]["spent_epsilon"] == pytest.approx(sim.report["privacy"]["spent_epsilon"])
    assert not rep["privacy"]["planned_but_unspent"] and rep["mode"].startswith("horizontal custodians, separate")

    assert rep["privacy"]["noise"].startswith("simulation")   # the servers ran with --seed, and the report says so

    # what the shared folder holds: hellos (no data), every role's run key, and shares sealed to one server each
    # (ciphertext: a reader of the folder, or the other server, cannot open them); who opens what, envelope by
    # envelope: tests/deploy/test_who_reads_what.py
    from vertisynth.core.transport import FolderTransport

    exchange = FolderTransport(ex)
    assert {parse_slot(n).round for n in exchange.names("*")} == {"hello", "key", "collab_share", "collab_noisy"}
    assert sorted(exchange.names("key__*")) == sorted(f"key__{r}__to__all__collab" for r in ROLES)
    assert sorted(exchange.names("hello__*")) == ["hello__A__to__all__0", "hello__B__to__all__0"]
    for s in (0, 1):
        shares = exchange.names(f"collab_share__*__to__server{s}__*")
        assert shares and len(shares) == len(exchange.names("collab_share__*")) // 2
        noisy = exchange.names(f"collab_noisy__server{s}__*")
        assert {parse_slot(n).to for n in noisy} == {("A",), ("B",), ("publisher",)}
        measured = [n for n in noisy if "__measure-" in n]   # the measurement rounds: the publisher's only
        assert measured and all(parse_slot(n).to == ("publisher",) for n in measured)
        for n in shares + noisy:
            assert _header(exchange, n, cfg).kind.startswith("sealed:")


def test_roles_refuse_unknown_names_and_what_they_do_not_cover(tmp_path, in_process):
    # the command's refusal in a thread (issue 33): what is checked is its line and exit status
    cfg, csvs = _setup(tmp_path)
    with pytest.raises(DataError, match="unknown custodian 'C'; the config's custodians are \\['A', 'B'\\]"):
        run_custodian(_plan(cfg), "C", csvs["A"], tmp_path / "ex")
    with pytest.raises(DataError, match="unknown server 2; the config has collab.servers = 2"):
        run_server(_plan(cfg), 2, tmp_path / "ex")
    out = cli("collab", "server", str(cfg), "--index", "5", "--exchange", str(tmp_path / "ex"),
              *_key(cfg, "server0"), ok=False)
    assert out.returncode == 2 and "unknown server 5" in out.stderr
    out = cli("collab", "nosuchrole", str(cfg), ok=False)
    assert out.returncode != 0 and "No such command 'nosuchrole'" in out.stderr
    (tmp_path / "h.toml").write_text(cfg.read_text().replace("[collab]", "[evaluation]\nholdout = 0.2\n[collab]"))
    with pytest.raises(ConfigError, match="holdout = 0"):
        run_server(_plan(tmp_path / "h.toml"), 0, tmp_path / "ex")


def test_missing_messages_time_out_with_a_clear_error(tmp_path):
    cfg, csvs = _setup(tmp_path)
    plan = _plan(cfg)
    t0 = time.monotonic()
    with pytest.raises(MessageError, match="for the custodians' hellos .* missing \\['A', 'B'\\]; is a custodian down"):
        run_server(plan, 0, tmp_path / "ex", timeout=0.5, identity=_id(tmp_path, "server0"))
    assert time.monotonic() - t0 < 10
    for n in ("A", "B"):   # both custodians announced, but no server ever answers
        _hello(cfg, n, tmp_path / "ex")
    with pytest.raises(MessageError, match="waited 0 s for server 0's noisy share of 'age:grid'"):
        run_publisher(_plan(cfg), tmp_path / "ex", tmp_path / "out", timeout=0.3, identity=_id(tmp_path, "publisher"))
    assert not (tmp_path / "out" / "synthetic.csv").exists()


def test_a_custodian_with_a_different_schema_or_config_is_refused_by_everyone(tmp_path):
    cfg, csvs = _setup(tmp_path)
    bad = tmp_path / "bad.csv"
    pd.read_csv(csvs["B"]).drop(columns=["income"]).to_csv(bad, index=False)
    with pytest.raises(DataError, match="custodian 'B' has a different schema: lacks \\['income'\\]"):
        run_custodian(_plan(cfg), "B", bad, tmp_path / "ex", timeout=1, identity=_id(tmp_path, "B"))
    plan = _plan(cfg)
    _hello(cfg, "A", tmp_path / "ex")
    # the server sees B's hello (written before B failed) and names the problem instead of waiting
    with pytest.raises(DataError, match="custodian 'B' has a different schema: lacks \\['income'\\]"):
        run_server(plan, 0, tmp_path / "ex", timeout=5, identity=_id(tmp_path, "server0"))
    other = tmp_path / "other"
    other.mkdir()
    _hello(cfg, "A", other, fp="0123456789abcdef")
    with pytest.raises(ConfigError, match="custodian 'A' runs a different config"):
        run_server(_plan(cfg), 1, other, timeout=5, identity=_id(tmp_path, "server1"))


def test_a_column_outside_the_schema_is_named_to_its_custodian_only(tmp_path):
    """A custodian whose CSV holds a column the config does not name: it stops naming the column; its hello (in
    clear: every role and a relay read it) says only that there is one, and the server refuses it saying so. Before,
    the hello carried the column's name."""
    cfg, csvs = _setup(tmp_path)
    bad = tmp_path / "bad.csv"
    pd.read_csv(csvs["B"]).assign(patient_secret_code=1).to_csv(bad, index=False)
    with pytest.raises(DataError, match="custodian 'B' has a different schema: has extra columns "
                                        "\\['patient_secret_code'\\]"):
        run_custodian(_plan(cfg), "B", bad, tmp_path / "ex", timeout=1, identity=_id(tmp_path, "B"))
    from vertisynth.core.courier import read_hello
    from vertisynth.core.identity import roster_of

    hello = read_hello(FolderTransport(tmp_path / "ex").read("hello__B__to__all__0"),
                       roster_of(load_config(cfg).section("roster")), "hello__B__to__all__0")
    assert "patient_secret_code" not in hello.columns and len(hello.columns) == len(_plan(cfg).run.base.domain) + 1
    with pytest.raises(DataError, match="custodian 'B' has a different schema: has extra columns "
                                        "\\['<a column outside the schema>'\\]"):
        run_server(_plan(cfg), 0, tmp_path / "ex", timeout=5, identity=_id(tmp_path, "server0"))


TUNED = """[collab.tuning]
method = "{method}"
folds = 2
grid = {{ iters = [10, 20] }}
{more}
"""


@pytest.mark.parametrize("method, more", [
    ("private_selection", 'expected_runs = 3.0\nthresholds = { A = 0.6 }'),
    ("paper", 'metric = "workload_error.l1_1way"\nthresholds = { A = 1.0, B = 2.0 }'),
])
def test_tuning_as_separate_processes_equals_the_simulation(tmp_path, method, more, in_process):
    # the roles in threads of this process (issue 33): collab's deployment kind runs as processes in
    # test_separate_processes_publish_exactly_the_simulation (cold and forked) and test_collab_remote_exchange.py;
    # what this test adds is the tuning's rounds over the same exchange
    import json

    cfg, csvs = _setup(tmp_path, extra=TUNED.format(method=method, more=more))
    plan = _plan(cfg)
    plan.test_secret = bytes.fromhex(SECRET)   # the publisher's draws, as `publish --test-secret` makes them
    sim = plan.execute(tmp_path / "sim")
    ex = tmp_path / "exchange"
    outs = _spawn(cfg, csvs, ex, tmp_path / "dist")
    rep = json.loads((tmp_path / "dist" / "report.json").read_text())
    for key in ("chosen", "candidate_runs", "published", "label"):
        assert rep["collab"]["tuning"][key] == sim.report["collab"]["tuning"][key], key
    assert rep["collab"]["tuning"].get("dp_scores") == sim.report["collab"]["tuning"].get("dp_scores")
    assert rep["privacy"]["spent_epsilon"] == pytest.approx(sim.report["privacy"]["spent_epsilon"])
    assert rep["privacy"]["per_stage_epsilon"] == pytest.approx(sim.report["privacy"]["per_stage_epsilon"])
    if sim.report["collab"]["published"]:
        assert (tmp_path / "dist" / "synthetic.csv").read_bytes() == (tmp_path / "sim" / "synthetic.csv").read_bytes()
        assert "published" in outs[-1]
    else:
        assert not (tmp_path / "dist" / "synthetic.csv").exists()
    assert sim.report["collab"]["published"]   # these seeds publish: the equality covers the table
    from vertisynth.collab.pipeline import KEPT_SECRET
    from vertisynth.collab.tuning import TEST_LABEL

    assert rep["collab"]["tuning"]["candidate_draws"] == TEST_LABEL and TEST_LABEL in outs[-1]
    runs = len(FolderTransport(ex).names("collab_step__*__to__A__*")) - 1   # the participants do see K (docs/collab.md)
    if method == "private_selection":
        assert rep["collab"]["tuning"]["candidate_runs"] == KEPT_SECRET and "secret number" in outs[-1]
    else:
        assert rep["collab"]["tuning"]["candidate_runs"] == runs
    assert runs >= 1
    # what the custodians saw of the tuning: the publisher's steps and, sound: one DP score per run (no fold
    # table ever leaves the publisher); paper: the fold runs' synthetic tables, which each scores on its folds;
    # each message sealed to each of its recipients (one envelope each): steps to every custodian and server,
    # tables and scores to the custodians, votes to the publisher
    exchange, sound = FolderTransport(ex), method != "paper"
    for c in ("A", "B"):
        assert len(exchange.names(f"collab_synthetic__*__to__{c}__*")) == (0 if sound else 2 * runs)
        assert len(exchange.names(f"collab_score__*__to__{c}__*")) == (runs if sound else 0)
    assert len(exchange.names("collab_vote__*__to__publisher__*")) == len(exchange.names("collab_vote__*")) == 2 * runs
    assert len(exchange.names("collab_step__*")) == 4 * (runs + 1)
    for n in exchange.names("*"):   # in clear only the hellos and run keys (docs/threat-model.md)
        if parse_slot(n).round not in ("hello", "key"):
            assert len(parse_slot(n).to) == 1 and _header(exchange, n, cfg).kind.startswith("sealed:"), n
    if method == "paper":
        assert "not sound" in rep["privacy"]["tuning_accounting"]


def test_tuning_errors_missing_votes_and_thresholds_out_of_range(tmp_path, in_process):
    # the command's refusal in a thread (issue 33): what is checked is its line and exit status
    from vertisynth.collab.distributed import FollowerIO, PublisherFiles, PublisherIO, Vote, vote_slot
    from vertisynth.collab.tuning import Selection

    cfg, csvs = _setup(tmp_path, extra=TUNED.format(method="compose_all", more=""))
    plan = _plan(cfg)
    with pytest.raises(ConfigError, match="thresholds.A = 2.5 is outside the range \\[0.0, 2.0\\] of 'dp_workload.l1'"):
        run_custodian(plan, "A", csvs["A"], tmp_path / "ex", threshold=2.5)
    assert not (tmp_path / "ex").exists()   # refused before announcing anything
    out = cli("collab", "custodian", str(cfg), "--name", "B", "--csv", str(csvs["B"]), "--exchange",
              str(tmp_path / "ex"), "--threshold", "-1", *_key(cfg, "B"), ok=False)
    assert out.returncode == 2 and "thresholds.B = -1.0 is outside the range" in out.stderr
    (tmp_path / "plain").mkdir()
    plain, _ = _setup(tmp_path / "plain")
    with pytest.raises(ConfigError, match="this config has no \\[collab.tuning\\]"):
        run_custodian(_plan(plain), "A", csvs["A"], tmp_path / "ex", threshold=0.5)
    # the publisher waits for every custodian's vote on a candidate run, and names the missing one
    ex = tmp_path / "votes"
    ex.mkdir()
    publisher = _channel(cfg, "publisher", ex, "r1")
    publisher.publish_run_key()
    io = PublisherIO(PublisherFiles(2, publisher), ["A", "B"], Selection("compose_all", [0, 1]), 3, plan.tuner.grid)
    f = vote_slot(0, "A")
    a = _channel(cfg, "A", ex, "r1")
    a.post(Vote(party="A", run=0, yes=True), f, ["publisher"])
    t0 = time.monotonic()
    with pytest.raises(MessageError, match="waited 0 s for custodian 'B'.s vote on candidate run 0"):
        io.votes(0, {})
    assert time.monotonic() - t0 < 10
    b_slot = f"collab_vote__B__to__publisher__{vote_slot(0, 'B').tag}"   # a vote A sealed and signed, in B's slot
    FolderTransport(ex).send(b_slot, a.sealed_envelope("publisher", a.key_of("publisher"), b_slot, "collab_vote",
                                                       "collab_tuning_vote", Vote(party="A", run=0, yes=True).to_bytes()))
    with pytest.raises(MessageError, match="from 'A' under another sender's name"):
        io.votes(0, {})
    # a custodian or server whose publisher never announces the next step times out clearly too
    with pytest.raises(MessageError, match="waited 0 s for the publisher's tuning step 0"):
        FollowerIO(PublisherFiles(2, _channel(cfg, "server0", tmp_path / "ex3"))).next_run(0, [])


def test_secure_noise_is_the_servers_default_and_a_seed_needs_simulation(tmp_path):
    cfg, csvs = _setup(tmp_path)
    secure = tmp_path / "secure.toml"
    secure.write_text(cfg.read_text().replace('noise = "simulation"', 'noise = "secure"'))
    with pytest.raises(ConfigError, match="server --seed draws reproducible simulation noise"):
        run_server(_plan(secure), 0, tmp_path / "ex", seed=3)
    unset = tmp_path / "unset.toml"   # no noise key: the cross-machine roles take secure noise
    unset.write_text(cfg.read_text().replace('noise = "simulation"', ''))
    with pytest.raises(ConfigError, match="server --seed"):
        run_server(_plan(unset), 1, tmp_path / "ex2", seed=3)
    res = run(load_config(secure), tmp_path / "sim")   # the one-process collab run with secure noise
    assert res.report["privacy"]["noise"].startswith("secure") and not res.ledger.unspent()
