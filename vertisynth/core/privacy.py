"""Privacy accounting: costs, their composition and conversion, budgets, and the ledger.

Unit of privacy: one person, i.e. one whole record *across all parties* (add/remove neighbours).
A mechanism run by party A on A's columns and one run by party B on B's columns touch the same
person, so their costs compose (add up) exactly like two mechanisms run by one curator.

Conversions used (all standard):
  * pure ε-DP  ⇒ (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4), and RDP ε(α) = min(ε, α ε²/2).
  * ρ-zCDP     ⇒ RDP ε(α) = ρ α for all α > 1 (definition).
  * RDP curve  ⇒ (ε, δ)-DP: ε = min_α R(α) + log((α-1)/α) − (log δ + log α)/(α − 1)
    (Canonne, Kamath & Steinke 2020, Prop. 12 / Balle et al. 2020), tighter than ρ + 2√(ρ log 1/δ).
  * (ε, δ) costs have no RDP curve; they compose by basic composition and their δ is taken
    out of the budget's δ before the RDP part is converted.
"""
from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from .errors import BudgetError

# Rényi orders on which curves are tracked: dense near 1 (optimal for large ρ) up to 1e4. Larger orders
# would only help budgets with ε below about 1e-3 (Budget.rho() then says it is too small), and they let
# a pure-ε charge convert to a hair under ε at δ > 0, which surprises more than it helps.
ORDERS: np.ndarray = np.unique(1.0 + np.geomspace(1e-4, 1e4, 2000))


