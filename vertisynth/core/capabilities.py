"""Optional capabilities a component may offer beyond its base interface, declared as `typing.Protocol`s.

The pipeline, the cross-machine roles and the conformance kit check them with `isinstance` (never by probing
for a method name), so a plugin author sees here everything the application may call. Implement the methods
with these signatures; inheriting from the Protocol is optional but documents the intent.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .dataset import Dataset
from .messages import Message
from .privacy import PrivacyLedger


@runtime_checkable
class PartyServerSplit(Protocol):
    """A vertical synthesizer whose fit splits into a party side (own columns → messages) and a server side
    (messages only): what `vertisynth party synth` and `vertisynth server` run on separate machines."""

    def party_rngs(self, rng: np.random.Generator) -> tuple[np.random.Generator, dict[str, np.random.Generator]]:
        """The key-agreement stream (shared by the parties, never the server) and one stream per party."""

    def party_step(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator) -> list[Message]:
        """Everything one party computes from its own columns, spending its planned charges."""

    def server_step(self, messages: Sequence[Message]) -> None:
        """Fit the model from every party's messages (no rows)."""

    def needs_keys(self) -> bool:
        """Whether the parties must agree hash keys hidden from the server first (`vertisynth party keys`)."""

    def set_keys(self, keys: Mapping[str, Any]) -> None:
        """Keys agreed in an earlier step, for the parties in `keys`."""

    def agree_keys(self, key_rng: np.random.Generator) -> None:
        """The one-process simulation's stand-in for the key agreement."""

    def set_key_context(self, context: bytes) -> None:
        """Bind the simulated key agreement to a run (so a simulation reproduces a run across machines)."""


@runtime_checkable
class StepsInChunks(Protocol):
    """A party/server synthesizer whose party step reads the party's table as a stream of chunks (counts and
    a map over chunks), so a run never holds the table whole (`stream = true`, `party synth --csv`)."""

    def chunk_rows(self) -> int:
        """Rows per chunk (the memory setting)."""

    def party_step_chunks(self, party: str, domain: Any, chunks: Any, ledger: PrivacyLedger,
                          rng: np.random.Generator, scheduler: Any = None) -> list[Message]:
        """`party_step` on a re-startable stream of (global ids, rows) chunks; the same messages."""

    def streams_parties(self) -> bool:
        """Whether this configuration's fit is the party steps then the server step (no interactive rounds)."""

    def party_steps(self, steps: Any, ledger: PrivacyLedger) -> list[Message]:
        """Run `steps(party, ledger)` for every party (at once, if so configured); their messages in party order."""


@runtime_checkable
class SamplesInBlocks(Protocol):
    """A synthesizer that draws its records in blocks (`GraphicalModel.sample_blocks`): a run samples, decodes
    and (with `stream = true`) writes one block of the config's `sample_block_rows` at a time."""

    def sample_blocks(self, n: int | None, rng: np.random.Generator, block_rows: int) -> Iterator[Dataset]:
        """The records of `sample(n, rng)` as consecutive blocks of at most `block_rows` rows (n None: its own
        default count); at the sampler's default block size their concatenation is `sample(n, rng)`."""


@runtime_checkable
class ChoosesSampling(Protocol):
    """A synthesizer's config that says how records are drawn from its model: "sample" (independent draws) or
    "round" (mbi's rounding: a block's counts rounded, so a block holds at most HYPERGEOMETRIC_MAX records)."""

    sampling: str


@runtime_checkable
class NamesEncoder(Protocol):
    """A synthesizer's config that names the encoder its parties measure with (VertiMRF's `encoder`)."""

    encoder: str


@runtime_checkable
class ReportsModel(Protocol):
    """A synthesizer that describes what it built (cliques, selected marginals...) for the report."""

    def model_details(self) -> dict[str, Any]: ...


@runtime_checkable
class HasGraphicalModel(Protocol):
    """A synthesizer whose fit ends in a graphical model that it samples from. The pipeline keeps the model and
    writes it beside the table (`model.npz`, a DP release): more rows are then drawn from it without spending."""

    def fitted_model(self) -> tuple[Any, str]:
        """(the fitted `vertisynth.pgm.GraphicalModel`, its sampling method: "sample" or "round")."""


