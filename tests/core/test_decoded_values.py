"""Decoded numbers stay inside their declared bounds, which are inclusive at both ends (issue 32)."""
import numpy as np
import pandas as pd

from vertisynth.core.encoding import TableSchema
from vertisynth.core.dataset import Dataset


def _decode_every_code(schema, frame, draws=200):
    codec = schema.fit(frame, None, np.random.default_rng(0), release=False)
    n = draws * max(codec.domain.shape)
    codes = np.stack([np.arange(n) % k for k in codec.domain.shape], axis=1)   # every bin, many times
    data = Dataset(codes.astype(np.int64), codec.domain)
    return codec, codec.decode(data, np.random.default_rng(1))


def test_an_inferred_integer_range_is_the_data_min_and_max_and_never_left():
    ages = pd.DataFrame({"age": np.random.default_rng(0).integers(18, 91, 2000)})   # 18..90
    schema = TableSchema.infer(ages, warn=False)
    assert schema.columns[0].bounds == (18, 90)   # not one past the data (which let 91 appear)
    codec, out = _decode_every_code(schema, ages)
    assert out["age"].between(18, 90).all() and out["age"].max() == 90 and out["age"].min() == 18
    assert codec.columns[0].labels[-1].endswith("90]")   # the last bin is closed, as the bounds are


def test_declared_bounds_are_inclusive_and_decoded_values_stay_inside():
    frame = pd.DataFrame({"age": [0, 91, 45], "x": [0.0, 1.0, 0.5]})
    schema = TableSchema.from_config({"age": {"kind": "numeric", "bounds": [0, 91], "bins": 7, "integer": True},
                                      "x": {"kind": "numeric", "bounds": [0, 1], "bins": 3}})
    _, out = _decode_every_code(schema, frame)   # both ends encode (inclusive) ...
    assert out["age"].between(0, 91).all() and out["age"].max() == 91   # ... and decode inside them
    assert out["x"].between(0, 1).all()


def _most_decimals(values):
    return max(len(f"{v!r}".split(".")[1]) if "." in f"{v!r}" else 0 for v in values)


def test_decoded_numbers_carry_the_inputs_decimals():
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"income": rng.normal(50_000, 1_000, 3000).round(2), "rate": rng.uniform(0, 1, 3000).round(3)})
    schema = TableSchema.infer(frame, warn=False)
    assert [c.decimals for c in schema.columns] == [2, 3]   # read off the data, as the inferred bounds are
    _, out = _decode_every_code(schema, frame)
    assert _most_decimals(out["income"]) == 2 and _most_decimals(out["rate"]) == 3   # kept, at most and used
    lo, hi = schema.columns[0].bounds
    assert out["income"].between(lo, hi).all()
    declared = TableSchema.from_config({"p": {"kind": "numeric", "bounds": [0, 0.05], "bins": 4, "decimals": 2}})
    _, out = _decode_every_code(declared, pd.DataFrame({"p": [0.0, 0.05]}))
    assert set(out["p"]) <= {0.0, 0.01, 0.02, 0.03, 0.04, 0.05} and out["p"].max() == 0.05


def test_decimals_is_checked():
    import pytest

    from vertisynth.core.errors import ConfigError
    for bad in ({"kind": "numeric", "bounds": [0, 1], "decimals": -1},
                {"kind": "categorical", "categories": ["a"], "decimals": 2}):
        with pytest.raises(ConfigError, match="decimals"):
            TableSchema.from_config({"c": bad})


def test_dates_outside_pandas_range_name_the_supported_range():
    import pytest

    from vertisynth.core.errors import ConfigError, DomainError
    with pytest.raises(ConfigError, match=r"'1600-01-01' is outside the supported range.*1677-09-22 to 2262-04-11"):
        TableSchema.from_config({"d": {"kind": "datetime", "bounds": ["1600-01-01", "2000-01-01"]}})
    schema = TableSchema.from_config({"d": {"kind": "datetime", "bounds": ["1700-01-01", "2000-01-01"], "clip": True}})
    codec = schema.fit(pd.DataFrame({"d": ["1800-01-01"]}), None, np.random.default_rng(0))
    with pytest.raises(DomainError, match="outside the supported range.*1677-09-22 to 2262-04-11.*numeric"):
        codec.encode(pd.DataFrame({"d": ["1650-01-01", "1800-01-01"]}))
