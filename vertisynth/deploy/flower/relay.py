"""The server's side of the Flower runtime, without Flower: drive the parties through the steps of a run
(hello, PSI/PSU alignment, key agreement, party synth), relaying each party's signed envelopes to the parties
they are addressed to; the server role (deploy/server.py) runs beside the parties in the synth step, as a local
participant: it publishes the run key the parties seal to, then builds the table. Every envelope goes to the roles
its slot name addresses (`addressed_to`: one rule for deploy's and collab's messages, core/courier.py).

The server role (with encoder "he" it also signs the clique queries the parties answer mid-run,
deploy/he_rounds.py; for a vertical twin, e.g. aim with params.vertical, it runs the synthesizer and signs every
query the parties answer, deploy/oracle_rounds.py) is a `Local` participant of the synth step, its own worker (`vertisynth server`) on
its own relay folder on the ServerApp's machine, relayed to and from like a party (envelopes `...__to__server__...`
go to it, its `...__server__to__all__...` to the parties), and it writes the table itself. A [collab] run is one
step, `collab`: custodians and compute servers on SuperNodes, the publisher the local participant.

The relay reads no envelope: every recipient checks every envelope (roster, signature, run, config, round,
recipient) as in a folder exchange, and the server role does so again in `run_server`. What the relay checks
is only the traffic: each SuperNode speaks for one party of the config, and writes under that party's name only.
`ask` is the runtime's round trip (serverapp.py: Flower messages); tests may pass any other.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from vertisynth.core.capabilities import PartyServerSplit
from vertisynth.core.courier import parse_slot
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.run.config import RunConfig

from ..plans import vertical_plan
from ..server import run_server
from ..transport import FolderTransport
from .bridge import BUSY, DONE, FAILED, STEPS, WAITING, Reply

# node id -> (step, envelopes for it) ; returns node id -> Reply, or raises MessageError naming who did not answer
Ask = Callable[[Mapping[int, tuple[str, dict[str, bytes]]]], Mapping[int, Reply]]
LOCAL = -1   # the node id of the Local participant (Flower's node ids are positive)


class Local(Protocol):
    """A participant on the relay's own machine: the server role with encoder "he" (bridge.ServerBridge), or a
    [collab] run's publisher (bridge.PublisherBridge)."""
    party: str
    steps: frozenset[str]   # the steps it takes part in

    def __call__(self, step: str, inbound: dict[str, bytes]) -> Reply: ...


def collab_roles(config: RunConfig) -> list[str] | None:
    """A [collab] run's roles on SuperNodes: its custodians (collab.files keys, or custodian1..N) and compute
    servers (server0..S-1); the publisher runs beside the ServerApp. None for a vertical run."""
    collab = config.section("collab")
    if collab is None:
        return None
    custodians = list(collab.files) if collab.files else [f"custodian{i + 1}" for i in range(collab.custodians)]
    return custodians + [f"server{i}" for i in range(collab.servers)]


def steps_for(config: RunConfig, data_dir: str | None = None) -> list[str]:
    if config.section("collab") is not None:
        return ["collab"]   # every collab role runs all its rounds in one worker
    _, synth = vertical_plan(config, data_dir, aligned_csv=True)
    return (["hello"] + (["align"] if config.alignment.use in ("psi", "psu") else [])
            + (["keys"] if isinstance(synth, PartyServerSplit) and synth.needs_keys() else []) + ["synth"])


def addressed_to(name: str, party: str) -> bool:
    """The relay's one rule (core/courier.py, deploy's and collab's slots alike): a message goes to every role its
    name `<round>__<sender>__to__<all | a+b | role>__<tag>` addresses, never back to its sender."""
    return parse_slot(name).routes_to(party)


