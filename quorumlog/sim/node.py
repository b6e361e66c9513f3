"""One simulated node: the real RaftCore over a SimStore, executing each Ready in the contract's order.

Order (quorumlog/raft/types.py): hard_state (durable at once here: it models an fsynced file), truncate,
appends (then Stored), messages, completions, committed_index. Follow-up events the runtime owes the core
(Stored) are stepped after the whole Ready ran, as a runtime's loop would.
"""

from __future__ import annotations

import random
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from ..codes import ResponseCode
from ..errors import DiskError, DiskFull, QuorumLogError
from ..format.log_entry import MEMBERSHIP_PRODUCER_ID
from ..raft.types import (AppendBatch, AppendRecords, Durable, Event, HardState, RaftConfig, Ready, Role, Stored,
                          StoreFailed, Tick)
from ..wire.messages import VoteResponse
from .checker import Violation
from .disk import Disk, SimStore

if TYPE_CHECKING:
    from .world import World

CoreFactory = Callable[[RaftConfig, SimStore, HardState, random.Random, int], Any]


class SimNode:
    def __init__(self, world: "World", node_id: str, config: RaftConfig, core_factory: CoreFactory) -> None:
        self.world = world
        self.node_id = node_id
        self.config = config
        self.core_factory = core_factory
        self.store = SimStore()
        self.hard_state = HardState()
        self.disk = Disk(self.store, world.rng, world.scheduler, world.options.flush_delay_max_ms,
                         world.options.slow_flush_delay_max_ms, self._on_durable)
        self.alive = True
        self.incarnation = 0
        self.crashes = 0
        self.steps = 0
        self._follow_ups: deque[Event] = deque()
        self._stepping = False
        self._role_seen: tuple | None = None
        self.disk_error: str | None = None  # EIO seen: the node fail-stops once this step is done
        self.core = core_factory(config, self.store, self.hard_state, self._new_rng(), world.scheduler.now_ms)

    def _new_rng(self) -> random.Random:
        return random.Random(self.world.rng.getrandbits(64))

    # -- life and death ----------------------------------------------------------------------------
    def crash(self, keep_unflushed: int) -> None:
        assert self.alive
        self.alive = False
        self.incarnation += 1
        self.crashes += 1
        self.disk.crashed()
        self._follow_ups.clear()
        self.store.crash(keep_unflushed)

    def restart(self) -> None:
        """A new core from the persisted HardState and what the store kept."""
        assert not self.alive
        self.alive = True
        self._role_seen = None
        self.disk_error = None
        self.store.failed = False  # restarted on a healed disk (an operator's job after a fail-stop)
        self.core = self.core_factory(self.config, self.store, self.hard_state, self._new_rng(),
                                      self.world.scheduler.now_ms)
        self.world.checker.on_restart(self)
        self.step(Tick(self.world.scheduler.now_ms))

    # -- stepping ----------------------------------------------------------------------------------
    def step(self, event: Event) -> None:
        """Step the core with `event`, run its Ready, then any follow-up events, checking after each."""
        assert self.alive and not self._stepping
        self._stepping = True
        try:
            self._follow_ups.append(event)
            while self._follow_ups:
                ev = self._follow_ups.popleft()
                ready = self.core.step(ev)
                self.steps += 1
                self.world.steps += 1
                if ready:
                    self._execute(ready)
                self.world.checker.after_node_step(self)
                role = (self.core.role, self.core.term)
                if role != self._role_seen:
                    self._role_seen = role
                    self.world.trace_line(lambda: f"{self.node_id} is {role[0].value} of term {role[1]}")
                    if role[0] == Role.LEADER:
                        self.world.faults.on_new_leader()
        finally:
            self._stepping = False
        if self.disk_error is not None and self.alive:
            self.world.fail_stop(self, self.disk_error)  # as the server does once the core handled the EIO

    def _on_durable(self, index: int) -> None:
        if self.alive:
            self.world.trace_line(lambda: f"{self.node_id} durable {index}")
            self.step(Durable(index))

    def _execute(self, ready: Ready) -> None:
        world = self.world
        store = self.store
        if ready.hard_state is not None:
            self.hard_state = ready.hard_state  # durable at once: the sim's HardState file never tears
        if ready.truncate_after is not None:
            world.checker.on_truncate(self, ready.truncate_after)
            world.trace_line(lambda: f"{self.node_id} truncate after {ready.truncate_after}")
            store.truncate_after(ready.truncate_after)
            self.disk.truncated(ready.truncate_after)
        if ready.reset_to is not None:
            if ready.reset_to - 1 > world.checker.committed_index:
                raise Violation("contract", f"{self.node_id} resets its log to begin at {ready.reset_to}, beyond "
                                            f"the group's commit point {world.checker.committed_index}")
            world.trace_line(lambda: f"{self.node_id} reset to begin {ready.reset_to}")
            store.reset(ready.reset_to, ready.reset_producers)
            self.disk.truncated(ready.reset_to - 1)
        refused: QuorumLogError | None = None
        if ready.appends:
            first = store.end_index + 1
            for action in ready.appends:
                if action.first_index != store.end_index + 1:
                    raise Violation("contract", f"{self.node_id} asked to write at {action.first_index}, "
                                                f"store ends at {store.end_index}")
                try:
                    if isinstance(action, AppendBatch):
                        if action.producer is not None and action.producer[0] == MEMBERSHIP_PRODUCER_ID:
                            world.checker.on_membership_proposed(self, action.bodies[0], action.first_index)
                        store.append_batch(action.term, action.bodies, action.timestamp_ms, action.producer,
                                           action.noop)
                    else:
                        assert isinstance(action, AppendRecords)
                        store.append_records(action.data)
                        if store.end_index != action.last_index:
                            raise Violation("contract", f"{self.node_id} AppendRecords {action.first_index}.."
                                                        f"{action.last_index} stored up to {store.end_index}")
                except (DiskFull, DiskError) as exc:
                    refused = exc  # the rest of this Ready's writes are not attempted, as in the server
                    break
                except QuorumLogError as exc:
                    # The core only writes records that follow its log; a chain mismatch here means it
                    # appended after a prefix that differs from the leader's (log matching broken).
                    raise Violation("log_matching", f"{self.node_id} store rejected append at "
                                                    f"{action.first_index}: {exc!r}") from exc
            if store.end_index >= first:
                world.checker.on_append(self, first, store.end_index)
                world.trace_line(lambda: f"{self.node_id} wrote {first}..{store.end_index}")
                self.disk.written()
            if refused is None:
                self._follow_ups.append(Stored(store.end_index))
            else:
                code = refused.code
                world.trace_line(lambda: f"{self.node_id} store refused a write: {code.name}")
                if code == ResponseCode.DISK_ERROR:
                    self.disk_error = str(refused)
                self._follow_ups.append(StoreFailed(code, str(refused)))
        for message in ready.messages:
            assert message.frm == self.node_id, message
            if isinstance(message, VoteResponse) and message.granted and not message.pre_vote:
                world.checker.on_vote_granted(self, message)
            world.network.send(message.frm, message.to, message, world.deliver_message)
        for completion in ready.completions:
            world.on_completion(self, completion)
        if ready.committed_index is not None:
            if ready.committed_index > store.end_index and refused is None:
                raise Violation("contract", f"{self.node_id} commits {ready.committed_index} beyond its end "
                                            f"{store.end_index}")
            before = store.committed_index
            store.set_committed_index(min(ready.committed_index, store.end_index))  # as the server does
            store.checkpoint()
            if store.committed_index > before:
                world.checker.on_commit(self)
