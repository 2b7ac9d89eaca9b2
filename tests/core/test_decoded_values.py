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
