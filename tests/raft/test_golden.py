"""Golden transcripts (etcd raft's testdata style): a scripted run rendered as text, compared to a file.

Set QUORUMLOG_UPDATE_GOLDEN=1 to rewrite the files after an intended behaviour change, then read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

from quorumlog.raft.types import AppendBatch, ClientAppend, Ready, Tick
from quorumlog.wire.messages import (HeartbeatRequest, HeartbeatResponse, PushRequest, PushResponse, VoteRequest,
                                     VoteResponse)

from .harness import Cluster

TESTDATA = Path(__file__).parent / "testdata"


def render_message(m) -> str:
    head = f"{m.frm}->{m.to} t{m.term}"
    if isinstance(m, VoteRequest):
        kind = "PreVote" if m.pre_vote else "Vote"
        return f"{head} {kind} last=({m.last_index},t{m.last_term})"
    if isinstance(m, VoteResponse):
        return f"{head} {'PreVoteResp' if m.pre_vote else 'VoteResp'} {m.result.name}"
    if isinstance(m, HeartbeatRequest):
        return f"{head} Heartbeat commit={m.committed_index}"
    if isinstance(m, HeartbeatResponse):
        return f"{head} HeartbeatResp {m.code.name}"
    if isinstance(m, PushRequest):
        extra = f" entries={m.first_index}..{m.last_index}" if m.records is not None else ""
        return f"{head} Push {m.push_type.name} prev=({m.prev_index},t{m.prev_term}) commit={m.committed_index}{extra}"
    if isinstance(m, PushResponse):
        return f"{head} PushResp {m.push_type.name} {m.code.name} index={m.index} end={m.end_index}"
    return f"{head} {type(m).__name__}"


def render_ready(nid: str, event, ready: Ready) -> list[str]:
    if not ready:
        return []
    lines = [f"{nid} <- {type(event).__name__}"]
    if ready.hard_state is not None:
        lines.append(f"  hard_state term={ready.hard_state.term} vote={ready.hard_state.voted_for}")
    if ready.truncate_after is not None:
        lines.append(f"  truncate_after {ready.truncate_after}")
    for a in ready.appends:
        if isinstance(a, AppendBatch):
            lines.append(f"  append_batch {a.first_index}..{a.first_index + len(a.bodies) - 1} t{a.term}")
        else:
            lines.append(f"  append_records {a.first_index}..{a.last_index}")
    lines += [f"  send {render_message(m)}" for m in ready.messages]
    lines += [f"  complete {c.request_id} {c.code.name} {c.first_index}..{c.last_index} t{c.term}"
              for c in ready.completions]
    if ready.committed_index is not None:
        lines.append(f"  commit {ready.committed_index}")
    return lines


class Recorder(Cluster):
    def __init__(self, *a, **kw) -> None:
        self.transcript: list[str] = []
        super().__init__(*a, **kw)

    def step(self, nid, event):
        ready = self.nodes[nid].core.step(event)
        self.transcript += render_ready(nid, event, ready)
        self._execute(self.nodes[nid], ready)
        return ready


def check_golden(name: str, lines: list[str]) -> None:
    path = TESTDATA / name
    text = "\n".join(lines) + "\n"
    if os.environ.get("QUORUMLOG_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with QUORUMLOG_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"transcript differs from {path}"


def test_campaign_and_first_append_transcript():
    c = Recorder(3, seed=1)
    n0 = c.nodes["n0"].core
    c.now_ms = n0.elector.election_deadline_ms
    c.step("n0", Tick(c.now_ms))  # n0 times out first: pre-vote, vote, lead
    c.deliver()
    c.step("n0", ClientAppend(1, (b"hello", b"world")))
    c.deliver()
    check_golden("campaign_append.txt", c.transcript)
