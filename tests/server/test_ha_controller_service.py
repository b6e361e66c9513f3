"""The controller service on the `_meta` leader (server/services/ha_controller.py) with a stand-in replica: an election is
written only after a ReadIndex round confirms the leadership (found by the master/slave soak, seed 2611: a
partitioned `_meta` leader elected the one member it could hear, its stale entry was committed when it led
again, and a slave truncated acknowledged appends to follow the master it named)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from quorumlog.codes import ResponseCode
from quorumlog.meta.kv import KVStore, decode_command
from quorumlog.raft.types import ClientAppend, ClientRead, Completion, Role
from quorumlog.server.services.ha_controller import MASTER_TIMEOUT_MS, HAControllerService
from quorumlog.wire.client import HaControllerRequest

MEMBERS = ["n0", "n1", "n2"]


class _Replica:
    """What the service asks of its replica: a leading core, the `_meta` store, requests through the core; it is also
    the session the service answers."""

    def __init__(self) -> None:
        self.state_machine = "kv"
        self.stopping = False
        self.core = SimpleNamespace(role=Role.LEADER, term=7, leader_id="n0")
        self.sm = SimpleNamespace(kv=KVStore())
        self._pending: dict[int, Any] = {}
        self.steps: list[Any] = []
        self.sent: list[Any] = []
        self._rid = 0
        self._applied = 0
        self.ready = True  # (its term's first entry applied)

    def holds_everything_committed(self) -> bool:
        return self.ready

    def submit(self, event_for: Any, pending: Any) -> int:
        self._rid += 1
        self._pending[self._rid] = pending
        self.steps.append(event_for(self._rid))
        return self._rid

    def send(self, response: Any) -> None:  # (the session of every request: the answers are kept)
        self.sent.append(response)

    def finish(self, service: HAControllerService, event: Any, code: ResponseCode) -> None:
        """The core's answer to a stepped read or append."""
        p = self._pending.pop(event.request_id)
        if isinstance(event, ClientAppend) and code == ResponseCode.SUCCESS:  # (committed: applied to `_meta`)
            self._applied += 1
            self.sm.kv.apply(self._applied, event.bodies[0])
        c = Completion(event.request_id, code)
        p.on_done(c)


def _heartbeat(service: HAControllerService, member: str, epoch: int, max_offset: int, **more: Any) -> dict:
    body = {"group": "ms", "member": member, "members": MEMBERS, "master": "n0", "epoch": epoch,
            "max_offset": max_offset, **more}
    service.on_request(service.replica, HaControllerRequest(1, "heartbeat", json.dumps(body).encode()))
    return json.loads(service.replica.sent[-1].body)


def _running_with_master_n0(now: int) -> tuple[_Replica, HAControllerService]:
    r = _Replica()
    # the service's clock stands at `now` (it read time.monotonic(): the heartbeats were timed by the machine's
    # uptime, and the elections these tests expect happened only on a machine up for more than 2.8 hours)
    service = HAControllerService(r, clock=lambda: now)  # type: ignore[arg-type]
    _heartbeat(service, "n0", 0, 0)  # the group's first heartbeat: epoch 1 for its configured master
    first = r.steps[-1]
    assert isinstance(first, ClientAppend)
    r.finish(service, first, ResponseCode.SUCCESS)
    assert service.committed["ms"]["master"] == "n0" and service.committed["ms"]["epoch"] == 1
    service.controllers["ms"].lease_end_ms = now  # (its lease ran out: the master is silent from here)
    return r, service


def _elect_after_silence(r: _Replica, service: HAControllerService, now: int) -> Any:
    _heartbeat(service, "n1", 1, 500)  # only n1 is heard; the master n0 is silent
    service.controllers["ms"].heard["n0"].at_ms = now - 10 * MASTER_TIMEOUT_MS
    service.controllers["ms"].sync_state_set = frozenset(MEMBERS)
    before = len(r.steps)
    service.tick(now)
    assert len(r.steps) == before + 1
    return r.steps[-1]


