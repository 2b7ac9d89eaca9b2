"""The server's Flower ServerApp (`vertisynth.deploy.flower.serverapp:app`): relays the parties' envelopes step by
step (relay.py) over Flower messages, then builds the table. Run config (set with `flwr run --run-config`):
`config` (the shared job TOML on the SuperLink's machine), `out` (a fresh output folder there), `timeout`
(seconds a step, and a party's answer, may take), `data-dir` (benchmark data, only for named benchmarks);
`server-key` (the server's signing key) and optionally `work` (its worker's scratch): the server role runs during
the synth step as its own worker, relayed like a party (relay.py): it publishes the run key the parties seal
their messages to (with encoder "he" it also signs its clique queries) and writes the table."""
from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from vertisynth.core.errors import MessageError, VertisynthError
from vertisynth.run.config import load_config

from ..he_rounds import joint_encoder
from ..plans import vertical_plan
from .bridge import PublisherBridge, ServerBridge
from .relay import Relay, collab_roles, fresh_out, keep_exchange, steps_for
from .wire import reply_from, request_records

app = ServerApp()
POLL = 0.2   # seconds between pulls of replies (Flower's send_and_receive sleeps 3 s)


def _message(node: int, records: dict) -> Message:
    return Message(RecordDict({k: ConfigRecord(v) for k, v in records.items()}), dst_node_id=node,
                   message_type="query")


class BoundedPull:
    """`grid.pull_messages` that never blocks the relay: each outstanding reply is pulled in a thread of its own.
    Flower keeps retrying for a reply whose metadata reached the SuperLink but whose content did not (a node killed
    while uploading it) for up to two hours; here that reply is simply not there yet when the step's deadline
    passes, and the node is named as silent like any other (the other nodes' replies are not held up by it)."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.inflight: set[str] = set()
        self.done: queue.Queue = queue.Queue()

    def _pull(self, mid: str) -> None:
        try:
            self.done.put((mid, list(self.grid.pull_messages({mid})), None))
        except BaseException as exc:   # noqa: BLE001 - handed to the relay's thread, which raises it
            self.done.put((mid, [], exc))

    def __call__(self, ids: set[str]) -> list[Message]:
        """The replies (to `ids`) that are complete now; starts a pull for every id not being pulled."""
        for mid in ids - self.inflight:
            self.inflight.add(mid)
            threading.Thread(target=self._pull, args=(mid,), daemon=True).start()
        out = []
        while True:
            try:
                mid, msgs, exc = self.done.get_nowait()
            except queue.Empty:
                return out
            self.inflight.discard(mid)
            if exc is not None:
                raise exc
            out += msgs


class FlowerAsk:
    """One round trip: a request to each node, every reply within `timeout` or a clear error naming who is silent."""

    def __init__(self, grid: Grid, timeout: float, wait: float) -> None:
        self.grid, self.timeout, self.wait = grid, timeout, wait
        self.pull = BoundedPull(grid)
        self.names: dict[int, str] = {}
        self.bytes_out: dict[int, int] = {}
        self.bytes_in: dict[int, int] = {}
        self.silent: set[int] = set()

    def __call__(self, requests):
        ids = {}
        for node, (step, envelopes) in requests.items():
            [mid] = self.grid.push_messages([_message(node, request_records(step, envelopes, self.wait))])
            if mid is None:   # the SuperLink took no message for it: the node has gone offline
                self.silent.add(node)
                raise MessageError(f"{[self.names.get(node, f'SuperNode {node}')]} is no longer connected to the "
                                   "SuperLink (disconnected?); run stopped")
            ids[mid] = node
            self.bytes_out[node] = self.bytes_out.get(node, 0) + sum(map(len, envelopes.values()))
        replies, deadline = {}, time.monotonic() + self.timeout + self.wait
        while ids and time.monotonic() < deadline:
            for msg in self.pull(set(ids)):
                node = ids.pop(msg.metadata.reply_to_message_id, None)
                if node is None:   # a late reply to a round already given up on
                    continue
                if msg.has_error():
                    raise MessageError(f"SuperNode {node}: its ClientApp failed: {msg.error.reason}")
                replies[node] = reply_from(msg.content)
                self.names[node] = replies[node].party
                self.bytes_in[node] = self.bytes_in.get(node, 0) + sum(map(len, replies[node].envelopes.values()))
            if ids:
                time.sleep(POLL)
        if ids:
            self.silent |= set(ids.values())
            silent = [self.names.get(n, f"SuperNode {n}") for n in ids.values()]
            raise MessageError(f"{silent} did not answer within {self.timeout:.0f} s (disconnected?); run stopped")
        return replies

    def abort(self, nodes, reason: str) -> None:
        """Tell every node still answering to stop its party's worker and why; bounded, the run has failed anyway."""
        nodes = [n for n in nodes if n not in self.silent]
        try:
            ids = set(self.grid.push_messages([_message(n, request_records("abort", {}, 0, reason)) for n in nodes]))
            deadline = time.monotonic() + min(self.timeout, 30.0)
            while ids and time.monotonic() < deadline:
                ids -= {m.metadata.reply_to_message_id for m in self.pull(ids)}
                time.sleep(POLL)
        except Exception:   # noqa: BLE001 - best effort: the run's own error is what the operator must see
            pass


