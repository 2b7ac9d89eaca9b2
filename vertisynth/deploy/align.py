"""One party of PSI/PSU on its own machine: `vertisynth party align`, messages as files in a shared folder.

Each party runs this with its own CSV (an identifier column) and the shared config: the [[parties]]
list gives the ring order (the first party leads), [alignment] the protocol and its identifier
options. Keys, shuffles and the PSU fill's randomness come from the OS CSPRNG; only a run whose hello had an
explicit test secret (`party hello --test-secret`, labelled "not for production") draws them from that secret,
in the one-process simulation's order (`_test_streams`), so the deployment publishes the simulation's table
(`deploy/simulate.py`). The exchange folder only ever holds blinded group
elements (`BlindedSet` messages), each in a signed envelope bound to the run of `party hello` and to its
round (`align-rNN`), sealed to the one party it goes to (each party's X25519 run key of this step, published in
`key__<party>__to__all__align`: a relay reads no blinded set, so it cannot compare them as the leader does); a party reads
the envelopes addressed to it, checks them before use (a replay from an earlier run or round is refused), waits
for the ones it expects each round, and writes its own atomically. Mismatched settings (party order, normalize,
fill, budget) are named by the hello round.

Output (in --out, private to the party): `<party>_alignment.csv` with its row number, identifier and
position in the common order (PSI: the intersection rows only; PSU: every row, positions in U) and
`<party>_alignment.json` (protocol, sizes it learned, |U| or |∩|), and, when the config plans on this
machine alone (a `csv` dataset with a public schema and named [[parties]]: see docs/alignment.md),
`<party>_aligned.csv`: exactly its own columns, one row per common position (PSI: the intersection;
PSU: U, its real rows where it holds the identifier and the config's fill elsewhere, DP fill spends
in `<party>_alignment_ledger.json`). That file goes straight into `vertisynth party synth --csv`.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import attrs
import numpy as np
import pandas as pd

from vertisynth.core.capabilities import AlignsAcrossMachines
from vertisynth.core.cluster import dask_session
from vertisynth.core.courier import ALIGN_KEY
from vertisynth.core.encoding import TableSchema
from vertisynth.core.errors import ConfigError, DataError, VertisynthError
from vertisynth.core.outfiles import write_csv
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.core.registry import default_registry
from vertisynth.run.config import RunConfig, noise_for
from vertisynth.run.pipeline import build_component, make_plan

from .plans import streams as _streams
from .session import TEST_LABEL, Session, publish_party_key, session, test_noise_seed


def _round(r: int) -> str:
    return f"align-r{r:02d}"


def _inbox(sess: Session, aligner: AlignsAcrossMachines, party: str, r: int, expected: dict[str, int]
           ) -> list[Message]:
    got = sess.gather(_round(r - 1), list(sess.state.parties), party, None,   # a party may send itself a set
                      what=f"party {party!r}'s round-{r} message(s) {expected}", total=sum(expected.values()))
    return [aligner.read_round_message(body, name, header.sender, party, r - 1) for name, header, body in got]


def _table_plan(config: RunConfig, party: str, frame: pd.DataFrame, id_column: str, data_dir: str | None):
    """The public plan this party's aligned table follows (checked before the protocol runs) and its columns."""

    try:
        plan = make_plan(config, data_dir=data_dir)
    except VertisynthError as exc:
        raise ConfigError(f"party align writes the aligned table only when the config plans on this machine alone "
                          f"([dataset] name = 'csv' with a public schema, and named [[parties]]); planning failed: "
                          f"{exc}. Pass --no-table to write only the alignment") from None
    if plan.source.schema.inferred:
        raise ConfigError("the aligned table needs a public schema in the config ([dataset.params.schema]): a schema "
                          "read off one party's rows would differ between parties and is not DP")
    names = list(plan.partition.names)
    if party not in names:
        raise DataError(f"unknown party {party!r}; the config's [[parties]] are {names}")
    own = list(plan.partition.parties[names.index(party)].attributes)
    have = [c for c in frame.columns if c != id_column]
    if sorted(have) != sorted(own):
        raise DataError(f"party {party!r}'s CSV must hold its identifier column {id_column!r} and exactly its "
                        f"attributes {own}; it has {have}")
    if any(c.kind == "numeric" and c.binning == "quantile" and c.name in own for c in plan.source.schema.columns):
        raise ConfigError("cross-machine runs need public bin edges (binning 'edges' or 'equal_width'), not DP quantiles")
    for c in plan.source.schema.columns:   # the CSV was read as text; numbers are the schema's numeric columns
        if c.name in own and c.kind == "numeric":
            try:
                frame[c.name] = pd.to_numeric(frame[c.name])
            except ValueError as exc:
                raise DataError(f"party {party!r}'s numeric column {c.name!r}: {exc}") from None
    return plan, own