def test_an_election_waits_for_a_readindex_round_and_is_forgotten_when_it_fails():
    async def main() -> None:
        now = 10_000_000
        r, service = _running_with_master_n0(now)
        read = _elect_after_silence(r, service, now)
        assert isinstance(read, ClientRead)  # not yet an append of the election
        assert _heartbeat(service, "n1", 1, 500).get("lease_ms") is None  # (nobody leads a new epoch yet)
        r.finish(service, read, ResponseCode.TIMEOUT)  # cut off from the quorum: the round never completes
        assert not any(isinstance(e, ClientAppend) for e in r.steps[1:])
        assert "ms" not in service.controllers  # started again from what `_meta` holds
        # the next heartbeat reloads epoch 1 (master n0) and waits a master timeout before electing anyone
        assert _heartbeat(service, "n1", 1, 500)["epoch"] == 1
        service.tick(now + 1)
        assert not any(isinstance(e, (ClientAppend, ClientRead)) for e in r.steps[2:])
        service.close()
    asyncio.run(main())


def test_a_confirmed_leadership_writes_the_election():
    async def main() -> None:
        now = 10_000_000
        r, service = _running_with_master_n0(now)
        read = _elect_after_silence(r, service, now)
        r.finish(service, read, ResponseCode.SUCCESS)
        write = r.steps[-1]
        assert isinstance(write, ClientAppend)
        key, value = decode_command(write.bodies[0])[1:3]
        assert key == "ha/ms" and json.loads(value)["master"] == "n1" and json.loads(value)["epoch"] == 2
        r.finish(service, write, ResponseCode.SUCCESS)
        view = _heartbeat(service, "n1", 1, 500)
        assert (view["master"], view["epoch"], view.get("lease_ms")) == ("n1", 2, service.lease_ms)
        service.close()
    asyncio.run(main())


def test_a_new_meta_leader_answers_nothing_before_it_applied_its_terms_first_entry():
    """Built from a `_meta` state that may miss the last committed election, the controller could elect again in
    an epoch already given to another master: it waits until the leader holds everything committed."""
    async def main() -> None:
        r = _Replica()
        r.ready = False
        service = HAControllerService(r, clock=lambda: 10_000_000)  # type: ignore[arg-type]
        body = {"group": "ms", "member": "n0", "members": MEMBERS, "master": "n0", "epoch": 0, "max_offset": 0}
        service.on_request(r, HaControllerRequest(1, "heartbeat", json.dumps(body).encode()))
        assert r.sent[-1].code == ResponseCode.LEADER_NOT_READY and not service.controllers and not r.steps
        r.ready = True
        service.on_request(r, HaControllerRequest(2, "heartbeat", json.dumps(body).encode()))
        assert r.sent[-1].code == ResponseCode.SUCCESS and "ms" in service.controllers
        service.close()
    asyncio.run(main())


def test_a_masters_boot_is_durable_before_its_lease_and_a_new_boot_is_a_restart_for_a_new_meta_leader():
    """The restart was a flag sent once, kept in one controller's memory, and counted only if the member's epoch
    entry survived: a master whose power cut took it came back shorter and resumed its epoch. Now its boot is
    in `_meta`, and any later `_meta` leader sees a new one."""
    async def main() -> None:
        now = 10_000_000
        r, service = _running_with_master_n0(now)
        service.controllers["ms"].lease_end_ms = 0
        assert "lease_ms" not in _heartbeat(service, "n0", 1, 0, boot="b1")  # (its boot is not durable yet)
        write = r.steps[-1]
        assert isinstance(write, ClientAppend)
        r.finish(service, write, ResponseCode.SUCCESS)
        assert _heartbeat(service, "n0", 1, 0, boot="b1")["lease_ms"] == service.lease_ms
        # a new `_meta` leader (its own term), and the master comes back from a power cut with its epoch entry
        # gone: a new boot, an older epoch
        r.core.term += 1
        assert "lease_ms" not in _heartbeat(service, "n0", 0, 0, boot="b2")
        assert service.controllers["ms"].master_restarted
        service.close()
    asyncio.run(main())
