"""Two-party exact measurement of cross-party marginals under Paillier (the SecureBoost histogram pattern).

A query is (SA, SB): an attribute tuple of the encrypting party E and one of the summing party S; the answer is the
contingency table on SA + SB (E's attributes first). Rounds, each a `Message` (so the signed envelope can wrap it):

  1. E → S  `EncryptedOneHot`: per row, the packed one-hot codes of every distinct SA (layout in `packing.py`),
     encrypted with fresh randomness.
  2. S → E  `EncryptedSums`: for every distinct SB and each of its values v, the product (homomorphic sum) of the
     ciphertexts of the rows with SB = v, over the columns holding the SA blocks queried with SB, times an encryption
     (fresh randomness, which re-randomises the sum) of S's noise plus the offset T in every slot of those blocks.
  3. E → server  `NoisyCounts`: E decrypts, unpacks, removes T, adds its own noise, publishes.

S refuses to return a column that holds a block not queried with that SB (it would leave E a count without S's noise).
`simulate` computes the same released tables in plaintext, drawing both parties' noise in the same order: with the
same noise sources it returns exactly what the protocol returns.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.messages import Message
from vertisynth.core.progress import step

from . import ops, paillier
from .noise import UniformSource, discrete_gaussian, support_bound
from .packing import Layout

Query = tuple[tuple[str, ...], tuple[str, ...]]


def key_of(attrs_: Sequence[str]) -> str:
    return "|".join(attrs_)


def tuple_codes(view: Dataset, attrs_: Sequence[str]) -> tuple[np.ndarray, int]:
    """Every row's cell index in the tuple `attrs_` (row-major over the attributes' sizes) and the cell count."""
    shape = tuple(view.domain.size(a) for a in attrs_)
    codes = np.ravel_multi_index(tuple(np.asarray(view.column(a), np.int64) for a in attrs_), shape)
    return codes, int(np.prod(shape))


# -- messages -------------------------------------------------------------------------------------
@attrs.frozen(eq=False)
class EncryptedOneHot(Message):
    kind: ClassVar[str] = "he_encrypted_onehot"
    recipient: str = ""
    modulus: str = ""                      # N in hex: the public key
    blocks: list = attrs.field(factory=list)
    cells: list = attrs.field(factory=list)
    width: int = 0
    per: int = 0
    groups: list = attrs.field(factory=list)
    ciphertexts: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0, 0), np.uint8))
    count_bits: int = 0                    # a wide shared layout's count bits per slot (packing.py); 0: not wide
    guard: int = 0                         # a guarded shared layout's gap slots (packing.py); 0: not guarded
    block_ids: list = attrs.field(factory=list)   # rows made of kept blocks (`encrypt_blocks`): one id per block
    kept: list = attrs.field(factory=list)        # the ids S holds from earlier answers: their columns not sent

    def layout(self) -> Layout:
        return Layout(tuple(tuple(b) for b in self.blocks), tuple(self.cells), self.width, self.per, tuple(self.groups),
                      self.count_bits, self.guard)

    def validate(self) -> EncryptedOneHot:
        super().validate()
        lay = self.layout()
        if self.block_ids and (len(self.block_ids) != len(self.blocks) or not set(self.kept) <= set(self.block_ids)
                               or len(set(self.groups)) != len(self.groups) or lay.shared):
            raise self._fail("block ids need one id per block, each block in its own group of a tight layout")
        if self.kept and not self.block_ids:
            raise self._fail("kept blocks named without block ids")
        sent = lay.plaintexts - sum(len(lay.columns(i)) for i, k in enumerate(self.block_ids) if k in self.kept)
        if self.ciphertexts.dtype != np.uint8 or self.ciphertexts.ndim != 3 or self.ciphertexts.shape[1] != sent:
            raise self._fail(f"ciphertexts have shape {self.ciphertexts.shape}, expected (rows, {sent}, bytes)")
        if paillier.text_bits(self.modulus) < paillier.MIN_KEY_BITS:
            raise self._fail(f"public key's modulus shorter than {paillier.MIN_KEY_BITS} bits")
        return self


@attrs.frozen(eq=False)
class EncryptedSums(Message):
    kind: ClassVar[str] = "he_encrypted_sums"
    recipient: str = ""
    groupings: list = attrs.field(factory=list)   # [{"attrs": SB, "columns": [...], "groups": G}]
    sums: dict = attrs.field(factory=dict)        # "g<i>" -> uint8 (G, len(columns), bytes)

    def validate(self) -> EncryptedSums:
        super().validate()
        for i, g in enumerate(self.groupings):
            arr = self.sums.get(f"g{i}")
            if arr is None or arr.dtype != np.uint8 or arr.shape[:2] != (g["groups"], len(g["columns"])):
                raise self._fail(f"sums of grouping {g['attrs']} are missing or misshapen")
        return self


@attrs.frozen(eq=False)
class NoisyCounts(Message):
    """Cross-party tables with two-sided discrete Gaussian noise; every cell's noise variance is `variance`."""

    kind: ClassVar[str] = "he_noisy_counts"
    peer: str = ""
    stage: str = ""
    crypto: str = ""           # "real" or "simulated" (the report labels it)
    encrypting: str = ""       # which party encrypted
    variance: float = 0.0
    tables: dict = attrs.field(factory=dict)   # "a|b|c" -> array on those attributes in that order

    def validate(self) -> NoisyCounts:
        super().validate()
        if not self.variance > 0:
            raise self._fail(f"variance must be positive, got {self.variance}")
        return self


