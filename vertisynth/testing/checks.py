"""Per-kind conformance checks, in the style of scikit-learn's `parametrize_with_checks`.

    from vertisynth.testing.checks import parametrize_with_checks, registry_subjects

    @parametrize_with_checks(registry_subjects())
    def test_conformance(subject, check):
        check(subject)

A `Subject` names one component (kind, name, how to build a fresh instance, its config) and the
small public test bed it runs on (domain, parties, budget). `component_checks(subject)` yields
the checks that apply to its kind:

  all kinds     config round-trip (cattrs unstructure → structure) and unknown keys rejected;
                no global RNG (same seed → same output, different seeds → different output,
                np.random seeded globally to different values changes nothing and its state is untouched)
  synthesizer,  declared privacy cost present and within budget, for any budget and split (a
  encoder       Hypothesis property); plan() charges == charges spent after fit/encode (through the
                ledger); the empirical privacy audit of the measurement step against the declared
                cost (vertisynth.testing.audit)
  encoder       encode/estimate contract across the party boundary (messages validate, survive
                save/load, and the server's estimate from loaded messages equals the original)
  evaluator     no privacy charges; values within the declared [min, max]; real-vs-real is the best
                score and adding noise records never improves it; symmetry when "symmetric" is declared
  synthesizer   with "horizontal" (MeasuresMarginals): its marginal queries spend exactly the ρ given and
                declare at least the L2 sensitivity of their counts (√(number of marginals) for one record);
                fitted on the exact answers it samples records in the domain, about as many as were counted
  aligner       outputs row-aligned with domains unchanged; identical inputs give back the same
                multiset of records (the intersection and union of equal sets are that set);
                unequal inputs give aligned output or a clear vertisynth error

A failing check raises `ConformanceError` (or `PrivacyViolation` from the audit) naming the problem.
"""
from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from vertisynth.core.structuring import CONVERTER, structure
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError, VertisynthError
from vertisynth.core.factor import Factor
from vertisynth.core.interfaces import (Aligner, Encoder, Evaluator, MeasuresMarginals, PlanContext, Synthesizer,
                                       VerticalData)
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, PureDP
from vertisynth.core.registry import Registry, default_registry

from .audit import (AUDIT_LEVELS, AuditableMechanism, PrivacyViolation, audit, claimed_epsilon, claimed_profile,
                    default_level, looped)
from .power import samples_for_claim
from .strategies import adversarial_pairs

KINDS = ("synthesizer", "encoder", "evaluator", "aligner")


class ConformanceError(AssertionError):
    """A component breaks the contract of its kind."""


def _fail(subject: Subject, text: str) -> ConformanceError:
    return ConformanceError(f"{subject.kind} {subject.name!r}: {text}")


# -- the test bed ---------------------------------------------------------------------------------
# Six attributes (so 5-way evaluators apply), 288 cells, two parties: small enough to audit quickly.
DEFAULT_DOMAIN = Domain(("a0", "a1", "a2", "a3", "a4", "a5"), (2, 3, 4, 2, 3, 2))
DEFAULT_PARTIES = (("a0", "a1", "a2"), ("a3", "a4", "a5"))


def correlated_dataset(domain: Domain, n: int, seed: int = 0) -> Dataset:
    """A public test table with correlated columns (each column copies the previous one 60% of the time)."""
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, domain.shape[0], n)]
    for s in domain.shape[1:]:
        copy = rng.random(n) < 0.6
        cols.append(np.where(copy, cols[-1] % s, rng.integers(0, s, n)))
    return Dataset(np.column_stack(cols).astype(np.int64), domain)


