"""A party's table as a stream of (global ids, rows) chunks, and the counts the party's stages read off it.

The party phase reads its table only through marginal counts (the local PrivMRF fit, the value
distributions: counts are additive over chunks) and through the encoder (a map over chunks, merged by
max or concatenation). So the table itself is never held whole: `ChunkedCounts` answers `counts` by a
pass over the chunks (cached; the pairs and single attributes the local fit asks first come in one pass),
and the encoder maps its `chunk_job` over the same chunks. Integer counts summed over chunks equal the
one-shot `Dataset.counts` exactly, so every stage equals the in-memory run bit for bit. (The chunk stream
and `ChunkedCounts` live in core/chunks.py: a streamed run's evaluation reads them too.) `party_phase` runs
the parties' steps of a one-process run, at once in forked processes if asked.
"""
from __future__ import annotations

import multiprocessing
import pickle
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from vertisynth.core.chunks import ChunkedCounts, Chunks, mapped, view_chunks   # noqa: F401 (the party's names)
from vertisynth.core.chunks import adopt_all, handed
from vertisynth.core.errors import DataError, VertisynthError
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Charge, PrivacyLedger
from vertisynth.core.capabilities import MapsEarly
from vertisynth.core.cluster import EarlyMap


def start_early_map(encoder: Any, party: str, low: Chunks, low_domain: Any, client: Any,
                    chunk_rows: int) -> EarlyMap | None:
    """The party's encoding map started on the cluster now, if the encoder knows it before its job is made
    (`early_mapper`: DPFM with agreed keys) and the workers see the spilled rows; else None. The job made
    later (after the local fit, its charge spent then, as always) takes the merged result if its map is this
    one: the same message bit for bit, with the fit's time hidden behind the workers'."""
    got = encoder.early_mapper(party, low_domain) if isinstance(encoder, MapsEarly) else None
    if got is None:
        return None
    early = EarlyMap(client, low, low_domain, *got, chunk_rows)
    return early if early.running else None


def party_phase(step: Callable[[str, PrivacyLedger], list[Message]], names: Sequence[str], ledger: PrivacyLedger,
                processes: int = 1, threads: bool = False) -> list[Message]:
    """Every party's step (`step(party, ledger)`: its party step on its own data and stream), their messages
    concatenated in the order of `names`.

    With processes > 1 (and fork available) the parties run at once, each in a forked process: the parties
    are independent organisations, so nothing one computes reaches another; each child returns its messages
    and the charges its mechanisms passed, and the parent spends those in party order on its own ledger. The
    messages equal a sequential run's bit for bit (each party reads only its own data and stream).

    With threads (a Dask cluster maps the parties' chunk jobs) every party steps at once in a thread of this
    process, with a ledger of its own whose charges are then spent in party order, as with processes: each
    party's counting and fitting runs while the others' chunk tasks keep the workers busy."""
    names = list(names)
    if threads and len(names) > 1:
        return _spent_in_order(_threaded(step, names, ledger), names, ledger)
    if processes <= 1 or len(names) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [m for p in names for m in step(p, ledger)]
    results: dict[str, tuple[list[Message], list[Any]]] = {}
    for wave in range(0, len(names), processes):
        results.update(_forked(step, names[wave:wave + processes], ledger))
    return _spent_in_order(results, names, ledger)


def _spent_in_order(results: dict[str, tuple[list[Message], list[Any]]], names: Sequence[str],
                    ledger: PrivacyLedger) -> list[Message]:
    out: list[Message] = []
    for p in names:
        messages, spent = results[p]
        for charge in spent:   # the parent's ledger refuses anything its plan does not hold
            ledger.spend(charge)
        out += messages
    return out