def _number(value: Any) -> float:
    """Numbers only: a string or a bool is a caller's mistake, not a budget."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BudgetError(f"privacy parameters must be numbers, got {value!r}")
    return float(value)


def _positive(name: str):
    def check(_inst: Any, _attr: Any, value: float) -> None:
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise BudgetError(f"{name} must be a positive finite number, got {value!r}")

    return check


def _delta_ok(_inst: Any, _attr: Any, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0 <= value < 1):
        raise BudgetError(f"delta must be in [0, 1), got {value!r}")


JOINT = "joint (all parties)"   # the per-party label of a charge no single party makes


# -- costs ------------------------------------------------------------------------------------
@attrs.frozen
class PureDP:
    epsilon: float = attrs.field(converter=_number, validator=_positive("epsilon"))

    def rdp(self, orders: np.ndarray = ORDERS) -> np.ndarray:
        return np.minimum(self.epsilon, orders * self.epsilon**2 / 2)

    def describe(self) -> str:
        return f"ε={self.epsilon:.4g}"


@attrs.frozen
class ApproxDP:
    epsilon: float = attrs.field(converter=_number, validator=_positive("epsilon"))
    delta: float = attrs.field(converter=_number, validator=_delta_ok)

    def rdp(self, orders: np.ndarray = ORDERS) -> None:
        return None

    def describe(self) -> str:
        return f"(ε={self.epsilon:.4g}, δ={self.delta:.3g})"


@attrs.frozen
class ZCDP:
    rho: float = attrs.field(converter=_number, validator=_positive("rho"))

    def rdp(self, orders: np.ndarray = ORDERS) -> np.ndarray:
        return self.rho * orders

    def describe(self) -> str:
        return f"ρ={self.rho:.4g} (zCDP)"


@attrs.frozen
class RDP:
    """An arbitrary Rényi-DP curve given on `orders` (interpolated onto ORDERS; +inf outside)."""

    orders: tuple[float, ...] = attrs.field(converter=lambda v: tuple(float(x) for x in v))
    epsilons: tuple[float, ...] = attrs.field(converter=lambda v: tuple(float(x) for x in v))

    def __attrs_post_init__(self) -> None:
        if len(self.orders) != len(self.epsilons) or not self.orders:
            raise BudgetError("an RDP curve needs as many epsilons as orders (at least one)")
        if min(self.orders) <= 1 or min(self.epsilons) < 0:
            raise BudgetError("RDP orders must be > 1 and epsilons >= 0")

    def rdp(self, orders: np.ndarray = ORDERS) -> np.ndarray:
        o = np.asarray(self.orders)
        e = np.asarray(self.epsilons)
        idx = np.argsort(o)
        o, e = o[idx], e[idx]
        # RDP is non-decreasing in α: a curve known at α0 bounds every α <= α0 by ε(α0), so each order
        # takes the smallest ε known at an order >= it (a suffix minimum; +inf beyond the last one).
        suffix_min = np.append(np.minimum.accumulate(e[::-1])[::-1], np.inf)
        return suffix_min[np.searchsorted(o, orders, side="left")]

    def describe(self) -> str:
        return f"RDP curve on {len(self.orders)} orders"


Cost = PureDP | ApproxDP | ZCDP | RDP


def rdp_to_approx(curve: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> float:
    """Smallest ε such that the RDP curve implies (ε, δ)-DP."""
    if delta <= 0:
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        eps = curve + np.log((orders - 1) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    eps = eps[np.isfinite(eps)]
    return float(max(eps.min(), 0.0)) if eps.size else math.inf


def zcdp_to_approx(rho: float, delta: float) -> float:
    return rdp_to_approx(rho * ORDERS, delta)


@attrs.frozen
class Composition:
    """The composed cost of several mechanisms, reported as (ε, δ) at a chosen δ."""

    rdp_curve: np.ndarray | None = attrs.field(eq=False)
    pure_epsilon: float | None  # Σε when every RDP-capable cost is pure DP
    zcdp_rho: float | None  # Σρ when every cost is pure or zCDP
    approx_epsilon: float
    approx_delta: float

    @classmethod
    def of(cls, costs: Iterable[Cost]) -> Composition:
        costs = list(costs)
        curve = None
        pure = 0.0
        rho = 0.0
        all_pure = True
        zcdp_ok = True
        a_eps = a_delta = 0.0
        for c in costs:
            if isinstance(c, ApproxDP):
                a_eps += c.epsilon
                a_delta += c.delta
                zcdp_ok = False
                continue
            r = c.rdp()
            curve = r if curve is None else curve + r
            if isinstance(c, PureDP):
                pure += c.epsilon
                rho += c.epsilon**2 / 2
            else:
                all_pure = False
                if isinstance(c, ZCDP):
                    rho += c.rho
                else:
                    zcdp_ok = False
        return cls(
            curve,
            pure if (curve is not None and all_pure) else None,
            rho if (curve is not None and zcdp_ok) else None,
            a_eps,
            a_delta,
        )

    def plus_zcdp(self, rho: float) -> Composition:
        """`of(costs + [ZCDP(rho)])` from `of(costs)`: the same sums in the same order, without recomposing the
        costs (remaining_rho bisects over ρ a hundred times per stage)."""
        r = ZCDP(rho).rdp()
        if self.rdp_curve is not None:
            zr = None if self.zcdp_rho is None else self.zcdp_rho + rho
            return Composition(self.rdp_curve + r, None, zr, self.approx_epsilon, self.approx_delta)
        only_zcdp = self.approx_epsilon == 0   # no curve: no cost, or only (ε > 0, δ) ones
        return Composition(r, None, rho if only_zcdp else None, self.approx_epsilon, self.approx_delta)

    def epsilon(self, delta: float) -> float:
        """Total ε at total failure probability `delta` (∞ if impossible)."""
        if self.rdp_curve is None:
            return self.approx_epsilon if self.approx_delta <= delta + 1e-15 else math.inf
        rest = delta - self.approx_delta
        best = math.inf
        if self.pure_epsilon is not None:
            best = self.pure_epsilon if rest >= -1e-15 else math.inf
        if rest > 0:
            best = min(best, rdp_to_approx(self.rdp_curve, rest))
        return self.approx_epsilon + best


# -- budget -----------------------------------------------------------------------------------
@attrs.frozen
class Budget:
    """A total (ε, δ) privacy budget."""

    epsilon: float = attrs.field(converter=_number, validator=_positive("budget epsilon"))
    delta: float = attrs.field(default=0.0, converter=_number, validator=_delta_ok)

    def allows(self, costs: Iterable[Cost], slack: float = 1e-9) -> bool:
        return Composition.of(costs).epsilon(self.delta) <= self.epsilon * (1 + slack)

    def rho(self) -> float:
        """The largest ρ whose zCDP guarantee fits inside (ε, δ): the budget for Gaussian mechanisms."""
        if self.delta <= 0:
            raise BudgetError(
                "Gaussian (zCDP) mechanisms need delta > 0; set budget.delta (e.g. 1e-5 or 1/n)"
            )
        return _rho_of(self.epsilon, self.delta)

    def split(self, fractions: dict[str, float]) -> dict[str, float]:
        """Split the budget's ρ into named fractions (which must be positive and sum to <= 1)."""
        check_fractions(fractions)
        rho = self.rho()
        return {k: rho * f for k, f in fractions.items()}

    def to_dict(self) -> dict[str, float]:
        return {"epsilon": self.epsilon, "delta": self.delta}


