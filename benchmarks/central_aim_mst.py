"""Central `aim` and `mst` against the public implementations, in the same run: quality and CPU seconds.

    python benchmarks/central_aim_mst.py [--datasets zoo:small-domains,nltcs,adult] [--epsilons 1.0]
        [--seeds 0] [--peers-python PY] [--dpmm-python PY] [--peer-cpu 600] [--aim-rounds T] [--peers ...]

Peers (NOT project dependencies; install them into separate venvs, run here as subprocesses):
    python3 -m venv ../venv-peers && ../venv-peers/bin/pip install smartnoise-synth
    python3 -m venv ../venv-peers-dpmm && ../venv-peers-dpmm/bin/pip install dpmm     (dpmm pins numpy<2)
smartnoise-synth 1.0.8 brings mbi 1.1 (the JAX Private-PGM) and carries `snsynth.aim` (the mbi AIM mechanism
ported to the JAX API; no warm start between rounds) and `snsynth.mst` (the NIST MST code); dpmm 0.1.9 carries
the mbi AIM code on the numpy Private-PGM (FactoredInference, warm-started between rounds). The worker
calls their algorithm functions on the very same coded table and the same ρ (their own ε→ρ conversion and
data transformer are bypassed), then samples as many rows as the table has. A peer that is not installed, or
that fails, is skipped with a line saying why; one that runs past --peer-cpu CPU seconds is stopped and reported
as "> t" (then the ratio is a bound).
mbi 2.0.0 itself ships no AIM mechanism (only the estimation engine): its AIM is the code these two package.

Printed per dataset × ε × seed: 3-way TVD over `--marginals` random marginals (the project's `tvd` evaluator,
the same marginals for every method) and CPU seconds of fit + sample (process CPU, all threads; for the peers
their whole process's CPU, imports and JAX compilation included since every run pays them), then the ratios
ours / peer. Columns sampled independently (`independent`) anchor the quality scale.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


# -- the peer side (runs inside the peers' interpreter; imports no vertisynth) ---------------------------------
def peer_worker(kind: str, spec_path: str, out_path: str) -> None:
    import pandas as pd

    z = np.load(spec_path, allow_pickle=False)
    spec = json.loads(bytes(z["spec"]).decode())
    names, shape, rho, n = spec["attributes"], spec["shape"], spec["rho"], spec["n"]
    np.random.seed(spec["seed"])    # the peers draw from numpy's global generator
    # smartnoise's peers sample with method="sample": mbi 1.1.0's default "round" loses most of the fitted model
    # (zoo small-domains, ρ = 100: mean 2-way TVD 0.110 on "round" samples, 0.012 on "sample" ones, 0.010 for the
    # model's own marginals), which would measure that sampler, not the algorithm
    c0, w0 = time.process_time(), time.perf_counter()
    if kind.startswith("smartnoise"):
        from mbi import Dataset, Domain

        data = Dataset(pd.DataFrame(z["codes"], columns=names), Domain(names, shape))
        c0, w0 = time.process_time(), time.perf_counter()
    if kind == "smartnoise_aim":
        from snsynth.aim.aim import AIMSynthesizer

        syn = AIMSynthesizer(epsilon=1.0, delta=1e-9, degree=3, max_model_size=80, rounds=spec.get("rounds"))
        syn.rho = rho
        syn.AIM(data, list(itertools.combinations(names, min(3, len(names)))))
        out = syn.synthesizer.synthetic_data(rows=n, method="sample").df[names].to_numpy()
    elif kind in ("smartnoise_mst", "smartnoise_mst_nocompress"):
        import snsynth.mst.mst as mst

        mst.cdp_rho = lambda _eps, _delta: rho
        syn = mst.MSTSynthesizer(epsilon=1.0, delta=1e-9)
        if kind == "smartnoise_mst_nocompress":
            syn.compress_domain = lambda d, log: (d, log, lambda x: x)
        syn.MST(data, 1.0, 1e-9)
        out = syn.undo_compress_fn(syn.synthesizer.synthetic_data(rows=n, method="sample")).df[names].to_numpy()
    elif kind == "dpmm_aim":
        from numpy.random import RandomState

        from dpmm.models.aim import AIM

        # dpmm bundles the numpy Private-PGM (FactoredInference, warm-started between rounds) and the mbi AIM code;
        # one process (n_jobs=1) so that its CPU is this process's
        syn = AIM(epsilon=1.0, delta=1e-9, degree=min(3, len(names)), max_cells=10**15, n_jobs=1,
                  prng=RandomState(spec["seed"]), rounds=spec.get("rounds"))
        syn.rho = rho
        syn.set_domain(dict(zip(names, shape)))
        syn.fit(pd.DataFrame(z["codes"], columns=names))
        out = syn.generate(n_records=n)[names].to_numpy()
    else:
        raise SystemExit(f"unknown peer {kind}")
    np.savez(out_path, codes=out.astype(np.int64), cpu=time.process_time() - c0, wall=time.perf_counter() - w0)


PEERS = {"aim": ["dpmm_aim", "smartnoise_aim"], "mst": ["smartnoise_mst"]}


def run_peer(python: str, kind: str, real, rho: float, seed: int, cpu_limit: float,
             rounds: int | None = None) -> tuple[np.ndarray | None, str]:
    """Run one peer in its interpreter, capped at `cpu_limit` CPU seconds (RLIMIT_CPU, so a loaded machine does not
    shorten its allowance); its CPU seconds are the child's rusage (imports and JAX start-up included)."""
    import resource
    import signal

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_limit), int(cpu_limit) + 5))

    with tempfile.TemporaryDirectory() as tmp:
        spec = {"attributes": list(real.domain.attributes), "shape": [int(s) for s in real.domain.shape],
                "rho": rho, "n": int(real.n), "seed": seed, "rounds": rounds}
        np.savez(Path(tmp) / "spec.npz", codes=np.asarray(real.codes, np.int64),
                 spec=np.frombuffer(json.dumps(spec).encode(), dtype=np.uint8))
        cmd = [python, __file__, "--worker", kind, str(Path(tmp) / "spec.npz"), str(Path(tmp) / "out.npz")]
        env = {**os.environ, "JAX_ENABLE_X64": "1"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=cap)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            return None, f"> {cpu:.0f}"
        if proc.returncode != 0:
            return None, "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:160]
        return np.load(Path(tmp) / "out.npz")["codes"], f"{cpu:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="zoo:small-domains,nltcs,adult")
    ap.add_argument("--epsilons", default="1.0")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--marginals", type=int, default=300)
    ap.add_argument("--methods", default="aim,mst")
    ap.add_argument("--peers-python", default=os.environ.get("PEERS_PYTHON", "../venv-peers/bin/python"),
                    help="the interpreter with smartnoise-synth")
    ap.add_argument("--dpmm-python", default=os.environ.get("DPMM_PYTHON", "../venv-peers-dpmm/bin/python"),
                    help="the interpreter with dpmm (it pins numpy<2, so not the smartnoise one)")
    ap.add_argument("--peer-cpu", type=float, default=600.0, help="CPU seconds each peer may use")
    ap.add_argument("--peers", default="dpmm_aim,smartnoise_aim,smartnoise_mst", help="which peers to run")
    ap.add_argument("--aim-rounds", type=int, default=None,
                    help="AIM's T for ours and the peers alike (default 16·d, the paper's)")
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA"))
    ap.add_argument("--csv", default=None, help="append one row per method and cell to this CSV as it is printed")
    args = ap.parse_args()
    if args.csv and not Path(args.csv).exists():
        Path(args.csv).write_text("dataset,epsilon,seed,method,aim_rounds,tvd_3way,cpu_s,note\n")

    from vertisynth.core.dataset import Dataset, VerticalPartition
    from vertisynth.core.interfaces import PlanContext, VerticalData
    from vertisynth.core.privacy import Budget, PrivacyLedger
    from vertisynth.core.registry import default_registry
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import build_component, run

    reg = default_registry()
    pythons = {"smartnoise": args.peers_python, "dpmm": args.dpmm_python}
    for lib, py in pythons.items():
        if not Path(py).exists():
            print(f"{lib} peers skipped: no interpreter at {py} (see the module docstring to install them)")
    print(f"{'dataset':<20} {'ε':>4} {'seed':>4} {'method':<16} {'3-way TVD':>9} {'CPU s':>9}  ours/peer: TVD, CPU")
    for ds in args.datasets.split(","):
        name, _, preset = ds.partition(":")
        dparams = {"preset": preset} if name == "zoo" else {"data_dir": args.data_dir} if args.data_dir else {}
        for eps in map(float, args.epsilons.split(",")):
            for seed in map(int, args.seeds.split(",")):
                cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": args.delta},
                                    "dataset": {"name": name, "params": dparams},
                                    "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
                base = run(cfg)
                real = base.real_codes
                budget = Budget(eps, args.delta)
                tvd = build_component(reg, "evaluator", "tvd", {"ways": [3], "marginals": args.marginals}, "tvd").instance

                def score(syn: Dataset) -> float:
                    return tvd.evaluate(real, syn, np.random.default_rng(1000 + seed))["tvd_3way"]

                def line(method: str, t: float, cpu: str, extra: str = "") -> None:
                    print(f"{ds:<20} {eps:>4g} {seed:>4} {method:<16} {t:>9.4f} {cpu:>9}  {extra}", flush=True)
                    if args.csv:
                        timed = cpu.replace(".", "", 1).isdigit()
                        rounds = args.aim_rounds if "aim" in method and args.aim_rounds else ""
                        note = "" if timed or cpu == "-" else cpu.replace(",", ";")
                        with open(args.csv, "a") as f:
                            f.write(f"{ds},{eps:g},{seed},{method},{rounds},"
                                    f"{'' if t != t else round(t, 6)},{cpu if timed else ''},{note}\n")

                line("independent", score(base.synthetic_codes), "-")
                for method in args.methods.split(","):
                    params = {"rounds": args.aim_rounds} if method == "aim" and args.aim_rounds else {}
                    syn = build_component(reg, "synthesizer", method, params, method).instance
                    partition = VerticalPartition.from_lists([list(real.domain.attributes)]).validate(real.domain)
                    ledger = PrivacyLedger(budget)
                    ledger.plan(syn.plan(PlanContext(real.domain, partition, budget)))
                    ledger.check_plan()
                    c0 = time.process_time()
                    rng = np.random.default_rng(seed)
                    syn.fit(VerticalData(partition, partition.views(real)), ledger, rng)
                    out = syn.sample(None, rng)
                    cpu = time.process_time() - c0
                    ours = score(out)
                    line(method, ours, f"{cpu:.1f}")
                    for peer in [p for p in PEERS[method] if p in args.peers.split(",")]:
                        py = pythons[peer.split("_")[0]]
                        if not Path(py).exists():
                            continue
                        codes, peer_cpu = run_peer(py, peer, real, budget.rho(), seed, args.peer_cpu,
                                                   args.aim_rounds if method == "aim" else None)
                        if codes is None:
                            line(peer, float("nan"), peer_cpu, f"ours / peer CPU < {cpu / float(peer_cpu[2:]):.3f}"
                                 if peer_cpu.startswith(">") else peer_cpu)
                            continue
                        theirs = score(Dataset(codes, real.domain))
                        line(peer, theirs, peer_cpu, f"{ours / theirs:.2f}, {cpu / max(float(peer_cpu), 1e-9):.3f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        peer_worker(*sys.argv[2:5])
        sys.exit(0)
    sys.exit(main())
