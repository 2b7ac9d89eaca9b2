"""The opt-in pytest plugin: option, fixtures and Hypothesis profile (loaded by tests/conftest.py)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from hypothesis import settings

from vertisynth.testing.audit import default_level
from vertisynth.testing.plugin import CI_PROFILE
from vertisynth.testing.reference import ReferenceGRR

REPO = Path(__file__).resolve().parents[2]


def test_fixtures(audit_level, privacy_audit, vs_rng, test_domain, test_dataset):
    assert audit_level == default_level()
    report = privacy_audit(ReferenceGRR(2, 1.0), [(0, 1)], 1.0, n_samples=2000, seed=1)
    assert report.level == audit_level and report.passed
    assert isinstance(vs_rng, np.random.Generator)
    assert test_dataset.domain == test_domain and test_dataset.n == 200


def test_ci_profile_is_registered_and_derandomised():
    profile = settings.get_profile(CI_PROFILE)
    assert profile.derandomize and profile.deadline is None


def test_option_sets_the_level_for_a_third_party_suite(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["vertisynth.testing.plugin"]\n')
    (tmp_path / "test_level.py").write_text(textwrap.dedent("""
        import sys

        from vertisynth.testing.audit import default_level

        def test_level(audit_level):
            assert audit_level == default_level() == "standard"
            # the plugin leaves the checks (the registry, scipy.stats) to the fixtures that use them: an xdist
            # controller, which runs no test, loads it too (issue 33)
            assert "vertisynth.testing.checks" not in sys.modules

        def test_dataset_fixture(test_dataset):
            assert test_dataset.n == 200
    """))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("VERTISYNTH_AUDIT", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          "--vertisynth-audit=standard", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "vertisynth privacy audit level: standard" in run.stdout and "2 passed" in run.stdout  # the header


def test_option_rejects_unknown_levels(pytestconfig):
    option = next(o for o in pytestconfig._parser._anonymous.options + [
        o for g in pytestconfig._parser._groups for o in g.options] if "--vertisynth-audit" in o.names())
    assert sorted(option.attrs()["choices"]) == ["smoke", "standard", "thorough"]