# -- the protocol ---------------------------------------------------------------------------------
@attrs.define
class Costs:
    """What one protocol run cost each side (CPU seconds of this process, bytes sent, and the priced operations
    it performed: the change of the calling thread's `ops` counter, op -> count, the same names `HEEncoder`'s
    estimates count)."""

    cpu: dict = attrs.field(factory=dict)
    bytes_sent: dict = attrs.field(factory=dict)
    ciphertexts: dict = attrs.field(factory=dict)
    ops: dict = attrs.field(factory=dict)

    def add(self, party: str, cpu: float = 0.0, sent: int = 0, cts: int = 0, done: Mapping[str, int] | None = None
            ) -> None:
        self.cpu[party] = self.cpu.get(party, 0.0) + cpu
        self.bytes_sent[party] = self.bytes_sent.get(party, 0) + sent
        self.ciphertexts[party] = self.ciphertexts.get(party, 0) + cts
        mine = self.ops.setdefault(party, {})
        for op, k in (done or {}).items():
            mine[op] = mine.get(op, 0) + k

    def since(self, party: str, start: tuple[float, Any], sent: int = 0, cts: int = 0) -> None:
        """Book to `party` the CPU and operations since `start` (`mark()`)."""
        self.add(party, cpu_now() - start[0], sent, cts, dict(ops.now() - start[1]))


def mark() -> tuple[float, Any]:
    """Now, for `Costs.since`: this process's CPU (with its reaped pool workers) and its operation counts."""
    return cpu_now(), ops.now()


def unique(queries: Sequence[Query]) -> list[Query]:
    """The queries in order, each once, as tuples of attribute names."""
    return list(dict.fromkeys((tuple(q[0]), tuple(q[1])) for q in queries))