class Relay:
    def __init__(self, parties: list[str], nodes: list[int], ask: Ask, timeout: float,
                 local: Local | None = None) -> None:
        if len(nodes) != len(parties):
            raise MessageError(f"{len(nodes)} SuperNode(s) connected, the config has {len(parties)} parties "
                               f"{parties}: start one SuperNode per party (and no other) before the run")
        if LOCAL in nodes or (local is not None and local.party in parties):
            raise ConfigError(f"the local participant {local.party if local is not None else LOCAL!r} clashes with a party")
        self.parties, self.nodes, self.ask, self.timeout, self.local = parties, nodes, ask, timeout, local
        self.envelopes: dict[str, bytes] = {}
        self.delivered: dict[int, set[str]] = {n: set() for n in [*nodes, LOCAL]}
        self.party_of: dict[int, str] = {LOCAL: local.party} if local is not None else {}
        self.rounds = 0
        self.rounds_per_step: dict[str, int] = {}

    def _inbox(self, node: int) -> dict[str, bytes]:
        party = self.party_of.get(node)
        if party is None:                      # not introduced yet (its first reply names it)
            return {}
        return {n: b for n, b in self.envelopes.items() if n not in self.delivered[node] and addressed_to(n, party)}

    def _take(self, node: int, reply: Reply) -> bool:
        known = self.party_of.get(node)
        if known is None:
            if reply.party not in self.parties:
                raise MessageError(f"SuperNode {node} speaks for {reply.party!r}, not a party of this config "
                                   f"{self.parties}; refused")
            if reply.party in self.party_of.values():
                raise MessageError(f"two SuperNodes speak for party {reply.party!r}; refused")
            self.party_of[node] = known = reply.party
        elif reply.party != known:
            raise MessageError(f"SuperNode {node} spoke for {known!r} and now for {reply.party!r}; refused")
        new = False
        for name, data in reply.envelopes.items():
            if parse_slot(name).sender != known:
                raise MessageError(f"SuperNode {node} ({known!r}) sent {name}, under another sender's name; refused")
            if name in self.envelopes:
                if self.envelopes[name] != data:
                    raise MessageError(f"party {known!r} sent {name} twice with different contents; refused")
                continue
            self.envelopes[name] = data
            new = True
        return new

    def step(self, step: str) -> None:
        pending = list(self.nodes) + ([LOCAL] if self.local is not None and step in self.local.steps else [])
        last = time.monotonic()   # a step fails after `timeout` s without progress (a party computing says so)
        while pending:
            if time.monotonic() - last > self.timeout:
                who = [self.party_of.get(n, f"node {n}") for n in pending]
                raise MessageError(f"step {step!r}: no progress from parties {who} for {self.timeout:.0f} s")
            requests = {n: (step, self._inbox(n)) for n in pending if n != LOCAL}
            replies = dict(self.ask(requests)) if requests else {}
            self.rounds += 1
            self.rounds_per_step[step] = self.rounds_per_step.get(step, 0) + 1
            progress = False
            for node, (_, sent) in requests.items():
                self.delivered[node] |= set(sent)
            for node in pending:
                if node == LOCAL:   # after the parties' replies, so it gets what they just sent in this round
                    inbox = self._inbox(LOCAL)
                    replies[LOCAL] = self.local(step, inbox)
                    self.delivered[LOCAL] |= set(inbox)
                reply = replies[node]
                progress |= self._take(node, reply)
                if reply.status == FAILED:
                    raise MessageError(f"{'the server role' if node == LOCAL else 'party'} {reply.party!r} failed "
                                       f"in step {step!r}: {reply.error}")
            if progress or any(replies[n].status in (DONE, BUSY) for n in pending):
                last = time.monotonic()
            pending = [n for n in pending if replies[n].status != DONE]
            stuck = all(replies[n].status == WAITING for n in pending) and not progress
            if pending and stuck and not any(self._inbox(n) for n in pending):
                waits = {self.party_of[n]: replies[n].error for n in pending}
                raise MessageError(f"step {step!r}: every party left waits for envelopes nobody sent ({waits}); "
                                   "a party is missing from the run or runs another config")

    def run(self, steps: list[str]) -> dict[str, bytes]:
        unknown = [s for s in steps if s not in STEPS]
        if unknown:
            raise ConfigError(f"unknown steps {unknown}; the steps are {list(STEPS)}")
        for step in steps:
            self.step(step)
        return dict(self.envelopes)


def fresh_out(out: Path) -> Path:
    """`out/exchange`, refused if it already holds envelopes (a reused output folder); creates nothing."""
    exchange = out / "exchange"
    if exchange.exists() and any(exchange.iterdir()):
        raise ConfigError(f"{str(exchange)!r} already holds envelopes (a reused output folder); use a fresh --out")
    return exchange


def keep_exchange(out: Path, envelopes: Mapping[str, bytes]) -> Path:
    """The relayed envelopes kept in `out/exchange` (what crossed the wire, for audit). A reused `out` is refused."""
    exchange = fresh_out(out)
    folder = FolderTransport(exchange)
    for name, data in sorted(envelopes.items()):
        folder.send(name, data)
    return exchange


def build(config: RunConfig, envelopes: Mapping[str, bytes], out: Path, data_dir: str | None = None,
          key: Path | None = None) -> Path:
    """The server role on what was relayed, after the fact: the envelopes kept in `out/exchange`, then `run_server`
    on them with every check of a folder run, with the server's signing key `key` (its run key beside it: the one
    the parties sealed to, published before their synth step). A reused `out` is refused. The ServerApp runs the
    server role during the synth step instead (bridge.ServerBridge)."""
    return run_server(config, keep_exchange(out, envelopes), out, data_dir, key=key)