@attrs.frozen
class _AlignRandomness:
    """This party's protocol randomness (None: the OS CSPRNG inside the protocol), its PSU fill stream, and the
    stream its codec bins and unbins with (decoded values stay in their bin, so it never changes the table)."""

    protocol: np.random.Generator | None
    fill: np.random.Generator
    codec: np.random.Generator


def _os_rng() -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence().entropy)   # 128 bits from the OS


def _test_streams(protocol: str, ring: list[str], party: str, secret: bytes | None, keys: str) -> _AlignRandomness:
    """The simulation's draws for this party (`run.pipeline.execute` with the test secret's party seed: the
    `alignment` stream; PSI: make_parties spawns one child per party; PSU: spawn(2) = protocol, fill, each
    spawning one child per party in ring order), only under an explicit test secret; keys = 'os' keeps the
    protocol's keys and shuffles on the OS CSPRNG, as the simulation does."""
    if secret is None:
        return _AlignRandomness(None, _os_rng(), _os_rng())
    streams = _streams(test_noise_seed(secret))
    at = ring.index(party)
    codec = streams["preprocessing"].spawn(len(ring))[at]
    if protocol == "psi":
        proto, fill = streams["alignment"], _os_rng()   # PSI fills nothing
    else:
        proto, fills = streams["alignment"].spawn(2)
        fill = fills.spawn(len(ring))[at]
    return _AlignRandomness(proto if keys == "seeded" else None, fill, codec)


def _aligned_table(plan, own: list[str], party: str, frame: pd.DataFrame, row_of: np.ndarray,
                   result, rand: _AlignRandomness, test: bool) -> tuple[pd.DataFrame, list[dict]]:
    """This party's own columns over the common positions, and the DP fill spends (PSU `marginal`/`majority`)."""

    mine = frame[own].iloc[row_of].reset_index(drop=True)   # rows in the protocol's (deduplicated) order
    if result.protocol == "psi":
        return mine.iloc[result.rows].reset_index(drop=True), []
    schema = TableSchema(tuple(c for c in plan.source.schema.columns if c.name in own))
    codec = schema.fit(mine, None, rand.codec)
    view = codec.encode(mine)
    ledger = PrivacyLedger(plan.ledger.budget, [c for c in plan.ledger.planned
                                                if c.party == party and c.stage == "alignment"],
                           noise=noise_for(plan.config, cross_machine=not test))   # test: the simulation's noise
    filled = plan.aligner.instance.fill_party(party, view, result, ledger, rand.fill)
    table = codec.decode(filled, rand.codec)
    table.iloc[result.rows] = mine.to_numpy()   # real rows keep their exact values (decode only bins them)
    if ledger.unspent():
        raise DataError(f"party {party!r}: planned fill spends were not made: {ledger.unspent()}")
    return table[own], [c.to_dict() for c in ledger.spent]