@functools.lru_cache(maxsize=256)
def _rho_of(epsilon: float, delta: float) -> float:
    """ε → ρ once per budget (bisection on the zCDP → (ε, δ) conversion)."""
    lo, hi = 0.0, max(epsilon, 1.0)
    while zcdp_to_approx(hi, delta) < epsilon:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if zcdp_to_approx(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    if lo <= 0:
        raise BudgetError(f"budget ε={epsilon:g}, δ={delta:g} is too small for any zCDP mechanism")
    return lo


def remaining_rho(budget: Budget, planned: Sequence[Cost]) -> float:
    """Largest ρ such that `planned` plus a ρ-zCDP mechanism still fit inside `budget`."""
    if not planned:
        return budget.rho()
    base = Composition.of(planned)
    if base.epsilon(budget.delta) >= budget.epsilon:
        raise BudgetError("earlier stages already plan the whole budget; nothing is left for this stage")
    lo, hi = 0.0, budget.rho()
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid > 0 and base.plus_zcdp(mid).epsilon(budget.delta) <= budget.epsilon:
            lo = mid
        else:
            hi = mid
    if lo <= 0:
        raise BudgetError("no zCDP budget is left after the earlier stages' plans")
    return lo


def check_fractions(fractions: dict[str, float]) -> None:
    for k, f in fractions.items():
        if not (0 < f <= 1):
            raise BudgetError(f"budget fraction {k!r} must be in (0, 1], got {f}")
    total = sum(fractions.values())
    if total > 1 + 1e-9:
        raise BudgetError(f"budget fractions sum to {total:.4g} > 1: {fractions}")


def group_cost(cost: Cost, c: int) -> Cost:
    """What `cost` per row costs for a group of c rows (one person copied c times by a `sample` fill)."""
    if c == 1:
        return cost
    if isinstance(cost, ZCDP):     # Bun & Steinke 2016, Prop. 1.9: rho-zCDP -> c^2 rho for groups of c
        return ZCDP(c * c * cost.rho)
    if isinstance(cost, PureDP):  # Dwork & Roth 2014, Thm 2.2
        return PureDP(c * cost.epsilon)
    if isinstance(cost, ApproxDP):  # (c eps, c e^{(c-1) eps} delta)
        return ApproxDP(c * cost.epsilon, min(1.0, c * math.exp((c - 1) * cost.epsilon) * cost.delta))
    raise BudgetError(f"a {type(cost).__name__} cost has no group-privacy conversion here, and records may appear "
                      f"{c} times (sample fill); use fill 'marginal'")


# -- ledger -----------------------------------------------------------------------------------
NOISE_KINDS = ("secure", "simulation")
NOISE_LABELS = {
    "secure": "secure: discrete Gaussian/Laplace from the OS CSPRNG (OpenDP samplers)",
    "simulation": "simulation: numpy's seeded float samplers; reproducible, NOT for production releases",
}

@attrs.frozen
class Charge:
    """One mechanism's cost, attributed to a pipeline stage and (optionally) a party."""

    stage: str
    mechanism: str
    cost: Cost
    party: str | None = None
    note: str = ""

    def key(self) -> tuple[str, str, str | None]:
        return (self.stage, self.mechanism, self.party)

    def to_dict(self) -> dict[str, Any]:
        d = {"stage": self.stage, "mechanism": self.mechanism, "party": self.party,
             "cost_type": type(self.cost).__name__, **attrs.asdict(self.cost)}
        if self.note:
            d["note"] = self.note
        return d


@attrs.define
class PrivacyLedger:
    """Records what every stage plans to spend (before data is touched) and what it actually spends.

    * `plan` registers charges; `check_plan` refuses a plan whose composition exceeds the budget.
    * `spend` is called by a mechanism right before it adds noise with the very Charge object the
      component's `plan()` returned; it must equal (exactly: no float tolerance) a planned, not yet
      spent entry, so nothing unplanned is spent and no spend is a rebuilt approximation of its plan.
    * `noise` says which noise the mechanisms draw: "secure" (integer-valued mechanisms from the OS
      CSPRNG, core/noise.py) or "simulation" (numpy's seeded float samplers; studies and tests).
    """

    budget: Budget
    planned: list[Charge] = attrs.field(factory=list)
    spent: list[Charge] = attrs.field(factory=list)
    # Group privacy: when alignment lets one person's record appear in up to `group_size` rows (a
    # `sample` fill copies real records), every later charge costs what it costs for a group that size.
    group_size: int = 1
    noise: str = attrs.field(default="simulation", kw_only=True)
    # marginals a vertical oracle measured across parties (attributes, parties, measure, trust, variance): the
    # charges are the synthesizer's plan; this says which of its answers crossed parties and under which trust
    cross_party: list[dict[str, Any]] = attrs.field(factory=list, kw_only=True)

    @noise.validator
    def _noise_ok(self, _attr: Any, value: str) -> None:
        if value not in NOISE_KINDS:
            raise BudgetError(f"noise must be one of {list(NOISE_KINDS)}, got {value!r}")

    def plan(self, charges: Iterable[Charge]) -> None:
        self.planned.extend(map(self.grouped, charges))

    def grouped(self, charge: Charge) -> Charge:
        """`charge` as this ledger records it (group privacy applied when group_size > 1)."""
        c = self.group_size
        if c == 1:
            return charge
        try:
            new = group_cost(charge.cost, c)
        except BudgetError as exc:
            raise BudgetError(f"{charge.stage} {charge.mechanism!r}: {exc}") from None
        note = (charge.note + "; " if charge.note else "") + f"group privacy x{c} ({charge.cost.describe()} per row)"
        return attrs.evolve(charge, cost=new, note=note)

    def planned_epsilon(self) -> float:
        return Composition.of(c.cost for c in self.planned).epsilon(self.budget.delta)

    def spent_epsilon(self) -> float:
        if not self.spent:
            return 0.0
        return Composition.of(c.cost for c in self.spent).epsilon(self.budget.delta)

    def check_plan(self) -> None:
        eps = self.planned_epsilon()
        if eps > self.budget.epsilon * (1 + 1e-9):
            raise BudgetError(
                f"the plan spends ε={eps:.4g} at δ={self.budget.delta:.3g}, more than the budget "
                f"ε={self.budget.epsilon:.4g}. Per-stage split:\n{self.table(self.planned)}"
            )

    def spend(self, charge: Charge) -> None:
        if not isinstance(charge, Charge):
            raise BudgetError(f"a spend takes the Charge object that plan() returned, got {type(charge).__name__}")
        recorded = self.grouped(charge)
        if self.spent.count(recorded) < self.planned.count(recorded):
            self.spent.append(recorded)
            return
        raise BudgetError(
            f"unplanned privacy spend: stage {charge.stage!r}, mechanism {charge.mechanism!r}, "
            f"party {charge.party!r}, cost {charge.cost.describe()}; a mechanism spends only a Charge its "
            f"component planned (the same object, matched exactly), and each planned charge once"
        )

    def unspent(self) -> list[Charge]:
        remaining = list(self.spent)
        out = []
        for c in self.planned:
            if c in remaining:
                remaining.remove(c)
            else:
                out.append(c)
        return out

    def by_stage(self, charges: Sequence[Charge]) -> dict[str, float]:
        stages: dict[str, list[Cost]] = defaultdict(list)
        for c in charges:
            stages[c.stage].append(c.cost)
        return {s: Composition.of(cs).epsilon(self.budget.delta) for s, cs in stages.items()}

    def table(self, charges: Sequence[Charge] | None = None) -> str:
        charges = self.spent if charges is None else charges
        rows = [f"  {'stage':<28} {'charges':>7} {'ε alone (at budget δ)':>22}"]
        counts: dict[str, int] = defaultdict(int)
        for c in charges:
            counts[c.stage] += 1
        for stage, eps in self.by_stage(charges).items():
            rows.append(f"  {stage:<28} {counts[stage]:>7} {eps:>22.4g}")
        total = Composition.of(c.cost for c in charges).epsilon(self.budget.delta) if charges else 0.0
        rows.append(f"  {'total (composed)':<28} {len(charges):>7} {total:>22.4g}")
        rows.append(f"  {'budget':<28} {'':>7} {self.budget.epsilon:>22.4g}")
        return "\n".join(rows)

    def to_dict(self) -> dict[str, Any]:
        comp = Composition.of(c.cost for c in self.spent) if self.spent else None
        return {
            "noise": NOISE_LABELS[self.noise],
            "unit_of_privacy": "one person's whole record across all parties (add/remove neighbours)",
            "budget": self.budget.to_dict(),
            "spent_epsilon": self.spent_epsilon(),
            "planned_epsilon": self.planned_epsilon() if self.planned else 0.0,
            "spent_zcdp_rho": comp.zcdp_rho if comp else 0.0,
            "within_budget": self.spent_epsilon() <= self.budget.epsilon * (1 + 1e-9),
            "per_stage_epsilon": self.by_stage(self.spent),
            "per_party_epsilon": {
                # a charge with no party is a joint one (a centralised synthesizer, or a measurement that needs two
                # parties, such as the he encoder's): it counts against everyone, and is labelled so, not "None"
                (str(p) if p is not None else JOINT): Composition.of(c.cost for c in self.spent if c.party == p)
                .epsilon(self.budget.delta)
                for p in sorted({c.party for c in self.spent}, key=str)
            },
            "charges": [c.to_dict() for c in self.spent],
            "planned_but_unspent": [c.to_dict() for c in self.unspent()],
            **({"cross_party": {"queries": len(self.cross_party),
                                "through": sorted({f"{q['measure']} (trust = {q['trust']})" for q in self.cross_party}),
                                "answers": self.cross_party}} if self.cross_party else {}),
        }
