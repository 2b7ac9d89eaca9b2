"""Issue 31, "one of each": one output writer (run/report.py `write_release`) for every release, whoever built it:
the one-process run, the deploy server, collab in one process and collab's publisher. Each clears what the
previous run in its folder wrote (the manifest) and records what it wrote, so no stale file of an earlier run (a
model, a table) sits beside this one's as if it were its. Before, the deploy server recorded no manifest (a later
run in its folder kept its model.npz) and collab's publisher neither cleared nor recorded (an earlier run's model
or table stayed beside its release)."""
import json
import threading

from deploy_helpers import SECRET, SERVER_KEY, cli, collab_census_job, hello_all, keys_all, publish_key, with_roster

from vertisynth.core.identity import Identity
from vertisynth.core.outfiles import OUTPUTS_MANIFEST
from vertisynth.run.config import load_config
from vertisynth.run.pipeline import make_plan

RECORDS = {"synthetic.csv", "report.json", "ledger.json", "summary.md"}

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 800 }
[synthesizer]
use = "vertimrf"
params = { encoder_params = { t = 100 }, local_params = { iters = 10, refine_iters = 5 }, iters = 10, rounds = 1 }
"""


def _earlier_run(out, names):
    """An earlier run's release in `out`: its files and its manifest."""
    out.mkdir(parents=True, exist_ok=True)
    for n in names:
        (out / n).write_text("an earlier run's file")
    (out / OUTPUTS_MANIFEST).write_text(json.dumps(sorted(names)))


def _manifest(out):
    return set(json.loads((out / OUTPUTS_MANIFEST).read_text()))


def test_the_deploy_server_writes_and_records_its_release_as_every_run_does(tmp_path, in_process):
    # the roles in threads (issue 33): what is checked is the server's release folder and its record
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG, ["registry", "employer"]))
    hello_all(tmp_path, ["registry", "employer"], secret=SECRET)
    keys_all(tmp_path, ["registry", "employer"])
    publish_key(tmp_path)
    for party in ("registry", "employer"):
        cli("party", "job.toml", "--party", party, "--exchange", "shared", "--out", f"private_{party}", cwd=tmp_path)
    out = tmp_path / "out"
    _earlier_run(out, ["synthetic.csv", "heatmap_tvd.png"])
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path)
    assert not (out / "heatmap_tvd.png").exists()
    assert _manifest(out) == RECORDS | {"report.html", "model.npz"}   # so the next run there clears them


def test_collabs_publisher_clears_the_earlier_release_and_records_its_own(tmp_path):
    from vertisynth.collab.distributed import run_custodian, run_publisher, run_server

    text, csvs = collab_census_job(tmp_path, 300, iters=10, simulation=False)
    ids = {r: Identity.generate(r) for r in ("A", "B", "server0", "server1", "publisher")}
    (tmp_path / "c.toml").write_text(text + "\n[roster.keys]\n" + "".join(f'{r} = "{i.public_text()}"\n'
                                                                         for r, i in ids.items()))
    out, ex, errors = tmp_path / "out", tmp_path / "shared", []
    _earlier_run(out, ["synthetic.csv", "model.npz", "report.html"])

    def role(name):
        try:
            plan = make_plan(load_config(tmp_path / "c.toml"))   # each role its own plan, as in its own process
            if name == "publisher":
                run_publisher(plan, ex, out, timeout=120, identity=ids[name])
            elif name.startswith("server"):
                run_server(plan, int(name[len("server"):]), ex, timeout=120, identity=ids[name])
            else:
                run_custodian(plan, name, csvs[name], ex, timeout=120, identity=ids[name])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append((name, exc))
    threads = [threading.Thread(target=role, args=(n,)) for n in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and not any(t.is_alive() for t in threads), errors
    assert not (out / "model.npz").exists() and not (out / "report.html").exists()
    assert (out / "synthetic.csv").read_text() != "an earlier run's file"
    assert _manifest(out) == RECORDS