def cpu_now() -> float:
    """CPU seconds of this process plus its finished children (the encryption pool's workers)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def _blocks_and_groupings(queries: Sequence[Query]) -> tuple[list, list]:
    blocks = list(dict.fromkeys(q[0] for q in queries))
    groupings = list(dict.fromkeys(q[1] for q in queries))
    return blocks, groupings


def block_groups(queries: Sequence[Query], separate: bool = False) -> tuple[list, list[int]]:
    """E's blocks ordered so that blocks summed by the same set of S's groupings are adjacent, and each block's
    group id (blocks of one group share ciphertexts; a new group starts a fresh one). `separate`: every block its
    own group (a layout whose blocks a later stage may sum by other groupings: `HEEncoder.reuse_plan`)."""
    blocks, _ = _blocks_and_groupings(queries)
    if separate:
        return blocks, list(range(len(blocks)))
    sets = {b: frozenset(q[1] for q in queries if q[0] == b) for b in blocks}
    ids = {s: i for i, s in enumerate(dict.fromkeys(sets[b] for b in blocks))}
    ordered = sorted(blocks, key=lambda b: ids[sets[b]])
    return ordered, [ids[sets[b]] for b in ordered]


def row_ciphertexts(queries: Sequence[Query], size: Callable[[tuple[str, ...]], int], n: int, offset: int,
                    modulus_bits: int, slot_bits: int | None = None, share: bool = True, separate: bool = False) -> int:
    """Ciphertexts per row the encrypting side of `queries` makes (its layout's plaintexts)."""
    blocks, groups = block_groups(unique(queries), separate)
    return Layout.build(blocks, [size(b) for b in blocks], n, offset, modulus_bits, groups, slot_bits,
                        share).plaintexts


def grouping_columns(lay: Layout, queries: Sequence[Query]) -> list[tuple[tuple[str, ...], list[int], list[int]]]:
    """Round 2's plan at S, from E's layout: for every grouping SB (in query order), the blocks queried with it and
    the plaintext columns S sums and returns for it (every column holding one of those blocks)."""
    block_index = {tuple(b): i for i, b in enumerate(lay.blocks)}
    _, groupings = _blocks_and_groupings(unique(queries))
    out = []
    for sb in groupings:
        mine = [block_index[q[0]] for q in unique(queries) if q[1] == sb]
        out.append((sb, mine, sorted({c for b in mine for c in lay.columns(b)})))
    return out


def stage_counts(queries: Sequence[Query], size: Callable[[tuple[str, ...]], int], n: int, offset: int,
                 modulus_bits: int, slot_bits: int | None = None, share: bool = True, separate: bool = False,
                 reuse: Layout | None = None) -> dict[str, int]:
    """What one protocol run on `queries` (E's side first) makes, exactly, from E's layout: "per_row" ciphertexts
    per row E encrypts, "returned" ciphertexts S sends back (per grouping: its values x its columns), "adds"
    homomorphic additions at S (each grouping's columns over all n rows). `reuse`: the run sums the rows E
    encrypted in an earlier stage under that layout (no new encryption)."""
    if reuse is None:
        blocks, groups = block_groups(unique(queries), separate)
        lay = Layout.build(blocks, [size(b) for b in blocks], n, offset, modulus_bits, groups, slot_bits, share)
    else:
        lay = reuse
    cols = grouping_columns(lay, queries)
    return {"per_row": 0 if reuse is not None else lay.plaintexts,
            "returned": sum(size(sb) * len(c) for sb, _, c in cols), "adds": sum(n * len(c) for *_, c in cols)}


def encrypt_rows(party: str, recipient: str, view: Dataset, queries: Sequence[Query], public_key, offset: int,
                 workers: int = 0, chunk: int = 2048, slot_bits: int | None = None, share: bool = True,
                 separate: bool = False) -> EncryptedOneHot:
    """Round 1 at E. Blocks summed by the same groupings pack tightly together; each such group starts on a fresh
    ciphertext (`block_groups`), unless one shared layout needs fewer (`share`, packing.py). `separate`: every
    block its own group, so that a later stage can sum the same rows by other groupings."""
    queries = unique(queries)
    blocks, groups = block_groups(queries, separate)
    codes, cells = zip(*(tuple_codes(view, b) for b in blocks))
    lay = Layout.build(blocks, cells, view.n, offset, paillier.plain_bits(public_key), groups, slot_bits, share)
    plain = lay.pack_rows(codes)
    cts = np.array(paillier.encrypt_many(public_key, plain.ravel().tolist(), workers, chunk, label="encrypt rows"),
                   dtype=object)
    return EncryptedOneHot(party, recipient, paillier.key_text(public_key), [list(b) for b in blocks], list(cells),
                           lay.width, lay.per, list(lay.groups),
                           paillier.to_bytes(public_key, cts.reshape(plain.shape)), lay.count_bits, lay.guard).validate()


class RowsCache:
    """E's encrypted rows that S holds from earlier answers of one run, for one (E, S) pair: block id -> its
    ciphertext columns (uint8 (n, columns, 2·key_bits/8)), or E's whole rows (an `EncryptedOneHot`), at S; or
    only their size in E's record of what S holds (`arrays` False).
    Bounded: at most `max_bytes` of ciphertexts, the least recently used block dropped first. E and S apply the same
    operations in the same order (`keep_blocks`), so E's record and S's store drop the same blocks."""

    def __init__(self, max_bytes: int, arrays: bool = True) -> None:
        self.max_bytes, self.arrays = int(max_bytes), arrays
        self.items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.bytes = 0

    def __contains__(self, key: str) -> bool:
        return key in self.items

    def get(self, key: str) -> Any:
        self.items.move_to_end(key)
        return self.items[key][0]

    def put(self, key: str, value: Any, nbytes: int) -> None:
        if key in self.items or nbytes > self.max_bytes:
            return
        while self.bytes + nbytes > self.max_bytes:
            _, (_, b) = self.items.popitem(last=False)
            self.bytes -= b
        self.items[key] = (value, int(nbytes))
        self.bytes += int(nbytes)


def block_id(salt: bytes, modulus: str, block: Sequence[str], width: int, codes: np.ndarray) -> str:
    """E's name for one encrypted block: its attributes, slot width and key, and its rows' codes (the column
    as the query bins it), under a salt E draws per run from the OS CSPRNG (S cannot test guesses of E's column)."""
    head = f"vertisynth/he-block/v1|{modulus}|{'|'.join(block)}|{width}|".encode()
    return hmac.new(salt, head + np.ascontiguousarray(codes, "<i8").tobytes(), hashlib.sha256).hexdigest()[:32]


def usual_layout(queries: Sequence[Query], size: Callable[[tuple[str, ...]], int], n: int, offset: int,
                 modulus_bits: int, slot_bits: int | None = None, separate: bool = False) -> Layout:
    """The layout `encrypt_rows` builds for `queries` (blocks of the same groupings packed together, or each in
    its own group where `separate`; a shared layout where that needs fewer plaintexts)."""
    blocks, groups = block_groups(unique(queries), separate)
    return Layout.build(blocks, [size(b) for b in blocks], n, offset, modulus_bits, groups, slot_bits, True)


def blocks_layout(queries: Sequence[Query], size: Callable[[tuple[str, ...]], int], n: int, offset: int,
                  modulus_bits: int, slot_bits: int | None = None) -> Layout:
    """The layout of rows made of kept blocks: every block of `queries` (E's side) on its own plaintexts, tight
    (a block's ciphertexts do not depend on which other blocks a query asks with it)."""
    blocks, groups = block_groups(unique(queries), separate=True)
    return Layout.build(blocks, [size(b) for b in blocks], n, offset, modulus_bits, groups, slot_bits, share=False)


def encrypt_blocks(party: str, recipient: str, view: Dataset, queries: Sequence[Query], public_key, offset: int,
                   salt: bytes, held: Callable[[str], bool], workers: int = 0, chunk: int = 2048,
                   slot_bits: int | None = None, limit: int | None = None) -> EncryptedOneHot | None:
    """Round 1 at E on `blocks_layout`: the blocks S holds already (`held(id)`) are named, the others encrypted
    (fresh randomness) and sent; S sums both alike (`expand_rows`). None (nothing encrypted) when that would take
    more than `limit` new ciphertexts per row (the usual layout, `encrypt_rows`, packs several fresh blocks
    tighter)."""
    queries = unique(queries)
    blocks, groups = block_groups(queries, separate=True)
    codes, cells = zip(*(tuple_codes(view, b) for b in blocks))
    bits, modulus = paillier.plain_bits(public_key), paillier.key_text(public_key)
    lay = Layout.build(blocks, cells, view.n, offset, bits, groups, slot_bits, share=False)
    ids = [block_id(salt, modulus, b, lay.width, c) for b, c in zip(blocks, codes)]
    fresh = [i for i, k in enumerate(ids) if not held(k)]
    if limit is not None and sum(len(lay.columns(i)) for i in fresh) > limit:
        return None
    width = paillier.ciphertext_bytes(public_key)
    if fresh:
        sub = Layout.build([blocks[i] for i in fresh], [cells[i] for i in fresh], view.n, offset, bits,
                           range(len(fresh)), slot_bits, share=False)
        plain = sub.pack_rows([codes[i] for i in fresh])
        cts = np.array(paillier.encrypt_many(public_key, plain.ravel().tolist(), workers, chunk,
                                             label="encrypt rows"), dtype=object)
        raw = paillier.to_bytes(public_key, cts.reshape(plain.shape))
    else:
        raw = np.zeros((view.n, 0, width), np.uint8)
    return EncryptedOneHot(party, recipient, modulus, [list(b) for b in blocks], list(cells), lay.width, lay.per,
                           list(lay.groups), raw, 0, 0, ids,
                           [k for i, k in enumerate(ids) if i not in fresh]).validate()


def keep_blocks(store: RowsCache, msg: EncryptedOneHot) -> np.ndarray | None:
    """One message's effect on a `RowsCache` (E's record or S's store, the same steps on both, so both drop the
    same blocks): every kept block touched, then every sent one stored (at S with its columns). At S returns the
    full ciphertext array (kept blocks read from the store); at E (a record without arrays) None. A kept block the
    store does not hold, or holds in another shape, is refused."""
    lay = msg.layout()
    rows, width = msg.ciphertexts.shape[0], msg.ciphertexts.shape[2]
    cols = [len(lay.columns(i)) for i in range(len(msg.blocks))]
    parts: dict[int, np.ndarray | None] = {}
    for i, k in enumerate(msg.block_ids):
        if k in msg.kept:
            if k not in store:
                raise MessageError(f"he: {msg.party!r} names encrypted rows (block {msg.blocks[i]}) that "
                                   f"{msg.recipient!r} does not hold; refused")
            parts[i] = store.get(k)
            if parts[i] is not None and parts[i].shape != (rows, cols[i], width):
                raise MessageError(f"he: {msg.party!r}'s kept rows for block {msg.blocks[i]} have shape "
                                   f"{parts[i].shape}; refused")
    j = 0
    for i, k in enumerate(msg.block_ids):
        if k not in msg.kept:
            parts[i] = msg.ciphertexts[:, j:j + cols[i]]
            j += cols[i]
            store.put(k, np.array(parts[i]) if store.arrays else None, rows * cols[i] * width)
    if not store.arrays:
        return None
    return np.concatenate([parts[i] for i in range(len(msg.blocks))], axis=1)


def expand_rows(msg: EncryptedOneHot, store: RowsCache) -> EncryptedOneHot:
    """At S: E's rows with every kept block filled in from S's store (and the sent ones stored for later answers)."""
    if not msg.block_ids:
        return msg
    return attrs.evolve(msg, ciphertexts=keep_blocks(store, msg), kept=[]).validate()


def check_layout(lay: Layout, queries: Sequence[Query], n: int, offset: int, modulus_bits: int,
                 size: Callable[[tuple[str, ...]], int] | None = None, slot_bits: int | None = None,
                 share: bool = True, separate: bool = False) -> Layout:
    """S's check of E's declared layout against the one the public facts give (`encrypt_rows` builds the same):
    the blocks and groups of the queries, the cells of E's attributes (when `size` is known), the slot width
    (the least that cannot overflow, or `slot_bits`) and the slots per plaintext. A wider slot or more cells than
    the plan would let a dishonest E carry more in the declared slots; a narrower one could overflow. Returns the
    planned layout (a shared one when `share` and it needs fewer plaintexts: then its count bits are checked too)."""
    blocks, groups = block_groups(unique(queries), separate)
    if list(lay.blocks) != blocks:
        raise MessageError(f"he: the encrypting party's blocks {[list(b) for b in lay.blocks]} are not those of the "
                           f"queries {[list(b) for b in blocks]}; refusing to sum")
    cells = [size(b) for b in blocks] if size is not None else list(lay.cells)
    need = Layout.build(blocks, cells, n, offset, modulus_bits, groups).width
    if lay.width < need:
        raise ConfigError(f"he: the encrypting party's {lay.width}-bit slots could overflow with {n} rows and "
                          f"noise offset {offset}; refusing to sum")
    want = Layout.build(blocks, cells, n, offset, modulus_bits, groups, slot_bits, share)
    if list(lay.groups) != list(want.groups):
        raise MessageError(f"he: the encrypting party's blocks {[list(b) for b in lay.blocks]} are not those of the "
                           f"queries {[list(b) for b in blocks]} in their planned groups; refusing to sum")
    if (lay.cells, lay.width, lay.per, lay.count_bits, lay.guard) != (want.cells, want.width, want.per, want.count_bits,
                                                                      want.guard):
        raise MessageError(f"he: the encrypting party's layout (cells {list(lay.cells)}, {lay.width}-bit slots, "
                           f"{lay.per} per plaintext) is not the planned one (cells {list(want.cells)}, "
                           f"{want.width}-bit slots, {want.per} per plaintext); refusing to sum")
    return want


def sum_and_noise(party: str, msg: EncryptedOneHot, view: Dataset, queries: Sequence[Query], sigma: float,
                  source: UniformSource, workers: int = 0, size: Callable[[tuple[str, ...]], int] | None = None,
                  slot_bits: int | None = None, offset: int | None = None,
                  extra: Callable[[int, int], Sequence[int]] | None = None, share: bool = True,
                  plan_queries: Sequence[Query] | None = None, separate: bool = False) -> EncryptedSums:
    """Round 2 at S: homomorphic sums per value of each grouping, S's noise (+T) added under encryption with fresh
    randomness (so no returned ciphertext is the plain sum), and a fresh uniform mask on every bit outside the
    declared slots (`Layout.mask`), so a dishonest E that writes outside them reads noise there. E's layout must be
    the planned one (`check_layout`; `size`: E's attribute tuples' cells, `slot_bits`: the config's).
    `offset`: the layout's noise offset when more than S's T shares the slots (trust = "server": both parties' shares,
    2T); `extra(grouping, value)`: further ciphertexts, one per returned column, multiplied into that sum before the
    re-randomisation (trust = "server": E's encrypted noise share). `plan_queries`, `separate`: the rows are those E
    encrypted in an earlier stage for these queries (the layout is checked against that stage's plan, `offset` its
    T); every block of `queries` must be one of its blocks."""
    queries = unique(queries)
    paillier.require()
    pk = paillier.public_from_text(msg.modulus)
    nsq, modulus = paillier.ct_modulus(pk), paillier.plain_modulus(pk)
    t = support_bound(sigma)
    lay = check_layout(msg.layout(), queries if plan_queries is None else plan_queries, view.n,
                       t if offset is None else offset, paillier.plain_bits(pk), size, slot_bits, share, separate)
    missing = {q[0] for q in queries} - set(lay.blocks)
    if missing:
        raise MessageError(f"he: blocks {sorted(map(list, missing))} are not in the encrypting party's rows; refusing")
    if msg.ciphertexts.shape[0] != view.n:
        raise MessageError(f"he: {msg.party!r} encrypted {msg.ciphertexts.shape[0]} rows, {party!r} holds {view.n}")
    block_index = {tuple(b): i for i, b in enumerate(lay.blocks)}
    cts = paillier.loaded(pk, msg.ciphertexts)   # E's whole rows: read once per run
    # noise for every query, drawn in query order (the simulation draws in the same order)
    noise = {q: discrete_gaussian((lay.cells[block_index[q[0]]], tuple_codes(view, q[1])[1]), sigma, source)
             for q in queries}
    out_groupings, sums, pending = [], {}, []
    for gi, (sb, mine, cols) in enumerate(grouping_columns(lay, queries)):
        touched = {b for b in range(len(lay.blocks)) if set(lay.columns(b)) & set(cols)}
        if touched - set(mine) and not lay.shared:   # a shared layout masks them (Layout.mask)
            raise ConfigError(f"he: summing by {list(sb)} would release blocks {[lay.blocks[b] for b in touched - set(mine)]} "
                              "without noise (they share ciphertexts with the queried ones)")
        declared = {c: lay.declared_bits(mine, c) for c in cols}
        codes, groups = tuple_codes(view, sb)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(groups + 1))
        sub = cts[:, cols]
        for v in range(groups):
            step(f"homomorphic sums by {'|'.join(sb)}", v, groups)
            acc = paillier.product_mod(sub[order[bounds[v]:bounds[v + 1]]], nsq)
            if extra is not None:
                acc = (acc * np.array([paillier.gmpy2.mpz(int(c)) for c in extra(gi, v)], dtype=object)) % nsq
                ops.count("mul", len(acc))
            plain = lay.pack_values([(b, noise[(lay.blocks[b], sb)][:, v] + t) for b in mine])
            pending.append((gi, v, acc, [plain[c] + lay.mask(declared[c], modulus, c) for c in cols]))
        out_groupings.append({"attrs": list(sb), "columns": cols, "groups": groups})
    # the noise encryptions: the bulk of S's exponentiations, mapped over local processes
    flat = [p for *_, plains in pending for p in plains]
    enc_noise = iter(paillier.encrypt_many(paillier.rerandomiser(pk), flat, workers,
                                           label="encrypt noise (re-randomise)", op="noise"))
    ops.count("mul", len(flat))   # each sum times its noise ciphertext
    per_g: dict[int, list] = {}
    for gi, v, acc, plains in pending:
        per_g.setdefault(gi, []).append([(int(a) * next(enc_noise)) % nsq for a in acc])
    for gi, rows in per_g.items():
        sums[f"g{gi}"] = paillier.to_bytes(pk, np.array(rows, dtype=object))
    return EncryptedSums(party, msg.party, out_groupings, sums).validate()


