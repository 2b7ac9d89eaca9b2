"""ml_utility's two models on one-hot codes, in numpy: the same models scikit-learn's evaluator fitted.

`LogisticModel` minimises scikit-learn's `LogisticRegression(C=1)` objective (lbfgs): the mean log loss plus
½/(C n)·‖W‖² (intercepts unpenalised); binomial with one weight vector for two classes, multinomial softmax
over the classes present for more. The objective is strictly convex in W, so its optimum (found here by Newton's
method for two classes, L-BFGS for more, to tighter gradient tolerances than scikit-learn's 1e-4) is the model
scikit-learn approximates.
`TreeModel` is CART as `DecisionTreeClassifier(max_depth, criterion="gini")` grows it on one-hot columns: every
node with impurity and a split that leaves both sides non-empty is split on the column maximising
Σ_k c_left,k²/n_left + Σ_k c_right,k²/n_right (scikit-learn's proxy), down to max_depth; grown level by level with one
`bincount` per level. Ties between different partitions are broken by column order here, by a seeded feature
permutation in scikit-learn: the only place the two can differ (small, deep nodes).
Why not scikit-learn: importing it costs ≈ 1.7 CPU s (scipy.stats under `sklearn.utils.fixes`), a fifth of the
default job (docs/speed.md).
"""
from __future__ import annotations

import numpy as np


class OneHot:
    """Rows of codes (n × m) as the n × d matrix X with one 1 per attribute (column offset[j] + code). `X @ w` and
    `X.T @ r` (w, r vectors or matrices) are gathers and weighted bincounts, summed in the order a CSR product sums
    them (each row's m columns in order; each column's rows in order, from 0), so the same values bit for bit as
    scipy.sparse's, without its import (≈ 0.25 CPU s of a run that needs nothing else of scipy)."""

    def __init__(self, codes: np.ndarray, sizes: list[int] | tuple[int, ...]) -> None:
        n, m = codes.shape
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.idx = codes.astype(np.int64) + offsets   # (n, m): each row's columns, ascending
        self.shape = (n, int(sum(sizes)))

    def __matmul__(self, w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, dtype=float)
        out = w[self.idx[:, 0]]
        for j in range(1, self.idx.shape[1]):
            out += w[self.idx[:, j]]
        return out

    @property
    def T(self) -> "_OneHotT":
        return _OneHotT(self)


class _OneHotT:
    """Xᵀ of a `OneHot` X: `Xᵀ @ r` sums r's rows into the columns they hold."""

    def __init__(self, x: OneHot) -> None:
        self._flat, self._m, self._d = x.idx.ravel(), x.idx.shape[1], x.shape[1]

    def __matmul__(self, r: np.ndarray) -> np.ndarray:
        r = np.asarray(r, dtype=float)
        if r.ndim == 1:
            return np.bincount(self._flat, np.repeat(r, self._m), minlength=self._d).astype(float, copy=False)
        return np.stack([np.bincount(self._flat, np.repeat(r[:, c], self._m), minlength=self._d)
                         for c in range(r.shape[1])], axis=1).astype(float, copy=False)


def one_hot(codes: np.ndarray, sizes: list[int] | tuple[int, ...]) -> OneHot:
    """Rows of codes (n × m) as a one-hot matrix (`OneHot`) with one 1 per attribute (column offset[j] + code)."""
    return OneHot(codes, sizes)


def _lbfgs(fun, x0: np.ndarray, gtol: float, max_iter: int, memory: int = 10) -> np.ndarray:
    """Minimise a smooth convex fun(x) -> (value, grad) by L-BFGS with a backtracking Armijo line search."""
    x = x0
    f, g = fun(x)
    s_list: list[np.ndarray] = []
    y_list: list[np.ndarray] = []
    for _ in range(max_iter):
        if np.max(np.abs(g)) <= gtol:
            break
        q = g.copy()   # two-loop recursion: d = −H g
        alphas = []
        for s, y in zip(reversed(s_list), reversed(y_list)):
            a = (s @ q) / (y @ s)
            alphas.append(a)
            q -= a * y
        if s_list:
            q *= (s_list[-1] @ y_list[-1]) / (y_list[-1] @ y_list[-1])
        for (s, y), a in zip(zip(s_list, y_list), reversed(alphas)):
            q += (a - (y @ q) / (y @ s)) * s
        d = -q
        slope = g @ d
        if slope >= 0:   # not a descent direction (rounding): restart from the gradient
            s_list.clear()
            y_list.clear()
            d, slope = -g, -(g @ g)
        step = 1.0
        while True:
            x_new = x + step * d
            f_new, g_new = fun(x_new)
            if f_new <= f + 1e-4 * step * slope or step < 1e-12:
                break
            step *= 0.5
        s, y = x_new - x, g_new - g
        if s @ y > 1e-12:
            s_list.append(s)
            y_list.append(y)
            if len(s_list) > memory:
                s_list.pop(0)
                y_list.pop(0)
        if f - f_new <= 1e-15 * max(1.0, abs(f)):
            x, f, g = x_new, f_new, g_new
            break
        x, f, g = x_new, f_new, g_new
    return x


