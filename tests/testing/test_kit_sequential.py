"""The audit kit's sequential phase 2 (`audit(sequential=True)`) and its row-unique shortcut: a loose claim stops
early, an over-claim is still flagged on the full sample, the claim-tight case runs to the end, and the fast
`_unique_rows` returns exactly numpy's rows and inverse (docs/testing.md "Sequential audits")."""
from types import SimpleNamespace

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.privacy import ZCDP
from vertisynth.testing.audit import NeighbourPair, _unique_rows, audit, claimed_profile
from vertisynth.testing.reference import ReferenceGaussianHistogram, ReferenceLaplaceCount

DOM = Domain(("a",), (3,))
EMPTY = Dataset(np.zeros((0, 1), dtype=np.int64), DOM)
ONE = Dataset(np.zeros((1, 1), dtype=np.int64), DOM)
COUNT_PAIR = [NeighbourPair(EMPTY, ONE, "add_remove", "empty vs one record")]


def test_a_loose_claim_stops_at_a_look_and_still_passes():
    mech = ReferenceLaplaceCount(0.5)   # truly 0.5-DP, claimed 2: cleared long before 20,000 samples
    full = audit(mech, COUNT_PAIR, 2.0, n_samples=20_000, seed=1)
    seq = audit(mech, COUNT_PAIR, 2.0, n_samples=20_000, seed=1, sequential=True)
    assert full.passed and seq.passed and seq.sequential and not full.sequential
    (r,) = seq.results
    assert r.n < 20_000 and r.n_planned == 20_000 and "cleared after" in r.describe()
    assert full.results[0].n == 20_000 and full.results[0].n_planned is None


@pytest.mark.parametrize("true_eps, claimed", [(2.0, 1.0), (1.25, 1.0)])
def test_an_overclaim_is_flagged_on_the_full_sample(true_eps, claimed):
    """The over-claimed count (2x, 1.25x the claimed ε) is never cleared at a look: it runs to n and is flagged,
    as the full-size audit flags it."""
    mech = ReferenceLaplaceCount(true_eps)
    full = audit(mech, COUNT_PAIR, claimed, n_samples=100_000, seed=3)
    seq = audit(mech, COUNT_PAIR, claimed, n_samples=100_000, seed=3, sequential=True)
    assert not full.passed and not seq.passed
    assert all(r.n == 100_000 and r.n_planned is None for r in seq.results)


def test_a_tight_claim_runs_to_the_end():
    """A Laplace count claimed at its own ε: the best event's ratio is e^ε, never cleared before n."""
    seq = audit(ReferenceLaplaceCount(1.0), COUNT_PAIR, 1.0, n_samples=20_000, seed=2, sequential=True)
    assert seq.passed and seq.results[0].n == 20_000


def test_every_claim_of_a_curve_must_be_cleared():
    """zCDP claims at several δ: a pair stops only once all of them are cleared; an over-claimed ρ (4x: σ halved)
    is flagged at full size."""
    pair = [NeighbourPair(EMPTY, ONE, "add_remove")]
    claims = claimed_profile([ZCDP(0.5)], 1e-5)
    ok = audit(ReferenceGaussianHistogram(0.05), pair, claims=claims, n_samples=20_000, seed=4, sequential=True)
    assert ok.passed and all(r.n == ok.results[0].n < 20_000 for r in ok.results)
    bad = audit(ReferenceGaussianHistogram(0.5, overclaim=4.0), pair, claims=claims, n_samples=20_000, seed=4,
                sequential=True)
    assert not bad.passed and all(r.n == 20_000 for r in bad.results)


@pytest.mark.parametrize("rows, cols, lo, hi, dtype", [(5000, 4, 0, 3, np.int64), (5000, 1, -40, 40, np.int64),
                                                       (3000, 6, 0, 2, np.uint8), (2000, 3, -2**40, 2**40, np.int64),
                                                       (0, 3, 0, 2, np.int64)])
