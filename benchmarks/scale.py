"""VertiMRF in rows: CPU seconds and peak RSS per phase at n rows, per-row cost against the smallest n,
and the DPFM encoding against the old encoder kept here as the anchor.

    PYTHONPATH=$PWD python benchmarks/scale.py [--rows 45222,450000] [--dataset adult|census] [--tvd]
                                               [--anchor-encoder] [--eps 1.0] [--seed 0]

Tables: Adult rows resampled with replacement to n (n = Adult's own 45,222 takes the table as is), or the
built-in census generator drawing n rows; two parties (the dataset's default split); VertiMRF defaults.
Per phase (process CPU seconds, i.e. `time.process_time`, and the peak RSS seen while the phase ran, sampled
every 20 ms from /proc/self/status):
  party       each party's whole party step (`party_step_chunks`), summed over parties; of it
  LocMRF      the local PrivMRF (`fit_table`, with the counting passes it asks for),
  counting    every counting pass over the chunks (`ChunkedCounts.prefetch`, inside or before LocMRF),
  LocEnc      the DPFM sketches (the encoder's chunk job over the chunks)
  server      the whole server step; of it, InitMRF (first estimation) and OptMRF (the re-estimations)
  sample      drawing the synthetic table
  run         fit + sample (CPU of this process and its children, from getrusage)
per row: CPU ns per row, and its ratio to the first n in --rows (1.0 = linear).
--anchor-encoder: also time the encoder's raw maxima with the OLD kernel (copied below as it was before
the old kernel: a (64, n) block gathered by `values[:, order]`, `maximum.reduceat`, seven-pass geometric values,
the low 64 bits of each AES block only) on the same party views and key, print the ratio old / new, whether
the maxima are identical (no since the new PRF uses both halves of each AES block) and their mean. --tvd: 3-way TVD over 100 marginals of the synthetic table against the input.
Each n runs in a fresh subprocess so peak RSS is per n.

--target R: the issue's cost target on Adult (45,222 rows, `--tvd`), R rounds alternating, each run a fresh
process, CPU seconds of fit + sample, medians and the ratio of the medians (and per round):
  (a) the issue's config, DPFM t = 8,000: the old tree (commit OLD_COMMIT, exported with `git archive` into a
      temporary folder; its own benchmark and code, whose VertiMRF default was t = 8,000) against this tree;
  (b) the current default, t = 32,000: this tree against the old tree run at the same t (its VertiMRF given
      encoder_params t = 32,000), and, in the first round, the anchor encoder (old DPFM kernel, same views and
      key, same process) against this tree's kernel at t = 32,000: ns per repetition·row.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

DATA = os.environ.get("VERTISYNTH_DATA") or next(
    (str(p) for p in (Path(__file__).resolve().parents[2] / "shared" / "data",) if (p / "adult").is_dir()), "")


OLD_COMMIT = "41dc03a"  # the code before issue 21 (docs/scale.md: "before, anchor")

# -- the anchor: the DPFM raw-maxima kernel before the record-major rewrite -------------------------------------------------
def old_geometric_from_words(words: np.ndarray) -> np.ndarray:
    exponent = ((words >> np.uint64(11)).astype(np.float64).view(np.uint64) >> np.uint64(52)).astype(np.int16)
    return (53 - np.maximum(exponent - 1022, 0)).astype(np.int16)


def old_sketch_maxima(key: bytes, view, ids: np.ndarray, t: int, gamma: float, rep_block: int = 64) -> dict:
    from vertisynth.plugins.encoders.prf import TAG_FM, PRFStream

    assert gamma == 1.0
    ids = np.asarray(ids)
    out = {a: np.empty((t, view.domain.size(a)), dtype=np.int16) for a in view.attributes}
    groups = {}
    for a in view.attributes:
        codes = view.column(a)
        order = np.argsort(codes, kind="stable")
        sc = codes[order]
        starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        groups[a] = (order, starts, sc[starts])
    stream = PRFStream(key, TAG_FM, ids, min(rep_block, t))
    for h0 in range(0, t, rep_block):
        reps = np.arange(h0, min(h0 + rep_block, t))
        values = old_geometric_from_words(stream.words(reps)[..., 0])
        for a in view.attributes:
            order, starts, present = groups[a]
            o = np.full((values.shape[0], view.domain.size(a)), -1, dtype=np.int16)
            o[:, present] = np.maximum.reduceat(values[:, order], starts, axis=1)
            out[a][h0:h0 + reps.size] = o
    return out


# -- measuring --------------------------------------------------------------------------------------------
def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Meter:
    """CPU seconds and peak RSS per named phase (phases may repeat: CPU adds up, the peak is the max)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self._active: list[str] = []
        self._stop = False
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop:
            r = rss_mb()
            for name in list(self._active):
                self.peak[name] = max(self.peak.get(name, 0.0), r)
            time.sleep(0.02)

    @contextmanager
    def phase(self, name: str):
        self._active.append(name)
        c0 = time.process_time()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c0
            self.peak[name] = max(self.peak.get(name, 0.0), rss_mb())
            self._active.remove(name)


