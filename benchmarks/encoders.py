"""Benchmark of the encoders: DPFM speed on Adult, accuracy DPFM vs GRR, GRR vs pure-ldp.

    PYTHONPATH=. python benchmarks/encoders.py [--data-dir DIR] [--repeats 3]

Every time is the median of --repeats runs, and every speed figure is also printed as a ratio to an
anchor measured in the same run: the bare AES-ECB cost of the same number of PRF blocks (the work no
implementation can skip), so the numbers transfer between machines.

The pure-ldp comparison needs the `pure-ldp` package, which is NOT a project dependency; install it in
a throwaway environment that also sees the project's packages, e.g.
    python -m venv --system-site-packages /tmp/ldpvenv && /tmp/ldpvenv/bin/pip install pure-ldp statsmodels
    PYTHONPATH=. /tmp/ldpvenv/bin/python benchmarks/encoders.py
Without it that section says so and is skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.encoders.dpfm import DPFMConfig, DPFMEncoder
from vertisynth.plugins.encoders.grr import GRRConfig, GRREncoder, grr_perturb, keep_probability, unbias

SPLITS = {"nltcs": 8, "adult": 8}  # NLTCS 0-7 | 8-15, Adult 0-7 | 8-14


def load(data_dir: Path, name: str, bins: int | None = None) -> tuple[Dataset, VerticalPartition]:
    """A benchmark table split 0-7 | rest; `bins` merges each attribute's codes into that many
    equal-width bins (VertiMRF Sec. 6.1 encodes binned attributes, b = 4 in the reference)."""
    spec = json.loads((data_dir / name / f"{name}.json").read_text())
    dom = Domain(list(spec), [spec[k]["domain"] for k in spec])
    frame = pd.read_csv(data_dir / name / f"{name}.csv")
    codes = frame[list(dom.attributes)].to_numpy(np.int64)
    if bins:
        sizes = np.array(dom.shape)
        codes = np.where(sizes > bins, codes * bins // sizes, codes)
        dom = Domain(dom.attributes, np.minimum(sizes, bins))
    data = Dataset(codes, dom)
    k = SPLITS[name]
    part = VerticalPartition.from_lists([dom.attributes[:k], dom.attributes[k:]], ["left", "right"])
    return data, part


def plan(encoder, data, part, epsilon, delta=1e-5):
    ctx = PlanContext(data.domain, part, Budget(epsilon, delta), n_public=data.n)
    ledger = PrivacyLedger(ctx.budget)
    ledger.plan(encoder.plan(ctx))
    ledger.check_plan()
    return ledger


def encode_all(encoder, data, part, ledger, rng):
    views = part.views(data)
    return [encoder.encode(p, views[p], ledger, rng) for p in part.names]


def cross_pairs(part):
    left, right = part.parties
    return [(a, b) for a in left.attributes for b in right.attributes]


def median_time(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def aes_anchor(blocks: int) -> float:
    """Seconds to AES-256-ECB `blocks` 16-byte blocks, in pieces of the size the encoder uses."""
    enc = Cipher(algorithms.AES(b"\0" * 32), modes.ECB()).encryptor()
    piece = memoryview(np.zeros(64 * 45_222 * 2, dtype="<u8")).cast("B")
    out = bytearray(len(piece) + 15)
    per_piece = len(piece) // 16
    t0 = time.perf_counter()
    for _ in range(max(1, blocks // per_piece)):
        enc.update_into(piece, out)
    return time.perf_counter() - t0


# -- 1. DPFM speed on Adult -------------------------------------------------------------------------
def speed(data_dir: Path, repeats: int) -> None:
    data, part = load(data_dir, "adult")
    t = 2000
    print(f"\n== DPFM speed: Adult n={data.n}, parties {[len(p.attributes) for p in part]}, t={t}, 2 cores ==")

    def run_encode():
        enc = DPFMEncoder(DPFMConfig(t=t, calibration="paper", postprocess="clip"))
        ledger = plan(enc, data, part, 0.8)
        return enc, encode_all(enc, data, part, ledger, np.random.default_rng(1))

    enc_s, (enc, msgs) = median_time(run_encode, repeats)
    pairs = cross_pairs(part)
    est_s, _ = median_time(lambda: [enc.estimate_with_variance(msgs, list(p)) for p in pairs], repeats)
    hashed = len(part) * data.n * t
    anchor = statistics.median(aes_anchor(hashed) for _ in range(repeats))
    tracemalloc.start()
    run_encode()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"encode both parties     : {enc_s:7.2f} s   (target < 30 s: {enc_s / 30:.2f} of it; paper: 23.1 min per party)")
    print(f"  hashed (record, rep)  : {hashed / enc_s / 1e6:7.2f} M pairs/s  ({hashed / 1e6:.1f} M pairs)")
    print(f"  anchor: bare AES-ECB of the same blocks {anchor:.2f} s -> encode/anchor ratio {enc_s / anchor:.1f}")
    print(f"estimate {len(pairs)} cross 2-ways : {est_s:7.2f} s   (target < 15 s: {est_s / 15:.2f} of it; ratio to anchor {est_s / anchor:.2f})")
    print(f"peak traced memory (one encode of both parties): {peak / 2**20:.0f} MiB; "
          f"process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


# -- 2. Accuracy: DPFM vs GRR -------------------------------------------------------------------------
def tvd(est: np.ndarray, truth: np.ndarray) -> float:
    e = np.clip(est, 0, None)
    e = e / e.sum() if e.sum() > 0 else np.full(e.shape, 1 / e.size)
    return 0.5 * float(np.abs(e - truth / truth.sum()).sum())


def accuracy(data_dir: Path, epsilons, seeds: int) -> None:
    print(f"\n== Accuracy: average TVD of all cross-party 2-way marginals (encoder gets the whole ε, δ=1e-5; "
          f"mean of {seeds} seed(s)) ==")
    print(f"{'data':8} {'ε':>4} {'DPFM paper':>11} {'DPFM tight':>11} {'tight+proj':>11} {'GRR':>8} "
          f"{'GRR/DPFM':>9} {'indep*':>8}")
    for name, bins in (("nltcs", None), ("adult", None), ("adult", 4)):
        data, part = load(data_dir, name, bins)
        label_ = name + (f"-b{bins}" if bins else "")
        pairs = cross_pairs(part)
        truths = {p: data.counts(list(p)).values for p in pairs}
        indep = np.mean([tvd(np.outer(t.sum(1), t.sum(0)), t) for t in truths.values()])
        for eps in epsilons:
            row = {}
            # (label, encoder config, {column: estimating encoder}): one encoding serves several estimators
            setups = (
                (DPFMEncoder, DPFMConfig(t=2000, calibration="paper", postprocess="clip"), {"paper": DPFMConfig(t=2000, calibration="paper", postprocess="clip")}),
                (DPFMEncoder, DPFMConfig(calibration="tight"),
                 {"tight": DPFMConfig(calibration="tight"), "proj": DPFMConfig(calibration="tight", postprocess="project")}),
                (GRREncoder, GRRConfig(postprocess="project"), {"grr": GRRConfig(postprocess="project")}),
            )
            for cls, cfg, estimators in setups:
                scores = {k: [] for k in estimators}
                for s in range(seeds):
                    enc = cls(cfg)
                    msgs = encode_all(enc, data, part, plan(enc, data, part, eps), np.random.default_rng(100 + s))
                    for k, ecfg in estimators.items():
                        est = cls(ecfg)
                        scores[k].append(np.mean([tvd(est.estimate(msgs, list(p)).values, truths[p]) for p in pairs]))
                row.update({k: float(np.mean(v)) for k, v in scores.items()})
            best = min(row["paper"], row["tight"], row["proj"])
            print(f"{label_:8} {eps:4.1f} {row['paper']:11.4f} {row['tight']:11.4f} {row['proj']:11.4f} {row['grr']:8.4f} "
                  f"{row['grr'] / best:9.2f} {indep:8.4f}")
    print("DPFM paper/tight: Alg. 3's ε' / the largest ε' the budget allows; Alg. 4 clipping; tight+proj: "
          "projection onto tables >= 0 summing to n̂. GRR: projected likewise; GRR/DPFM uses the best DPFM column")
    print("* indep: product of the TRUE 1-way marginals (no privacy), the 'ignore all correlation' line")
    print("  adult-b4: every attribute binned to <= 4 equal-width code bins, TVD against the binned truth")


# -- 3. GRR vs pure-ldp ---------------------------------------------------------------------------------
def versus_pure_ldp(data_dir: Path, repeats: int) -> None:
    print("\n== GRR vs pure-ldp (DEClient/DEServer = GRR), Adult, each attribute alone, ε₀ = 1 ==")
    try:
        from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
    except ImportError as exc:
        print(f"pure-ldp is NOT available ({exc}): section skipped (see the module docstring for the /tmp venv recipe; "
              "pure-ldp also imports statsmodels)")
        return
    data, _ = load(data_dir, "adult")
    eps, n = 1.0, data.n
    ids = np.arange(n)
    ours_t, theirs_t, ours_err, theirs_err = [], [], [], []
    for attr in data.domain.attributes:
        u = data.domain.size(attr)
        col = data.column(attr)
        truth = np.bincount(col, minlength=u)
        pq = [keep_probability(eps, u)]
        for r in range(repeats):
            key = np.random.default_rng(r).bytes(32)
            t0 = time.perf_counter()
            out = grr_perturb(col, u, eps, key, 0, ids)
            est = unbias(np.bincount(out, minlength=u), pq)
            ours_t.append(time.perf_counter() - t0)
            ours_err.append(np.abs(est - truth).mean())
            random.seed(r)
            client = DEClient(eps, u, index_mapper=lambda x: x)
            server = DEServer(eps, u, index_mapper=lambda x: x)
            t0 = time.perf_counter()
            for v in col.tolist():
                server.aggregate(client.privatise(v))
            theirs = np.array([server.estimate(v, suppress_warnings=True) for v in range(u)])
            theirs_t.append(time.perf_counter() - t0)
            theirs_err.append(np.abs(theirs - truth).mean())
    per = len(data.domain) * repeats
    o, t_ = statistics.median(ours_t), statistics.median(theirs_t)
    print(f"encode+estimate one attribute (median of {per}): vertisynth {o * 1e3:8.2f} ms   pure-ldp {t_ * 1e3:8.1f} ms   "
          f"speed-up {t_ / o:6.1f}x   ({n / o / 1e6:.1f} M vs {n / t_ / 1e6:.3f} M records/s)")
    oe, te = float(np.mean(ours_err)), float(np.mean(theirs_err))
    se = lambda v: float(np.std(v, ddof=1) / np.sqrt(len(v)))
    print(f"mean |count error| per value           : vertisynth {oe:8.2f} ± {se(ours_err):.1f}  pure-ldp {te:8.2f} ± {se(theirs_err):.1f}  "
          f"ratio {oe / te:5.2f} (same mechanism and estimator: 1 expected; ± = 1 standard error over {per} runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA", str(Path(__file__).resolve().parents[1].parent / "shared" / "data")))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=1, help="seeds averaged per accuracy cell")
    ap.add_argument("--only", choices=["speed", "accuracy", "ldp"], default=None)
    args = ap.parse_args()
    data_dir = Path(args.data_dir)
    if not (data_dir / "adult").is_dir():
        sys.exit(f"benchmark data not found under {data_dir} (set --data-dir or VERTISYNTH_DATA)")
    if args.only in (None, "speed"):
        speed(data_dir, args.repeats)
    if args.only in (None, "accuracy"):
        accuracy(data_dir, [0.4, 0.8, 1.6], args.seeds)
    if args.only in (None, "ldp"):
        versus_pure_ldp(data_dir, args.repeats)


if __name__ == "__main__":
    main()