def open_sums(private_key, lay: Layout, sums: EncryptedSums, queries: Sequence[Query], offset: int
              ) -> dict[Query, np.ndarray]:
    """Decrypt the returned sums and unpack each query's (E cells x S values) table, the noise offset removed."""
    pk = private_key.public_key
    block_index = {tuple(b): i for i, b in enumerate(lay.blocks)}
    got: dict[Query, np.ndarray] = {}
    for gi, g in enumerate(sums.groupings):
        step("decrypt", gi, len(sums.groupings))
        sb = tuple(g["attrs"])
        cts = paillier.from_bytes(pk, sums.sums[f"g{gi}"])
        plains = [dict(zip(g["columns"], paillier.decrypt_many(private_key, row))) for row in cts]
        for q in queries:
            if q[1] == sb:
                got[q] = np.stack([lay.unpack(p, block_index[q[0]]) for p in plains], axis=1) - offset
    for q in queries:
        if q not in got:
            raise MessageError(f"he: {sums.party!r} returned no sums for query {q}")
    return got


def decrypt_and_publish(party: str, private_key, onehot: EncryptedOneHot, sums: EncryptedSums,
                        queries: Sequence[Query], sigma: float, source: UniformSource, stage: str) -> NoisyCounts:
    """Round 3 at E: decrypt, unpack, remove the offset T, add E's noise, publish."""
    queries = unique(queries)
    got = open_sums(private_key, onehot.layout(), sums, queries, support_bound(sigma))
    tables = {}
    for q in queries:
        shape = got[q].shape
        e_noise = discrete_gaussian(shape, sigma, source, bounded=False)   # E's, in the clear: not truncated
        tables[key_of(q[0] + q[1])] = (got[q] + e_noise).astype(np.float64)
    return NoisyCounts(party, sums.party, stage, "real", party, 2 * sigma**2, tables).validate()