@attrs.frozen
class Subject:
    """One component under test and its test bed.

    measure: (component, data: VerticalData, ledger, rng) -> array, the component's measurement
        step on the real code path (for synthesizers; default: fit then release the counts of a
        100-record sample, which is post-processing and so also auditable, but weaker).
    audit_mechanism: component -> AuditableMechanism, a vectorised sampling hook on Dataset inputs
        (replaces the looped real path; prove elsewhere that it matches it).
    audit_samples: fresh samples per side per pair (default: the audit level's count).
    audit_pairs: how many of the adversarial pairs to audit (they are ordered by suspicion).
    audit_sequential: phase 2 in looks, a pair stopping once every claim is cleared (`audit(sequential=)`:
        the same α, at most α less power; for looped audits whose claims are loose).
    neighbours: the neighbouring relation the component's guarantee is stated for: "add_remove"
        (unbounded DP, the project's default) or "substitute" (bounded DP, e.g. local randomizers that
        release one row per aligned record, whose record count is public).
    """

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    name: str
    factory: Callable[[Any], Any]
    config_cls: type | None = None
    params: dict[str, Any] = attrs.field(factory=dict)
    spec: Any = None
    domain: Domain = DEFAULT_DOMAIN
    parties: tuple[tuple[str, ...], ...] = DEFAULT_PARTIES
    budget: Budget = Budget(1.0, 1e-5)
    n_records: int = 200
    measure: Callable[..., np.ndarray] | None = None
    audit_mechanism: Callable[[Any], AuditableMechanism] | None = None
    audit_samples: int | None = None
    audit_pairs: int = 2
    audit_seed: int = 20261122
    audit_sequential: bool = False
    neighbours: str = attrs.field(default="add_remove", validator=attrs.validators.in_(("add_remove", "substitute")))

    @property
    def config(self) -> Any:
        if self.config_cls is None:
            return None
        return structure(self.params, self.config_cls, f"{self.kind} {self.name!r} params")

    def build(self) -> Any:
        return self.factory(self.config) if self.config_cls is not None else self.factory()

    @property
    def partition(self) -> VerticalPartition:
        return VerticalPartition.from_lists([list(p) for p in self.parties]).validate(self.domain)

    def context(self) -> PlanContext:
        return PlanContext(self.domain, self.partition, self.budget)

    def data(self, seed: int = 0) -> Dataset:
        return correlated_dataset(self.domain, self.n_records, seed)

    def vertical(self, data: Dataset) -> VerticalData:
        return VerticalData(self.partition, self.partition.views(data))

    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.kind}:{self.name}" + (f"[{extra}]" if extra else "")


def registry_subjects(registry: Registry | None = None, kinds: Iterable[str] = KINDS,
                      params: dict[tuple[str, str], Sequence[dict[str, Any]]] | None = None,
                      distribution: str | None = None,
                      overrides: dict[tuple[str, str], dict[str, Any]] | None = None,
                      **common: Any) -> list[Subject]:
    """A Subject for every registered component of `kinds` (from `distribution` only, when given:
    e.g. "vertisynth" for the built-ins, or your own package's name), with the default config or each
    params dict in `params[(kind, name)]`. `common` sets Subject fields for all (e.g. audit_samples=...),
    `overrides[(kind, name)]` for one component (e.g. its measure=... hook)."""
    registry = registry or default_registry()
    params = params or {}
    overrides = overrides or {}
    out = []
    for kind in kinds:
        for name in registry.names(kind):
            if distribution is not None and registry.provider(kind, name) != distribution:
                continue
            spec = registry.get(kind, name)
            fields = {**common, **overrides.get((kind, name), {})}
            for p in params.get((kind, name), [{}]):
                out.append(Subject(kind, name, spec.load_factory(), spec.load_config_cls(), dict(p), spec, **fields))
    return out


# -- helpers --------------------------------------------------------------------------------------
class AuditLedger(PrivacyLedger):
    """Accepts every spend without matching it to a plan: the audit draws thousands of outputs and
    checks the *noise*, while the ledger contract is checked separately."""

    def spend(self, charge: Charge) -> None:
        self.spent.append(charge)


def _plan(subject: Subject, component: Any) -> list[Charge]:
    charges = component.plan(subject.context())
    if not isinstance(charges, list) or not all(isinstance(c, Charge) for c in charges):
        raise _fail(subject, f"plan() must return a list of Charge objects, got {charges!r}")
    return charges


