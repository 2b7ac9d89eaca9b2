"""VertiMRF across processes: parties and the server exchange only files; the result equals the simulation."""
import pandas as pd
import pytest
from deploy_helpers import SECRET, SERVER_KEY, cli, hello_all, keys_all, parallel, publish_key, with_roster

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 2000 }
[synthesizer]
use = "vertimrf"
params = { encoder_params = { t = 200 }, local_params = { iters = 30, refine_iters = 10 }, iters = 40, rounds = 1 }
[[evaluators]]
use = "tvd"
params = { ways = [2], marginals = 10 }
"""


def test_parties_and_server_as_separate_processes_equal_the_simulation(tmp_path, cold_start):
    # the folder exchange's end-to-end flow from cold `python -m vertisynth.cli` starts; with_roster pins the server too: it signs the run key and the model file it releases
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG, ["registry", "employer"]))
    hello_all(tmp_path, ["registry", "employer"], secret=SECRET)
    keys_all(tmp_path, ["registry", "employer"])
    publish_key(tmp_path)
    for party in ("registry", "employer"):
        res = cli("party", "job.toml", "--party", party, "--exchange", "shared", "--out", f"private_{party}",
                  cwd=tmp_path)
        assert "not for production" in res.stdout
    res = cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path)
    assert "not for production" in res.stdout
    deployed = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    simulated = simulate(load_config(tmp_path / "job.toml"), SECRET).synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(deployed, pd.read_csv(tmp_path / "sim.csv"))
    from vertisynth.api import load_model   # the server keeps the fitted model too (a DP release)
    assert list(load_model(tmp_path / "out" / "model.npz").sample(20, seed=0).columns) == list(deployed.columns)
    from vertisynth.run.model import ModelRelease
    assert ModelRelease.load(tmp_path / "out" / "model.npz").signer == "server"
    load_model(tmp_path / "out" / "model.npz", tmp_path / "job.toml")   # verifies under the roster's server key
    # the server's inputs are signed envelopes only: no raw column of any party is among them
    assert all(p.suffix == ".env" for p in (tmp_path / "shared").iterdir())
    assert "not for production" in (tmp_path / "out" / "report.json").read_text()
    # the run's summary and HTML report, by the run's writers: the spend, no metric (the server holds no real row)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Privacy" in summary and "no metrics: the server holds no real rows" in summary
    assert f"synthetic records: {len(deployed)}" in summary
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Privacy ledger" in html and "no figure: no real rows here" in html and "summary.md" in res.stdout


def test_server_refuses_missing_parties(tmp_path, in_process):
    # the roles in threads (issue 33): the folder kind's flow across processes is the test above (cold); what this
    # one checks is the server's one line naming the party that sent nothing
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG.replace('encoder_params', 'encoder = "grr", encoder_params').replace("{ t = 200 }", "{}"), ["registry", "employer"]))
    hello_all(tmp_path, ["registry", "employer"])
    publish_key(tmp_path)
    cli("party", "job.toml", "--party", "registry", "--exchange", "shared", "--out", "private_registry", cwd=tmp_path)
    res = cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, "--timeout", "2",
              cwd=tmp_path, ok=False)
    assert res.returncode == 2 and "no messages from parties ['employer']" in res.stderr


KEYED = """
seed = 5
budget = { epsilon = 8.0, delta = 1e-5 }
[dataset]
name = "csv"
[dataset.params]
path = "not-on-any-machine.csv"   # with a public schema the file is only read by `vertisynth run`
[dataset.params.schema]
a = { kind = "categorical", categories = ["x", "y", "z"] }
b = { kind = "categorical", categories = ["x", "y"] }
c = { kind = "categorical", categories = ["x", "y", "z"] }
d = { kind = "categorical", categories = ["x", "y"] }
[[parties]]
name = "hospital"
attributes = ["a", "b"]
[[parties]]
name = "insurer"
attributes = ["c", "d"]
[synthesizer]
use = "vertimrf"
params = { encoder_params = { t = 2000 }, local_params = { iters = 30, refine_iters = 10 }, iters = 40, rounds = 1 }
[[evaluators]]
use = "tvd"
params = { ways = [2] }
"""


def _own_csvs(tmp_path, n=1500):
    import numpy as np

    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, n)
    c = np.where(rng.random(n) < 0.8, a, rng.integers(0, 3, n))   # a cross-party correlation
    labels = np.array(["x", "y", "z"])
    pd.DataFrame({"a": labels[a], "b": labels[rng.integers(0, 2, n)]}).to_csv(tmp_path / "hospital.csv", index=False)
    pd.DataFrame({"c": labels[c], "d": labels[rng.integers(0, 2, n)]}).to_csv(tmp_path / "insurer.csv", index=False)


def test_parties_agree_keys_through_files_and_run_on_their_own_csvs(tmp_path, in_process):
    # the roles in threads (issue 33): the folder kind's flow across processes is the cold test above; this one checks
    # the key round's files and the cross-party dependence the agreed keys keep
    import json

    (tmp_path / "job.toml").write_text(with_roster(tmp_path, KEYED, ["hospital", "insurer"]))
    _own_csvs(tmp_path)
    hello_all(tmp_path, ["hospital", "insurer"])
    res = keys_all(tmp_path, ["hospital", "insurer"])
    outs = [(o, e) for _, o, e in res]
    keys = {p: json.loads((tmp_path / f"private_{p}" / f"{p}_keys.json").read_text()) for p in ("hospital", "insurer")}
    assert keys["hospital"]["group_key"] == keys["insurer"]["group_key"]
    assert keys["hospital"]["fingerprint"] in outs[0][0]
    shared = list((tmp_path / "shared").iterdir())
    assert sorted(f.name for f in shared if not f.name.startswith("hello")) == [
        "keys-pub__hospital__to__all__0.env", "keys-pub__insurer__to__all__0.env"]
    assert not any(bytes.fromhex(keys["hospital"]["group_key"]) in f.read_bytes() for f in shared)
    publish_key(tmp_path)
    for p in ("hospital", "insurer"):   # no secret seed: noise from the OS; each party reads only its own CSV
        cli("party", "synth", "job.toml", "--party", p, "--csv", f"{p}.csv", "--keys", f"private_{p}/{p}_keys.json",
            "--exchange", "shared", "--out", f"private_{p}", cwd=tmp_path)
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path)
    syn = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    assert list(syn.columns) == ["a", "b", "c", "d"] and abs(len(syn) - 1500) < 200
    # the cross-party correlation: 0.85 in the data, 1/3 if lost (as with keys that differ between parties);
    # the one-process simulation of this config gives 0.58
    assert (syn.a == syn.c).mean() > 0.45


def test_three_parties_agree_one_group_key_and_bad_key_inputs(tmp_path):
    import json
    import threading

    from vertisynth.run.config import parse_config
    from vertisynth.deploy.party import run_party, run_party_keys
    from vertisynth.core.errors import ConfigError, DataError, MessageError

    from vertisynth.core.identity import Identity
    from vertisynth.deploy.session import hello
    from vertisynth.deploy.transport import FolderTransport

    names = ["hospital", "insurer", "bank"]
    ids = {p: Identity.generate(p) for p in names}
    for p in names:
        ids[p].save(tmp_path / p / f"{p}_signing.pem")
    text = KEYED.replace('attributes = ["c", "d"]', 'attributes = ["c"]\n[[parties]]\nname = "bank"\nattributes = ["d"]')
    text += "[roster.keys]\n" + "".join(f'{p} = "{ids[p].public_text()}"\n' for p in names)
    (tmp_path / "job.toml").write_text(text)
    config = load_config(tmp_path / "job.toml")
    paths, errors = {}, []

    def one(p):
        try:
            hello(config, ids[p], FolderTransport(tmp_path / "shared"), names, tmp_path / p, None, 60, 0.02)
            paths[p] = run_party_keys(config, p, tmp_path / "shared", tmp_path / p, timeout=60, poll=0.02)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(p,)) for p in ("hospital", "insurer", "bank")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    groups = {json.loads(paths[p].read_text())["group_key"] for p in paths}
    assert len(groups) == 1 and len(paths) == 3
    assert (paths["bank"].stat().st_mode & 0o077) == 0          # owner-only
    wrapped = sorted(f.name for f in (tmp_path / "shared").glob("keys-*__hospital__to__*"))
    assert wrapped == ["keys-pub__hospital__to__all__0.env", "keys-wrap__hospital__to__bank__bank.env",
                       "keys-wrap__hospital__to__insurer__insurer.env"]
    # bad inputs
    with pytest.raises(MessageError, match="waited"):
        run_party_keys(config, "hospital", tmp_path / "empty", tmp_path / "hospital", timeout=0.2, poll=0.05)
    with pytest.raises(DataError, match="unknown party"):
        run_party_keys(config, "nobody", tmp_path / "shared", tmp_path / "x", timeout=1)
    with pytest.raises(ConfigError, match="--keys FILE"):
        run_party(config, "hospital", tmp_path / "shared", tmp_path / "hospital", keys=tmp_path / "absent.json")
    with pytest.raises(DataError, match="belongs to party"):
        run_party(config, "insurer", tmp_path / "shared", tmp_path / "insurer", keys=paths["bank"])
    _own_csvs(tmp_path)
    with pytest.raises(DataError, match="must hold exactly these columns"):
        run_party(config, "insurer", tmp_path / "shared", tmp_path / "insurer", csv=tmp_path / "hospital.csv")
    grr = parse_config({**__import__("tomllib").loads(text),
                        "synthesizer": {"use": "vertimrf", "params": {"encoder": "grr"}}})
    with pytest.raises(ConfigError, match="needs no shared keys"):
        run_party_keys(grr, "hospital", tmp_path / "shared", tmp_path / "x", timeout=1)


@pytest.mark.parametrize("fill", ["marginal", "sample"])
def test_keyed_parties_align_then_synthesise_across_processes(tmp_path, fill, in_process):
    """ID-keyed tables, nothing shared but files: `party align` (PSU) -> `party synth --csv <aligned>` -> server."""
    # the roles in threads of this process (issue 33): `party align` runs as processes in test_psi_deploy.py (both
    # protocols), the folder kind's flow in test_parties_and_server_as_separate_processes...; what this test adds is
    # the fill's files and ledger read by the later steps
    import json

    import numpy as np

    rng = np.random.default_rng(8)
    n = 1500
    a = rng.integers(0, 3, n)
    c = np.where(rng.random(n) < 0.85, a, rng.integers(0, 3, n))
    labels = np.array(["x", "y", "z"])
    people_h, people_i = rng.permutation(n)[:1300], rng.permutation(n)[:1350]   # each in its own order
    pd.DataFrame({"id": [f"p{i}" for i in people_h], "a": labels[a[people_h]],
                  "b": labels[rng.integers(0, 2, 1300)]}).to_csv(tmp_path / "hospital.csv", index=False)
    pd.DataFrame({"id": [f"p{i}" for i in people_i], "c": labels[c[people_i]],
                  "d": labels[rng.integers(0, 2, 1350)]}).to_csv(tmp_path / "insurer.csv", index=False)
    keyed = KEYED if fill == "marginal" else KEYED.replace("epsilon = 8.0", "epsilon = 20.0")  # group privacy: 4x
    (tmp_path / "job.toml").write_text(with_roster(
        tmp_path, keyed + f'[alignment]\nuse = "psu"\nparams = {{ fill = "{fill}", workers = 1 }}\n', ["hospital", "insurer"]))
    hello_all(tmp_path, ["hospital", "insurer"])
    res = parallel([["party", "align", "job.toml", "--party", p, "--csv", f"{p}.csv", "--exchange", "shared",
                     "--out", f"private_{p}", "--timeout", "60"] for p in ("hospital", "insurer")], tmp_path)
    assert all(r[0] == 0 for r in res), res
    tables = {p: pd.read_csv(tmp_path / f"private_{p}" / f"{p}_aligned.csv") for p in ("hospital", "insurer")}
    union = len(set(people_h) | set(people_i))
    assert list(tables["hospital"].columns) == ["a", "b"] and len(tables["hospital"]) == len(tables["insurer"]) == union
    # the same person sits on the same row of both tables: a == c for 85% of the people both hold
    pos = {p: pd.read_csv(tmp_path / f"private_{p}" / f"{p}_alignment.csv").set_index("id").position
           for p in ("hospital", "insurer")}
    both = pos["hospital"].index.intersection(pos["insurer"].index)
    assert len(both) == len(set(people_h) & set(people_i))
    assert (pos["hospital"][both].to_numpy() == pos["insurer"][both].to_numpy()).all()
    rows = pos["hospital"][both].to_numpy()
    assert (tables["hospital"].a.to_numpy()[rows] == tables["insurer"].c.to_numpy()[rows]).mean() > 0.8
    spends = json.loads((tmp_path / "private_hospital" / "hospital_alignment_ledger.json").read_text())
    assert [s["stage"] for s in spends] == (["alignment"] if fill == "marginal" else [])
    keys_all(tmp_path, ["hospital", "insurer"])   # the documented flow: align -> keys -> synth
    publish_key(tmp_path)
    for p in ("hospital", "insurer"):
        cli("party", "synth", "job.toml", "--party", p, "--csv", f"private_{p}/{p}_aligned.csv",
            "--exchange", "shared", "--out", f"private_{p}", cwd=tmp_path)
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path)
    syn = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    assert list(syn.columns) == ["a", "b", "c", "d"]
    assert (syn.a == syn.c).mean() > 0.45   # the cross-party correlation survives (1/3 if rows did not line up)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert ("alignment" in report["privacy"]["per_stage_epsilon"]) == (fill == "marginal")
    # without an aligned table party synth refuses a keyed config
    res = cli("party", "synth", "job.toml", "--party", "hospital", "--exchange", "shared", "--out",
              "private_hospital", cwd=tmp_path, ok=False)
    assert res.returncode == 2 and "run `vertisynth party align` first" in res.stderr
