"""What every kind of hosted group does alike (host.py HostedGroup), whatever drives its log: requests
dispatched by type, the start of a stop, its status answered with the node's fields, read pages released."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..config import NodeConfig
from ..wire.client import ClientRequest, StatusRequest, StatusResponse
from .host import GroupHost, Handled, Handler, Session, dispatch, send_response
from .reads import CommitNotifier

if TYPE_CHECKING:
    from ..store.file_store import FileStore
    from .services.topics import TopicService


class GroupRuntime:
    """The shared part of a Raft group's replica and a master/slave group's member; each sets these in its
    constructor (`handlers`: the request types it serves, its own and its services')."""

    host: GroupHost
    config: NodeConfig
    group: str
    store: FileStore
    notifier: CommitNotifier
    topics: TopicService
    handlers: dict[type, Handler]
    stopping: bool

    def on_client_request(self, session: Session, request: ClientRequest) -> Handled:
        """One client request; returns a coroutine for the transport to run when the answer must wait."""
        return dispatch(self.handlers, session, request, self.group)

    def begin_stop(self) -> None:
        """Stop taking peer messages (nothing new reaches the store after the final flush), wake parked reads."""
        self.stopping = True
        self.notifier.wake_all()

    def _status(self, session: Session, request: StatusRequest) -> None:
        send_response(session, StatusResponse(request.request_id, ResponseCode.SUCCESS,
                                              json.dumps(self.host.status(self)).encode()))

    def queue_end(self, topic: str, queue_id: int) -> int | None:
        return self.topics.queue_end(topic, queue_id)

    def release_read_pages(self) -> None:
        """Unmap the pages of the sealed segments read since the last call (a file store's; a quiet group's readers
        page them in too): FileStore.release_read_pages."""
        release = getattr(self.store, "release_read_pages", None)
        if release is not None:
            release()
