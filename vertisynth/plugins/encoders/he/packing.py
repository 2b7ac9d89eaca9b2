"""Packing many counts into one Paillier plaintext, as FATE's SecureBoost does.

A plaintext (an integer below the modulus N) holds `per` slots of `width` bits each; slot j is the integer's bits
[j·width, (j+1)·width). Adding ciphertexts adds the packed integers, so each slot accumulates its own count as long as
no slot ever exceeds 2^width - 1 (no carry into the next). The encrypting party's one-hot codes put a 1 in one slot
per block (an attribute tuple) per row; the summing party adds at most n rows and then its noise plus the offset T
(so the noise never makes a slot negative, which would borrow from the next): every slot stays within n + 2T.
`slot_width` picks the width from exactly that bound; `Layout` refuses a width that could overflow.

Layouts in which blocks summed by different groupings share ciphertexts (`Layout.build(share=True)`, chosen only
when they need fewer ciphertexts per row). A column S returns for a grouping then also holds other blocks' plain
counts, which S must hide from E. Two kinds:
  * guarded (`guard` > 0): k-bit slots as in the tight layout, the blocks in their groups' order, and `guard` empty
    slots (at least MASK_BITS + 1 bits) wherever a block of another group follows in the same plaintext, and at the
    top of every plaintext. In a returned column every maximal run of undeclared slots (other blocks' counts, empty
    slots) ends in such a gap, below a declared slot or the plaintext's top: S adds to the run, as one integer, a
    fresh uniform value in [0, 2^W - 2^u] (W the run's bits, u those below its gap), so it carries nowhere and two
    runs' contents differ in total variation by at most 2^-(MASK_BITS+1) per run (not per slot). E reads each
    declared slot exactly as in the tight layout (k bits).
  * wide (`count_bits` = k < width): every block in one group, slots of width max(k, MASK_BITS) + 1; S's mask puts
    a fresh uniform value in [0, 2^width - 2^k] on every undeclared slot (total variation at most 2^-MASK_BITS per
    slot) and a uniform multiple of 2^k on the guard bits of every declared slot, so E reads it only mod 2^k.
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Sequence

import attrs
import numpy as np

from vertisynth.core.errors import ConfigError


MASK_BITS = 40   # statistical hiding of a shared layout's undeclared slots: total variation <= 2^-40 per slot
GUARDED = True   # whether `Layout.build(share=True)` may choose a guarded layout (False: the earlier wide-only choice)


def slot_width(n: int, offset: int) -> int:
    """Bits a slot needs to hold any count of n rows plus noise in [-offset, offset] shifted by +offset."""
    return int(n + 2 * offset).bit_length()


@attrs.frozen
class Layout:
    """Where every block's cells sit: block b (an attribute tuple with `cells[b]` cells) occupies the global slots
    starts[b] .. starts[b] + cells[b] - 1; global slot s lives in plaintext s // per at position s % per.
    `groups`: a block whose group differs from the previous block's starts on a fresh plaintext, so the summing
    party can add up one group's ciphertexts without touching another group's counts (blocks that are summed by
    the same groupings share a group and pack tightly)."""

    blocks: tuple[tuple[str, ...], ...]
    cells: tuple[int, ...]
    width: int
    per: int
    groups: tuple[int, ...]
    count_bits: int = 0          # wide shared layouts: the low bits of a slot that carry the count (0: all `width`)
    guard: int = 0               # guarded shared layouts: empty slots at each group boundary and each plaintext's top
    starts: tuple[int, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if len(self.groups) != len(self.cells):
            raise ConfigError("he: layout needs one group per block")
        if not 0 <= self.count_bits <= self.width:
            raise ConfigError(f"he: layout count bits {self.count_bits} outside [0, {self.width}]")
        if self.guard and self.count_bits:
            raise ConfigError("he: a layout is guarded or wide, not both")
        starts, s = [], 0
        for i, c in enumerate(self.cells):
            if i and self.groups[i] != self.groups[i - 1] and s % self.per:
                # a fresh plaintext, or (guarded) a gap that S's mask of the run below it fills
                fresh = not self.guard or s % self.per + self.guard >= self.per
                s += self.per - s % self.per if fresh else self.guard
            starts.append(s)
            s += c
        object.__setattr__(self, "starts", tuple(starts))

    @classmethod
    def build(cls, blocks: Sequence[tuple[str, ...]], cells: Sequence[int], n: int, offset: int, modulus_bits: int,
              groups: Sequence[int] | None = None, width: int | None = None, share: bool = False) -> Layout:
        """The tight layout (blocks of different groups on fresh plaintexts); with `share` (and no forced
        `width`), the shared one instead when it needs fewer plaintexts (module docstring)."""
        need = slot_width(n, offset)
        forced = width is not None
        width = need if width is None else int(width)
        if width < need:
            raise ConfigError(f"he: a slot of {width} bits could overflow: counts of up to {n} rows plus noise offset "
                              f"{offset} need {need} bits (slot_bits too small)")
        per = (modulus_bits - 1) // width
        if per < 1:
            raise ConfigError(f"he: a {width}-bit slot does not fit a {modulus_bits}-bit Paillier plaintext")
        groups = tuple(int(g) for g in groups) if groups is not None else (0,) * len(cells)
        tight = cls(tuple(tuple(b) for b in blocks), tuple(int(c) for c in cells), width, per, groups)
        if not share or forced or len(set(groups)) < 2:
            return tight
        wide = max(need, MASK_BITS) + 1
        if (modulus_bits - 1) // wide < 1:
            return tight
        shared = cls(tight.blocks, tight.cells, wide, (modulus_bits - 1) // wide, (0,) * len(groups), need)
        guard = -(-(MASK_BITS + 1) // need)     # gap slots: at least MASK_BITS + 1 bits
        options = [tight]
        if GUARDED and (modulus_bits - 1) // need - guard >= 1:
            options.append(cls(tight.blocks, tight.cells, need, (modulus_bits - 1) // need - guard, groups, 0, guard))
        options.append(shared)
        return min(options, key=lambda lay: lay.plaintexts)   # the first of the fewest: tight, guarded, wide

    @property
    def shared(self) -> bool:
        """Blocks of different groupings share plaintexts (S masks the undeclared ones: module docstring)."""
        return self.guard > 0 or 0 < self.count_bits < self.width

    @property
    def k(self) -> int:
        """The bits of a slot that carry its count."""
        return self.count_bits or self.width

    @property
    def slots(self) -> int:
        return self.starts[-1] + self.cells[-1] if self.cells else 0

    @property
    def plaintexts(self) -> int:
        """Ciphertexts per row."""
        return -(-self.slots // self.per)

    def columns(self, block: int) -> range:
        """The plaintext columns block `block` touches."""
        s = self.starts[block]
        return range(s // self.per, (s + self.cells[block] - 1) // self.per + 1)

    def pack_rows(self, codes: Sequence[np.ndarray]) -> np.ndarray:
        """One-hot rows packed: codes[b][i] is row i's cell in block b; returns an (n, plaintexts) object array of
        Python ints (numpy applies the shifts elementwise; there is no per-row Python loop)."""
        n = len(codes[0]) if codes else 0
        out = np.zeros((n, self.plaintexts), dtype=object)
        rows = np.arange(n)
        for b, code in enumerate(codes):
            slot = self.starts[b] + np.asarray(code, np.int64)
            col, pos = slot // self.per, slot % self.per
            shifts = (pos * self.width).astype(object)
            np.add.at(out, (rows, col), np.left_shift(np.ones(n, dtype=object), shifts))
        return out

    def pack_values(self, values: Sequence[tuple[int, np.ndarray]]) -> list[int]:
        """Plaintexts carrying the given per-slot values: (block, int array of that block's cells); other slots 0.
        Every value must fit its slot."""
        out = [0] * self.plaintexts
        top = 1 << self.k
        for b, vals in values:
            vals = np.asarray(vals, np.int64).ravel()
            if vals.size != self.cells[b] or vals.min(initial=0) < 0 or vals.max(initial=0) >= top:
                raise ConfigError(f"he: values for block {self.blocks[b]} do not fit {self.k}-bit slots")
            for k, v in enumerate(vals.tolist()):
                s = self.starts[b] + k
                out[s // self.per] += v << (self.width * (s % self.per))
        return out

    def declared_bits(self, blocks: Sequence[int], column: int) -> int:
        """The bit mask of plaintext `column`'s slots that hold a cell of one of `blocks`."""
        full, m = (1 << self.width) - 1, 0
        for b in blocks:
            for s in range(max(self.starts[b], column * self.per), min(self.starts[b] + self.cells[b],
                                                                       (column + 1) * self.per)):
                m |= full << (self.width * (s % self.per))
        return m

    def mask(self, declared: int, modulus: int, column: int = 0) -> int:
        """A fresh mask from the OS CSPRNG for one returned plaintext: uniform w-bit values in every slot outside
        `declared` and a uniform value above the slots (below the modulus), zero in the declared slots. On an
        honest sum (every undeclared slot 0, every declared one below 2^w) adding it carries nowhere and stays
        below the modulus, so the declared slots decrypt unchanged; whatever a dishonest encryptor put outside
        them reads as uniform noise (docs/he.md: what carries and the modulus still let through)."""
        region = self.per * self.width
        if self.guard:
            return self._guarded_mask(declared, modulus, column)
        if self.shared:
            # undeclared slots hold plain counts < 2^k: a uniform value in [0, 2^w - 2^k] hides them (TV <= 2^-k'
            # for k' = log2(2^w - 2^k + 1) >= MASK_BITS) and carries nowhere; a declared slot's guard bits get a
            # uniform multiple of 2^k, so E reads it mod 2^k only
            low, w, k = 0, self.width, self.k
            for j in range(self.per):
                if (declared >> (j * w)) & 1:
                    r = secrets.randbelow(1 << (w - k)) << k
                else:
                    r = secrets.randbelow((1 << w) - (1 << k) + 1)
                low |= r << (j * w)
        else:
            low = int.from_bytes(os.urandom(-(-region // 8)), "big") & ((1 << region) - 1) & ~declared
        room = modulus >> region        # honest sums are < 2^region: top·2^region + sum < room·2^region <= N
        top = secrets.randbelow(room)
        return low | (top << region)

    def _guarded_mask(self, declared: int, modulus: int, column: int) -> int:
        """A guarded layout's mask (module docstring): each maximal run of undeclared slots of plaintext `column`, as
        one integer, gets a fresh uniform value from the OS CSPRNG in [0, 2^W - 2^u] (u: its bits up to its highest
        slot holding a cell of any block), the run at the top up to the modulus; declared slots get nothing. A run
        below a declared slot ends in a gap of `guard` empty slots (`starts`), so W - u >= MASK_BITS + 1."""
        w, out, j = self.width, 0, 0
        occupied = self.declared_bits(range(len(self.cells)), column)
        full = (1 << w) - 1
        is_declared = [bool((declared >> (i * w)) & full) for i in range(self.per)]
        holds = [bool((occupied >> (i * w)) & full) for i in range(self.per)]
        while j < self.per:
            if is_declared[j]:
                j += 1
                continue
            lo = j
            while j < self.per and not is_declared[j]:
                j += 1
            u = max((i - lo + 1 for i in range(lo, j) if holds[i]), default=0) * w
            room = modulus >> (lo * w) if j == self.per else 1 << ((j - lo) * w)   # the top run: below the modulus
            if u and room.bit_length() - 1 - u <= MASK_BITS:
                raise ConfigError("he: a guarded layout's run of other blocks' counts has no gap above it")  # (`starts`)
            out |= secrets.randbelow(room - (1 << u) + 1) << (lo * w)
        if is_declared[-1]:   # no run at the top: the bits above the slots still get a mask (honest: all zero)
            out |= secrets.randbelow(modulus >> (self.per * w)) << (self.per * w)
        return out

    def unpack(self, plaintexts: Sequence[int], block: int) -> np.ndarray:
        """Block `block`'s slot values (their count bits) from the plaintexts (a missing column reads as zero)."""
        mask = (1 << self.k) - 1
        out = np.empty(self.cells[block], dtype=np.int64)
        for k in range(self.cells[block]):
            s = self.starts[block] + k
            out[k] = (int(plaintexts[s // self.per]) >> (self.width * (s % self.per))) & mask
        return out
