"""Fit once, sample many: the fitted model as a DP release.

A synthesizer whose fit ends in a graphical model (`HasGraphicalModel`: Private-PGM, PrivMRF, VertiMRF and the
independent baseline, whose 1-way marginals are a model of single-attribute cliques) hands it to the pipeline,
which keeps it on the RunResult and writes it beside the table as `model.npz`: the cliques, their
log-potentials, the DP record count and the public decoding (schema, and the bin edges the run released).
Everything in it was computed under the run's budget, so drawing more rows from it is post-processing: it
spends nothing, and the ledger records the file as part of the release.

The file is a `Message` (one .npz, no pickle, validated on load: shapes against the domain, finite values,
cliques that form their own junction tree) with a SHA-256 digest of its contents, so a file cut short or
edited by hand gets a one-line error. The digest detects accidents, not an attacker: anyone can edit the file
and recompute it, and such a file loads. Where the releasing role holds a roster key (the deploy server),
the file is also signed with it (Ed25519 over the digest and the signer's name); `load(path, roster=...)`
then accepts only a file whose signer the roster pins and whose signature verifies (docs/privacy.md).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import ColumnCodec, ColumnSchema, TableCodec
from vertisynth.core.errors import ConfigError, DataError, DomainError, MessageError
from vertisynth.core.identity import Identity, Roster, roster_of
from vertisynth.core.messages import Message
from vertisynth.core.structuring import CONVERTER
from vertisynth.pgm import GraphicalModel, build_junction_tree
from vertisynth.pgm.model import SAMPLE_BLOCK_ROWS

from .config import RunConfig, config_fingerprint, load_config

if TYPE_CHECKING:   # pandas is imported where a frame is built or read (docs/speed.md, fifth pass)
    import pandas as pd

MODEL_FILE = "model.npz"


@attrs.frozen(eq=False)
class ModelRelease(Message):
    """The fitted model as a file: what `vertisynth sample` and `vertisynth.load_model` read."""

    kind: ClassVar[str] = "model_release"
    domain: Domain = attrs.field(default=None)
    cliques: list[list[str]] = attrs.field(factory=list)
    potentials: dict[str, np.ndarray] = attrs.field(factory=dict)   # str(clique index) -> log-potential
    total: float = 0.0                 # the DP record count: the default number of rows to draw
    sampling: str = "sample"
    synthesizer: str = ""
    codec: list[dict[str, Any]] = attrs.field(factory=list)        # public decoding, one entry per column
    privacy: dict[str, Any] = attrs.field(factory=dict)            # the run's spend, for whoever reads the file
    digest: str = ""
    signer: str = ""       # the releasing role's roster name; "" unsigned
    run: str = ""          # the deployed run that released it (its run id); "" for a one-process run
    config: str = ""       # that run's config fingerprint: a signature vouches for this run of this config only
    signature: str = ""    # hex Ed25519 signature of signed_bytes(signer, digest)

    def content_digest(self) -> str:
        h = hashlib.sha256()
        head = {"domain": self.domain.to_dict() if isinstance(self.domain, Domain) else None,
                "cliques": self.cliques, "total": self.total, "sampling": self.sampling,
                "synthesizer": self.synthesizer, "codec": self.codec, "privacy": self.privacy, "party": self.party,
                **({"run": self.run, "config": self.config} if self.run or self.config else {})}
        h.update(json.dumps(head, sort_keys=True, default=str).encode())
        for key in sorted(self.potentials):
            arr = np.ascontiguousarray(self.potentials[key], dtype=np.float64)
            h.update(key.encode() + str(arr.shape).encode() + arr.tobytes())
        return h.hexdigest()

    def signed_bytes(self) -> bytes:
        # v2: the run id and config fingerprint are signed too, so a model signed in one run (another budget,
        # another schema) cannot be passed off as the release of another run of the same roster
        return b"\0".join([b"vertisynth model release v2", self.signer.encode(), self.digest.encode(),
                           self.run.encode(), self.config.encode()])

    def check_signature(self, roster: Roster, path: str | Path, config_fp: str | None = None) -> None:
        """Accept only a file signed by a role the roster pins, under that role's key, and (with `config_fp`)
        released by a run of that config (one line otherwise)."""
        where = f"model file {str(path)!r}"
        if not self.signer or not self.signature:
            raise MessageError(f"{where} is not signed, but the roster given pins the releasing roles' keys "
                               f"({sorted(roster.keys)}): refused (a digest alone proves nothing about who wrote it)")
        if self.signer not in roster.keys:
            raise MessageError(f"{where} is signed by {self.signer!r}, whom the roster does not pin "
                               f"({sorted(roster.keys)}): refused")
        try:
            sig = bytes.fromhex(self.signature)
        except ValueError:
            raise MessageError(f"{where}: its signature is not hex: refused") from None
        roster.verify(self.signer, sig, self.signed_bytes(), where)
        if config_fp is not None and self.config != config_fp:
            raise MessageError(f"{where} was released by a run of another config (fingerprint "
                               f"{(self.config or 'none')[:12]}..., this config's {config_fp[:12]}...): refused")

    def validate(self) -> ModelRelease:
        super().validate()
        if not isinstance(self.domain, Domain):
            raise self._fail("domain is missing")
        if self.digest != self.content_digest():
            raise self._fail("its contents do not match its digest: the file was altered or damaged")
        if len(self.potentials) != len(self.cliques) or not self.cliques:
            raise self._fail(f"{len(self.cliques)} cliques but {len(self.potentials)} potentials")
        for i, c in enumerate(self.cliques):
            try:
                shape = self.domain.project(c).shape
            except DomainError as exc:
                raise self._fail(f"clique {c}: {exc}") from None
            pot = self.potentials.get(str(i))
            if pot is None or pot.shape != shape:
                raise self._fail(f"potential of clique {c} has shape {None if pot is None else pot.shape}, expected {shape}")
        if not self.total > 0:
            raise self._fail(f"record count must be positive, got {self.total}")
        if self.sampling not in ("sample", "round"):
            raise self._fail(f"unknown sampling method {self.sampling!r}")
        names = [c.get("schema", {}).get("name") for c in self.codec]
        if sorted(map(str, names)) != sorted(self.domain.attributes):
            raise self._fail(f"decoding covers columns {names}, the model {list(self.domain.attributes)}")
        return self


def _codec_to_json(codec: TableCodec) -> list[dict[str, Any]]:
    return [{"schema": CONVERTER.unstructure(c.schema), "labels": list(c.labels),
             "edges": None if c.edges is None else [float(e) for e in c.edges], "dtype": c.dtype}
            for c in codec.columns]


def _codec_from_json(entries: list[dict[str, Any]]) -> TableCodec:
    cols = []
    for e in entries:
        schema = ColumnSchema(**e["schema"])
        edges = None if e["edges"] is None else np.asarray(e["edges"], float)
        cols.append(ColumnCodec(schema, tuple(e["labels"]), edges, e["dtype"]))
    return TableCodec(tuple(cols))


class FittedModel:
    """A fitted synthesizer's model with its public decoding: `sample(n)` draws raw-looking rows and spends
    nothing. `save(path)` writes it; `FittedModel.load(path)` (or `vertisynth.load_model`) reads it back."""

    def __init__(self, model: GraphicalModel, codec: TableCodec, sampling: str = "sample", synthesizer: str = "",
                 privacy: dict[str, Any] | None = None, run: str = "", config: str = "") -> None:
        missing = [a for a in codec.domain.attributes if a not in model.domain.attributes]
        if missing:
            raise DataError(f"the model lacks the table's columns {missing}")
        self.model, self.codec, self.sampling, self.synthesizer = model, codec, sampling, synthesizer
        self.privacy = dict(privacy or {})
        self.run, self.config = run, config   # the releasing deployed run (id, config fingerprint), "" if none

    @property
    def columns(self) -> list[str]:
        return list(self.codec.domain.attributes)

    @property
    def n_records(self) -> int:
        """The DP record count the model was fitted with: `sample()`'s default size."""
        return max(1, int(round(self.model.total)))

    def sample_codes(self, n: int | None = None, seed: int | np.random.Generator | None = None) -> Dataset:
        n = self.n_records if n is None else n
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise DataError(f"number of rows to sample must be a positive integer, got {n!r}")
        if isinstance(seed, (int, np.integer)) and seed < 0:
            raise DataError(f"seed must be a non-negative integer, got {seed}")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return self.model.sample(int(n), rng, self.sampling).project(self.codec.domain.attributes)

    def sample(self, n: int | None = None, seed: int | np.random.Generator | None = None) -> pd.DataFrame:
        """n rows (default: the DP record count), decoded to look like the input. Post-processing: no budget."""
        import pandas as pd
        frames = list(self.sample_frames(n, seed))
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def sample_frames(self, n: int | None = None, seed: int | np.random.Generator | None = None,
                      block_rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The rows of `sample(n, seed)` drawn and decoded one block of at most `block_rows` at a time (memory:
        one block, whatever n; `vertisynth sample` appends them to its CSV). At the default block size (None:
        the sampler's, 131,072) their concatenation is `sample(n, seed)`; up to one block it is the whole-table
        draw and decode."""
        n = self.n_records if n is None else n
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise DataError(f"number of rows to sample must be a positive integer, got {n!r}")
        if isinstance(seed, (int, np.integer)) and seed < 0:
            raise DataError(f"seed must be a non-negative integer, got {seed}")
        block_rows = SAMPLE_BLOCK_ROWS if block_rows is None else block_rows
        if isinstance(block_rows, bool) or not isinstance(block_rows, (int, np.integer)) or block_rows < 1:
            raise DataError(f"block_rows must be a positive integer, got {block_rows!r}")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        blocks = self.model.sample_blocks(int(n), rng, self.sampling, int(block_rows))
        return (self.codec.decode(block.project(self.codec.domain.attributes), rng) for block in blocks)

    def to_release(self) -> ModelRelease:
        m = self.model
        fields = dict(party="release", domain=m.domain, cliques=[list(c) for c in m.tree.cliques],
                      potentials={str(i): np.asarray(t, float) for i, t in enumerate(m.theta)}, total=float(m.total),
                      sampling=self.sampling, synthesizer=self.synthesizer, codec=_codec_to_json(self.codec),
                      privacy=json.loads(json.dumps(self.privacy, default=str)), run=self.run, config=self.config)
        draft = ModelRelease(**fields)
        return ModelRelease(**fields, digest=draft.content_digest()).validate()

    def save(self, path: str | Path, identity: Identity | None = None) -> Path:
        """Write the model file; with `identity` (the releasing role's roster key) signed by it."""
        path = Path(path)
        if path.suffix != ".npz":
            raise ConfigError(f"model file {str(path)!r}: use the .npz extension (numpy appends it otherwise)")
        path.parent.mkdir(parents=True, exist_ok=True)
        rel = self.to_release()
        if identity is not None:
            rel = attrs.evolve(rel, signer=identity.name)
            rel = attrs.evolve(rel, signature=identity.sign(rel.signed_bytes()).hex())
        return rel.save(path)

    @classmethod
    def load(cls, path: str | Path, roster: Roster | RunConfig | str | Path | None = None) -> FittedModel:
        """Read and check a model file; a malformed or altered one gets a one-line MessageError. With `roster`
        (a Roster, or a config, or its path, whose [roster] is used) the file must be signed by a role the
        roster pins, and the signature must verify."""
        config_fp = None
        if roster is not None and not isinstance(roster, Roster):
            cfg = roster if isinstance(roster, RunConfig) else load_config(roster)
            roster, config_fp = roster_of(cfg.section("roster")), config_fingerprint(cfg)
        rel = ModelRelease.load(path)
        if roster is not None:
            rel.check_signature(roster, path, config_fp)
        try:
            tree = build_junction_tree(rel.domain, rel.cliques, max_cells=float("inf"))
        except (DomainError, ConfigError, ValueError) as exc:
            raise MessageError(f"model file {str(path)!r}: its cliques do not form a model ({exc})") from None
        if [list(c) for c in tree.cliques] != [list(c) for c in rel.cliques]:
            raise MessageError(f"model file {str(path)!r}: its cliques are not the maximal cliques of their own "
                               "triangulation")
        try:
            codec = _codec_from_json(rel.codec)
        except (KeyError, TypeError, ValueError, ConfigError) as exc:
            raise MessageError(f"model file {str(path)!r}: its decoding is malformed ({exc})") from None
        if codec.domain.shape != rel.domain.project(codec.domain.attributes).shape:
            raise MessageError(f"model file {str(path)!r}: its decoding's sizes {codec.domain.shape} do not match "
                               "the model's")
        model = GraphicalModel(tree, [rel.potentials[str(i)] for i in range(len(rel.cliques))], rel.total)
        return cls(model, codec, rel.sampling, rel.synthesizer, rel.privacy, rel.run, rel.config)

    def __repr__(self) -> str:
        eps = self.privacy.get("spent_epsilon")
        return (f"FittedModel({self.synthesizer or 'model'}: {len(self.columns)} columns, "
                f"{len(self.model.tree.cliques)} cliques, n≈{self.n_records}"
                + (f", ε={eps:.4g}" if isinstance(eps, (int, float)) else "") + ")")