def run_party_align(config: RunConfig, party: str, csv: Path, id_column: str, exchange: str | Path, out: Path,
                    timeout: float = 600.0, poll: float = 0.05, write_table: bool = True,
                    data_dir: str | None = None, key: Path | None = None) -> Path:
    protocol = config.alignment.use
    if protocol not in ("psi", "psu"):
        raise ConfigError(f"party align runs psi or psu; the config's alignment is {protocol!r}")
    aligner = build_component(default_registry(), "aligner", protocol, config.alignment.params, "alignment")
    if not isinstance(aligner.instance, AlignsAcrossMachines):
        raise ConfigError(f"party align: the installed {protocol!r} aligner does not run across machines")
    params = aligner.config
    ring = [p.name for p in config.parties]
    if len(ring) < 2 or any(not n for n in ring):
        raise ConfigError("party align needs the parties listed by name in [[parties]] (their order is the ring)")
    if party not in ring:
        raise DataError(f"unknown party {party!r}; the config's parties are {ring}")
    if not csv.is_file():
        raise DataError(f"CSV {str(csv)!r} does not exist")
    sess = session(config, party, exchange, out, key, timeout, poll)
    if list(sess.state.parties) != ring:
        raise ConfigError(f"the hello round ran with parties {list(sess.state.parties)}, the config's ring is {ring}")
    # every round sealed to the party it goes to (a run key of this step, memory only): a relay that held the
    # blinded sets could compare them as the leader does (the sizes of every region of the sets' Venn diagram)
    sess.key_purpose = ALIGN_KEY
    sess.run_key, sess.sealed = publish_party_key(sess), True
    frame = pd.read_csv(csv, dtype=str)   # as text: the schema's categories are text ("1" stays "1"), ids too
    if id_column not in frame.columns:
        raise DataError(f"CSV {str(csv)!r} has no identifier column {id_column!r}")
    raw = frame[id_column].tolist()
    table_plan = _table_plan(config, party, frame, id_column, data_dir) if write_table else None
    # duplicates / normalisation exactly as in the one-process pipeline (views are row placeholders here)

    rand = _test_streams(protocol, ring, party, sess.state.secret(), params.keys)
    own_ids, row_of = aligner.instance.party_ids(party, raw)
    with contextlib.ExitStack() as stack:   # the blinding mapped over a Dask cluster when one is configured
        workers = stack.enter_context(dask_session(params.dask_scheduler)) if params.dask_scheduler else params.workers
        me = aligner.instance.round_party(party, ring, own_ids, rand.protocol, workers)
        for r in range(1, me.rounds + 1):
            inbox = _inbox(sess, aligner.instance, party, r, me.expected(r)) if r > 1 else []
            for msg in me.step(r, inbox):
                sess.send(_round(r), [msg.to], msg.kind, msg.to_bytes(), tag=msg.filename[:-4].split("__", 4)[-1])
    res = me.result
    assert res is not None
    if protocol == "psi":
        table = pd.DataFrame({"row": row_of[res.rows], "id": [raw[i] for i in row_of[res.rows]],
                              "position": np.arange(len(res.rows))})
    else:
        table = pd.DataFrame({"row": row_of, "id": [raw[i] for i in row_of], "position": res.rows})
    test = sess.state.test_secret is not None
    aligned = _aligned_table(*table_plan, party, frame, row_of, res, rand, test) if table_plan else None
    out.mkdir(parents=True, exist_ok=True)
    if aligned is not None:
        write_csv(out / f"{party}_aligned.csv", aligned[0], private=True)   # real rows and IDs: 0600, like the keys
        (out / f"{party}_alignment_ledger.json").write_text(json.dumps(aligned[1], indent=2))
    path = out / f"{party}_alignment.csv"
    write_csv(path, table, private=True)   # the party's IDs and row map: 0600
    (out / f"{party}_alignment.json").write_text(json.dumps(
        {"protocol": protocol, "party": party, "ring": ring, "common_rows": res.n_common, "sizes_learned": res.sizes,
         **({"test_secret": TEST_LABEL} if test else {})}, indent=2))
    return path
