"""The party's Flower ClientApp (`vertisynth.deploy.flower.clientapp:app`): one step request in, the party's new
envelopes out. Who the party is and where its files are come from its own SuperNode's --node-config, never from
the server's message; the step runs the ordinary party command on this machine (bridge.py)."""
from __future__ import annotations

import attrs
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from vertisynth.core.errors import VertisynthError

from .bridge import FAILED, Bridge, NodeSettings, Reply
from .wire import reply_records

app = ClientApp()


@app.query()
def step(msg: Message, context: Context) -> Message:
    fields = msg.content["step"]
    party = str(context.node_config.get("party", ""))
    try:
        settings = NodeSettings.from_node_config(dict(context.node_config))
        # a work folder per Flower run: a second run never mistakes the first one's workers for its own
        bridge = Bridge(attrs.evolve(settings, work=settings.work / f"run-{msg.metadata.run_id}"))
        if fields["step"] == "abort":
            bridge.abort(str(fields["reason"]))
            reply = Reply(party, FAILED, {}, "aborted")
        else:
            inbound = {str(k): bytes(v) for k, v in msg.content["envelopes"].items()}
            reply = bridge.step(str(fields["step"]), inbound, float(fields["wait"]))
    except VertisynthError as exc:
        reply = Reply(party, FAILED, {}, str(exc))
    records = reply_records(reply)
    return Message(RecordDict({"reply": ConfigRecord(records["reply"]), "envelopes": ConfigRecord(records["envelopes"])}),
                   reply_to=msg)
