"""One party of PSI/PSU on its own machine: `vertisynth party align`, messages as files in a shared folder.

Each party runs this with its own CSV (an identifier column) and the shared config: the [[parties]]
list gives the ring order (the first party leads), [alignment] the protocol and its identifier
options. Keys and shuffles come from the OS CSPRNG. The exchange folder only ever holds blinded group
elements (`BlindedSet` files named r<round>__<from>__to__<to>__...npz); a party reads the files
addressed to it, waits for the ones it expects each round, and writes its own atomically.

Output (in --out, private to the party): `<party>_alignment.csv` with its row number, identifier and
position in the common order (PSI: the intersection rows only; PSU: every row, positions in U) and
`<party>_alignment.json` (protocol, sizes it learned, |U| or |∩|). The party then reorders (and, after
PSU, fills) its own table; the one-process pipeline does all of that in a single run.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from vertisynth.core.config import RunConfig, structure
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.messages import publish, wait_for_files

from .private_sets import PSIConfig, PSUConfig, _prepare_ids
from .protocol import BlindedSet, make_parties


def _inbox(folder: Path, party: str, r: int, expected: dict[str, int], timeout: float, poll: float) -> list[BlindedSet]:
    files = wait_for_files(folder, f"r{r - 1:02d}__*__to__{party}__*.npz", sum(expected.values()),
                           f"party {party!r}'s round-{r} message(s) {expected}", timeout, poll)
    return [BlindedSet.load(f) for f in files]


def run_party_align(config: RunConfig, party: str, csv: Path, id_column: str, exchange: Path, out: Path,
                    timeout: float = 600.0, poll: float = 0.1) -> Path:
    protocol = config.alignment.use
    if protocol not in ("psi", "psu"):
        raise ConfigError(f"party align runs psi or psu; the config's alignment is {protocol!r}")
    cls = PSIConfig if protocol == "psi" else PSUConfig
    params = structure(config.alignment.params, cls, f"alignment.params of {protocol!r}")
    ring = [p.name for p in config.parties]
    if len(ring) < 2 or any(not n for n in ring):
        raise ConfigError("party align needs the parties listed by name in [[parties]] (their order is the ring)")
    if party not in ring:
        raise DataError(f"unknown party {party!r}; the config's parties are {ring}")
    if not csv.is_file():
        raise DataError(f"CSV {str(csv)!r} does not exist")
    frame = pd.read_csv(csv, dtype={id_column: str})
    if id_column not in frame.columns:
        raise DataError(f"CSV {str(csv)!r} has no identifier column {id_column!r}")
    raw = frame[id_column].tolist()
    # duplicates / normalisation exactly as in the one-process pipeline (views are row placeholders here)
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain

    rows = Dataset(np.arange(len(raw), dtype=np.int64)[:, None], Domain(["row"], [max(len(raw), 1)]))
    ids, kept, _ = _prepare_ids({party: rows}, {party: raw}, params)
    me = make_parties(protocol, {p: (ids[party] if p == party else []) for p in ring}, None, params.workers)[party]
    exchange.mkdir(parents=True, exist_ok=True)
    for r in range(1, me.rounds + 1):
        inbox = _inbox(exchange, party, r, me.expected(r), timeout, poll) if r > 1 else []
        for msg in me.step(r, inbox):
            publish(msg, exchange, msg.filename)
    res = me.result
    assert res is not None
    row_of = kept[party].codes[:, 0]
    if protocol == "psi":
        table = pd.DataFrame({"row": row_of[res.rows], "id": [raw[i] for i in row_of[res.rows]],
                              "position": np.arange(len(res.rows))})
    else:
        table = pd.DataFrame({"row": row_of, "id": [raw[i] for i in row_of], "position": res.rows})
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{party}_alignment.csv"
    table.to_csv(path, index=False)
    (out / f"{party}_alignment.json").write_text(json.dumps(
        {"protocol": protocol, "party": party, "ring": ring, "common_rows": res.n_common, "sizes_learned": res.sizes},
        indent=2))
    return path