def test_unique_rows_is_numpys_row_unique(rows, cols, lo, hi, dtype):
    x = np.random.default_rng(rows + cols).integers(lo, hi, (rows, cols)).astype(dtype)
    uniq, inv = np.unique(x, axis=0, return_inverse=True)
    got_u, got_inv = _unique_rows(x)
    assert np.array_equal(got_u, uniq) and got_u.dtype == uniq.dtype
    assert np.array_equal(got_inv, inv.ravel())


class _Item:
    def __init__(self, cost, mark="audit_cost"):
        self.cost, self.mark = cost, mark

    def get_closest_marker(self, name):
        return getattr(pytest.mark, name)(self.cost).mark if name == self.mark and self.cost is not None else None


class _Config:
    def __init__(self, workerinput=None, numprocesses=None):
        if workerinput is not None:
            self.workerinput = workerinput
        self.options = {"--vertisynth-longest-first": True, "numprocesses": numprocesses}

    def getoption(self, name, default=None):
        return self.options.get(name, default)


@pytest.mark.parametrize("config", [_Config({"workercount": 2}), _Config(numprocesses=2)], ids=["worker", "controller"])
def test_longest_first_deals_the_ranked_tests_into_the_workers_blocks(config):
    """xdist hands worker w the w-th contiguous block of the collection (with an odd count the last block is the
    larger: test below): each block is longest first, each test goes to the block with the least marked cost that
    has room, unmarked tests come last. A worker knows the worker count from `workerinput` only (-n is not passed
    to it)."""
    from vertisynth.testing.plugin import pytest_collection_modifyitems

    items = [_Item(c) for c in (1, 9, None, 3, 7, 10, 2)]
    pytest_collection_modifyitems(config, items)
    assert [i.cost for i in items] == [10, 3, 2, 9, 7, 1, None]
    # a test that is not an audit (CI's Flower runs) is ranked by run_cost alike
    items = [_Item(c, "run_cost" if c in (9, 3) else "audit_cost") for c in (1, 9, None, 3, 7, 10, 2)]
    pytest_collection_modifyitems(config, items)
    assert [i.cost for i in items] == [10, 3, 2, 9, 7, 1, None]


class _Node:   # what xdist's scheduler reads and calls on a worker at the start
    shutting_down = False

    def __init__(self, name):
        self.sent, self.gateway = [], SimpleNamespace(id=name)

    def send_runtest_some(self, indices):
        self.sent += indices


@pytest.mark.parametrize("costs", [(110, 60, 40, 40, 35, 30, 10, 10, 1, None, None),      # an odd count
                                   (110, 60, 58, 45, 34, 33, 31, 31, 30, 10, None, None)])  # an even one
def test_longest_first_holds_under_xdists_own_worksteal_start(costs):
    """The blocks that `--dist worksteal` (CI's audit step) really hands out: each worker starts with one of the
    two longest tests and no unmarked test runs before a marked one on its worker. Before, the ranked tests were
    dealt into blocks of ceil(n/2) and floor(n/2) while xdist hands out floor first: with an odd count the second
    worker began with the last, unmarked test (test_kit_power's 10-80 s)."""
    from xdist.scheduler.worksteal import WorkStealingScheduling

    from vertisynth.testing.plugin import pytest_collection_modifyitems

    items = [_Item(c) for c in costs]
    pytest_collection_modifyitems(_Config({"workercount": 2}), items)
    names = [f"t{n}" for n in range(len(items))]
    sched = WorkStealingScheduling(type("C", (), {"getvalue": staticmethod(lambda name: ["2*popen"])})())
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, names)
    sched.schedule()
    starts = sorted(items[node.sent[0]].cost for node in nodes)
    assert starts == [60, 110], starts
    for node in nodes:
        got = [items[i].cost for i in node.sent]
        marked = [c for c in got if c is not None]
        assert marked == sorted(marked, reverse=True) and got == marked + [None] * (len(got) - len(marked)), got
    assert sorted(i for node in nodes for i in node.sent) == list(range(len(items)))
