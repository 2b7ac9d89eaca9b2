"""Power and false alarms of MST's released-model audit (tests/plugins/synthesizers/test_aim_mst.py).

    PYTHONPATH=. python benchmarks/mst_audit_power.py [--seeds 20] [--divide 1 2 4] [--read record|joint]

For each audit seed (0..seeds-1, no reruns) runs the CI audit (`check_privacy_audit` on the test's subject: the
kit's first add/remove pair, 2,000 fresh samples a side, sequential) on MST with every noise divided by each
`--divide` factor (1: the honest MST; k: a true ε about k times the declared one), and prints the fraction of
seeds flagged and the CPU seconds per audit. `--read joint` audits the old output (the model's whole joint
table) instead of the record's cells, for comparison. The verdict at α = 1e-6 is the test's; no seed is rerun.
"""
from __future__ import annotations

import argparse
import statistics
import time

from tests.plugins.synthesizers import test_aim_mst as t
from vertisynth.testing.audit import PrivacyViolation
from vertisynth.testing.checks import check_privacy_audit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--divide", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--read", choices=["record", "joint"], default="record")
    args = ap.parse_args()
    for k in args.divide:
        cls = type(f"Divided{k:g}", (t.NoiseDividedMST,), {"divide": k}) if k != 1 else t.MSTSynthesizer
        flagged, cpu = [], []
        for seed in range(args.first, args.first + args.seeds):
            subject = t._mst_audit_subject(cls, seed)
            if args.read == "joint":
                import attrs
                subject = attrs.evolve(subject, measure=t._released_model)
            c0 = time.process_time()
            try:
                check_privacy_audit(subject)
                flagged.append(False)
            except PrivacyViolation:
                flagged.append(True)
            cpu.append(time.process_time() - c0)
            print(f"  divide {k:g} seed {seed}: {'FLAGGED' if flagged[-1] else 'passed'} ({cpu[-1]:.1f} CPU s)",
                  flush=True)
        print(f"divide {k:g} ({args.read}): flagged {sum(flagged)}/{len(flagged)}, CPU s per audit median "
              f"{statistics.median(cpu):.1f} (min {min(cpu):.1f}, max {max(cpu):.1f})", flush=True)


if __name__ == "__main__":
    main()
