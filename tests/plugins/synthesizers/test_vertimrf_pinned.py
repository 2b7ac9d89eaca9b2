"""A guard on VertiMRF's results: under the test secret (seeded simulation noise, simulated crypto) every encoder
path must reproduce, bit for bit, the synthetic table and the spent ledger recorded in
fixtures/vertimrf_pinned.json (computed by this very code on the commit named in that file's "_comment").

A refactor that changes a noise draw, the order of measurements, a charge or a float operation of the fit fails
here. Bit-identity holds for one numpy on one kind of CPU (numpy picks SIMD kernels for exp/log and sums by CPU, and
they differ in the last bit), so the fixture records that environment and the test skips, saying so, elsewhere. A change that is meant to change results re-records the fixture (`python
tests/plugins/synthesizers/test_vertimrf_pinned.py --record`) and says why in its commit message.
"""
from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.datasets.zoo import ZOO_PRESETS, ZooNetwork
from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig, VertiMRFSynthesizer

FIXTURE = Path(__file__).parent / "fixtures" / "vertimrf_pinned.json"
FAST = {"local_params": {"iters": 30, "refine_iters": 8}, "iters": 60, "round_iters": 30, "rounds": 2,
        "per_round": 3}
ENCODERS = {"dpfm": {"t": 200}, "grr": {}, "he": {"crypto": "simulated", "cliques": 4, "selection_pairs": 40}}


def nltcs_like(n: int = 1500, seed: int = 0) -> tuple[Dataset, list[list[str]]]:
    """16 binary attributes (NLTCS's shape: disability indicators), chained dependences, split 8 + 8."""
    rng = np.random.default_rng(seed)
    cols = [rng.random(n) < 0.3]
    for j in range(1, 16):   # each indicator follows the previous one (and, every third, the one before that)
        p = 0.15 + 0.6 * cols[-1] + (0.15 * cols[-2] if j % 3 == 0 else 0.0)
        cols.append(rng.random(n) < np.clip(p, 0, 0.95))
    names = [f"x{j:02d}" for j in range(16)]
    data = Dataset(np.column_stack(cols).astype(np.int64), Domain(names, [2] * 16))
    return data, [names[0::2], names[1::2]]   # interleaved: most chain edges cross the split


def zoo(preset: str, n: int, seed: int = 0) -> tuple[Dataset, list[list[str]]]:
    import zlib
    net = ZooNetwork(ZOO_PRESETS[preset], seed, zlib.crc32(preset.encode()))
    codes = net.sample_codes(n, np.random.default_rng(seed + 1))
    data = Dataset(codes, net.domain)
    k = ZOO_PRESETS[preset].parties
    names = list(net.domain.attributes)
    return data, [names[i::k] for i in range(k)]


TABLES = {"zoo-small-domains": lambda: zoo("small-domains", 1500),   # 3 parties, domains 2-4
          "zoo-mixed": lambda: zoo("mixed", 1500),                   # 3 parties, domains up to 46: binned
          "nltcs-like": lambda: nltcs_like()}                        # 2 parties, 16 binary attributes
CASES = [(t, e) for t in TABLES for e in ENCODERS]


def run_case(table: str, encoder: str) -> dict:
    data, parts = TABLES[table]()
    part = VerticalPartition.from_lists(parts)
    budget = Budget(2.0, 1e-5)
    syn = VertiMRFSynthesizer(VertiMRFConfig(**FAST, encoder=encoder, encoder_params=ENCODERS[encoder]))
    ledger = PrivacyLedger(budget)   # noise = "simulation": seeded, what the test secret reproduces
    ledger.plan(syn.plan(PlanContext(data.domain, part, budget)))
    syn.fit(VerticalData(part, part.views(data)), ledger, np.random.default_rng(7))
    out = syn.sample(None, np.random.default_rng(8))
    spent = [{**c.to_dict(), **{k: repr(v) for k, v in c.to_dict().items() if isinstance(v, float)}}
             for c in ledger.spent]
    return {"synthetic_sha256": hashlib.sha256(np.ascontiguousarray(out.codes, np.int64).tobytes()).hexdigest(),
            "rows": int(out.n),
            "ledger_spent_sha256": hashlib.sha256(json.dumps(spent, sort_keys=True).encode()).hexdigest(),
            "charges_spent": len(spent),
            "cross_party_marginals": [list(p) for p in syn._chosen]}


def environment() -> dict:
    """What the last bit of the fit's floats depends on besides the code: numpy's version and its SIMD level."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as feats
    except ImportError:   # numpy < 2
        feats = {}
    levels = ("X86_V2", "X86_V3", "X86_V4", "AVX512_SKX", "AVX512_ICL", "AVX512_SPR", "ASIMD", "SVE")
    return {"numpy": np.__version__, "machine": platform.machine(), "simd": [k for k in levels if feats.get(k)]}


@pytest.mark.parametrize("table,encoder", CASES)
def test_vertimrf_results_are_pinned(table, encoder):
    fixture = json.loads(FIXTURE.read_text())
    if fixture["environment"] != environment():
        pytest.skip(f"pinned on {fixture['environment']}, this is {environment()}: floats may differ in the last bit")
    want = fixture["cases"][f"{table}/{encoder}"]
    got = run_case(table, encoder)
    assert got == want, f"{table}/{encoder}: VertiMRF's results changed under the test secret"


def record() -> None:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    cases = {f"{t}/{e}": run_case(t, e) for t, e in CASES}
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps({"_comment": f"computed by test_vertimrf_pinned.py --record on commit {commit} "
                                               "(simulation noise, simulated crypto)",
                                   "environment": environment(), "cases": cases}, indent=1) + "\n")


if __name__ == "__main__" and "--record" in sys.argv:
    record()
