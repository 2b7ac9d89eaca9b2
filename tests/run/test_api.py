"""The pandas-in, pandas-out entry point."""
import numpy as np
import pandas as pd
import pytest

import vertisynth
from vertisynth.core.errors import DataError


def _parties(n=400, seed=0):
    rng = np.random.default_rng(seed)
    a = pd.DataFrame({"diag": rng.choice(["flu", "cold", "none"], n), "age": rng.integers(18, 90, n)})
    b = pd.DataFrame({"claims": rng.integers(0, 5, n)})
    return {"hospital": a, "insurer": b}


def test_synthesize_dataframes_per_party():
    res = vertisynth.synthesize(_parties(), epsilon=1.0, seed=1)
    assert list(res.synthetic.columns) == ["diag", "age", "claims"]
    assert set(res.synthetic["diag"]) <= {"flu", "cold", "none"}
    assert res.synthetic["claims"].dtype.kind == "i"
    assert res.ledger.spent_epsilon() <= 1.0 + 1e-9
    assert {p["name"] for p in res.report["parties"]} == {"hospital", "insurer"}


def test_synthesize_with_public_schema_is_not_flagged():
    schema = {"diag": {"kind": "categorical", "categories": ["flu", "cold", "none"]},
              "age": {"kind": "numeric", "bounds": [0, 100], "bins": 10, "integer": True},
              "claims": {"kind": "categorical", "categories": [0, 1, 2, 3, 4]}}
    res = vertisynth.synthesize(_parties(), epsilon=1.0, schema=schema, n=50)
    assert len(res.synthetic) == 50
    assert res.report["dataset"]["schema_inferred_from_data"] is False


def test_synthesize_bad_inputs():
    p = _parties()
    with pytest.raises(DataError, match="not row-aligned"):
        vertisynth.synthesize({"a": p["hospital"], "b": p["insurer"].iloc[:10]}, epsilon=1.0)
    with pytest.raises(DataError, match="held by both"):
        vertisynth.synthesize({"a": p["hospital"], "b": p["hospital"][["age"]]}, epsilon=1.0)
    with pytest.raises(DataError, match="pass `parties`"):
        vertisynth.synthesize(p["hospital"], epsilon=1.0)
