"""One readable line per message: short names, the fields that matter, no object reprs (stable across runs)."""

from __future__ import annotations

from ..wire.messages import (HeartbeatRequest, HeartbeatResponse, Message, PushRequest, PushResponse,
                             TakeLeadershipRequest, VoteRequest, VoteResponse)


def describe(m: Message) -> str:
    head = f"{m.to} <- {m.frm} t={m.term}"
    if isinstance(m, PushRequest):
        body = f"push {m.push_type.name} prev={m.prev_index}/{m.prev_term} commit={m.committed_index}"
        if m.records is not None:
            body += f" entries={m.first_index}..{m.last_index}"
        return f"{head} {body}"
    if isinstance(m, PushResponse):
        return (f"{head} push-resp {m.push_type.name} {m.code.name} index={m.index} end={m.end_index}"
                f" begin={m.begin_index}")
    if isinstance(m, HeartbeatRequest):
        return f"{head} heartbeat commit={m.committed_index}"
    if isinstance(m, HeartbeatResponse):
        return f"{head} heartbeat-resp {m.code.name}"
    if isinstance(m, VoteRequest):
        kind = "pre-vote" if m.pre_vote else "vote"
        extra = " transfer" if m.leadership_transfer else ""
        return f"{head} {kind} last={m.last_index}/{m.last_term}{extra}"
    if isinstance(m, VoteResponse):
        kind = "pre-vote" if m.pre_vote else "vote"
        return f"{head} {kind}-resp {m.result.name}"
    if isinstance(m, TakeLeadershipRequest):
        return f"{head} take-leadership"
    return f"{head} {type(m).__name__}"
