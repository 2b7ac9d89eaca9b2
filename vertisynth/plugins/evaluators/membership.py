"""`membership_attack`: can a curious party tell filled (synthetic) rows from real ones? (seed 001, §3, App. C)

The spectral attack of Tran, Li & Madry (2018): in a batch of rows, centre the (one-hot) features, take
the top singular vector v of the centred batch and score each row by |<x - μ, v>|. If filled rows come
from a distribution whose mean is far from the real rows', they stand out along v. The attack AUC is
how well the scores separate filled from real rows, averaged over random batches; 0.5 is ideal.
The attacker chooses the orientation of the score once (outliers = filled, or = real), so the reported
value is max(AUC, 1 - AUC) of the batch average.

After a PSU alignment with fill, every party's column block is attacked with its own fill mask
(`attack_auc_<party>`, and the worst over parties). Without a fill (or outside a pipeline), it attacks a
table made of the real and the synthetic records: can the synthetic ones be singled out?
"""
from __future__ import annotations

import attrs
import numpy as np
from sklearn.metrics import roc_auc_score

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import Alignment, Evaluator


@attrs.frozen
class MembershipAttackConfig:
    """batch_size: rows per attacked batch (the seed attacks mini-batches); batches: how many to average."""

    batch_size: int = 512
    batches: int = 20

    def __attrs_post_init__(self) -> None:
        if self.batch_size < 4 or self.batches < 1:
            raise ConfigError(f"membership_attack needs batch_size >= 4 and batches >= 1, got {self.batch_size}, {self.batches}")


def one_hot(data: Dataset) -> np.ndarray:
    offsets = np.concatenate([[0], np.cumsum(data.domain.shape)[:-1]])
    out = np.zeros((data.n, int(sum(data.domain.shape))), np.float64)
    rows = np.repeat(np.arange(data.n), len(offsets))
    out[rows, (data.codes + offsets).ravel()] = 1.0
    return out


def spectral_scores(x: np.ndarray) -> np.ndarray:
    """|<x - μ, v>| with v the top right-singular vector of the centred batch."""
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return np.abs(centred @ vt[0])


def attack_auc(x: np.ndarray, is_filled: np.ndarray, batch_size: int, batches: int, rng: np.random.Generator) -> float:
    n = len(x)
    if is_filled.all() or not is_filled.any():
        raise DataError("membership_attack needs both filled and real rows to score")
    aucs = []
    for _ in range(batches):
        idx = rng.choice(n, size=min(batch_size, n), replace=False)
        y = is_filled[idx]
        if y.all() or not y.any():
            continue
        aucs.append(roc_auc_score(y, spectral_scores(x[idx])))
    if not aucs:
        raise DataError("membership_attack: no batch held both filled and real rows; raise batch_size")
    mean = float(np.mean(aucs))
    return max(mean, 1.0 - mean)


class MembershipAttack(Evaluator):
    uses_alignment = True

    def __init__(self, config: MembershipAttackConfig | None = None) -> None:
        super().__init__(config or MembershipAttackConfig())

    def evaluate_alignment(self, alignment: Alignment, rng: np.random.Generator) -> dict[str, float]:
        cfg, out = self.config, {}
        for party, filled in alignment.filled.items():
            if filled.any() and not filled.all():
                out[f"attack_auc_{party}"] = attack_auc(one_hot(alignment.views[party]), filled, cfg.batch_size,
                                                        cfg.batches, rng)
        if not out:
            raise DataError("membership_attack: no party filled any row")
        out["attack_auc_max"] = max(out.values())
        return out

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        if real.n == 0 or synthetic.n == 0:
            raise DataError("membership_attack needs non-empty real and synthetic tables")
        missing = [a for a in real.domain.attributes if a not in synthetic.domain.attributes]
        if missing:
            raise DataError(f"membership_attack: the synthetic table lacks attributes {missing}")
        synthetic = synthetic.project(real.domain.attributes)
        if synthetic.domain.shape != real.domain.shape:
            raise DataError(f"membership_attack: domains differ: real {real.domain} vs synthetic {synthetic.domain}")
        both = Dataset(np.vstack([real.codes, synthetic.codes]), real.domain)
        is_synth = np.r_[np.zeros(real.n, bool), np.ones(synthetic.n, bool)]
        return {"attack_auc": attack_auc(one_hot(both), is_synth, self.config.batch_size, self.config.batches, rng)}