def reshape_tables(msg: NoisyCounts, domain_sizes: Mapping[str, int]) -> dict[tuple[str, ...], np.ndarray]:
    """The published tables with one axis per attribute."""
    out = {}
    for k, v in msg.tables.items():
        attrs_ = tuple(k.split("|"))
        out[attrs_] = np.asarray(v, float).reshape(tuple(domain_sizes[a] for a in attrs_))
    return out


def run_real(enc_party: str, sum_party: str, enc_view: Dataset, sum_view: Dataset, queries: Sequence[Query],
             sigma: float, enc_source: UniformSource, sum_source: UniformSource, keys, stage: str,
             costs: Costs | None = None, workers: int = 0, chunk: int = 2048,
             slot_bits: int | None = None, separate: bool = False,
             reuse: tuple[EncryptedOneHot, Sequence[Query], int] | None = None,
             keep: Callable[[EncryptedOneHot], None] | None = None,
             rows: EncryptedOneHot | None = None) -> NoisyCounts:
    """The three rounds in one process (the parties' steps are the functions above; `keys` is E's key pair).
    `separate`: E's layout puts every block in its own group (`encrypt_rows`). `reuse`: (E's rows from an earlier
    stage, that stage's queries, its offset T): S sums those rows (no new encryption; `HEEncoder.reuse_plan`).
    `keep(m1)`: S keeps E's rows for such a later stage. `rows`: E's rows made of kept blocks (`encrypt_blocks`,
    filled in at S by `expand_rows`), already made and counted by the caller."""
    public_key, private_key = keys
    costs = costs if costs is not None else Costs()
    t = support_bound(sigma)
    size = lambda b: int(np.prod([enc_view.domain.size(a) for a in b]))  # noqa: E731  (the public domain)
    share = True
    if rows is not None:
        m1, plan, offset, separate, share = rows, None, None, True, False
    elif reuse is None:
        c0 = mark()
        m1 = encrypt_rows(enc_party, sum_party, enc_view, queries, public_key, t, workers, chunk, slot_bits,
                          separate=separate)
        costs.since(enc_party, c0, m1.ciphertexts.nbytes, int(np.prod(m1.ciphertexts.shape[:2])))
        plan, offset = None, None
        if keep is not None:
            keep(m1)
    else:
        m1, plan, offset = reuse
        separate = True
    c0 = mark()
    m2 = sum_and_noise(sum_party, m1, sum_view, queries, sigma, sum_source, workers, size, slot_bits, offset=offset,
                       share=share, plan_queries=plan, separate=separate)
    costs.since(sum_party, c0, sum(a.nbytes for a in m2.sums.values()),
                sum(int(np.prod(a.shape[:2])) for a in m2.sums.values()))
    c0 = mark()
    m3 = decrypt_and_publish(enc_party, private_key, m1, m2, queries, sigma, enc_source, stage)
    costs.since(enc_party, c0, sum(a.nbytes for a in m3.tables.values()))
    return m3


def simulate(enc_party: str, sum_party: str, enc_view: Dataset, sum_view: Dataset, queries: Sequence[Query],
             sigma: float, enc_source: UniformSource, sum_source: UniformSource, stage: str) -> NoisyCounts:
    """The same released tables computed in plaintext, the noise drawn from the same sources in the same order."""
    queries = unique(queries)
    exact, noise_s = {}, {}
    for q in queries:
        ca, na = tuple_codes(enc_view, q[0])
        cb, nb = tuple_codes(sum_view, q[1])
        exact[q] = np.bincount(ca * nb + cb, minlength=na * nb).reshape(na, nb)
        noise_s[q] = discrete_gaussian((na, nb), sigma, sum_source)
    tables = {key_of(q[0] + q[1]): (exact[q] + noise_s[q] + discrete_gaussian(exact[q].shape, sigma, enc_source,
                                                                               bounded=False))
              .astype(np.float64) for q in queries}
    return NoisyCounts(enc_party, sum_party, stage, "simulated", enc_party, 2 * sigma**2, tables).validate()