def wrap(owner, name: str, meter: Meter, phase) -> None:
    """Replace owner.name by a version that runs inside meter.phase(phase(call number))."""
    fn = getattr(owner, name)
    calls = [0]

    def wrapped(*a, **k):
        calls[0] += 1
        with meter.phase(phase(calls[0])):
            return fn(*a, **k)
    setattr(owner, name, wrapped)


def total_cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def kernel_only(syn, data, t: int, n: int, rng) -> dict:
    """The DPFM kernel alone (raw maxima) on each party's binned view, t repetitions: CPU and peak RSS."""
    from vertisynth.plugins.encoders import dpfm
    from vertisynth.plugins.synthesizers.vertimrf import synthesizer as vsyn

    enc = syn._encoder
    lows = []
    for party in data.partition.names:
        view = data.views[party]
        mine = [a for a in view.attributes if a in syn._binned]
        lows.append((party, vsyn.bin_dataset(view, syn.config.bins, mine) if mine else view))
    data = None  # the raw views are not needed any more
    base = rss_mb()
    meter = Meter()
    for party, low in lows:
        with meter.phase("kernel"):
            dpfm.sketch_maxima(enc.party_key(party, rng), low, np.arange(low.n), t, enc.params.gamma,
                               enc.config.rep_block, enc.config.block_mb)
    meter._stop = True
    return {"n": n, "t": t, "cpu": meter.cpu["kernel"], "peak_mb": meter.peak["kernel"], "before_mb": base,
            "ns_per_rep_row": meter.cpu["kernel"] / (t * n * len(lows)) * 1e9}


