"""Before any row is read: the cross-party answers a vertical twin will ask, as a measure prices them
(`vertisynth validate --rows N`, issue 31).

A twin's plan fixes its probes: every cross-party pair once, each attribute on at most `probe_bins` bins, one answer
(the charges named `*cross_probe`; under trust "none" with many pairs a second stage, `*cross_reprobe`, priced on
the first pairs as another answer). Its adaptive answers follow from the data (which marginal crosses parties, on
which bins), so they are priced on a stand-in built from public facts only:

* the probes: each attribute on `probe_bins` equal-width bins, but for the twin that leaves the side of the party
  whose whole rows the measure sums unbinned (privmrf: `whole_party`), as the run asks them;
* how many: each planned marginal charge (`*_marginal`) taken to cross parties in the share of attribute pairs that
  cross (Adult, 2 parties of 8 and 7 attributes: 56 of 105 pairs; 27 marginals -> 15 answers; measured 11 and 14 on
  4,000-row runs);
* in one stage: a plan whose every charge is a marginal's (private_pgm's workload) knows every marginal before any
  answer, and the twin asks them together (`measure_many`): its cross-party ones are one answer of that many tables,
  not one answer each;
* the chosen pairs (`*_2way`: one charge a pair, mst and private_pgm; `*_2way_marginals`: one charge for k pairs,
  dpsyn, each pair at ρ/k, k taken as every pair): asked together once chosen (`measure_many`), so one answer of
  as many tables as the share of pairs that cross parties says, each one attribute against one (unbinned);
* which: the first answer a table of the first party's smallest pair of attributes that its whole rows do not
  carry (its smallest triple where they carry every pair) against one attribute of the second, so that the second
  party is priced for its encryption too (its one unbinned side encrypts), then one
  attribute against one, the cross-party pairs in turn from the median of their cells up (each answer one table,
  unbinned: an attribute coarsened at the party makes an answer cheaper to sum, not dearer to encrypt).

`answers(...)` returns them in the form `answers_cost` of a measure takes ({"domains", "queries", "sigma"}; the
stand-in's answers marked "adaptive": True, their tables follow the data).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.privacy import Charge

from .probes import width_bins

PROBE, REPROBE, MARGINAL = "cross_probe", "cross_reprobe", "_marginal"
PAIR, PAIRS = "_2way", "_2way_marginals"   # the chosen pairs: one charge each; one charge for all of them


def _domains(domain: Domain, owner: dict[str, str], attributes: Sequence[str],
             bins: dict[str, Any] | None = None) -> dict[str, Domain]:
    """Each party's public domain of `attributes` (sizes after `bins`)."""
    sizes: dict[str, dict[str, int]] = {}
    for a in dict.fromkeys(attributes):
        n = int(max(bins[a]) + 1) if bins and a in bins else domain.size(a)
        sizes.setdefault(owner[a], {})[a] = n
    return {p: Domain.from_sizes(s) for p, s in sizes.items()}