def _arrays(obj: Any) -> list[np.ndarray]:
    """Every numeric array inside a message / list of messages / dataset / factor, in a fixed order."""
    if isinstance(obj, Message):
        out = []
        for f in attrs.fields(type(obj)):
            out += _arrays(getattr(obj, f.name))
        return out
    if isinstance(obj, Dataset):
        return [obj.codes]
    if isinstance(obj, Factor):
        return [obj.values]
    if isinstance(obj, np.ndarray):
        return [obj] if obj.dtype.kind in "biuf" else []
    if isinstance(obj, dict):
        return [a for k in obj for a in _arrays(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [a for v in obj for a in _arrays(v)]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return [np.asarray([obj], float)]
    return []


def _flat(obj: Any) -> np.ndarray:
    arrays = _arrays(obj)
    return np.concatenate([a.astype(float).ravel() for a in arrays]) if arrays else np.zeros(0)


def _run_once(subject: Subject, seed: int) -> np.ndarray:
    """Build a fresh component, plan, run it on the test bed with rng(seed); its output, flattened."""
    component = subject.build()
    data = subject.data()
    rng = np.random.default_rng(seed)
    if subject.kind == "synthesizer":
        ledger = AuditLedger(subject.budget)
        ledger.plan(_plan(subject, component))
        component.fit(subject.vertical(data), ledger, rng)
        return _flat(component.sample(50, rng))
    if subject.kind == "encoder":
        ledger = AuditLedger(subject.budget)
        ledger.plan(_plan(subject, component))
        views = subject.partition.views(data)
        return _flat([component.encode(p, views[p], ledger, rng) for p in subject.partition.names])
    if subject.kind == "evaluator":
        component.plan(subject.context())
        other = correlated_dataset(subject.domain, subject.n_records, seed=1)
        return _flat(list(component.evaluate(data, other, rng).values()))
    views = subject.partition.views(data)
    ledger = AuditLedger(subject.budget)
    ledger.plan(_plan(subject, component))
    aligned, _info = component.align(views, ledger, rng)
    return _flat([aligned[p] for p in subject.partition.names])


# -- checks for every kind ------------------------------------------------------------------------
BASES = {"synthesizer": Synthesizer, "encoder": Encoder, "evaluator": Evaluator, "aligner": Aligner}


def check_implements_interface(subject: Subject) -> None:
    """The factory builds an instance of the kind's abstract base class (the pipeline refuses others)."""
    component = subject.build()
    base = BASES[subject.kind]
    if not isinstance(component, base):
        raise _fail(subject, f"the factory built a {type(component).__name__}, which is not a "
                             f"vertisynth.core.interfaces.{base.__name__}")


def check_config_roundtrip(subject: Subject) -> None:
    """Config unstructures to TOML-able data and structures back to an equal config; unknown keys fail."""
    if subject.config_cls is None:
        return
    config = subject.config
    data = CONVERTER.unstructure(config)
    try:
        back = structure(data, subject.config_cls, "round-trip")
    except ConfigError as exc:
        raise _fail(subject, f"config does not survive unstructure/structure: {exc}") from None
    if back != config:
        raise _fail(subject, f"config round-trip changed it: {config!r} -> {data!r} -> {back!r}")
    try:
        structure({**data, "no_such_key_xyz": 1}, subject.config_cls, "probe")
    except ConfigError:
        pass
    else:
        raise _fail(subject, "config accepts an unknown key 'no_such_key_xyz'; structure with forbid_extra_keys")


@contextlib.contextmanager
def watch_global_rng() -> Iterator[list[str]]:
    """Record every call to numpy's global generator (`np.random.normal`, `.choice`, `.seed`, `.set_state`...)
    made through the `np.random` module while the block runs; the list of names called is yielded. It sees a
    wrapped library that draws from it and puts the state back afterwards, which a state comparison misses."""
    glob = np.random.mtrand._rand
    names = [n for n in dir(np.random) if n != "get_state" and (
        getattr(getattr(np.random, n), "__self__", None) is glob or n in ("seed", "ranf", "sample"))]
    called: list[str] = []
    originals = {n: getattr(np.random, n) for n in names}

    def spy(name: str, fn: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            return fn(*args, **kwargs)
        return call

    for n, fn in originals.items():
        setattr(np.random, n, spy(n, fn))
    try:
        yield called
    finally:
        for n, fn in originals.items():
            setattr(np.random, n, fn)


def check_no_global_rng(subject: Subject) -> None:
    """Same explicit seed → same output whatever np.random's global seed; different seeds → different
    output (for randomised kinds); np.random's and Python random's global states are left untouched; and a
    synthesizer, encoder or aligner calls none of numpy's global generator functions (`watch_global_rng`), not
    even one that saves and restores its state around a wrapped library: that noise would come from a seeded
    Mersenne Twister, never from the run's generator or the OS CSPRNG."""
    saved, py_saved = np.random.get_state(), random.getstate()
    try:
        np.random.seed(1)
        state, py_state = np.random.get_state(), random.getstate()
        with watch_global_rng() as called:
            first = _run_once(subject, 7)
        if called and subject.kind != "evaluator":
            raise _fail(subject, f"it calls numpy's global RNG (np.random.{', np.random.'.join(sorted(set(called)))}"
                                 "), directly or through a library it wraps, even if it puts the state back: draw from the rng argument "
                                 "(give the library a Generator made from it, where it takes one) or charge a "
                                 "mechanism of your own instead")
        after = np.random.get_state()
        if not (np.array_equal(after[1], state[1]) and after[2] == state[2]):
            raise _fail(subject, "it draws from numpy's global RNG (np.random.*); take the explicit Generator instead")
        if random.getstate() != py_state:
            raise _fail(subject, "it draws from Python's global `random` module; take the explicit Generator instead")
        np.random.seed(2)
        second = _run_once(subject, 7)
    finally:
        np.random.set_state(saved)  # leave the process as we found it
        random.setstate(py_saved)
    if first.shape != second.shape or not np.array_equal(first, second):
        raise _fail(subject, "the same seed gave different outputs (global RNG, unseeded default_rng(), or "
                             "other hidden state)")
    if subject.kind in ("synthesizer", "encoder"):
        other = _run_once(subject, 8)
        if first.shape == other.shape and np.array_equal(first, other):
            raise _fail(subject, "different seeds gave identical outputs: the rng argument is ignored")


# -- privacy checks (synthesizers, encoders) ------------------------------------------------------
def check_declares_cost(subject: Subject) -> None:
    """plan() declares a positive privacy cost from public facts only, within the budget, per known party."""
    component = subject.build()
    charges = _plan(subject, component)
    if not charges:
        raise _fail(subject, "plan() declares no privacy charges, but a component that reads data must")
    parties = set(subject.partition.names) | {None}
    for c in charges:
        if c.party not in parties:
            raise _fail(subject, f"charge {c} names party {c.party!r}, not one of {sorted(map(str, parties - {None}))}")
    eps = claimed_epsilon([c.cost for c in charges], subject.budget.delta)
    if not eps <= subject.budget.epsilon * (1 + 1e-9):
        raise _fail(subject, f"plan() declares ε={eps:.4g}, more than the budget ε={subject.budget.epsilon:.4g}")
    again = _plan(subject, subject.build())
    if again != charges:
        raise _fail(subject, "plan() is not a function of the public context: two calls gave different charges")


def check_plan_fits_any_budget(subject: Subject) -> None:
    """Property (Hypothesis, derandomised): for any budget and any vertical split of the test domain,
    plan() either fits the budget or refuses with a clear BudgetError/ConfigError."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from .strategies import budgets, vertical_partitions

    @settings(max_examples=30, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(budgets(min_epsilon=0.01, max_epsilon=20.0, deltas=(0.0, 1e-9, 1e-5, 1e-2)),
           vertical_partitions(subject.domain, max_parties=3), st.sampled_from([(), (0.5,)]))
    def prop(budget: Budget, partition: VerticalPartition, before: tuple[float, ...]) -> None:
        planned_before = tuple(PureDP(budget.epsilon * f) for f in before)  # an earlier stage took half
        ctx = PlanContext(subject.domain, partition, budget, planned_before)
        try:
            charges = subject.build().plan(ctx)
        except (BudgetError, ConfigError):
            return  # a clear refusal (e.g. a Gaussian mechanism with δ = 0) is allowed
        eps = claimed_epsilon([*planned_before, *(c.cost for c in charges)], budget.delta)
        if not eps <= budget.epsilon * (1 + 1e-6):
            raise _fail(subject, f"with budget (ε={budget.epsilon:.4g}, δ={budget.delta:.3g}), "
                                 f"{len(partition)} parties and {planned_before} planned before, plan() declares "
                                 f"a total ε={eps:.4g}: over budget")

    prop()


PLAN_CPU_SECONDS = 0.05   # per call: the application calls plan() ~30 times (validate, the kit, studies' cells)


def check_plan_is_cheap(subject: Subject) -> None:
    """plan() is called often (validation, every study cell, the kit's properties): it must cost well under
    PLAN_CPU_SECONDS of CPU per call, i.e. work from the public context only, never fit or simulate."""
    import time

    component = subject.build()
    ctx = subject.context()
    try:
        component.plan(ctx)   # the first call may import lazily
    except (BudgetError, ConfigError):
        return   # refusing this context is check_plan_fits_any_budget's business
    calls, t0 = 5, time.process_time()
    for _ in range(calls):
        component.plan(ctx)
    per_call = (time.process_time() - t0) / calls
    if per_call > PLAN_CPU_SECONDS:
        raise _fail(subject, f"plan() takes {per_call * 1000:.0f} ms of CPU per call (limit {PLAN_CPU_SECONDS * 1000:.0f} "
                             "ms): it is called ~30 times per run; compute costs from the public context only")


def check_ledger_matches_plan(subject: Subject) -> None:
    """Run on real data with a strict ledger: every spend matches a planned charge and all are spent."""
    component = subject.build()
    ledger = PrivacyLedger(subject.budget)
    charges = _plan(subject, component)
    ledger.plan(charges)
    ledger.check_plan()
    data = subject.data()
    rng = np.random.default_rng(0)
    try:
        if subject.kind == "synthesizer":
            component.fit(subject.vertical(data), ledger, rng)
        else:
            views = subject.partition.views(data)
            for p in subject.partition.names:
                component.encode(p, views[p], ledger, rng)
    except BudgetError as exc:
        raise _fail(subject, f"spent something its plan did not declare: {exc}") from None
    unspent = ledger.unspent()
    if unspent or len(ledger.spent) != len(charges):
        raise _fail(subject, f"declared {len(charges)} charges but spent {len(ledger.spent)}; planned but not "
                             f"spent: {[c.to_dict() for c in unspent]}")


def _measurement(subject: Subject, component: Any) -> AuditableMechanism:
    """The measurement step as an audit sampler over joined Datasets (one person = one full row)."""
    if subject.audit_mechanism is not None:
        return subject.audit_mechanism(component)
    part = subject.partition

    if subject.kind == "encoder":
        def one(data: Dataset, rng: np.random.Generator) -> np.ndarray:
            views = part.views(data)
            ledger = AuditLedger(subject.budget)
            return _flat([component.encode(p, views[p], ledger, rng) for p in part.names])
    elif subject.measure is not None:
        def one(data: Dataset, rng: np.random.Generator) -> np.ndarray:
            return _flat(subject.measure(component, VerticalData(part, part.views(data)), AuditLedger(subject.budget), rng))
    else:
        def one(data: Dataset, rng: np.random.Generator) -> np.ndarray:
            component.fit(VerticalData(part, part.views(data)), AuditLedger(subject.budget), rng)
            return default_release(component, subject.domain, subject.n_records, rng)
    return looped(one)


def default_release(synth: Any, domain: Domain, n: int, rng: np.random.Generator) -> np.ndarray:
    """What the audit reads from a fitted synthesizer without a `measure` hook (post-processing of its release,
    so a valid output to audit): the number of rows it draws by default (`sample(None)`: a library that draws
    the true record count shows here at once) and the 1-way counts of `n` sampled rows. The 1-way counts tell
    the neighbours apart far better than the full contingency table of a small sample (288 sparse cells on
    the default test bed: a tenfold under-claim passed at 20,000 samples; docs/testing.md)."""
    default_rows = synth.sample(None, rng).n
    rows = synth.sample(n, rng)
    # count_vector: counts(...).values without a Factor and sub-domain each (a looped audit calls this ~10⁵ times)
    return np.concatenate([[float(default_rows)], *(rows.count_vector((a,)) for a in domain.attributes)])


def check_privacy_audit(subject: Subject) -> None:
    """Empirical audit of the measurement step on adversarial neighbouring pairs against the declared
    cost, at every (ε, δ) point of `claimed_profile` (shared samples; α split over the points)."""
    component = subject.build()
    charges = _plan(subject, component)
    points = claimed_profile([c.cost for c in charges], subject.budget.delta)
    if not points:
        raise _fail(subject, f"its declared cost {[c.cost.describe() for c in charges]} promises no finite ε "
                             f"at any δ < 1 it can be audited at")
    base = subject.data().take(np.arange(3)) if subject.neighbours == "substitute" else None
    pairs = [p for p in adversarial_pairs(subject.domain, base) if p.relation == subject.neighbours]
    pairs = pairs[: subject.audit_pairs]
    level = default_level()
    n = subject.audit_samples or audit_samples_for(points, level, len(pairs))
    report = audit(_measurement(subject, component), pairs, claims=points, level=level, n_samples=n,
                   seed=subject.audit_seed, name=subject.label(), sequential=subject.audit_sequential)
    if not report.passed and subject.kind == "synthesizer" and subject.measure is None \
            and subject.audit_mechanism is None:
        raise PrivacyViolation(report.message() + "\n  (audited: the number of rows sample(None) draws, then the "
                               "1-way counts of a sample. Either the declared cost is below the noise drawn, or a "
                               "default row count that follows the true record count, which is not DP: draw it "
                               "from a noisy count)")
    report.assert_ok()


def audit_samples_for(points: Sequence[tuple[float, float]], level: str, n_pairs: int = 1) -> int:
    """Fresh samples per side for auditing these claims: the level's count, or more where the claim needs it
    (`power.samples_for_claim`: a violation twice the claim certified 9 times in 10; it grows like 1/ε²), at most
    the `thorough` level's."""
    need = max(samples_for_claim(e, d, n_pairs=n_pairs, n_claims=len(points)) for e, d in points)
    return int(min(max(AUDIT_LEVELS[level], need), AUDIT_LEVELS["thorough"]))


# -- encoders -------------------------------------------------------------------------------------
def check_encoder_contract(subject: Subject) -> None:
    """Messages validate, carry their party, survive save/load; the server estimates from messages only."""
    import tempfile
    from pathlib import Path

    component = subject.build()
    ledger = AuditLedger(subject.budget)
    ledger.plan(_plan(subject, component))
    views = subject.partition.views(subject.data())
    rng = np.random.default_rng(0)
    messages = []
    for p in subject.partition.names:
        msg = component.encode(p, views[p], ledger, rng)
        if not isinstance(msg, Message):
            raise _fail(subject, f"encode() returned {type(msg).__name__}, not a vertisynth Message")
        if msg.party != p:
            raise _fail(subject, f"the message from party {p!r} says it comes from {msg.party!r}")
        msg.validate()
        messages.append(msg)
    with tempfile.TemporaryDirectory() as tmp:
        loaded = [Message.load(m.save(Path(tmp) / f"{i}.npz")) for i, m in enumerate(messages)]
    first = [subject.parties[0][0]]
    queries = [first]
    if len(subject.parties) > 1:
        queries.append([subject.parties[0][0], subject.parties[1][0]])  # a cross-party marginal
    for attrs_ in queries:
        est = component.estimate(messages, attrs_)
        if not isinstance(est, Factor) or set(est.domain.attributes) != set(attrs_):
            raise _fail(subject, f"estimate(messages, {attrs_}) must return a Factor on {attrs_}, got {est!r}")
        if est.values.shape != est.domain.shape or not np.all(np.isfinite(est.values)):
            raise _fail(subject, f"estimate on {attrs_} has shape {est.values.shape} or non-finite values")
        again = component.estimate(loaded, attrs_)
        if not np.allclose(again.transpose(est.domain.attributes).values, est.values, equal_nan=False):
            raise _fail(subject, f"estimate on {attrs_} from messages loaded from disk differs from the original")


# -- evaluators -----------------------------------------------------------------------------------
def _scores(component: Any, real: Dataset, synth: Dataset, seed: int = 0) -> dict[str, float]:
    return component.evaluate(real, synth, np.random.default_rng(seed))


def _noise_rows(domain: Domain, n: int) -> np.ndarray:
    """Records far from `correlated_dataset`: every attribute at its last code (a corner cell)."""
    return np.tile(np.array(domain.shape, dtype=np.int64) - 1, (n, 1))


def check_evaluator_no_charges(subject: Subject) -> None:
    """Evaluators read real data for scoring only; they may not declare privacy charges."""
    if subject.build().plan(subject.context()):
        raise _fail(subject, "declares privacy charges; evaluators are not DP and may not spend budget")


def check_evaluator_range(subject: Subject) -> None:
    """Every value is finite and within the spec's [min_value, max_value]."""
    component = subject.build()
    lo = getattr(subject.spec, "min_value", -np.inf)
    hi = getattr(subject.spec, "max_value", np.inf)
    real = subject.data(0)
    cases = {"independent table": correlated_dataset(subject.domain, subject.n_records, 1),
             "itself": real,
             "a single corner cell": Dataset(_noise_rows(subject.domain, 30), subject.domain)}
    for what, synth in cases.items():
        for key, v in _scores(component, real, synth).items():
            if not (np.isfinite(v) and lo - 1e-12 <= v <= hi + 1e-12):
                raise _fail(subject, f"{key} = {v} against {what} is outside the declared range [{lo}, {hi}]")


def check_evaluator_ordering(subject: Subject) -> None:
    """The real table scores best against itself, and mixing in more noise records never improves a score."""
    component = subject.build()
    goal = getattr(subject.spec, "goal", "minimize")
    sign = 1.0 if goal == "minimize" else -1.0
    real = subject.data(0)
    chain = []
    for k in (0, real.n // 4, real.n, 4 * real.n):
        synth = Dataset(np.vstack([real.codes, _noise_rows(subject.domain, k)]), subject.domain)
        chain.append((k, _scores(component, real, synth)))
    for (k0, a), (k1, b) in zip(chain, chain[1:]):
        for key in a:
            if sign * b[key] < sign * a[key] - 1e-9:
                raise _fail(subject, f"{key} improved from {a[key]:.6g} to {b[key]:.6g} when noise records grew "
                                     f"from {k0} to {k1} (goal: {goal})")


def check_evaluator_symmetry(subject: Subject) -> None:
    """For evaluators declaring the "symmetric" capability: score(A, B) == score(B, A)."""
    if "symmetric" not in getattr(subject.spec, "capabilities", ()):
        return
    component = subject.build()
    a, b = subject.data(0), correlated_dataset(subject.domain, subject.n_records // 2, 3)
    ab, ba = _scores(component, a, b), _scores(component, b, a)
    for key in ab:
        if not np.isclose(ab[key], ba[key], rtol=1e-9, atol=1e-12):
            raise _fail(subject, f"declares 'symmetric' but {key}(A, B) = {ab[key]} != {key}(B, A) = {ba[key]}")


def check_evaluator_rejects_mismatched_domains(subject: Subject) -> None:
    """Tables on different domains give a clear vertisynth error, not a numpy traceback."""
    component = subject.build()
    real = subject.data(0)
    other = Domain(real.domain.attributes, tuple(s + 1 for s in real.domain.shape))
    try:
        _scores(component, real, Dataset(real.codes, other))
    except VertisynthError:
        return
    except Exception as exc:  # noqa: BLE001 — the point is to report the wrong kind of error
        raise _fail(subject, f"mismatched domains raised {type(exc).__name__}: {exc} (expected a VertisynthError)")
    raise _fail(subject, "scored tables with different domains without complaint")


# -- aligners -------------------------------------------------------------------------------------
def _records_multiset(views: dict[str, Dataset], names: Sequence[str]) -> list[tuple[int, ...]]:
    joined = np.hstack([views[p].codes for p in names])
    return sorted(map(tuple, joined.tolist()))


def check_aligner_set_semantics(subject: Subject) -> None:
    """Outputs are row-aligned with unchanged domains and JSON-able info; identical, already aligned
    inputs come back as the same multiset of joined records (A ∩ A = A ∪ A = A)."""
    component = subject.build()
    data = subject.data()
    views = subject.partition.views(data)
    ledger = AuditLedger(subject.budget)
    ledger.plan(_plan(subject, component))
    out, info = component.align(views, ledger, np.random.default_rng(0))
    names = subject.partition.names
    if set(out) != set(names):
        raise _fail(subject, f"returned views for {sorted(out)}, expected {sorted(names)}")
    sizes = {p: out[p].n for p in names}
    if len(set(sizes.values())) != 1:
        raise _fail(subject, f"output is not row-aligned: row counts {sizes}")
    for p in names:
        if out[p].domain != views[p].domain:
            raise _fail(subject, f"changed party {p!r}'s domain from {views[p].domain} to {out[p].domain}")
    try:
        json.dumps(info)
    except TypeError as exc:
        raise _fail(subject, f"info is not JSON-able: {exc}") from None
    if _records_multiset(out, names) != _records_multiset(views, names):
        raise _fail(subject, "identical, aligned inputs did not come back as the same set of records")


def check_aligner_unequal_inputs(subject: Subject) -> None:
    """Parties with different row counts: row-aligned output, or a clear vertisynth error."""
    component = subject.build()
    views = subject.partition.views(subject.data())
    first = subject.partition.names[0]
    views[first] = views[first].take(np.arange(views[first].n - 5))
    ledger = AuditLedger(subject.budget)
    ledger.plan(_plan(subject, component))
    try:
        out, _ = component.align(views, ledger, np.random.default_rng(0))
    except VertisynthError:
        return
    except Exception as exc:  # noqa: BLE001
        raise _fail(subject, f"unequal inputs raised {type(exc).__name__}: {exc} (expected a VertisynthError)")
    if len({v.n for v in out.values()}) != 1:
        raise _fail(subject, "unequal inputs gave output that is not row-aligned")


def check_horizontal_contract(subject: Subject) -> None:
    """MeasuresMarginals (the [collab] mode's contract): queries cost exactly ρ, never understate the L2
    sensitivity of their counts, and fitting on exact answers gives records of the domain. A config the
    horizontal mode cannot run must say so with a ConfigError (e.g. private_pgm with MST)."""
    component = subject.build()
    rho = 0.37
    try:
        queries = component.marginal_queries(subject.domain, rho)
    except ConfigError:
        return
    except Exception as exc:  # noqa: BLE001
        raise _fail(subject, f"marginal_queries raised {type(exc).__name__}: {exc} (expected a ConfigError)")
    total = sum(q.rho for q in queries)
    if not queries or not np.isclose(total, rho, rtol=1e-9):
        raise _fail(subject, f"marginal_queries(ρ={rho}) spends ρ={total:.6g} in {len(queries)} queries")
    for q in queries:
        for m in q.marginals:
            subject.domain.check(m)
        if q.l2_sensitivity < np.sqrt(len(q.marginals)) * (1 - 1e-12):
            raise _fail(subject, f"query {q.name!r} declares L2 sensitivity {q.l2_sensitivity:.4g}, below "
                                 f"√{len(q.marginals)} (one record adds 1 to a cell of each of its marginals)")
    data = subject.data()
    answers = [np.concatenate([data.counts(list(m)).values.ravel() for m in q.marginals]).astype(float)
               for q in queries]
    component.fit_marginals(subject.domain, queries, answers, [1e-6] * len(queries), np.random.default_rng(0))
    out = component.sample(None, np.random.default_rng(1))
    if not isinstance(out, Dataset) or out.domain.attributes != subject.domain.attributes:
        raise _fail(subject, "after fit_marginals, sample() did not return records of the domain")
    if abs(out.n - data.n) > max(2, 0.05 * data.n):
        raise _fail(subject, f"fitted on exact counts of {data.n} records, it sampled {out.n}")


# -- the collection -------------------------------------------------------------------------------
CHECKS: dict[str, tuple[Callable[[Subject], None], ...]] = {
    "synthesizer": (check_implements_interface, check_config_roundtrip, check_declares_cost,
                    check_plan_fits_any_budget, check_plan_is_cheap, check_ledger_matches_plan,
                    check_no_global_rng, check_privacy_audit),
    "encoder": (check_implements_interface, check_config_roundtrip, check_declares_cost,
                check_plan_fits_any_budget, check_plan_is_cheap, check_ledger_matches_plan,
                check_no_global_rng, check_encoder_contract, check_privacy_audit),
    "evaluator": (check_implements_interface, check_config_roundtrip, check_evaluator_no_charges, check_evaluator_range,
                  check_evaluator_ordering, check_evaluator_symmetry,
                  check_evaluator_rejects_mismatched_domains, check_no_global_rng),
    "aligner": (check_implements_interface, check_config_roundtrip, check_aligner_set_semantics, check_aligner_unequal_inputs,
                check_no_global_rng),
}


# checks chosen by what a component declares it can do (its interfaces and capability Protocols), as
# scikit-learn's estimator tags choose theirs
CAPABILITY_CHECKS: dict[type, tuple[Callable[[Subject], None], ...]] = {
    MeasuresMarginals: (check_horizontal_contract,),
}


def component_checks(subject: Subject) -> Iterator[tuple[Subject, Callable[[Subject], None]]]:
    """(subject, check) pairs for every check that applies to the subject's kind and capabilities."""
    for check in CHECKS[subject.kind]:
        yield subject, check
    component = subject.build()
    for capability, checks in CAPABILITY_CHECKS.items():
        if isinstance(component, capability):
            for check in checks:
                yield subject, check


def _entry(table: dict, subject: Subject, check: Callable) -> str | None:
    """The reason listed for this subject's params variant (its label), else for its (kind, name)."""
    for key in (subject.label(), (subject.kind, subject.name)):
        if (reason := table.get(key, {}).get(check.__name__)) is not None:
            return reason
    return None


def parametrize_with_checks(subjects: Iterable[Subject],
                            skip: dict[tuple[str, str] | str, dict[str, str]] | None = None,
                            expected_failures: dict[tuple[str, str] | str, dict[str, str]] | None = None):
    """A pytest.mark.parametrize("subject, check", ...) over every subject's checks, with readable ids.

    skip / expected_failures: {(kind, name) or a subject's label: {check name: reason}}; a label
    ("synthesizer:vertimrf[encoder=grr]", see Subject.label) picks one params variant and wins over its
    (kind, name). An expected failure is a strict xfail, so the suite turns red when the component gets
    fixed and the entry is stale.
    """
    import pytest

    skip = skip or {}
    expected_failures = expected_failures or {}
    cases = []
    for s in subjects:
        for _, c in component_checks(s):
            marks = []
            if (reason := _entry(skip, s, c)) is not None:
                marks.append(pytest.mark.skip(reason=reason))
            if (reason := _entry(expected_failures, s, c)) is not None:
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            cases.append(pytest.param(s, c, marks=marks, id=f"{s.label()}-{c.__name__}"))
    return pytest.mark.parametrize("subject, check", cases)