def _nodes(grid: Grid, want: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < want and time.monotonic() < deadline:
        time.sleep(POLL)
    return nodes


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    out = Path(str(cfg["out"]))
    timeout = float(cfg.get("timeout", 600))
    data_dir = str(cfg.get("data-dir", "")) or None
    ask = FlowerAsk(grid, timeout, wait=min(10.0, timeout / 2))
    nodes: list[int] = []
    server: ServerBridge | PublisherBridge | None = None
    try:
        if not str(cfg.get("config", "")) or not str(cfg.get("out", "")):
            raise MessageError("set the run config: flwr run APP --run-config 'config=\"job.toml\" out=\"out\"'")
        config = load_config(str(cfg["config"]))
        roles = collab_roles(config)
        if roles is not None:   # [collab]: custodians and compute servers on SuperNodes, the publisher here
            parties = roles
            if not str(cfg.get("server-key", "")):
                raise MessageError("[collab]: the publisher runs beside the ServerApp and signs what it posts; set "
                                   "--run-config 'server-key=\"private/publisher_signing.pem\"'")
            fresh_out(out)
            work = Path(str(cfg.get("work", "")) or f"{out}.work") / f"run-{context.run_id}"
            server = PublisherBridge(Path(str(cfg["config"])), out, work, Path(str(cfg["server-key"])), timeout,
                                     data_dir)
        else:
            plan, synth = vertical_plan(config, data_dir, aligned_csv=True)
            parties = list(plan.partition.names)   # [[parties]], or a built-in dataset's named default split
            # the server role runs beside the parties in the synth step: it publishes the run key they seal their
            # messages to (and with encoder "he" signs its clique queries mid-run), then builds the table
            if not str(cfg.get("server-key", "")):
                he = joint_encoder(synth) is not None
                raise MessageError(("encoder 'he': the server takes part in the rounds" if he else
                                    "the server signs the run key the parties seal their messages to")
                                   + "; set --run-config 'server-key=\"private_server/server_signing.pem\"' "
                                   "(from `party init --party server`)")
            fresh_out(out)   # a reused output folder is refused before anything runs
            work = Path(str(cfg.get("work", "")) or f"{out}.work") / f"run-{context.run_id}"
            server = ServerBridge(Path(str(cfg["config"])), out, work, Path(str(cfg["server-key"])), data_dir)
        nodes = _nodes(grid, len(parties), timeout)
        relay = Relay(parties, nodes, ask, timeout, local=server)
        t0 = time.monotonic()
        envelopes = relay.run(steps_for(config, data_dir))
        # the server role or the collab publisher wrote the release; keep the wire's envelopes for audit
        keep_exchange(out, envelopes)
        _stats(out, relay, ask, time.monotonic() - t0)
    except Exception as exc:   # noqa: BLE001 - ours, or a Flower failure: one line in error.txt, not a traceback
        if not isinstance(exc, VertisynthError):
            exc = MessageError(f"the Flower runtime failed: {type(exc).__name__}: {exc}")
        if str(cfg.get("out", "")):   # the operator's output folder says why there is no table
            out.mkdir(parents=True, exist_ok=True)
            (out / "error.txt").write_text(f"error: {exc}\n")
        print(f"error: {exc}", flush=True)   # into `flwr run --stream` / `flwr log`
        ask.abort(nodes, str(exc))
        if server is not None:
            server.abort(str(exc))
        raise SystemExit(f"error: {exc}") from None
    print(f"server: wrote {out}/synthetic.csv, report.json, ledger.json (relayed {len(envelopes)} envelopes in "
          f"{relay.rounds} round trips)", flush=True)


def _stats(out: Path, relay: Relay, ask: FlowerAsk, seconds: float) -> None:
    per_party = {relay.party_of[n]: {"bytes_to_party": ask.bytes_out.get(n, 0), "bytes_from_party": ask.bytes_in.get(n, 0)}
                 for n in relay.nodes}
    (out / "network.json").write_text(json.dumps({"round_trips": relay.rounds, "per_step": relay.rounds_per_step,
                                                  "seconds": seconds,
                                                  "envelopes": len(relay.envelopes), "parties": per_party}, indent=2))
