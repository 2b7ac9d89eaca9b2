"""Small coded tables with known dependence, shared by the engine's and the synthesizers' tests."""
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain


def correlated(n=5000, seed=0):
    """Five attributes a..e with chained dependences (a→b→d, a→c→e), domains 3, 8, 2, 4, 2."""
    rng = np.random.default_rng(seed)
    dom = Domain(["a", "b", "c", "d", "e"], [3, 8, 2, 4, 2])
    a = rng.integers(0, 3, n)
    b = (2 * a + rng.integers(0, 3, n)) % 8
    c = (a == 0).astype(int) ^ (rng.random(n) < 0.1)
    d = (b // 2 + (rng.random(n) < 0.2)) % 4
    e = (c + (rng.random(n) < 0.15)) % 2
    return Dataset(np.column_stack([a, b, c, d, e]), dom)
