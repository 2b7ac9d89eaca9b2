"""Sampling in row blocks (GraphicalModel.sample_blocks): the one-shot table up to a block, the same law beyond
(model marginals against sampled counts, the rounded counts of every step exactly), no order artifact across
blocks, memory of one block, the smallest code type, clear errors."""
import hashlib
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.pgm import GraphicalModel, build_junction_tree
from vertisynth.pgm.model import code_dtype


def _chain():
    dom = Domain(list("abcde"), [2, 3, 4, 2, 3])
    tree = build_junction_tree(dom, [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("a", "e")])
    rng = np.random.default_rng(0)
    return GraphicalModel(tree, [rng.normal(0, 1, dom.project(c).shape) for c in tree.cliques], 1000.0)


@pytest.mark.parametrize("method,n,digest", [("sample", 5000, "c9d71d7623429a42"), ("round", 5000, "feb090b5d4b41e45"),
                                             ("sample", 131072, "123e540167184ee8"),
                                             ("round", 131072, "5f05e1b51b9b775c")])
def test_up_to_one_block_the_table_is_the_one_shot_draw(method, n, digest):
    # digests of the table the sampler drew before blocks existed (commit 6d03beb, same model, rng 3)
    codes = _chain().sample(n, np.random.default_rng(3), method).codes
    assert hashlib.sha256(codes.astype(np.int64).tobytes()).hexdigest()[:16] == digest


@pytest.mark.parametrize("method", ["sample", "round"])
def test_blocks_draw_the_models_marginals(method):
    model = _chain()
    n = 120_000
    data = model.sample(n, np.random.default_rng(5), method, block_rows=777)
    assert data.n == n and data.codes.dtype == np.uint8
    for attrs_ in [("a", "b"), ("b", "c", "d"), ("a", "c", "e")]:
        emp = data.counts(attrs_).values / n
        assert 0.5 * np.abs(emp - model.marginal(attrs_).values / model.total).sum() < 0.01
    if method == "round":   # rounded over the whole table, not per block: every clique cell within a record or two
        for clique in model.tree.cliques:
            want = model.marginal(clique).values / model.total * n
            assert np.abs(data.counts(clique).values - want).max() <= 2 * len(clique) + 1


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 400), st.integers(0, 2**31), st.integers(401, 1200))
def test_round_blocks_realise_the_rounded_counts_of_every_step(block, seed, n):
    # the counts drawn first from the tables are exactly the counts of the records the blocks then draw
    model = _chain()
    steps = model._sampling_steps("round")
    counts = model._round_counts(steps, n, np.random.default_rng(seed))
    data = model.sample(n, np.random.default_rng(seed), "round", block_rows=block)
    for (given_, new, _), c in zip(steps, counts):
        assert np.array_equal(data.counts(given_ + new).values.ravel(), c.ravel())


@pytest.mark.parametrize("method", ["sample", "round"])
def test_no_order_artifact_across_blocks(method):
    # the first and the last blocks' records follow the same law (values handed out without replacement must
    # not run out late, nor favour early blocks)
    model = _chain()
    data = model.sample(60_000, np.random.default_rng(11), method, block_rows=500)
    head, tail = data.codes[:20_000], data.codes[-20_000:]
    for j in range(len(model.domain)):
        size = model.domain.shape[j]
        p, q = np.bincount(head[:, j], minlength=size) / 20_000, np.bincount(tail[:, j], minlength=size) / 20_000
        assert 0.5 * np.abs(p - q).sum() < 0.02


def test_sample_blocks_yields_blocks_of_the_setting():
    blocks = list(_chain().sample_blocks(1000, np.random.default_rng(0), "round", block_rows=300))
    assert [b.n for b in blocks] == [300, 300, 300, 100]
    assert list(_chain().sample_blocks(0, np.random.default_rng(0), "sample", block_rows=300))[0].n == 0


@pytest.mark.parametrize("method", ["sample", "round"])
def test_memory_is_one_block_not_n(method):
    model = _chain()

    def peak(n):
        tracemalloc.start()
        for _ in model.sample_blocks(n, np.random.default_rng(0), method, block_rows=2000):
            pass
        out = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return out

    small, large = peak(4000), peak(80_000)
    assert large < 1.3 * small


def test_code_dtype_and_errors():
    assert code_dtype(Domain(["a"], [128])) == np.uint8
    assert code_dtype(Domain(["a", "b"], [3, 256])) == np.uint16   # a spare bit: code + 1 must not wrap
    assert code_dtype(Domain(["a"], [70_000])) == np.uint32
    model = _chain()
    with pytest.raises(ConfigError, match="block_rows"):
        model.sample(10, np.random.default_rng(0), "round", block_rows=0)
    with pytest.raises(ConfigError, match="sampling method"):
        model.sample(10, np.random.default_rng(0), "exact")
    with pytest.raises(ConfigError, match="cannot sample -1"):
        model.sample(-1, np.random.default_rng(0))
