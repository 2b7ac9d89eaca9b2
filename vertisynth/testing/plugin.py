"""Opt-in pytest plugin of the vertisynth conformance kit.

Enable it in a conftest.py at your test root:

    pytest_plugins = ["vertisynth.testing.plugin"]

It adds
  * the option `--vertisynth-audit=smoke|standard|thorough` (about 2e4 / 1e5 / 1e6 fresh samples per
    side per neighbouring pair; default smoke, or $VERTISYNTH_AUDIT), used by every audit that is not
    given an explicit level;
  * fixtures: `audit_level` (the chosen level), `privacy_audit` (audit() with that level and a fixed
    seed), `vs_rng` (a seeded numpy Generator), `test_domain`, `test_dataset` (the check test bed);
  * a Hypothesis profile "vertisynth-ci" (derandomised, no deadline, 200 examples, failure blobs
    printed): select it with `--hypothesis-profile=vertisynth-ci`;
  * the markers `audit_cost(cpu_seconds)` (`run_cost(seconds)` on a test that is not an audit) and the
    option `--vertisynth-longest-first`: the selected tests
    run in order of their marked cost, longest first, dealt to the pytest-xdist workers (whose `--dist
    worksteal` hands out the collection in contiguous blocks) so that the blocks' marked costs stay even:
    a long audit never starts last and the workers end together.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from .audit import AUDIT_LEVELS, audit, set_default_level

# .checks (the registry, scipy.stats: ~0.8 CPU s) is imported by the two fixtures that use it, not here: a
# pytest-xdist controller loads this plugin but runs no test (issue 33)

CI_PROFILE = "vertisynth-ci"
settings.register_profile(
    CI_PROFILE,
    derandomize=True,  # the same examples on every CI run: a red build is reproducible
    deadline=None,  # shared CI machines have noisy timings
    max_examples=200,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vertisynth", "vertisynth DP conformance kit")
    group.addoption(
        "--vertisynth-audit",
        action="store",
        default=os.environ.get("VERTISYNTH_AUDIT", "smoke"),
        choices=sorted(AUDIT_LEVELS),
        help="privacy audit level: smoke (~2e4), standard (~1e5) or thorough (~1e6) samples per pair",
    )


    group.addoption(
        "--vertisynth-longest-first",
        action="store_true",
        default=False,
        help="run tests marked audit_cost(cpu_seconds) longest first, dealt in turn to the xdist workers",
    )


def pytest_configure(config: pytest.Config) -> None:
    set_default_level(config.getoption("--vertisynth-audit"))
    config.addinivalue_line("markers", "audit_cost(cpu_seconds): a test's CPU seconds, for --vertisynth-longest-first")
    # not audit_cost: `-k "audit"` (CI's audit step) matches marker names too, so a non-audit carrying it would
    # run among the audits
    config.addinivalue_line("markers", "run_cost(seconds): a test's seconds (not an audit), for --vertisynth-longest-first")


def _cost(item: pytest.Item) -> float:
    mark = item.get_closest_marker("audit_cost") or item.get_closest_marker("run_cost")
    return float(mark.args[0]) if mark and mark.args else 0.0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--vertisynth-longest-first"):
        return
    ranked = sorted(items, key=_cost, reverse=True)   # stable: unmarked tests keep their order, last
    # an xdist worker collects on its own: it knows the worker count from workerinput, the controller from -n
    workers = getattr(config, "workerinput", {}).get("workercount") or config.getoption("numprocesses", None) or 1
    workers = workers if isinstance(workers, int) and workers > 1 else 1
    items[:] = [t for block in _blocks(ranked, workers) for t in block]


def _blocks(ranked: list[pytest.Item], workers: int) -> list[list[pytest.Item]]:
    """The ranked tests dealt into the contiguous blocks xdist hands the workers at the start (`--dist worksteal`:
    block w holds len(rest) // (workers - w) of the tests not yet handed out, so with an odd count the *last*
    block is the larger), each test to the block with the least marked cost so far that has room: every block
    longest first, the longest tests spread over the workers, unmarked tests last."""
    sizes, rest = [], len(ranked)
    for w in range(workers):
        sizes.append(rest // (workers - w))
        rest -= sizes[-1]
    blocks: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for item in ranked:
        w = min((w for w in range(workers) if len(blocks[w]) < sizes[w]), key=lambda w: (load[w], w))
        blocks[w].append(item)
        load[w] += _cost(item)
    return blocks


def pytest_report_header(config: pytest.Config) -> str:
    level = config.getoption("--vertisynth-audit")
    return f"vertisynth privacy audit level: {level} ({AUDIT_LEVELS[level]} samples per side per pair)"


@pytest.fixture
def audit_level(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--vertisynth-audit")


@pytest.fixture
def privacy_audit(audit_level: str):
    """`privacy_audit(mechanism, pairs, epsilon, delta=0.0, **kw)` at the session's audit level."""
    return functools.partial(audit, level=audit_level)


@pytest.fixture
def vs_rng() -> np.random.Generator:
    return np.random.default_rng(20261122)


@pytest.fixture
def test_domain():
    from .checks import DEFAULT_DOMAIN

    return DEFAULT_DOMAIN


@pytest.fixture
def test_dataset(test_domain):
    from .checks import correlated_dataset

    return correlated_dataset(test_domain, 200, seed=0)