class LogisticModel:
    """L2-regularised logistic regression (scikit-learn's C, lbfgs objective) on the one-hot columns of codes."""

    def __init__(self, C: float = 1.0, gtol: float = 1e-8, max_iter: int = 1000) -> None:
        self.C, self.gtol, self.max_iter = C, gtol, max_iter

    def fit(self, codes: np.ndarray, sizes: list[int] | tuple[int, ...], y: np.ndarray) -> "LogisticModel":
        from vertisynth.pgm.estimation import blas_threads

        self.sizes = list(sizes)
        # BLAS on one thread: the solves are (d+1)² for d one-hot columns, too small to share, and OpenBLAS's
        # spinning threads made a 132² solve take 0.9 CPU s on a loaded machine
        with blas_threads().limit(limits=1, user_api="blas"):
            return self._fit(codes, y)

    def _fit(self, codes: np.ndarray, y: np.ndarray) -> "LogisticModel":
        self.classes_ = np.unique(y)
        X = one_hot(codes, self.sizes)
        n, d = X.shape
        lam = 1.0 / (self.C * n)
        XT = X.T
        if self.classes_.size == 2:
            t = (y == self.classes_[1]).astype(float)
            penalty = np.full(d + 1, lam)
            penalty[d] = 0.0   # the intercept (last) is not penalised
            codes = codes.astype(np.int64)
            pairs = [(j, l, codes[:, j] * self.sizes[l] + codes[:, l])
                     for j in range(len(self.sizes)) for l in range(j + 1, len(self.sizes))]
            offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

            def hessian(D):
                """Xᵀ diag(D) X with the intercept column, block by block: a row has one column per attribute,
                so the (j, l) block is one weighted bincount of the code pairs."""
                H = np.zeros((d + 1, d + 1))
                col_sum = XT @ D
                H[np.arange(d), np.arange(d)] = col_sum
                H[d, :d] = H[:d, d] = col_sum
                H[d, d] = D.sum()
                for j, l, key in pairs:
                    (a, sa), (b, sb) = (offsets[j], self.sizes[j]), (offsets[l], self.sizes[l])
                    block = np.bincount(key, weights=D, minlength=sa * sb).reshape(sa, sb)
                    H[a:a + sa, b:b + sb] = block
                    H[b:b + sb, a:a + sa] = block.T
                return H

            def value(w):
                z = X @ w[:d] + w[d]
                return (np.logaddexp(0.0, z) - t * z).mean() + 0.5 * lam * (w[:d] @ w[:d]), z

            # damped Newton: the Hessian is (d+1)², small for one-hot codes, and a few steps reach the optimum to
            # rounding (L-BFGS took ~250 gradient evaluations for 1e-7 on the default job's census)
            w = np.zeros(d + 1)
            f, z = value(w)
            for _ in range(self.max_iter):
                p = 0.5 * (1 + np.tanh(0.5 * z))   # σ(z), overflow-free
                r = (p - t) / n
                g = np.concatenate([XT @ r, [r.sum()]]) + penalty * w
                if np.max(np.abs(g)) <= self.gtol:
                    break
                H = hessian(p * (1 - p) / n) + np.diag(penalty)
                try:
                    direction = -np.linalg.solve(H, g)
                except np.linalg.LinAlgError:   # singular (an unpenalised intercept with separable rows)
                    direction = -np.linalg.lstsq(H, g, rcond=None)[0]
                step = 1.0
                while True:
                    f_new, z_new = value(w + step * direction)
                    if f_new <= f + 1e-4 * step * (g @ direction) or step < 1e-10:
                        break
                    step *= 0.5
                if not f_new < f:
                    break
                w, f, z = w + step * direction, f_new, z_new
            self.coef_ = w
        else:
            k = self.classes_.size
            onehot = (y[:, None] == self.classes_[None, :]).astype(float)

            def fun(w):
                W = w.reshape(d + 1, k)
                z = X @ W[:d] + W[d]
                z -= z.max(axis=1, keepdims=True)
                logsum = np.log(np.exp(z).sum(axis=1))
                loss = (logsum - (z * onehot).sum(axis=1)).mean()
                r = (np.exp(z - logsum[:, None]) - onehot) / n
                grad = np.vstack([XT @ r + lam * W[:d], r.sum(axis=0)])
                return loss + 0.5 * lam * (W[:d] * W[:d]).sum(), grad.ravel()

            # scikit-learn's own tolerance and budget here (gradient of the mean loss, max-abs 1e-4, 300 steps): a
            # softmax over tens of classes costs ~30 ms an evaluation, and 1e-7 took 5x the steps for the same
            # predictions (zoo `mixed`: 39 classes, 142 evaluations, 4.9 CPU s, as scikit-learn's 127 iterations)
            self.coef_ = _lbfgs(fun, np.zeros((d + 1) * k), 1e-4, 300).reshape(d + 1, k)
        return self

    def predict(self, codes: np.ndarray) -> np.ndarray:
        X = one_hot(codes, self.sizes)
        d = X.shape[1]
        if self.classes_.size == 2:
            return self.classes_[(X @ self.coef_[:d] + self.coef_[d] > 0).astype(int)]
        return self.classes_[np.argmax(X @ self.coef_[:d] + self.coef_[d], axis=1)]