def _threaded(step: Callable[[str, PrivacyLedger], list[Message]], names: Sequence[str],
              ledger: PrivacyLedger) -> dict[str, tuple[list[Message], list[Any]]]:
    """One thread per party, each on a copy of the ledger that records what it passed. BLAS is held to one
    thread meanwhile: the estimators pin it in turn, and concurrent pins would undo each other."""
    from threadpoolctl import threadpool_limits

    def run(p: str) -> tuple[list[Message], list[Any]]:
        mine = _recording(ledger)
        return step(p, mine), mine.passed

    with threadpool_limits(1, user_api="blas"), \
            ThreadPoolExecutor(len(names), thread_name_prefix="vertisynth-party") as pool:
        running = {p: pool.submit(run, p) for p in names}
        return {p: running[p].result() for p in names}   # the first party's error in party order


def _recording(ledger: PrivacyLedger) -> _RecordingLedger:
    return _RecordingLedger(ledger.budget, list(ledger.planned), list(ledger.spent), ledger.group_size,
                            noise=ledger.noise)


# after a party's process failed, how long the others still running may take to finish (their results, and the
# spills they hand over, are then adopted, so the run removes those spills when it ends)
FAILED_PARTY_GRACE_S = 30.0


def _forked(step: Callable[[str, PrivacyLedger], list[Message]], names: Sequence[str],
            ledger: PrivacyLedger) -> dict[str, tuple[list[Message], list[Any]]]:
    """One forked child per party (it inherits the data: nothing is copied in), the results back by pipe."""
    ctx = multiprocessing.get_context("fork")
    running = []
    for p in names:
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, step, p, ledger), daemon=True, name=f"vertisynth-party-{p}")
        proc.start()
        send.close()
        running.append((p, proc, recv))
    out: dict[str, tuple[list[Message], list[Any]]] = {}
    failed: Exception | None = None
    grace = 0.0
    try:
        for p, proc, recv in running:
            if failed is not None and not recv.poll(max(grace - time.monotonic(), 0.0)):
                # still stepping after the grace: stopped below; a spill it had not handed over yet is its own
                # (swept once it is gone), one handed over stays marked this process's until it exits
                continue
            blob = None
            while blob is None:   # bounded by the child's life: a dead child without a result is an error
                if recv.poll(0.2):
                    try:
                        blob = recv.recv_bytes()
                    except EOFError:
                        blob = b""
                elif not proc.is_alive() and not recv.poll(0):
                    blob = b""
            proc.join(timeout=30)
            if not blob:
                failed = failed or DataError(f"party {p!r}: its process ended (exit code {proc.exitcode}) without "
                                             "a result")
                grace = grace or time.monotonic() + FAILED_PARTY_GRACE_S
                continue
            status, payload = pickle.loads(blob)
            if status != "ok":
                kind, text = payload
                failed = failed or (kind if isinstance(kind, type) and issubclass(kind, VertisynthError)
                                    else DataError)(text)
                grace = grace or time.monotonic() + FAILED_PARTY_GRACE_S
                continue
            messages, spent, spills = payload
            # the child's spilled rows, for this process's later passes; adopted after another party's failure
            # too, so that the run removes them when it ends (handed over, no other process would)
            adopt_all(spills)
            out[p] = (messages, spent)
        if failed is not None:
            raise failed
    finally:
        for _, proc, recv in running:
            recv.close()
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    return out


@attrs.define
class _RecordingLedger(PrivacyLedger):
    """The parent's ledger in a party's process, keeping the charges as the mechanisms passed them (the parent
    spends those again: recorded ones would get group privacy applied twice)."""

    passed: list[Charge] = attrs.field(factory=list, kw_only=True)

    def spend(self, charge: Charge) -> None:
        super().spend(charge)
        self.passed.append(charge)


def _child(send: Any, step: Callable[[str, PrivacyLedger], list[Message]], party: str,
           ledger: PrivacyLedger) -> None:
    mine = _recording(ledger)
    try:
        messages = step(party, mine)
        blob = pickle.dumps(("ok", (messages, mine.passed, handed())), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:   # noqa: BLE001 - reported to the parent, which raises it
        text = f"party {party!r}: {exc}" if isinstance(exc, VertisynthError) else \
            f"party {party!r} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        blob = pickle.dumps(("error", (type(exc) if isinstance(exc, VertisynthError) else None, text)))
    send.send_bytes(blob)
    send.close()
