"""benchmarks/vertical_twins.py is the one runner of the twins' grid: he under both trusts and the release-once
measures (dpfm, grr) with the same CSV, resume and report. Bookkeeping only (no synthesizer runs here)."""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vt():
    spec = importlib.util.spec_from_file_location("vertical_twins", REPO / "benchmarks" / "vertical_twins.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write(path: Path, fields: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in fields})


def _row(method: str, trust: str, twin: float, measure: str | None = None, central: float | None = 0.1) -> dict:
    r = {"dataset": "zoo:weak", "epsilon": "0.4", "seed": "0", "method": method, "trust": trust, "twin": twin,
         "note": ""}
    if central is not None and method not in ("vertimrf", "independent"):
        r.update(central=central, ratio=twin / central, cpu_central=1.0, cpu_party="0.5/0.5", cpu_server=0.2)
    if measure is not None:
        r["measure"] = measure
    return r


def test_a_csv_from_before_the_measure_column_holds_he_rows_and_refuses_release_rows(vt, tmp_path):
    old = tmp_path / "old.csv"
    _write(old, [f for f in vt.FIELDS if f != "measure"], [_row("mst", "none", 0.11), _row("independent", "-", 0.3)])
    keys = [vt.key(r) for r in vt.read_csv(str(old))]
    assert keys[0][5] == "he" and keys[1][5] == "-"
    assert "measure" not in vt.csv_fields(str(old), "he")   # he rows appended in the file's own columns
    with pytest.raises(SystemExit, match="no 'measure' column"):
        vt.csv_fields(str(old), "dpfm")
    assert vt.csv_fields(str(tmp_path / "new.csv"), "grr") == vt.FIELDS


def test_release_rows_are_reported_apart_from_he_rows_against_vertimrf_and_independent(vt, tmp_path, capsys):
    path = tmp_path / "grid.csv"
    _write(path, vt.FIELDS, [
        _row("mst", "none", 0.105, "he"),             # the he grid: 1.05
        _row("mst", "none", 0.30, "grr"),             # grr twin: 3.0 x central, below VertiMRF-GRR and independent
        _row("vertimrf", "none", 0.35, "grr"),
        _row("vertimrf", "none", 0.02, "he"),
        _row("independent", "-", 0.38, "-"),
        _row("aim", "server", 0.5, "dpfm"),           # dpfm twin above independent: not met
        _row("vertimrf", "server", 0.6, "dpfm"),
    ])
    assert vt.report(str(path), markdown=True) == 0
    out = capsys.readouterr().out
    grr = next(line for line in out.splitlines() if line.startswith("mst") and "grr" in line)
    assert "median 3.00" in grr and "VertiMRF-grr median 0.86" in grr and "-> met" in grr
    dpfm = next(line for line in out.splitlines() if line.startswith("aim") and "dpfm" in line)
    assert "NOT met" in dpfm
    he = next(line for line in out.splitlines() if line.startswith("mst") and "trust none  :" in line)
    assert "median 1.05" in he and "over   1 cells" in he   # the grr row is not in the he summary
    assert "| zoo:weak | 0.4 | 0 | 0.1000 | 0.1050 | 1.05 |" in out