def answers(domain: Domain, partition: VerticalPartition, probe_bins: int, planned: Sequence[Charge],
            sigma_for_rho: Any, whole_party: str | None = None,
            absorbed: Callable[[str, tuple[str, ...], float], bool] | None = None,
            probe_stages: Sequence[tuple[Sequence[tuple[str, ...]], float]] = ()
            ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The twin's probe answer and the adaptive stand-in (module docstring), from the plan's charges, the public
    domain and the partition; and what was counted ({"probes", "adaptive", "marginals", "pairs", "stages": the
    answers, one a protocol stage; "filtered": the stages of `probe_stages`, where there are some}). `whole_party`: the party
    whose side the probes leave unbinned (the twin's probes sum that party's whole rows: `measure_probes(whole=
    True)`), None: both sides binned. `absorbed(party, side, σ)`: whether the measure sums that side from the
    party's whole rows (a joint block in their spare slots): the first answer's pair is then the smallest one that
    is not, so that it makes the second party encrypt as the runs do (issue 31: on the zoo and NLTCS the smallest
    pairs are joint blocks, and the stand-in priced no encryption for the second party). `probe_stages`: a twin's
    probes drawn from a filter, not planned (aim: `PlansProbeStages`), (pairs, σ) a stage, each attribute of more
    than `probe_bins` values on that many bins, as the run asks them (its bins of equal noisy mass: as many)."""
    owner = {a: p.name for p in partition for a in p.attributes}
    attrs = [a for a in domain.attributes if a in owner]
    pairs = [(a, b) for a, b in itertools.combinations(attrs, 2) if owner[a] != owner[b]]
    probes = [c for c in planned if c.mechanism.endswith(PROBE)]
    again = [c for c in planned if c.mechanism.endswith(REPROBE)]   # trust none, many pairs: a second stage
    margs = [c for c in planned if c.mechanism.endswith(MARGINAL)]
    chosen = [c for c in planned if c.mechanism.endswith(PAIR) and hasattr(c.cost, "rho")]
    vector = [c for c in planned if c.mechanism.endswith(PAIRS) and hasattr(c.cost, "rho")]   # Laplace: no twin
    out: list[dict[str, Any]] = []
    for staged, sigma in probe_stages:   # a twin's probes drawn from a filter (aim): its stages, from its plan
        bins = width_bins(domain.project(attrs), probe_bins)
        out.append({"domains": _domains(domain, owner, [x for p in staged for x in p], bins),
                    "queries": [((a,), (b,)) for a, b in staged], "sigma": float(sigma)})
    if probes and pairs:
        bins = {a: b for a, b in width_bins(domain.project(attrs), probe_bins).items() if owner[a] != whole_party}
        probed = pairs[: len(probes)]
        out.append({"domains": _domains(domain, owner, [x for p in probed for x in p], bins),
                    "queries": [((a,), (b,)) for a, b in probed], "sigma": sigma_for_rho(probes[0].cost.rho)})
        if again:   # which pairs follows from the first answers: priced on the first ones of the same bins
            out.append({"domains": _domains(domain, owner, [x for p in probed[:len(again)] for x in p], bins),
                        "queries": [((a,), (b,)) for a, b in probed[:len(again)]],
                        "sigma": sigma_for_rho(again[0].cost.rho)})
    total = len(attrs) * (len(attrs) - 1) // 2
    adaptive = math.ceil(len(margs) * len(pairs) / total) if margs and pairs else 0
    if adaptive:
        sigma = sigma_for_rho(margs[0].cost.rho)
        first, second = partition.names[0], partition.names[1]
        mine = sorted((a for a in attrs if owner[a] == first), key=lambda a: (domain.size(a), a))
        other = sorted((a for a in attrs if owner[a] == second), key=lambda a: (domain.size(a), a))
        ordered = sorted(pairs, key=lambda p: (domain.size(p[0]) * domain.size(p[1]), p))
        ordered = ordered[len(ordered) // 2:] + ordered[: len(ordered) // 2]
        duo = sorted(itertools.combinations(mine, 2), key=lambda b: (domain.project(b).size(), b))
        free = [b for b in duo if absorbed is None or not absorbed(first, b, sigma)]
        if duo and not free and len(mine) > 2:   # whole rows carry every pair: the smallest triple is not carried
            free = [min(itertools.combinations(mine, 3), key=lambda b: (domain.project(b).size(), b))]
        tables = [((free or duo)[0], (other[0],))] if duo else []
        tables += [((a,), (b,)) for a, b in itertools.islice(itertools.cycle(ordered), adaptive - len(tables))]
        tables = tables[:adaptive]
        if len(margs) == len(planned):   # nothing selects: every marginal known up front, asked in one stage
            out.append({"domains": _domains(domain, owner, [x for t in tables for side in t for x in side]),
                        "queries": tables, "sigma": sigma, "adaptive": True})
        else:
            for left, right in tables:
                out.append({"domains": _domains(domain, owner, left + right), "queries": [(left, right)],
                            "sigma": sigma, "adaptive": True})
    # the chosen pairs, asked together: one stage, the share of them that crosses parties, one attribute a side
    k = len(chosen) or (total if vector else 0)
    cross = math.ceil(k * len(pairs) / total) if k and pairs else 0
    if cross:
        sigma = sigma_for_rho(chosen[0].cost.rho if chosen else vector[0].cost.rho / k)
        ordered = sorted(pairs, key=lambda p: (domain.size(p[0]) * domain.size(p[1]), p))
        picked = ordered[len(ordered) // 2:][:cross] + ordered[: max(cross - (len(ordered) - len(ordered) // 2), 0)]
        out.append({"domains": _domains(domain, owner, [x for p in picked for x in p]),
                    "queries": [((a,), (b,)) for a, b in picked], "sigma": sigma, "adaptive": True})
    counted = {"filtered": len(probe_stages)} if probe_stages else {}
    return out, {"probes": len(probes) + len(again) + sum(len(p) for p, _ in probe_stages), "adaptive": adaptive,
                 "marginals": len(margs), **counted,
                 "pairs": cross, "stages": len(out)}
