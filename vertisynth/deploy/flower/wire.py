"""How a step request and a party's reply travel in a Flower `Message`: two ConfigRecords, one with the fields
and one holding the envelopes as bytes (the signed envelopes of core/envelope.py, unchanged)."""
from __future__ import annotations

from .bridge import Reply


def request_records(step: str, envelopes: dict[str, bytes], wait: float, reason: str = "") -> dict:
    return {"step": {"step": step, "wait": float(wait), "reason": reason}, "envelopes": dict(envelopes)}


def reply_records(reply: Reply) -> dict:
    return {"reply": {"party": reply.party, "status": reply.status, "error": reply.error},
            "envelopes": dict(reply.envelopes)}


def reply_from(records) -> Reply:
    fields, env = records["reply"], records["envelopes"]
    return Reply(str(fields["party"]), str(fields["status"]), {str(k): bytes(v) for k, v in env.items()},
                 str(fields["error"]))
