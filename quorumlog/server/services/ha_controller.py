"""The master/slave groups' controller, on the `_meta` group's leader (RocketMQ 5's controller, with our `_meta`
Raft group in place of its DLedger controller group). The decisions are ha/controller.py's, sans-I/O; this
service feeds it heartbeats, ticks it, and makes each decision durable in `_meta` before anyone acts on it.

- State per group, `ha/<group>` = {master, epoch, sync_state_set, sync_state_set_epoch, master_boot, members}: every
  change is written through the `_meta` log and answered (or handed out in heartbeat answers) only once
  committed. A member therefore never learns an epoch or a SyncStateSet that a later `_meta` leader could have
  forgotten; `master_boot` (the master's process) is durable before its first lease, so a master that restarted
  — even one whose power cut took its epoch entry — is seen as restarted by every later `_meta` leader too.
- heartbeat ({group, member, members, master, epoch, max_offset, boot, acked_offset, min_in_sync_replicas}):
  every member, every HEARTBEAT_MS, `max_offset` what it holds durably; the answer is the committed state and,
  for the master, `lease_ms`: it accepts writes until its send time + lease_ms. The controller elects another
  master only after `master_timeout_ms` (> lease) without the master's heartbeat — so the old master's lease ran
  out first, even when it is only cut off (RocketMQ #6316: a returning old master was writable beside the new
  one) — and only a member holding every acknowledged byte (ha/controller.py).
- The controller answers nothing until this `_meta` leader applied its own term's first entry: built earlier, from
  a state missing the last committed election, it could give an epoch to a second master.
- alter_sync_state_set ({group, master, epoch, members}): the master grows or shrinks its SyncStateSet;
  answered once committed, and only then does the master count the new set's acks.
- elect ({group, to}): `ha elect`, a switch by hand once the master's lease ran out.
- resign ({group, master, epoch, to}): the master itself asks for the switch (its disk is full) and has
  stopped writing before it asked: elected at the next tick, without waiting for its lease.
- A new `_meta` leader starts from the committed states and assumes a lease was granted just before it took
  over: it elects nobody for master_timeout_ms.
- An election is written only once a ReadIndex round begun after the master's silence was seen confirms this
  `_meta` leadership with a quorum. A leader cut off from its majority (not yet stepped down by check-quorum)
  hears no member's heartbeats and would elect the one member it can see; its entry, appended in its stale
  term, can be committed later when this same node leads `_meta` again — the master/slave soak caught exactly
  that (seed 2611: a partitioned `_meta` leader elected itself, led again a second later, and the slave that
  held the acknowledged appends truncated them to follow it).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable

from ...clock import monotonic_ms
from ...codes import ResponseCode
from ...ha.controller import HAController
from ...meta.kv import encode_put
from ...raft.types import ClientAppend, ClientRead, Completion, Role
from ...wire.client import HaControllerRequest, HaControllerResponse
from ..host import ConsensusGroup, Pending, Session, meta_leader_refusal, send_response

log = logging.getLogger(__name__)

HA_PREFIX = "ha/"
TICK_MS = 100
MASTER_TIMEOUT_MS = 1_000  # no heartbeat from the master for this long: elect another (RocketMQ: 10 s)
LEASE_MS = 600  # a master's writes stop this long after its last answered heartbeat was sent


class HAControllerService:
    serves = (HaControllerRequest,)

    def __init__(self, replica: ConsensusGroup, *, master_timeout_ms: int = MASTER_TIMEOUT_MS,
                 lease_ms: int = LEASE_MS, clock: Callable[[], int] | None = None) -> None:
        self.replica = replica
        self.clock = clock or monotonic_ms  # (tests drive their own)
        self.master_timeout_ms = master_timeout_ms
        self.lease_ms = lease_ms
        self.controllers: dict[str, HAController] = {}
        self.committed: dict[str, dict] = {}  # group -> the state `_meta` holds
        self._writing: set[str] = set()  # groups with a change on its way through the log
        self._term = -1
        self._ticker: asyncio.Task | None = None

    # -- requests ------------------------------------------------------------------------------------------
    def on_request(self, session: Session, req: HaControllerRequest) -> None:
        r = self.replica

        def answer(code: ResponseCode, message: str = "", body: dict | None = None) -> None:
            send_response(session, HaControllerResponse(req.request_id, code, r.core.leader_id,
                                                  json.dumps(body or {}).encode(), message))

        refused = meta_leader_refusal(r, "master/slave groups are controlled")
        if refused is not None:
            return answer(*refused)
        if not r.holds_everything_committed():
            # (a new leader that has not applied its own term's first entry may not have applied the last
            # election either: built from that, it could elect again in an epoch already given to another)
            return answer(ResponseCode.LEADER_NOT_READY, "the `_meta` leader has not applied its term's first entry")
        if r.core.term != self._term:  # a new leadership: start again from what `_meta` holds
            self._term = r.core.term
            self.controllers.clear()
            self.committed.clear()
            self._writing.clear()
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())
        now_ms = self.clock()
        try:
            b = json.loads(req.body)
            group = str(b["group"])
            c = self._controller(group, b, now_ms)
            if c is None:
                return answer(ResponseCode.UNKNOWN_GROUP, f"no master/slave group {group!r} is known")
            if req.op == "heartbeat":
                # (`restarted`, from members that send no boot: counts for a master that wrote in the current
                # epoch, not for a new group's master)
                restarted = bool(b.get("restarted")) and int(b["epoch"]) >= c.epoch
                member, boot = str(b["member"]), b.get("boot")
                if "min_in_sync_replicas" in b:
                    c.min_in_sync_replicas = int(b["min_in_sync_replicas"])
                lease = c.on_heartbeat(member, now_ms, int(b["epoch"]), int(b["max_offset"]), restarted,
                                       boot=None if boot is None else str(boot),
                                       acked_offset=int(b.get("acked_offset", 0)))
                view = dict(self.committed[group])
                if c.master_boot != view.get("master_boot") and c.master == view["master"] \
                        and c.epoch == view["epoch"] and group not in self._writing:
                    self._write(group, c)  # the master's boot, durable before its first lease in the epoch
                if lease is not None and view["master"] == member and view["epoch"] == c.epoch \
                        and view.get("master_boot") == boot:
                    view["lease_ms"] = self.lease_ms
                return answer(ResponseCode.SUCCESS, body=view)
            if req.op == "alter_sync_state_set":
                if group in self._writing:
                    return answer(ResponseCode.LEADER_PENDING_FULL, "a change of this group is being written")
                base = b.get("sync_state_set_epoch")
                if not c.alter_sync_state_set(str(b["master"]), int(b["epoch"]), set(b["members"]),
                                              None if base is None else int(base)):
                    return answer(ResponseCode.TERM_CHANGED, f"not the master of epoch {c.epoch}",
                                  self.committed[group])
                return self._write(group, c, session, req)
            if req.op == "elect":  # (to the master already: done, nothing switches)
                switching = c.request_switch(str(b["to"]))
                return answer(ResponseCode.SUCCESS, body={"switching_to": b["to"] if switching else None,
                                                          **self.committed[group]})
            if req.op == "resign":  # the master itself stopped writing (a full disk): no lease to wait for
                if b["master"] != c.master or int(b["epoch"]) != c.epoch:
                    return answer(ResponseCode.TERM_CHANGED, f"not the master of epoch {c.epoch}",
                                  self.committed[group])
                c.request_switch(str(b["to"]))
                c.lease_end_ms = 0
                return answer(ResponseCode.SUCCESS, body={"switching_to": b["to"], **self.committed[group]})
            if req.op == "describe":
                return answer(ResponseCode.SUCCESS, body={**self.committed[group], "alive": sorted(c.heard)})
        except (KeyError, TypeError, ValueError) as e:
            return answer(ResponseCode.BAD_REQUEST, f"ha {req.op}: {e}")
        return answer(ResponseCode.BAD_REQUEST, f"unknown ha op {req.op!r}")

    def _controller(self, group: str, b: dict, now_ms: int) -> HAController | None:
        c = self.controllers.get(group)
        if c is not None:
            return c
        item = self.replica.sm.kv.get(HA_PREFIX + group)
        if item is not None:
            state = json.loads(item.value)
        elif "members" in b and "master" in b:  # a new group's first heartbeat: its configured master, epoch 1
            state = {"master": str(b["master"]), "epoch": 0, "sync_state_set": [], "members": sorted(b["members"])}
        else:
            return None
        c = HAController(state["members"], master_timeout_ms=self.master_timeout_ms, lease_ms=self.lease_ms,
                         min_in_sync_replicas=int(b.get("min_in_sync_replicas", 1)))
        c.master, c.epoch, c.sync_state_set = state["master"], state["epoch"], frozenset(state["sync_state_set"])
        c.sync_state_set_epoch = int(state.get("sync_state_set_epoch", 0))
        c.master_boot = state.get("master_boot")
        c.lease_end_ms = now_ms + self.master_timeout_ms  # (an earlier controller may have granted one just now)
        self.controllers[group] = c
        self.committed[group] = _state(c)
        if state["epoch"] == 0:  # begin the configured master's epoch 1
            c.epoch, c.sync_state_set = 1, frozenset({c.master})
            c.lease_end_ms = 0
            self._write(group, c)
        return c

    # -- durable changes -----------------------------------------------------------------------------------
    def _write(self, group: str, c: HAController, session: Session | None = None,
               req: HaControllerRequest | None = None) -> None:
        """The controller's state of `group` through `_meta`'s log; `req`, a member's request that changed it, is
        answered once written."""
        state = _state(c)
        self._writing.add(group)
        body = encode_put(HA_PREFIX + group, json.dumps(state).encode())
        self.replica.submit(lambda rid: ClientAppend(rid, (body,), 0, -1),
                            Pending(lambda result: self.completed(group, state, session, req, result)))

    def completed(self, group: str, state: dict, session: Session | None, req: HaControllerRequest | None,
                  c: Completion) -> None:
        self._writing.discard(group)
        if c.code == ResponseCode.SUCCESS:
            if state["epoch"] != self.committed.get(group, {}).get("epoch"):
                log.info("master/slave group %s: master %s, epoch %d (sync state set %s)", group, state["master"],
                         state["epoch"], state["sync_state_set"])
            self.committed[group] = state
        else:  # not written (leadership lost, say): start again from what `_meta` holds
            self.controllers.pop(group, None)
            self.committed.pop(group, None)
        if session is not None and req is not None:
            send_response(session, HaControllerResponse(req.request_id, c.code, c.leader_id,
                                                         json.dumps(state).encode()))

    def _confirm_then_write(self, group: str) -> None:
        """A ReadIndex round first (see the module's doc); confirmed() writes the election or forgets it."""
        self._writing.add(group)
        self.replica.submit(ClientRead, Pending(lambda c: self.confirmed(group, c)))

    def confirmed(self, group: str, c: Completion) -> None:
        self._writing.discard(group)
        ctl = self.controllers.get(group)
        r = self.replica
        if c.code == ResponseCode.SUCCESS and ctl is not None and r.core.role is Role.LEADER \
                and r.core.term == self._term:
            self._write(group, ctl)
            return
        log.warning("master/slave group %s: election not written: this `_meta` leadership was not confirmed (%s)",
                    group, ResponseCode.of(c.code).name)
        self.controllers.pop(group, None)  # (start again from what `_meta` holds)
        self.committed.pop(group, None)

    async def _tick(self) -> None:
        while not self.replica.stopping:
            await asyncio.sleep(TICK_MS / 1000)
            self.tick(self.clock())

    def tick(self, now_ms: int) -> None:
        r = self.replica
        if r.core.role is not Role.LEADER or r.core.term != self._term:
            return
        for group, c in list(self.controllers.items()):
            if group in self._writing:
                continue
            elected = c.tick(now_ms)
            if elected is not None:
                log.warning("master/slave group %s: electing %s for epoch %d (%s), once this `_meta` "
                            "leadership is confirmed", group, elected.master, elected.epoch,
                            "clean" if elected.clean else "UNCLEAN: outside the sync state set")
                self._confirm_then_write(group)

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()


def _state(c: HAController) -> dict:
    return {"master": c.master, "epoch": c.epoch, "sync_state_set": sorted(c.sync_state_set),
            "sync_state_set_epoch": c.sync_state_set_epoch, "master_boot": c.master_boot,
            "members": sorted(c.members)}