def one(n: int, dataset: str, eps: float, seed: int, tvd: bool, anchor: bool, params: dict | None = None,
        kernel_t: int = 0) -> dict:
    """One VertiMRF run at n rows (in this process); returns the measurements."""
    from vertisynth.run.config import parse_config
    from vertisynth.core.interfaces import VerticalData
    from vertisynth.run.pipeline import make_plan
    from vertisynth.plugins.encoders import dpfm
    from vertisynth.plugins.evaluators.tvd import marginal_tvd, distinct_subsets
    from vertisynth.plugins.synthesizers.privmrf.synthesizer import PrivMRFSynthesizer
    from vertisynth.plugins.synthesizers.vertimrf import synthesizer as vsyn

    ds_params = {"data_dir": DATA} if dataset == "adult" else {"n": n}
    cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": 1e-5},
                        "dataset": {"name": dataset, "params": ds_params},
                        "synthesizer": {"use": "vertimrf", "params": params or {}}})
    plan = make_plan(cfg)
    rng = np.random.default_rng(seed)
    loaded = plan.source.load()
    codec = loaded.schema.fit(loaded.frame, plan.ledger, np.random.default_rng(seed + 1))
    real = codec.encode(loaded.frame)
    if real.n != n:
        real = real.take(np.random.default_rng(seed + 2).integers(0, real.n, n))
    data = VerticalData(plan.partition, plan.partition.views(real))
    syn = plan.synthesizer.instance
    if kernel_t:
        return kernel_only(syn, data, kernel_t, n, rng)
    from vertisynth.plugins.encoders.chunked import ChunkJob
    from vertisynth.plugins.synthesizers.vertimrf.streaming import ChunkedCounts

    meter = Meter()
    wrap(syn, "party_step_chunks", meter, lambda i: "party")
    wrap(PrivMRFSynthesizer, "fit_table", meter, lambda i: "LocMRF")
    wrap(ChunkedCounts, "prefetch", meter, lambda i: "counting")
    wrap(ChunkJob, "run_local", meter, lambda i: "LocEnc")
    wrap(vsyn, "estimate", meter, lambda i: "InitMRF" if i == 1 else "OptMRF")
    wrap(syn, "server_step", meter, lambda i: "server")
    wrap(syn, "sample", meter, lambda i: "sample")
    before = rss_mb()
    c0, w0 = total_cpu(), time.perf_counter()
    syn.fit(data, plan.ledger, rng)
    out_tab = syn.sample(None, rng)
    out = {"n": n, "run_cpu": total_cpu() - c0, "run_wall": time.perf_counter() - w0, "before_mb": before,
           "chunks": -(-n // syn.chunk_rows()) * len(plan.partition),
           "cpu": meter.cpu, "peak_mb": meter.peak, "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    out["model_cells"] = int(sum(syn._domain.project(c).size() for c in syn._model.tree.cliques))
    if tvd:
        joined = data.joined().project(out_tab.domain.attributes)
        names = joined.domain.attributes
        subs = distinct_subsets(len(names), 3, 100, np.random.default_rng(7))
        out["tvd3"] = float(np.mean([marginal_tvd(joined, out_tab, tuple(names[i] for i in s)) for s in subs]))
    if anchor:
        enc = syn._encoder
        p = enc.params
        cmp = {"new": 0.0, "old": 0.0, "identical": True, "mean_new": [], "mean_old": []}
        for party in plan.partition.names:
            view = data.views[party]
            mine = [a for a in view.attributes if a in syn._binned]
            low = vsyn.bin_dataset(view, syn.config.bins, mine) if mine else view
            key = enc.party_key(party, rng)
            ids = np.arange(low.n, dtype=np.int64)
            c = time.process_time()
            new = dpfm.sketch_maxima(key, low, ids, p.t, p.gamma, enc.config.rep_block)
            cmp["new"] += time.process_time() - c
            c = time.process_time()
            old = old_sketch_maxima(key, low, ids, p.t, p.gamma)
            cmp["old"] += time.process_time() - c
            cmp["identical"] &= all(np.array_equal(new[a], old[a]) for a in old)
            cmp["mean_new"] += [float(np.mean(new[a][new[a] >= 0])) for a in new]
            cmp["mean_old"] += [float(np.mean(old[a][old[a] >= 0])) for a in old]
        cmp["t"], cmp["rep_rows"] = int(p.t), int(p.t) * low.n * len(plan.partition.names)
        out["anchor"] = cmp
    meter._stop = True
    return out


def _json_run(cmd: list[str], cwd: str, env: dict) -> dict | None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        print(f"failed: {' '.join(cmd)[:200]}\n{proc.stderr[-1500:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def target(rounds: int, seed: int, old_tree: str | None = None) -> int:
    """The issue's ≥ 4x target on Adult, back to back against the old tree (see the module docstring).
    `old_tree`: an exported copy of OLD_COMMIT (default: exported here with git archive)."""
    import shutil
    import statistics
    import tempfile

    repo = Path(__file__).resolve().parents[1]
    old_dir = old_tree or tempfile.mkdtemp(prefix="vertisynth-old-")
    try:
        if old_tree:
            have_old, why = (Path(old_dir) / "benchmarks" / "scale.py").is_file(), f"no benchmarks/scale.py in {old_dir}"
        else:
            arch = subprocess.run(f"git -C {repo} archive {OLD_COMMIT} | tar -x -C {old_dir}", shell=True,
                                  capture_output=True, text=True)
            have_old = arch.returncode == 0 and (Path(old_dir) / "benchmarks" / "scale.py").is_file()
            why = arch.stderr.strip()[:200]
        if not have_old:
            print(f"cannot use the old tree {OLD_COMMIT} ({why}): old-tree rows skipped", file=sys.stderr)
        env_new = {**os.environ, "PYTHONPATH": str(repo), "VERTISYNTH_DATA": DATA}
        env_old = {**os.environ, "PYTHONPATH": old_dir, "VERTISYNTH_DATA": DATA}
        # the old benchmark has no --param: give its VertiMRF encoder_params t through its parse_config
        old_at = ("import json, sys; import vertisynth.core.config as c; f = c.parse_config; "
                  "c.parse_config = lambda d: f({{**d, 'synthesizer': {{**d['synthesizer'], 'params': "
                  "{{'encoder_params': {{'t': {t}}}}}}}}}); sys.path.insert(0, 'benchmarks'); import scale; "
                  "print(json.dumps(scale.one(45222, 'adult', 1.0, {seed}, True, False)))")
        new_cmd = [sys.executable, __file__, "--one", "45222", "--dataset", "adult", "--seed", str(seed), "--tvd"]
        configs = [("old, t = 8,000", "old8", lambda r: [sys.executable, "benchmarks/scale.py", "--one", "45222",
                                                          "--dataset", "adult", "--seed", str(seed), "--tvd"]),
                   ("new, t = 8,000", "new8", lambda r: new_cmd + ['--param=encoder_params={"t":8000}']),
                   ("new, t = 32,000", "new32", lambda r: new_cmd + (["--anchor-encoder"] if r == 0 else [])),
                   ("old, t = 32,000", "old32", lambda r: [sys.executable, "-c", old_at.format(t=32000, seed=seed)])]
        res: dict[str, list[dict]] = {k: [] for _, k, _ in configs}
        for r in range(rounds):
            for label, key, cmd in configs:
                if key.startswith("old") and not have_old:
                    continue
                out = _json_run(cmd(r), old_dir if key.startswith("old") else str(repo),
                                env_old if key.startswith("old") else env_new)
                if out is not None:
                    res[key].append(out)
                    print(f"round {r + 1} {label}: {out['run_cpu']:.2f} CPU s", file=sys.stderr, flush=True)
        n = 45222
        print(f"Adult ({n:,} rows), seed {seed}, fit + sample, CPU seconds of the process and its children; "
              f"{rounds} rounds alternating; old = {OLD_COMMIT}")
        print(f"{'config':<17} {'runs':<26} {'median':>7} {'µs/row':>7} {'LocEnc':>7} {'server':>7} {'tvd3':>7}")
        med = {}
        for label, key, _ in configs:
            rs = res[key]
            if not rs:
                continue
            runs = [r["run_cpu"] for r in rs]
            med[key] = statistics.median(runs)
            loc = statistics.median([r["cpu"].get("LocEnc", 0) for r in rs])
            srv = statistics.median([r["cpu"].get("server", 0) for r in rs])
            tv = statistics.median([r.get("tvd3", float("nan")) for r in rs])
            print(f"{label:<17} {' '.join(f'{x:.2f}' for x in runs):<26} {med[key]:7.2f} {med[key] / n * 1e6:7.1f} "
                  f"{loc:7.2f} {srv:7.2f} {tv:7.4f}")
        for t_label, o, nw in (("(a) the issue's config, t = 8,000", "old8", "new8"),
                               ("(b) the current default, t = 32,000", "old32", "new32")):
            if o in med and nw in med:
                pair = [a["run_cpu"] / b["run_cpu"] for a, b in zip(res[o], res[nw])]
                print(f"{t_label}: old / new = {med[o] / med[nw]:.2f}x (medians), per round "
                      f"{', '.join(f'{x:.2f}x' for x in pair)}; target >= 4x")
        anchor = next((r["anchor"] for r in res["new32"] if "anchor" in r), None)
        if anchor:
            ns = {k: anchor[k] / anchor["rep_rows"] * 1e9 for k in ("old", "new")}
            print(f"(b) encoder alone at t = {anchor['t']:,} (old DPFM kernel kept here as the anchor, same views and "
                  f"key): old {anchor['old']:.2f} s ({ns['old']:.2f} ns per repetition·row), new {anchor['new']:.2f} s "
                  f"({ns['new']:.2f} ns), old / new {anchor['old'] / max(anchor['new'], 1e-9):.2f}x; mean raw maximum "
                  f"old {np.mean(anchor['mean_old']):.4f} new {np.mean(anchor['mean_new']):.4f}")
        return 0
    finally:
        if not old_tree:
            shutil.rmtree(old_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="45222,450000",
                    help="comma-separated row counts (e.g. 45222,450000,4500000,10000000)")
    ap.add_argument("--dataset", choices=["adult", "census"], default="adult")
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tvd", action="store_true", help="3-way TVD of the synthetic table (100 marginals)")
    ap.add_argument("--anchor-encoder", action="store_true", help="time the old DPFM kernel on the same views")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=JSON",
                    help="a VertiMRF parameter, e.g. --param local_start=false --param iters=300")
    ap.add_argument("--kernel-only", type=int, default=0, metavar="T",
                    help="time only the DPFM kernel (raw maxima of every party, T repetitions) per n: ns per "
                         "repetition·row of a party and the RSS it adds (the linearity and memory check at 4.5M-10M)")
    ap.add_argument("--target", type=int, default=0, metavar="R",
                    help="the issue's Adult cost target: R rounds alternating the old tree and this one at t = 8,000 "
                         "and t = 32,000, medians and ratios, and the anchor encoder at t = 32,000")
    ap.add_argument("--old-tree", default=None, metavar="DIR",
                    help=f"--target: an exported copy of {OLD_COMMIT} (default: git archive of this repository)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: run one n, print JSON
    args = ap.parse_args()
    if args.target:
        return target(args.target, args.seed, args.old_tree)
    if args.dataset == "adult" and not (Path(DATA) / "adult").is_dir():
        print(f"Adult not found under {DATA}; using the census generator", file=sys.stderr)
        args.dataset = "census"
    if args.one:
        params = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)}
        print(json.dumps(one(args.one, args.dataset, args.eps, args.seed, args.tvd, args.anchor_encoder, params,
                             args.kernel_only)))
        return 0
    rows = [int(float(r)) for r in args.rows.split(",")]
    results = []
    for n in rows:
        cmd = [sys.executable, __file__, "--one", str(n), "--dataset", args.dataset, "--eps", str(args.eps),
               "--seed", str(args.seed), "--kernel-only", str(args.kernel_only)] + [f"--param={p}" for p in args.param] + (["--tvd"] if args.tvd else []) + (["--anchor-encoder"] if args.anchor_encoder else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            print(f"n={n}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if not results:
        return 1
    if args.kernel_only:
        b = results[0]
        print(f"DPFM kernel only, t = {args.kernel_only}, {args.dataset}: CPU s, ns per repetition·row (ratio to "
              f"n = {b['n']:,}), RSS before and peak during (MB)")
        for r in results:
            print(f"{r['n']:>11,} {r['cpu']:8.2f} s {r['ns_per_rep_row']:6.2f} ns {r['ns_per_rep_row'] / b['ns_per_rep_row']:5.2f}x"
                  f"   {r['before_mb']:7.0f} -> {r['peak_mb']:7.0f} MB")
        return 0
    phases = ["party", "LocMRF", "counting", "LocEnc", "server", "InitMRF", "OptMRF", "sample"]
    base = results[0]
    print(f"dataset {args.dataset}, ε = {args.eps}, seed {args.seed}, params {args.param}; CPU seconds (peak RSS MB); "
          f"ns/row and its ratio to n = {base['n']:,}")
    print(f"{'n':>10} {'run cpu':>8} {'wall':>6} " + " ".join(f"{p:>17}" for p in phases) + "   model cells   tvd3  RSS before")
    for r in results:
        cells = [f"{r['cpu'].get(p, 0):8.2f} ({r['peak_mb'].get(p, 0):5.0f})" for p in phases]
        tv = f"{r['tvd3']:.4f}" if "tvd3" in r else ""
        print(f"{r['n']:>10,} {r['run_cpu']:8.2f} {r['run_wall']:6.1f} " + " ".join(f"{c:>17}" for c in cells) + f"   {r['model_cells']:>11,}   {tv}  {r.get('before_mb', 0):6.0f}")
    print(f"{'per row':>10} " + " ".join(f"{p:>17}" for p in ["run"] + phases))
    for r in results:
        cells = []
        for p in ["run"] + phases:
            v, b = (r["run_cpu"], base["run_cpu"]) if p == "run" else (r["cpu"].get(p, 0), base["cpu"].get(p, 0))
            ns = v / r["n"] * 1e9
            ratio = (v / r["n"]) / (b / base["n"]) if b else float("nan")
            cells.append(f"{ns:8.0f}ns {ratio:5.2f}x")
        print(f"{r['n']:>10,} " + " ".join(f"{c:>17}" for c in cells))
    print("projected wall time on W workers (party phases of all parties mapped in 100k-row chunks, from the "
          "measured CPU per chunk; the server and sampling stay serial):")
    for r in results:
        per_chunk = r["cpu"].get("party", 0) / max(r["chunks"], 1)
        serial = r["cpu"].get("server", 0) + r["cpu"].get("sample", 0)
        proj = "  ".join(f"{w} workers {serial + math.ceil(r['chunks'] / w) * per_chunk:8.1f} s" for w in (2, 16, 64))
        print(f"{r['n']:>10,}: {r['chunks']} chunks x {per_chunk:.2f} CPU s + serial {serial:.1f} s  ->  {proj}")
    for r in results:
        if "anchor" in r:
            a = r["anchor"]
            print(f"anchor encoder at n = {r['n']:,}: old {a['old']:.2f} s, new {a['new']:.2f} s CPU, "
                  f"old/new {a['old'] / max(a['new'], 1e-9):.2f}x, maxima identical: {a['identical']} (the new PRF uses both "
                  f"halves of each AES block: same law, other bits); mean raw maximum per sketch old "
                  f"{np.mean(a['mean_old']):.4f} new {np.mean(a['mean_new']):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
