"""Measurement oracles: where a marginal-based synthesizer's questions meet the data.

A synthesizer (AIM, MST) never reads the table itself: it asks an oracle
  * `measure(attributes, pay, sigma)`: the counts of one marginal plus Gaussian noise of std `sigma`;
  * `select(candidates, estimates, weights, offsets, epsilon, pay)`: an exponential-mechanism choice of the
    candidate marginal whose counts are worst approximated by `estimates` (AIM's and MST's selection step),
    score_i = w_i · (‖x_i − estimate_i‖₁ − offset_i), sensitivity max_i w_i (‖x_i − e‖₁ moves by at most 1 when one
    record is added or removed; the estimates are earlier DP outputs and the offsets are public).
and two noisy score vectors, for selections that release scores rather than choose with them (PrivMRF, DPSyn):
  * `indif(pairs, pay, sigma)`: InDif(a, b) = Σ|n_xy − n_x·n_y/n| of every pair as one Gaussian vector (L2
    sensitivity INDIF_SENSITIVITY·√m under add/remove of one record; PrivMRF's R-score is InDif/2);
  * `l1_errors(candidates, estimates, pay, sigma, bins)`: ‖x_c − estimate_c‖₁ of every candidate as one Gaussian
    vector (L2 sensitivity √m; the estimates are earlier DP outputs).
Every answer is paid before the data is read, either with a planned `Charge` (spent on the ledger, matched
exactly) or from a `ZCDPFilter`: one planned charge spent up front whose ρ is then drawn down by answers whose
sizes the synthesizer chooses on the fly from earlier DP outputs (AIM's budget annealing). A zCDP filter is
valid under fully adaptive composition (Feldman & Zrnic 2021, Rényi filters: zCDP is Rényi DP at every order),
so the whole run is ρ-zCDP with ρ the sum of the planned charges.

`CentralOracle` answers from one table (the joined parties' columns). A vertical oracle answers the same calls
across parties; the synthesizers do not change.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import BudgetError, ConfigError
from vertisynth.core.mechanisms import exponential_noise, gaussian_sigma
from vertisynth.core.noise import discrete_gaussian
from vertisynth.core.privacy import Charge, PrivacyLedger, ZCDP

from .estimation import Measurement, bin_query
from .scores import INDIF_SENSITIVITY, indif


class ZCDPFilter:
    """An adaptive zCDP budget: `charge` (planned, ZCDP) is spent on the ledger when the filter opens; then
    `take(rho)` draws it down and refuses to go past it. `log` lists what each draw paid for."""

    def __init__(self, charge: Charge, ledger: PrivacyLedger) -> None:
        if not isinstance(charge, Charge) or not isinstance(charge.cost, ZCDP):
            raise BudgetError(f"a zCDP filter opens on a planned ZCDP charge, got {charge!r}")
        ledger.spend(charge)
        self.charge = charge
        self.total = float(charge.cost.rho)
        self.used = 0.0
        self.log: list[tuple[str, float]] = []

    @property
    def remaining(self) -> float:
        return max(self.total - self.used, 0.0)

    def take(self, rho: float, what: str) -> None:
        if not rho > 0:
            raise BudgetError(f"{what}: a filter draw must be positive, got ρ={rho}")
        if self.used + rho > self.total * (1 + 1e-9):
            raise BudgetError(f"{what}: ρ={rho:.4g} exceeds what is left of {self.charge.mechanism!r} "
                              f"({self.remaining:.4g} of {self.total:.4g})")
        self.used += rho
        self.log.append((what, float(rho)))


Pay = Charge | ZCDPFilter
Bins = dict[str, np.ndarray] | None   # attribute -> bin of each value: the marginal is asked on coarsened values


@runtime_checkable
class MarginalOracle(Protocol):
    """What a synthesizer may ask of the data (see the module docstring); central or vertical alike."""

    ledger: PrivacyLedger

    def measure(self, attributes: Sequence[str], pay: Pay, rng: np.random.Generator,
                sigma: float | None = None, bins: Bins = None) -> Measurement: ...

    def measure_many(self, queries: Sequence[Sequence[str]], pays: Sequence[Pay], rng: np.random.Generator,
                     sigma: float | None = None, bins: Sequence[Bins] | None = None) -> list[Measurement]:
        """`measure` for each query, in order (a vertical oracle runs the cross-party ones as one protocol stage)."""

    def select(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray],
               weights: Sequence[float], offsets: Sequence[float], epsilon: float, pay: Pay,
               rng: np.random.Generator, bins: Sequence[Bins] | None = None) -> int: ...

    def indif(self, pairs: Sequence[tuple[str, str]], pay: Pay, rng: np.random.Generator,
              sigma: float | None = None) -> np.ndarray: ...

    def l1_errors(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray], pay: Pay,
                  rng: np.random.Generator, sigma: float | None = None,
                  bins: Sequence[Bins] | None = None) -> np.ndarray: ...


def _same_rho(a: float, b: float) -> bool:
    """np.isclose(a, b, rtol=1e-12, atol=0) on two scalars, in plain floats: the same test (|a − b| <= 1e-12·|b|
    when both are finite, else equality), without numpy's array machinery: a looped audit pays ~10⁵ of these
    checks."""
    a, b = float(a), float(b)
    if math.isfinite(a) and math.isfinite(b):
        return abs(a - b) <= 1e-12 * abs(b)
    return a == b


def _spend(pay: Pay, ledger: PrivacyLedger, rho: float, what: str) -> None:
    """Pay ρ before any data is read: the planned charge itself (whose ρ must be this one), or a filter draw."""
    if isinstance(pay, ZCDPFilter):
        pay.take(rho, what)
        return
    if not isinstance(pay, Charge) or not isinstance(pay.cost, ZCDP):
        raise BudgetError(f"{what}: pay with a planned ZCDP charge or a zCDP filter, got {pay!r}")
    if not _same_rho(pay.cost.rho, rho):
        raise BudgetError(f"{what}: the charge's ρ={pay.cost.rho:.6g} is not what this answer costs (ρ={rho:.6g})")
    ledger.spend(pay)


def check_select(candidates: Sequence, estimates: Sequence, weights: Sequence[float], offsets: Sequence[float],
                 epsilon: float) -> np.ndarray:
    """A selection's arguments checked before anything is spent (every oracle's `select`); the weights as an array."""
    if not candidates or not (len(candidates) == len(estimates) == len(weights) == len(offsets)):
        raise ConfigError("select: needs as many estimates, weights and offsets as candidates (at least one)")
    if not epsilon > 0:
        raise ConfigError(f"select: epsilon must be positive, got {epsilon}")
    w = np.asarray(weights, float)
    if not np.all(w > 0):
        raise ConfigError("select: weights must be positive")
    return w


def _vector_sigma(pay: Pay, sigma: float | None, sensitivity: float, what: str) -> tuple[float, float]:
    """(σ, ρ) of a Gaussian vector of L2 `sensitivity`: σ from the planned charge's ρ, or given (filter draws)."""
    if sigma is None:
        if not isinstance(pay, Charge) or not isinstance(pay.cost, ZCDP):
            raise ConfigError(f"{what}: a filter payment needs the noise std sigma")
        sigma = gaussian_sigma(pay.cost.rho, sensitivity)
    if not sigma > 0:
        raise ConfigError(f"{what}: sigma must be positive, got {sigma}")
    return sigma, sensitivity * sensitivity / (2.0 * sigma * sigma)


