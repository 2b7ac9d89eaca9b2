"""Feature maps for structured outputs: sequences of answers (codes, some carrying a value), of any length.

The auditor's built-in and learned events read a numeric (n, f) array. A mechanism that answers a
stream of queries (Sparse Vector: ⊥, ⊥, ⊤ then stop; or ⊥, ⊥, 3.2 when ⊤ carries the noisy value)
releases variable-length, mixed outputs; `sequence_features(width)` turns them into numbers:

    audit(mech, pairs, epsilon, features=sequence_features(width=10))

where each output is a sequence of items, each either a code (an int or bool) or a (code, value)
pair. The features are the padded codes and values per position (code −1 past the end) and, per
output, for each code of interest its count and first position, the length, and with values their
sum, first and last: the joint patterns that expose Sparse Vector bugs ("many ⊥, then a ⊤ whose value
sits just above the threshold") are then one or two splits of the learned classifier away.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vertisynth.core.errors import DataError

PAD = -1


def pad_answers(outputs: Sequence[Sequence[Any]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) arrays of shape (n, width) from variable-length answer sequences: code −1 and
    value 0 past an output's end, value 0 for items without one. Longer outputs are an error."""
    n = len(outputs)
    codes = np.full((n, width), PAD, dtype=np.int64)
    values = np.zeros((n, width))
    for i, out in enumerate(outputs):  # a loop over outputs: only for looped (real code path) samplers
        if len(out) > width:
            raise DataError(f"sequence_features: an output has {len(out)} answers, more than width={width}")
        for j, item in enumerate(out):
            if isinstance(item, (tuple, list)):
                codes[i, j], values[i, j] = int(item[0]), float(item[1])
            else:
                codes[i, j] = int(item)
    return codes, values


def answer_features(codes: np.ndarray, values: np.ndarray | None = None,
                    codes_of_interest: Sequence[int] = (0, 1)) -> np.ndarray:
    """Per-position codes (and values) plus, per output, each code's count and first position (width
    when absent), the answered length, and with values their sum, first and last non-pad value."""
    codes = np.asarray(codes)
    n, width = codes.shape
    cols = [codes.astype(float)]
    for c in codes_of_interest:
        hit = codes == c
        cols += [hit.sum(1)[:, None], np.where(hit.any(1), hit.argmax(1), width)[:, None]]
    answered = codes != PAD
    cols.append(answered.sum(1)[:, None])
    if values is not None:
        values = np.asarray(values, float)
        has = answered & (values != 0)
        first = np.where(has.any(1), values[np.arange(n), has.argmax(1)], 0.0)
        last_idx = width - 1 - has[:, ::-1].argmax(1)
        last = np.where(has.any(1), values[np.arange(n), last_idx], 0.0)
        cols += [values, values.sum(1)[:, None], first[:, None], last[:, None]]
    return np.hstack(cols).astype(float)


def sequence_features(width: int, codes_of_interest: Sequence[int] = (0, 1)) -> Callable[[Any], np.ndarray]:
    """A `features=` map for outputs that are answer sequences of length <= width (see module doc)."""
    def features(outputs: Any) -> np.ndarray:
        return answer_features(*pad_answers(outputs, width), codes_of_interest)

    features.__name__ = f"sequence_features(width={width})"
    return features
