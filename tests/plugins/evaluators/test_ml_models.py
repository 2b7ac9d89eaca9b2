"""ml_utility's numpy models are the scikit-learn models it used before (same objective, same tree growth), and
the evaluator no longer imports scikit-learn (≈ 1.7 CPU s of the default job's start-up)."""
import subprocess
import sys

import numpy as np
import pytest

from vertisynth.plugins.evaluators.models import LogisticModel, TreeModel, accuracy, macro_f1


def _table(seed: int, n: int = 4000, k: int = 2):
    rng = np.random.default_rng(seed)
    sizes = [2, 3, 5, 7, 4, 9]
    codes = np.stack([rng.integers(0, s, n) for s in sizes], axis=1)
    score = codes[:, 0] + 0.6 * codes[:, 2] - 0.4 * codes[:, 3] + (codes[:, 5] % 3) + rng.normal(0, 1.2, n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, k + 1)[1:-1]))
    return codes, sizes, y


def _sklearn_one_hot(sizes):
    from sklearn.preprocessing import OneHotEncoder
    return OneHotEncoder(categories=[np.arange(s) for s in sizes], handle_unknown="ignore")


@pytest.mark.parametrize("k", [2, 3])
def test_logistic_model_is_sklearns_logistic_regression(k):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    codes, sizes, y = _table(0, k=k)
    test, _, _ = _table(1, k=k)
    ours = LogisticModel().fit(codes, sizes, y)
    theirs = make_pipeline(_sklearn_one_hot(sizes), LogisticRegression(max_iter=1000, tol=1e-8)).fit(codes, y)
    d = sum(sizes)
    if k == 2:   # Newton to 1e-8: scikit-learn's optimum at a tight tolerance
        assert np.allclose(ours.coef_[:d], theirs[-1].coef_.ravel(), atol=2e-4)
        assert np.array_equal(ours.predict(test), theirs.predict(test))
    else:   # L-BFGS at scikit-learn's own tolerance (1e-4): the weights are loose along near-flat directions
        assert np.mean(ours.predict(test) == theirs.predict(test)) > 0.995


@pytest.mark.parametrize("seed", [0, 1])
def test_tree_model_grows_sklearns_tree(seed):
    """Same criterion, same depth: the same predictions wherever the best split is unique (here: all)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.tree import DecisionTreeClassifier
    codes, sizes, y = _table(seed, k=3)
    test, _, _ = _table(seed + 10, k=3)
    ours = TreeModel(max_depth=4).fit(codes, sizes, y, 3)
    theirs = make_pipeline(_sklearn_one_hot(sizes), DecisionTreeClassifier(max_depth=4, random_state=0)).fit(codes, y)
    assert np.array_equal(ours.predict(test), theirs.predict(test))
    assert (ours.feature >= 0).sum() == theirs[-1].tree_.node_count - theirs[-1].tree_.n_leaves
    deep = TreeModel(max_depth=10).fit(codes, sizes, y, 3).predict(test)   # deep nodes: ties may break otherwise
    theirs_deep = make_pipeline(_sklearn_one_hot(sizes), DecisionTreeClassifier(max_depth=10, random_state=0))
    assert np.mean(deep == theirs_deep.fit(codes, y).predict(test)) > 0.97


def test_scores_are_sklearns():
    from sklearn.metrics import accuracy_score, f1_score
    rng = np.random.default_rng(0)
    for _ in range(20):
        t, p = rng.integers(0, 4, 50), rng.integers(0, 3, 50)
        p[:5] = 4   # a label never true: counts in the macro average with F1 0
        assert accuracy(t, p) == pytest.approx(accuracy_score(t, p))
        assert macro_f1(t, p) == pytest.approx(f1_score(t, p, average="macro"))


def test_a_tree_stops_at_pure_nodes_and_splits_on_the_signal():
    codes = np.array([[0, 1], [1, 0], [2, 1], [0, 0]] * 50)
    y = (codes[:, 0] == 2).astype(int)
    tree = TreeModel(max_depth=10).fit(codes, [3, 2], y, 2)
    assert (tree.feature >= 0).sum() == 1 and tree.feature[0] == 2   # one split: "attribute 0 is 2"
    assert np.array_equal(tree.predict(codes), y)


def test_ml_utility_imports_no_sklearn():
    code = ("import sys, numpy as np\n"
            "from vertisynth.core.dataset import Dataset\n"
            "from vertisynth.core.domain import Domain\n"
            "from vertisynth.plugins.evaluators.ml import MLUtility\n"
            "rng = np.random.default_rng(0)\n"
            "d = Dataset(rng.integers(0, 3, (500, 3)), Domain(['a', 'b', 'c'], [3, 3, 3]))\n"
            "out = MLUtility().evaluate_holdout(d, d, d, rng)\n"
            "assert 0 <= out['lr_accuracy_real'] <= 1\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"


def test_one_hot_products_are_scipy_sparse_ones_bit_for_bit():
    """`OneHot` (gathers and bincounts, no scipy import) sums in a CSR product's order: X @ w, X @ W, Xᵀ r and
    Xᵀ R equal scipy.sparse's exactly, so the fitted models and their scores did not move."""
    from scipy import sparse

    from vertisynth.plugins.evaluators.models import one_hot

    rng = np.random.default_rng(5)
    codes, sizes, _ = _table(3, n=3000)
    n, m = codes.shape
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    csr = sparse.csr_matrix((np.ones(n * m), (codes + offsets).ravel(), np.arange(0, n * m + 1, m)),
                            shape=(n, sum(sizes)))
    X = one_hot(codes, sizes)
    assert X.shape == csr.shape
    w, W = rng.normal(size=sum(sizes)) * 1e3, rng.normal(size=(sum(sizes), 4))
    r, R = rng.normal(size=n) / 7, rng.normal(size=(n, 3)) / 3
    assert np.array_equal(X @ w, csr @ w) and np.array_equal(X @ W, csr @ W)
    assert np.array_equal(X.T @ r, csr.T.tocsr() @ r) and np.array_equal(X.T @ R, csr.T.tocsr() @ R)