def check_measure(attributes: tuple[str, ...], pay: Pay, sigma: float | None, bins: Bins) -> tuple[float, float, Bins]:
    """What every oracle checks before a marginal is paid: the noise std (the charge's when not given; a filter
    payment must give it) is positive, and bins are valid and only for measured attributes. Returns (σ, its ρ, the
    checked bins)."""
    if sigma is None:
        if not isinstance(pay, Charge):
            raise ConfigError("measure: a filter payment needs the noise std sigma")
        sigma = gaussian_sigma(pay.cost.rho)
    if not sigma > 0:
        raise ConfigError(f"measure {list(attributes)}: sigma must be positive, got {sigma}")
    probe = Measurement(attributes, np.zeros(1), 1.0, bins)   # checks the bins
    if bins and not set(bins) <= set(attributes):
        raise ConfigError(f"measure {list(attributes)}: bins given for attributes not measured")
    return sigma, 1.0 / (2.0 * sigma * sigma), probe.bins


class CentralOracle:
    """Answers from one table of codes (every attribute of the domain): the central oracle."""

    def __init__(self, table: Dataset, ledger: PrivacyLedger) -> None:
        self.table = table
        self.domain = table.domain
        self.ledger = ledger
        self._counts: dict[tuple[str, ...], np.ndarray] = {}

    def exact(self, attributes: tuple[str, ...], bins: Bins = None) -> np.ndarray:
        """The true counts (on `bins` where given): what the data's holder scores candidates by."""
        return self._exact(tuple(attributes), bins)

    def _exact(self, attributes: tuple[str, ...], bins: Bins = None) -> np.ndarray:
        if attributes not in self._counts:
            self._counts[attributes] = self.table.counts(attributes).values.astype(float)
        return bin_query(self._counts[attributes], attributes, bins) if bins else self._counts[attributes]

    def measure(self, attributes: Sequence[str], pay: Pay, rng: np.random.Generator,
                sigma: float | None = None, bins: Bins = None) -> Measurement:
        attributes = tuple(self.domain.check(attributes))
        sigma, rho, checked = check_measure(attributes, pay, sigma, bins)
        _spend(pay, self.ledger, rho, f"measure {list(attributes)}")
        x = self._exact(attributes, checked)
        if self.ledger.noise == "secure":
            noisy = discrete_gaussian(x, rho, 1.0)
        else:
            noisy = x + rng.normal(0.0, sigma, size=x.shape)
        return Measurement(attributes, noisy, sigma, bins)

    def measure_many(self, queries: Sequence[Sequence[str]], pays: Sequence[Pay], rng: np.random.Generator,
                     sigma: float | None = None, bins: Sequence[Bins] | None = None) -> list[Measurement]:
        bins = list(bins) if bins is not None else [None] * len(queries)
        if not len(queries) == len(pays) == len(bins):
            raise ConfigError("measure_many: needs one payment and one bins entry per query")
        return [self.measure(q, p, rng, sigma, b) for q, p, b in zip(queries, pays, bins)]

    def select(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray],
               weights: Sequence[float], offsets: Sequence[float], epsilon: float, pay: Pay,
               rng: np.random.Generator, bins: Sequence[Bins] | None = None,
               admissible: Callable[[int], bool] | None = None) -> int:
        """The exponential mechanism (Gumbel-max) on w (error - offset), sensitivity max w. `admissible` (index ->
        bool, a function of public state only, e.g. AIM's model-size cap) restricts it to the candidates it admits,
        asked lazily: Gumbel-max over a subset picks the first of that subset in the order of noisy scores, so only
        the candidates ahead of the pick (and the heaviest admitted one, for the sensitivity) are asked; the same
        distribution as filtering every candidate first."""
        w = check_select(candidates, estimates, weights, offsets, epsilon)
        _spend(pay, self.ledger, epsilon * epsilon / 8.0, f"select among {len(candidates)} marginals")
        bins = list(bins) if bins is not None else [None] * len(candidates)
        exact = [self._exact(tuple(c), b) for c, b in zip(candidates, bins)]
        errors = np.array([np.abs(x - np.asarray(e, float).reshape(x.shape)).sum() for x, e in zip(exact, estimates)])
        scores = w * (errors - np.asarray(offsets, float))
        if admissible is None:
            logits = epsilon * (scores - scores.max()) / (2.0 * w.max())
            return int(np.argmax(logits + exponential_noise(logits.shape, rng, self.ledger)))
        asked: dict[int, bool] = {}

        def admits(i: int) -> bool:
            if i not in asked:
                asked[i] = bool(admissible(i))
            return asked[i]
        heaviest = next((int(i) for i in np.argsort(-w, kind="stable") if admits(int(i))), None)
        if heaviest is None:
            raise ConfigError(f"select: none of the {len(candidates)} candidates is admissible")
        logits = epsilon * (scores - scores.max()) / (2.0 * w[heaviest])
        noisy = logits + exponential_noise(logits.shape, rng, self.ledger)
        return next(int(i) for i in np.argsort(-noisy, kind="stable") if admits(int(i)))

    def _noisy_vector(self, x: np.ndarray, pay: Pay, rng: np.random.Generator, sigma: float | None,
                      sensitivity: float, what: str) -> np.ndarray:
        sigma, rho = _vector_sigma(pay, sigma, sensitivity, what)
        _spend(pay, self.ledger, rho, what)
        if self.ledger.noise == "secure":
            return discrete_gaussian(x, rho, sensitivity)
        return x + rng.normal(0.0, sigma, size=x.shape)

    def indif(self, pairs: Sequence[tuple[str, str]], pay: Pay, rng: np.random.Generator,
              sigma: float | None = None) -> np.ndarray:
        pairs = [tuple(self.domain.check(p)) for p in pairs]
        if not pairs or any(len(p) != 2 for p in pairs):
            raise ConfigError("indif: needs at least one pair of two distinct attributes")
        what = f"indif of {len(pairs)} pairs"
        _vector_sigma(pay, sigma, INDIF_SENSITIVITY * math.sqrt(len(pairs)), what)   # refuse before reading
        x = np.array([indif(self.table, a, b) for a, b in pairs])
        return self._noisy_vector(x, pay, rng, sigma, INDIF_SENSITIVITY * math.sqrt(len(pairs)), what)

    def l1_errors(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray], pay: Pay,
                  rng: np.random.Generator, sigma: float | None = None,
                  bins: Sequence[Bins] | None = None) -> np.ndarray:
        if not candidates or len(candidates) != len(estimates):
            raise ConfigError("l1_errors: needs as many estimates as candidates (at least one)")
        bins = list(bins) if bins is not None else [None] * len(candidates)
        cands = [tuple(self.domain.check(c)) for c in candidates]
        what = f"l1 errors of {len(cands)} marginals"
        sens = math.sqrt(len(cands))
        _vector_sigma(pay, sigma, sens, what)
        exact = [self._exact(c, Measurement(c, np.zeros(1), 1.0, b).bins) for c, b in zip(cands, bins)]
        x = np.array([np.abs(t - np.asarray(e, float).reshape(t.shape)).sum() for t, e in zip(exact, estimates)])
        return self._noisy_vector(x, pay, rng, sigma, sens, what)