@runtime_checkable
class ReportsBudgetSplit(Protocol):
    """A synthesizer that splits its budget between phases: the fractions of its zCDP ρ, for the report."""

    def budget_split(self) -> dict[str, float]: ...


@runtime_checkable
class HasPrivacyNotes(Protocol):
    """A component with caveats on its guarantee (e.g. bounded neighbours) that the summary must show."""

    def privacy_notes(self) -> list[str]: ...


@runtime_checkable
class SharedKeyEncoder(Protocol):
    """An encoder whose parties need hash keys common to them and unknown to the server (DPFM)."""

    def agree_keys(self, rng: np.random.Generator | None) -> dict[str, Any]: ...

    def set_keys(self, keys: dict[str, Any]) -> None: ...


@runtime_checkable
class EstimatesWithVariance(Protocol):
    """An encoder whose server side returns a marginal estimate together with its per-cell variance."""

    def estimate_with_variance(self, messages: Sequence[Message], attrs_: Sequence[str]) -> Any: ...


@runtime_checkable
class ReleasesNoisyCount(Protocol):
    """An encoder whose messages carry a DP estimate of the record count n̂ (with its variance)."""

    def noisy_count(self, messages: Sequence[Message]) -> tuple[float, float]: ...


@runtime_checkable
class MeasuresJointly(Protocol):
    """An encoder whose parties measure cross-party marginals together by an interactive protocol (encoder "he":
    exact counts under homomorphic encryption, two-sided noise) instead of each releasing sketches alone. A query
    is (attributes of one party, attributes of another); the answers are messages with noisy tables."""

    def selection_queries(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """The cross-party pairs measured (with a small share) for the selection scores, fixed at plan time."""

    def measure(self, views: Mapping[str, Dataset], queries: Sequence[tuple[tuple[str, ...], tuple[str, ...]]],
                stage: str, ledger: PrivacyLedger, rngs: Mapping[str, np.random.Generator]) -> list[Message]:
        """Run the protocol between the parties holding `views` for `queries`, spending `stage`'s planned charge."""

    def cross_party_entries(self, messages: Sequence[Message], stage: str) -> list[dict[str, Any]]:
        """The ledger's record (`PrivacyLedger.cross_party`) of the cross-party tables that `messages` of `stage`
        hold (attributes, parties, measure, trust, stage, released variance), sorted by attributes: what the
        server received, written alike by the one-process run and the deploy server."""


@runtime_checkable
class AlignsRows(Protocol):
    """An aligner that aligns ID-keyed party files from their identifiers alone (`stream = true`): the parties'
    row maps, not the tables (the same protocol run, randomness and info as `align`)."""

    def align_rows(self, ids: Mapping[str, Sequence[Any]], ledger: PrivacyLedger, rng: np.random.Generator,
                   domains: Mapping[str, Any] | None = None, marginals: Any = None) -> Any:
        """{party: rows} maps (`rows`, `real_everywhere()`) and the report's info (`info`)."""


@runtime_checkable
class AlignsAcrossMachines(Protocol):
    """An aligner whose protocol runs with each party on its own machine (`vertisynth party align`): the deploy
    driver moves its round messages in signed envelopes and knows nothing of what they hold."""

    def party_ids(self, party: str, raw: Sequence[Any]) -> tuple[list[str], np.ndarray]:
        """This party's identifiers as the protocol takes them (normalised, deduplicated) and the row of each."""

    def round_party(self, party: str, ring: Sequence[str], ids: Sequence[str], rng: np.random.Generator | None,
                    workers: Any) -> Any:
        """This party's protocol state: `rounds`, `expected(r)` ({sender: messages}), `step(r, inbox)` (the
        messages to send: `to`, `kind`, `filename`, `to_bytes()`) and, after the last round, `result` (`protocol`,
        `rows`, `n_common`, `sizes`). `rng` None: keys and shuffles from the OS CSPRNG."""

    def read_round_message(self, body: bytes, where: str, sender: str, to: str, rnd: int) -> Message:
        """A received round message, checked against its envelope (sender, recipient, round); else refused."""


Query = tuple[tuple[str, ...], tuple[str, ...]]   # (attributes of one party, attributes of another)


@runtime_checkable
class StageRounds(Protocol):
    """One party's side of one stage of a cross-party protocol, as a driver runs it across machines (deploy): in
    each round, in order, the party first sends everything it has for it, then waits for what it expects after
    it (messages of that round or of an earlier one); the driver moves the bytes in signed envelopes and knows
    nothing of what they hold. After the last round the party publishes its answers to the server."""

    def rounds(self) -> list[str]:
        """The round names (envelope rounds), in order; none when this party takes no part in the stage."""

    def outgoing(self, rnd: str) -> Iterable[tuple[list[str], str, bytes, str]]:
        """What this party sends in `rnd`, (recipients, kind, body, tag) each, made one at a time."""

    def expects(self, rnd: str) -> Mapping[str, list[str]]:
        """What this party waits for once it has sent `rnd`'s messages: {round: senders, one message each}."""

    def incoming(self, rnd: str, got: Mapping[str, Sequence[bytes]]) -> None:
        """The bodies received in `rnd`, by sender (their envelopes already verified)."""

    def published(self) -> Iterable[Message]:
        """This party's answers to the server, once every round has run."""


@runtime_checkable
class JointRounds(MeasuresJointly, Protocol):
    """An encoder whose cross-party protocol (MeasuresJointly) also runs with each party on its own machine: a
    selection stage on the planned queries, then a stage on the queries the server chooses."""

    def round_timeout(self) -> float:
        """Seconds a role waits for the others in a round."""

    def party_stage(self, me: str, view: Dataset, queries: Sequence[Query], stage: str, ledger: PrivacyLedger,
                    rng: np.random.Generator, test: bool) -> StageRounds:
        """Party `me`'s rounds of `stage` on its own columns (`test`: seeded noise under an explicit test secret,
        as the one-process simulation draws it), spending the stage's planned charge where the plan says."""

    def check_queries(self, queries: Sequence[Query]) -> None:
        """A party's check of the queries the server chose (refused in one line: unknown attributes, more than
        planned)."""

    def check_published(self, msg: Message, asked: Mapping[str, Sequence[Query]], where: str) -> None:
        """The server's check that a party's message answers only what was asked in its stage."""


@runtime_checkable
class FitsInRounds(Protocol):
    """A party/server synthesizer whose fit runs an encoder's rounds between the party steps and the server's fit
    (VertiMRF with encoder "he"): what `party synth` and `server` run across machines. The server chooses the
    second stage's queries from the first stage's answers."""

    def joint_rounds(self) -> JointRounds | None:
        """The encoder whose rounds this configuration runs; None when it runs none (party steps, then server)."""

    def round_view(self, view: Dataset) -> Dataset:
        """A party's columns as the protocol reads them (e.g. binned), from its coded columns, every row."""

    def serve_rounds(self, messages: Sequence[Message], measure: Callable[[list[Query]], list[Message]]) -> None:
        """The server's fit from the parties' messages and the first stage; `measure(queries)` runs the second
        stage on the queries it chose and returns the parties' answers."""


@runtime_checkable
class CrossPartyMeasure(Protocol):
    """How a vertical measurement oracle answers a marginal whose attributes span two parties (a "cross-party
    measure": encrypted counts, or sketches). A query is (attributes of one party, attributes of another); every
    answer is a table of noisy counts on left + right attributes (axes in that order) with its per-cell noise
    variance as the estimator must weight it. The oracle has already spent the charge for `sigma` (ρ = 1/(2σ²) per
    table against the role that sees the least noise) before it calls `answer`; `trust` names the roles that must not
    collude for that to hold ("none": no trusted party; "server": the server colludes with no party), and the oracle
    writes it into the ledger."""

    trust: str

    def released_variance(self, sigma: float) -> float:
        """The per-cell variance of an answer paid at `sigma` as the server sees it (e.g. 2σ² for two-sided noise)."""

    def rho_per_table(self, sigma: float) -> float:
        """The zCDP ρ one table answered at `sigma` costs (1/(2σ²) for one Gaussian; more where the noise is a sum
        of shares): what the oracle spends before it calls `answer`."""

    def sigma_for_rho(self, rho: float) -> float:
        """The σ whose table costs `rho` (the inverse of `rho_per_table`): how a planned charge becomes noise."""

    def answer(self, views: Mapping[str, Dataset], queries: Sequence[tuple[tuple[str, ...], tuple[str, ...]]],
               sigma: float, noise: str, rngs: Mapping[str, np.random.Generator],
               whole: Mapping[str, Dataset] | None = None) -> list[tuple[tuple[str, ...], np.ndarray, float]]:
        """Run the protocol between the parties holding `views` for `queries` (noise "secure": OS CSPRNG; else the
        parties' seeded `rngs`) and return (attributes, noisy counts, per-cell variance) per query, in order.
        `whole`: every party's columns, all of them, uncoarsened (a measure may encrypt them once for the run)."""


def below_two_sided(measure: CrossPartyMeasure) -> bool:
    """Whether a cross-party answer carries less than two-sided noise's 2σ² per cell at a given σ (he trust
    "server": three shares, 1.5σ²; trust "none": 2σ²). aim's twin plans its probes and candidates by it, and
    `vertisynth validate` prices aim's probe stages by the same test, so the two cannot drift apart."""
    return measure.released_variance(1.0) < 2.0 - 1e-9


@runtime_checkable
class SumsWholeRows(Protocol):
    """A cross-party measure that encrypts a party's whole rows once per run and sums every later table whose side
    at that party is one of its unbinned attributes from them (the `he` encoder): a query may leave that side
    unbinned at no further encryption."""

    def whole_rows_party(self, parties: Sequence[str]) -> str | None:
        """Of two parties, the one whose whole rows answer a table of one unbinned attribute per side; None when
        this run keeps no whole rows."""

    def in_whole_rows(self, domain: Any, side: Sequence[str], n: int, sigma: float) -> bool:
        """Whether a table side of a party whose whole public domain is `domain` (all of its attributes unbinned)
        is summed from that party's whole rows at `n` rows and noise σ (a block of them: one attribute, or a joint
        pair in the rows' spare slots): what an estimate before a run needs to know which side encrypts."""

    def block_pass(self, domain: Any, n: int, sigma: float) -> dict[str, Any] | None:
        """What one more pass of a party's rows (whole public domain `domain`) costs it as the encrypting side of
        an answer that no whole rows sum (a side its rows lack: which answers do follows the data), priced on its
        smallest such block: {"block", "ciphertexts", "cpu_s"}; None where its rows lack none."""


@runtime_checkable
class ReleasesOnce(Protocol):
    """A cross-party measure that releases once and answers every cross-party marginal from that release as
    post-processing (sealed DP FM sketches, GRR columns): no ρ per table. Its whole cost is planned up front
    (`release_cost`, public facts only, before any row is read); `release` runs once, each party spending its own
    planned charges before it sketches or randomises its own columns, the result sealed to the server (kept by this
    object, the server's side, in one process); `answer_released` then answers any two-party marginal for free,
    with the estimator's per-cell variance. `trust` names the roles that must not collude, as for
    `CrossPartyMeasure`."""

    trust: str

    def release_cost(self, ctx: Any, rho: float) -> list[Any]:
        """The release's charges (core.privacy.Charge) for a `PlanContext` `ctx`, composing to at most zCDP `rho`;
        a domain or partition the release cannot hold is refused here in one line."""

    def release(self, views: Mapping[str, Dataset], ledger: PrivacyLedger,
                rngs: Mapping[str, np.random.Generator]) -> None:
        """Run the release: each party (`views`: its own columns) spends its planned charges, then encodes."""

    def answer_released(self, queries: Sequence[tuple[tuple[str, ...], tuple[str, ...]]]
                        ) -> list[tuple[tuple[str, ...], np.ndarray, np.ndarray]]:
        """Per query (attributes of one party, of another): (attributes, estimated counts with axes in that order,
        per-cell variance of the same shape), from the release alone."""


@runtime_checkable
class ReleasesAtParties(ReleasesOnce, Protocol):
    """A `ReleasesOnce` measure whose release also runs with each party on its own machine (deploy's vertical oracle,
    deploy/oracle_rounds.py): each party makes its share of the release from its own columns and stream, paying its
    planned charges first (`release_at`), and sends it sealed to the server, who checks every share against the plan
    (`take_release`) before it answers anything from them. `release` in one process is exactly these steps."""

    def release_charges(self, party: str) -> list[Any]:
        """The plan's charges (core.privacy.Charge) `party` spends for its share, in the order it spends them."""

    def agrees_keys(self) -> bool:
        """Whether the parties agree a group key among themselves first (core/keys.py; never the server's)."""

    def seeded_keys(self, noise: str) -> bool:
        """Whether a party draws its side of the key agreement from its seeded stream under `noise` (reproducible
        simulation) rather than the OS CSPRNG."""

    def set_key_context(self, context: bytes) -> None:
        """What an agreed key is bound to (the run id and config fingerprint across machines; core/keys.py)."""

    def release_at(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator,
                   key: Any = None) -> Message:
        """`party`'s share of the release from its columns `view`: its planned charges spent on `ledger` first;
        `key`: its `core.keys.KeyParty` after the agreement where `agrees_keys()`."""

    def take_release(self, messages: Sequence[Message]) -> None:
        """The server's side: every party's share, each checked against the plan (one per party, its planned
        attributes and parameters, the same row count), refused in one line otherwise; once per run."""


@runtime_checkable
class ReportsConsistentVariance(Protocol):
    """A `ReleasesOnce` measure that reports what is left of an answer's noise once the vertical oracle makes it
    consistent with measured 1-ways (core/anova.py: its mean and the main effects of those attributes removed).
    How much that is depends on the estimator's covariance between cells, which only the measure knows: dpfm's
    inclusion–exclusion puts much of its error in whole rows and columns (removed), grr's P⁻¹ most of it in the
    interactions (kept); the independent-cells share 1 − (1 + Σ(u − 1))/cells is wrong both ways
    (docs/vertical.md)."""

    def consistent_variance(self, query: tuple[tuple[str, ...], tuple[str, ...]], adjusted: Sequence[str]
                            ) -> np.ndarray | None:
        """Per-cell variance of `query`'s answer (axes as `answer_released` gives them) after removing its mean and
        the main effects of the attributes `adjusted` (a non-empty subset of the query's); None where the
        measure cannot say (the oracle then takes cells as independent)."""


@runtime_checkable
class CountsInRelease(Protocol):
    """A `ReleasesOnce` measure whose release also carries a DP record count (dpfm's Gaussian n̂): the vertical
    oracle averages it into the 0-way answer, post-processing of the release (docs/vertical.md)."""

    def released_count(self) -> tuple[float, float]:
        """(n̂, Var[n̂]) from the release (run already)."""


@runtime_checkable
class AnswersInRounds(CrossPartyMeasure, Protocol):
    """A cross-party measure whose `answer` also runs with each party on its own machine (deploy's vertical oracle,
    deploy/oracle_rounds.py): each of the two parties runs its `StageRounds` on its own (coarsened) columns, then
    publishes what it found to the server, who reads the answers with `read_answers`. Under an explicit test secret
    and simulation noise a party draws its noise as `answer` draws it in one process with seeded noise, so the
    answers are the same."""

    def round_timeout(self) -> float:
        """Seconds a role waits for the others in a round."""

    def check_across_machines(self) -> None:
        """Refuse, in one line and before any role starts, a configuration whose rounds do not run across machines."""

    def stage_offer(self) -> bytes:
        """What the server sends both parties with each stage's query (signed by the server, sealed to each party):
        public material their rounds need, e.g. the he measure's trust = "server" Paillier public key; b"" for none."""

    def answer_stage(self, me: str, view: Dataset, domains: Mapping[str, Any], queries: Sequence[Query],
                     sigma: float, noise: str, rng: np.random.Generator, test: bool, stage: str,
                     offer: bytes = b"", parties: Mapping[str, Any] | None = None) -> StageRounds:
        """Party `me`'s rounds of one `answer` on its columns `view` (`domains`: every party's public domain in the
        stage, party -> Domain; `stage`: a name unique in the run, for the envelopes' rounds; `offer`: the server's
        `stage_offer` as the party received it; `parties`: each party's whole public domain, unbinned, as `answer`
        reads it off `whole`)."""

    def read_answers(self, messages: Sequence[Message], queries: Sequence[Query], sigma: float,
                     domains: Mapping[str, Any], noise: str = "secure"
                     ) -> list[tuple[tuple[str, ...], np.ndarray, float]]:
        """The server's reading of the parties' published messages of one stage: `answer`'s result, each message
        checked to hold only tables asked for (refused in one line otherwise); `noise`: the server's own (what it
        draws, where the measure has it add noise of its own)."""


@runtime_checkable
class FitsOnOracle(Protocol):
    """A synthesizer whose every data access is a marginal-oracle call (`vertisynth.pgm.oracle.MarginalOracle`), so
    it runs centrally or across parties unchanged: the pipeline builds the oracle (the central one on the joined
    table, or a vertical one when `vertical_request` says so) and calls `fit_oracle` instead of `fit`."""

    def fit_oracle(self, oracle: Any, rng: np.random.Generator) -> None: ...

    def vertical_request(self) -> Any:
        """The synthesizer's `vertical` table (`vertisynth.vertical.VerticalConfig`: measure, trust, its params), or
        None for a central run."""


@runtime_checkable
class ProbesWholeRows(Protocol):
    """A vertical twin whose probes leave unbinned the side of the party whose whole rows the measure sums
    (`vertisynth.vertical.probes.measure_probes(whole=True)`), so `vertisynth validate` prices them as it asks."""

    def probes_whole_rows(self) -> bool: ...


@runtime_checkable
class PlansProbeStages(Protocol):
    """A vertical twin whose probes are drawn from a filter, not planned as charges (aim): the probe stages it will
    ask, from its plan alone, so that `vertisynth validate` prices them: [(pairs, σ)] per stage, σ the cross-party
    measure's noise std, each attribute of more than `probe_bins` values asked on at most that many bins.
    `central`: a cross-party answer carries less than two-sided noise (`below_two_sided`: trust "server")."""

    def probe_stages(self, central: bool) -> list[tuple[list[tuple[str, ...]], float]]: ...


@runtime_checkable
class CostEstimate(Protocol):
    """A component that can say before a run what it will cost each party (`vertisynth validate` prints it):
    {party: {"ciphertexts": ..., "bytes": ..., "cpu_s": ...}} for `n` rows."""

    def cost_estimate(self, n: int) -> dict[str, dict[str, float]]: ...


@runtime_checkable
class PricesAnswers(Protocol):
    """A cross-party measure that can say before a run what a sequence of its answers will cost each party (a
    vertical twin's probes and a stand-in for its adaptive answers: vertisynth/vertical/cost.py): each answer
    {"domains": party -> public Domain, "queries": [(left, right)], "sigma": σ}; `parties`: each party's whole
    public domain; the result as `CostEstimate`'s."""

    def answers_cost(self, answers: Sequence[Mapping[str, Any]], n: int,
                     parties: Mapping[str, Any] | None = None) -> dict[str, dict[str, float]]: ...


@runtime_checkable
class EncodesInChunks(Protocol):
    """An encoder whose party side runs over a table in chunks (memory bounded by the chunk, not by n): the job
    maps over chunks locally or on a Dask cluster and merges them (DPFM: max of sketches; GRR: concatenation)."""

    def chunk_job(self, party: str, domain: Any, ledger: PrivacyLedger, rng: np.random.Generator) -> Any: ...


@runtime_checkable
class ChunksOnCluster(Protocol):
    """An encoder that says how its party side is chunked and where it maps: `chunk_rows` rows a chunk (memory is
    bounded by it), `dask_scheduler` the Dask cluster the chunks map on (an address; None: in this process). Read
    by VertiMRF's party phase and `encoders.chunked.encode_csv`; without it they take 100,000 rows, here."""

    chunk_rows: int
    dask_scheduler: Any


@runtime_checkable
class MapsEarly(Protocol):
    """An encoder whose chunk map is known before its chunk job is made (DPFM with agreed keys: the map draws
    nothing from the party's stream): (map, order-free merge), or None where it is not known yet. A cluster then
    maps the party's rows while the party fits its local model (core/cluster.py `EarlyMap`)."""

    def early_mapper(self, party: str, domain: Any) -> tuple[Any, Any] | None: ...


@runtime_checkable
class BuffersBlocks(Protocol):
    """An encoder whose party step holds a working buffer of `block_mb` MiB per chunk (DPFM's sketch blocks), for
    `EstimatesMemory`; without it the estimate counts two int64 columns per chunk value (GRR's)."""

    block_mb: float


@runtime_checkable
class CountsPhantoms(Protocol):
    """A sketch encoder that pads every sketch with `k_p` phantom elements once planned (DP FM sketches; None
    before its plan): a plan whose budget needs millions of them is refused, every estimate would be noise."""

    k_p: int | None


@runtime_checkable
class EstimatesMemory(Protocol):
    """A synthesizer that estimates, from its plan alone, the peak memory of each party and of the server:
    {"parties": {party: bytes}, "server": bytes, "server_largest_clique_cells": int} (`vertisynth validate`)."""

    def memory_estimate(self) -> dict[str, Any]: ...


@runtime_checkable
class ReportsReferencePoints(Protocol):
    """An evaluator whose scores come with reference points, so that a bare number means something: the same
    metric for a table of independent columns (the real 1-way marginals multiplied out) and, when the run keeps
    a holdout, for the real holdout against the training rows (the floor no synthesizer is expected to beat).
    Called after `evaluate` (or `evaluate_holdout`), on the same marginals it scored."""

    def reference_points(self, train: Dataset, holdout: Dataset | None) -> dict[str, dict[str, float]]:
        """{metric: {"independent": value, "holdout_floor": value (only with a holdout)}}."""


@runtime_checkable
class EvaluatesCounts(Protocol):
    """An evaluator that scores from marginal counts alone: it reads the real table only through `n`, `domain`
    and `counts(attrs)`, so a streamed run, which never holds the real rows (`core.chunks.ChunkedCounts`), can
    run it. A streamed run refuses, before it reads a row, every evaluator without this capability."""

    def evaluate_counts(self, real: Any, synthetic: Any, rng: np.random.Generator) -> dict[str, float]:
        """`evaluate` on counts-only tables (`core.chunks.ChunkedCounts` or `Dataset`): the same scores."""


@runtime_checkable
class MeasuresAssociation(Protocol):
    """An evaluator that scores pairwise association and hands out the matrices it compares (the HTML report
    draws them as heatmaps, real beside synthetic)."""

    def association_matrices(self, data: Dataset) -> tuple[np.ndarray, np.ndarray]:
        """(Cramér's V, normalised mutual information) between every two attributes of `data`, d × d each."""


RAW_VALUES = "raw_values"   # an EvaluatorSpec capability: the evaluator scores raw tables (ScoresRawTables)


def wants_raw_values(spec: Any, instance: Any) -> bool:
    """Whether an evaluator declared (in its spec's capabilities) that it scores raw tables; a declaration
    without `evaluate_raw` is a broken plugin, refused in one line."""
    if RAW_VALUES not in getattr(spec, "capabilities", ()):
        return False
    if not isinstance(instance, ScoresRawTables):
        from .errors import PluginError
        raise PluginError(f"evaluator {spec.name!r} declares {RAW_VALUES!r} but has no "
                          "evaluate_raw(real, synthetic, kinds, rng)")
    return True


@runtime_checkable
class ScoresRawTables(Protocol):
    """An evaluator that scores the decoded tables (raw values: numbers, dates, category strings) rather than
    the run's codes, e.g. a peer library's metric whose published scores are on raw values. It says so with the
    capability "raw_values" in its EvaluatorSpec; the pipeline then gives it the real rows as read and the
    synthetic table as decoded, with the public schema's column kinds ("numerical", "categorical", "datetime")."""

    def evaluate_raw(self, real: Any, synthetic: Any, kinds: Mapping[str, str],
                     rng: np.random.Generator) -> dict[str, float]:
        """`real`, `synthetic`: pandas DataFrames with the same columns."""
