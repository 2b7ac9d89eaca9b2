"""Equal-mass bins for VertiMRF's encoder, cut from the local models' DP 1-way tables."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vertisynth.core.structuring import structure
from vertisynth.core.errors import ConfigError
from vertisynth.plugins.synthesizers.vertimrf.dimension import mass_bin_map
from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 120), st.integers(2, 16), st.integers(0, 2**31))
def test_mass_bins_are_exactly_b_contiguous_nonempty_bins(u, bins, seed):
    p = np.random.default_rng(seed).dirichlet(np.full(u, 0.3))
    bm = mass_bin_map(p, bins)
    assert len(bm) == u and (np.diff(bm) >= 0).all() and (np.diff(bm) <= 1).all() and bm[0] == 0
    assert bm.max() + 1 == min(u, bins)


def test_mass_bins_follow_the_mass():
    p = np.r_[np.full(10, 0.08), np.full(90, 0.2 / 90)]   # 80% of the mass in the first tenth of the values
    bm = mass_bin_map(p, 4)
    assert np.bincount(bm).tolist()[:3] == [3, 3, 3]          # equal width would give 25 values a bin
    assert np.bincount(bm, weights=p)[:3] == pytest.approx([0.24, 0.24, 0.24])


def test_mass_binning_needs_the_local_models():
    with pytest.raises(ConfigError, match="binning 'mass'"):
        structure({"binning": "mass", "recovery": "hisrec"}, VertiMRFConfig, "vertimrf")


def test_mass_binning_runs_and_keeps_the_cross_party_correlation():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("graphcom", Path(__file__).with_name("test_vertimrf_graphcom.py"))
    graphcom = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graphcom)
    corr, model = graphcom._hospital(20000, 2.0, binning="mass")
    assert ["age", "claims"] in model["cross_party_marginals"] and corr >= 0.3
