"""The network run against the folder run, on loopback: Adult, 2 parties, VertiMRF defaults.

    VERTISYNTH_DATA=/path/to/data python benchmarks/network.py      # needs vertisynth[flower]; the folder holding adult/
    ... benchmarks/network.py --t 200                                                # a quicker variant

Runs the same job twice under one explicit test secret: (1) the folder exchange, every role a separate process
(hello, keys, synth in parallel, then server), (2) the Flower deployment of the README on 127.0.0.1 (SuperLink
with TLS and SuperNode authentication, one SuperNode per party, `flwr run`). Prints the envelope bytes each party
sent and received, the round trips per step, the wall time of both runs and the overhead, and checks that both
published the same table. Each party reads only its own columns (its own CSV).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from vertisynth.deploy.flower.loopback import Deployment
from vertisynth.deploy.flower.pki import node_key, trial_tls
from vertisynth.deploy.flower.project import write_app
from vertisynth.run.config import load_config
from vertisynth.run.pipeline import make_plan

SECRET = "5c0e9a7d3b1f4e2a8c6d0b9e7f1a3c5e"
PARTIES = {"party1": ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                      "relationship"],
           "party2": ["race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income"]}


def config_text(t: int | None) -> str:
    params = f"params = {{ encoder_params = {{ t = {t} }} }}\n" if t else ""
    parties = "".join(f'[[parties]]\nname = "{p}"\nattributes = {json.dumps(a)}\n' for p, a in PARTIES.items())
    return (f'seed = 7\nbudget = {{ epsilon = 1.6, delta = 1e-5 }}\n[dataset]\nname = "adult"\n{parties}'
            f'[synthesizer]\nuse = "vertimrf"\n{params}')


def cli(*args, cwd: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vertisynth.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def all_ok(procs, timeout: float = 1800) -> None:
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"a role failed: {err[-2000:]}")


def folder_run(root: Path, env: dict) -> float:
    t0 = time.perf_counter()
    for step, extra in (("hello", ["--test-secret", SECRET]), ("keys", ["-q"]), ("synth", ["-q"])):
        all_ok([cli("party", step, "job.toml", "--party", p, "--exchange", "shared", "--out", f"private_{p}",
                    *(["--csv", f"{p}.csv"] if step == "synth" else []), *extra, cwd=root, env=env) for p in PARTIES])
    all_ok([cli("server", "job.toml", "--exchange", "shared", "--out", "out_folder", "-q", cwd=root, env=env)])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--t", type=int, default=None, help="FM sketch repetitions (default: the encoder's default)")
    ap.add_argument("--keep", action="store_true", help="keep the working folder")
    args = ap.parse_args()
    data = os.environ.get("VERTISYNTH_DATA") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
    env = {**os.environ, "VERTISYNTH_DATA": data}
    root = Path(tempfile.mkdtemp(prefix="vs-network-"))
    roster = []
    for p in PARTIES:
        res = subprocess.run([sys.executable, "-m", "vertisynth.cli", "party", "init", "--party", p, "--out",
                              f"private_{p}"], cwd=root, env=env, capture_output=True, text=True, check=True)
        roster.append(res.stdout.strip().splitlines()[-1])
    (root / "job.toml").write_text(config_text(args.t) + "[roster.keys]\n" + "\n".join(roster) + "\n")
    frame = make_plan(load_config(root / "job.toml"), data_dir=data).source.load().frame
    for p, cols in PARTIES.items():
        frame[cols].to_csv(root / f"{p}.csv", index=False)
    print(f"Adult: {len(frame)} rows, parties {list(PARTIES)}; working folder {root}", flush=True)

    folder_s = folder_run(root, env)
    print(f"folder run: {folder_s:.1f} s wall", flush=True)
    for p in PARTIES:   # the Flower run starts from fresh private folders (same signing keys)
        for f in (root / f"private_{p}").iterdir():
            if not f.name.endswith("_signing.pem"):
                f.unlink()

    dep = Deployment(root)
    dep.env["VERTISYNTH_DATA"] = data
    try:
        t0 = time.perf_counter()
        dep.superlink(trial_tls(root / "tls", ["127.0.0.1"]))
        for p in PARTIES:
            private, public = node_key(root / f"private_{p}", p)
            dep.register(public)
            dep.supernode(p, private, {"party": p, "config": root / "job.toml", "out": root / f"private_{p}",
                                       "work": root / f"work_{p}", "csv": root / f"{p}.csv", "test-secret": SECRET,
                                       "timeout": 1800})
        for p in PARTIES:
            dep.wait_for(f"node_{p}", "SuperNode ID")
        write_app(root / "app")
        start_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = dep.run(root / "app", {"config": str(root / "job.toml"), "out": str(root / "out_flower"),
                                     "timeout": 1800}, timeout=3600)
        flower_s = time.perf_counter() - t0
    finally:
        dep.close()
    if not (root / "out_flower" / "synthetic.csv").is_file():
        raise SystemExit(f"the Flower run failed: {res.stdout[-3000:]}")
    net = json.loads((root / "out_flower" / "network.json").read_text())
    same = pd.read_csv(root / "out_flower" / "synthetic.csv").equals(pd.read_csv(root / "out_folder" / "synthetic.csv"))
    print(f"Flower deployment up (SuperLink, {len(PARTIES)} SuperNodes registered and connected): {start_s:.1f} s")
    print(f"Flower run (`flwr run` to its end): {flower_s:.1f} s wall; inside the ServerApp {net['seconds']:.1f} s")
    print(f"overhead of the network run over the folder run: {flower_s - folder_s:+.1f} s ({flower_s / folder_s:.2f}x)")
    print(f"round trips: {net['round_trips']} ({', '.join(f'{k} {v}' for k, v in net['per_step'].items())})")
    print("envelope bytes per party (payload; Flower adds HTTP/TLS and protobuf framing):")
    for p, v in net["parties"].items():
        print(f"  {p}: sent {v['bytes_from_party']:,} B, received {v['bytes_to_party']:,} B")
    print(f"published tables equal (Flower vs folder, same test secret): {same}")
    if not args.keep:
        import shutil
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
