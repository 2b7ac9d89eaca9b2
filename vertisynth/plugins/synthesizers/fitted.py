"""What a one-model synthesizer on the pgm engine (aim, mst, private_pgm) does once fitted: sample from its model,
hand the model over (HasGraphicalModel), report its timings."""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import DataError


class FittedGraphicalModel:
    """Mixin: the class sets `_name`, and `fit` sets `_model`, `_n_hat` (the DP record count) and `_timings`."""

    _name = "synthesizer"
    _model: Any = None

    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        if self._model is None:
            raise DataError(f"{self._name}: fit() before sample()")
        t0 = time.perf_counter()
        out = self._model.sample(self._n_hat if n is None else int(n), rng, self.config.sampling)
        self._timings["sample"] = time.perf_counter() - t0
        return out

    def fitted_model(self) -> tuple[Any, str]:
        """The fitted GraphicalModel and the sampling method (HasGraphicalModel): a DP release to sample from."""
        if self._model is None:
            raise DataError(f"{self._name}: fit() before fitted_model()")
        return self._model, self.config.sampling

    def timings(self) -> dict[str, float]:
        return dict(self._timings)