class TreeModel:
    """Gini CART on one-hot columns of categorical codes, grown breadth-first to max_depth."""

    def __init__(self, max_depth: int = 10) -> None:
        self.max_depth = max_depth

    def fit(self, codes: np.ndarray, sizes: list[int] | tuple[int, ...], y: np.ndarray, k: int) -> "TreeModel":
        n, m = codes.shape
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        n_cols = int(sum(sizes))
        self.col_attr = np.repeat(np.arange(m), sizes)
        self.col_value = np.arange(n_cols) - offsets[self.col_attr]
        cols = codes.astype(np.int64) + offsets   # n × m: the one-hot column each row has per attribute
        y = y.astype(np.int64)
        feature, left, right, counts = [-1], [-1], [-1], [np.bincount(y, minlength=k)]
        rows_node = np.zeros(n, dtype=np.int64)   # each training row's node among this level's open ones
        open_ids = np.array([0])
        for _ in range(self.max_depth):
            a = open_ids.size
            tot = np.array([counts[i] for i in open_ids], dtype=float)   # a × k
            best = np.empty(a, dtype=np.int64)
            best_valid = np.empty(a, dtype=bool)
            right_best = np.empty((a, k))
            step = max(1, (1 << 22) // (n_cols * k))   # nodes per batch: bounded memory on wide domains
            for lo in range(0, a, step):
                hi = min(a, lo + step)
                sel = (rows_node >= lo) & (rows_node < hi)
                right_c = np.bincount((((rows_node[sel] - lo)[:, None] * n_cols + cols[sel]) * k
                                       + y[sel, None]).ravel(),
                                      minlength=(hi - lo) * n_cols * k).reshape(hi - lo, n_cols, k).astype(float)
                left_c = tot[lo:hi, None, :] - right_c
                n_r, n_l = right_c.sum(axis=2), left_c.sum(axis=2)
                valid = (n_r > 0) & (n_l > 0)
                with np.errstate(divide="ignore", invalid="ignore"):
                    proxy = (right_c ** 2).sum(axis=2) / n_r + (left_c ** 2).sum(axis=2) / n_l
                b = np.argmax(np.where(valid, proxy, -np.inf), axis=1)
                best[lo:hi], best_valid[lo:hi] = b, valid[np.arange(hi - lo), b]
                right_best[lo:hi] = right_c[np.arange(hi - lo), b]
            impure = (tot > 0).sum(axis=1) > 1
            split = impure & best_valid
            if not split.any():
                break
            new_open = []
            local = np.full(a, -1, dtype=np.int64)   # split node's index among the next level's open nodes (left)
            for j in np.flatnonzero(split):
                node = int(open_ids[j])
                c = int(best[j])
                feature[node] = c
                for child_counts in (tot[j] - right_best[j], right_best[j]):
                    feature.append(-1), left.append(-1), right.append(-1), counts.append(child_counts.astype(np.int64))
                left[node], right[node] = len(counts) - 2, len(counts) - 1
                local[j] = len(new_open)
                new_open += [left[node], right[node]]
            row_split = split[rows_node]
            if not row_split.all():   # rows of nodes that became leaves leave the growth
                keep = row_split
                rows_node, cols, y = rows_node[keep], cols[keep], y[keep]
            best_col = best[rows_node]
            goes_right = (cols[np.arange(rows_node.size), self.col_attr[best_col]] == best_col)
            rows_node = local[rows_node] + goes_right
            open_ids = np.array(new_open)
        self.feature, self.left, self.right = np.array(feature), np.array(left), np.array(right)
        self.leaf_class = np.argmax(np.array(counts), axis=1)   # first class among ties, as scikit-learn
        self.offsets = offsets
        return self

    def predict(self, codes: np.ndarray) -> np.ndarray:
        node = np.zeros(codes.shape[0], dtype=np.int64)
        rows = np.arange(codes.shape[0])
        for _ in range(self.max_depth):
            f = self.feature[node]
            inner = f >= 0
            if not inner.any():
                break
            fc = np.where(inner, f, 0)
            goes_right = codes[rows, self.col_attr[fc]] == self.col_value[fc]
            node = np.where(inner, np.where(goes_right, self.right[node], self.left[node]), node)
        return self.leaf_class[node]


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(y_true == y_pred))


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """F1 averaged over the labels in either array, 0 for a label never predicted correctly (scikit-learn's)."""
    labels = np.union1d(y_true, y_pred)
    tp = np.array([np.sum((y_true == c) & (y_pred == c)) for c in labels], dtype=float)
    fp = np.array([np.sum((y_true != c) & (y_pred == c)) for c in labels], dtype=float)
    fn = np.array([np.sum((y_true == c) & (y_pred != c)) for c in labels], dtype=float)
    den = 2 * tp + fp + fn
    return float(np.mean(np.where(den > 0, 2 * tp / np.where(den > 0, den, 1), 0.0)))
