"""Encoders on NLTCS (shared benchmark data): 5-way marginals across both parties."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from encoder_helpers import planned
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.plugins.encoders.dpfm import DPFMConfig, DPFMEncoder
from vertisynth.plugins.encoders.grr import GRREncoder

pytestmark = pytest.mark.shared_data


def nltcs(data_dir):
    spec = json.loads((data_dir / "nltcs" / "nltcs.json").read_text())
    dom = Domain(list(spec), [spec[k]["domain"] for k in spec])
    codes = pd.read_csv(data_dir / "nltcs" / "nltcs.csv")[list(dom.attributes)].to_numpy(np.int64)
    data = Dataset(codes, dom)
    return data, VerticalPartition.from_lists([dom.attributes[:8], dom.attributes[8:]], ["left", "right"])


def tvd(est, truth):
    e = np.clip(est, 0, None)
    return 0.5 * np.abs(e / e.sum() - truth / truth.sum()).sum()


def test_five_way_cross_party_estimates(data_dir):
    data, part = nltcs(data_dir)
    query = ["0", "3", "8", "11", "15"]
    truth = data.counts(query).values
    views = part.views(data)
    dpfm = DPFMEncoder(DPFMConfig(t=500, calibration="tight", postprocess="none"))
    ledger = planned(dpfm, data, part, 1.6, n_public=data.n)
    rng = np.random.default_rng(0)
    msgs = [dpfm.encode(p, views[p], ledger, rng) for p in part.names]
    est = dpfm.estimate_with_variance(msgs, query)
    assert est.counts.values.shape == (2,) * 5 and np.all(np.isfinite(est.variance.values))
    assert np.abs((est.counts.values - truth) / np.sqrt(est.variance.values)).max() < 5
    # a cross-party 2-way is far better than ignoring the correlation of its two attributes
    pair = data.counts(["2", "9"]).values
    indep = np.outer(pair.sum(1), pair.sum(0)) / data.n
    assert tvd(dpfm.estimate(msgs, ["2", "9"]).values, pair) < 0.5 * tvd(indep, pair)
    grr = GRREncoder()
    ledger = planned(grr, data, part, 1.6)
    msgs = [grr.encode(p, views[p], ledger, rng) for p in part.names]
    g = grr.estimate_with_variance(msgs, query)
    z = (g.counts.values - truth) / np.sqrt(g.variance.values)
    assert g.counts.total() == pytest.approx(data.n) and np.abs(z).max() < 5
