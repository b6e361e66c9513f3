"""Frame kinds: one byte naming what a frame's payload is. Numbers are part of the protocol; never reuse."""

from __future__ import annotations

from enum import IntEnum


class Kind(IntEnum):
    # handshake
    HELLO = 1
    HELLO_OK = 2
    HELLO_ERROR = 3
    # peer connections: the frames that follow belong to this group (handshake.py)
    GROUP_SELECT = 9
    # peer messages (quorumlog/wire/messages.py)
    VOTE_REQUEST = 10
    VOTE_RESPONSE = 11
    HEARTBEAT_REQUEST = 12
    HEARTBEAT_RESPONSE = 13
    PUSH_REQUEST = 14
    PUSH_RESPONSE = 15
    TAKE_LEADERSHIP_REQUEST = 16
    # master/slave groups' HA transfer (quorumlog/wire/messages.py HaReport, HaTransfer)
    HA_REPORT = 17
    HA_TRANSFER = 18
    HA_EPOCHS = 19
    # client requests and responses (quorumlog/wire/client.py)
    APPEND_REQUEST = 20
    APPEND_RESPONSE = 21
    READ_REQUEST = 22
    READ_RESPONSE = 23
    STATUS_REQUEST = 24
    STATUS_RESPONSE = 25
    TRANSFER_LEADER_REQUEST = 26
    TRANSFER_LEADER_RESPONSE = 27
    MEMBER_CHANGE_REQUEST = 28
    MEMBER_CHANGE_RESPONSE = 29
    GROUP_REQUEST = 30
    GROUP_RESPONSE = 31
    KV_REQUEST = 32
    KV_RESPONSE = 33
    # a node's bookie (quorumlog/wire/ledger.py BookieOpRequest: add, read, read LAC, info, delete)
    BOOKIE_REQUEST = 34
    BOOKIE_RESPONSE = 35
    # topic messages: send, pull (quorumlog/wire/client.py TopicRequest)
    TOPIC_REQUEST = 36
    TOPIC_RESPONSE = 37
    # a consumer group's coordinator (quorumlog/wire/client.py ConsumerGroupRequest)
    CONSUMER_GROUP_REQUEST = 38
    CONSUMER_GROUP_RESPONSE = 39
    # the master/slave groups' controller (quorumlog/wire/client.py HaControllerRequest)
    HA_CONTROLLER_REQUEST = 40
    HA_CONTROLLER_RESPONSE = 41


PEER_KINDS = frozenset(range(Kind.VOTE_REQUEST, Kind.HA_EPOCHS + 1))
CLIENT_REQUEST_KINDS = frozenset({Kind.APPEND_REQUEST, Kind.READ_REQUEST, Kind.STATUS_REQUEST,
                                  Kind.TRANSFER_LEADER_REQUEST, Kind.MEMBER_CHANGE_REQUEST, Kind.GROUP_REQUEST,
                                  Kind.KV_REQUEST, Kind.BOOKIE_REQUEST, Kind.TOPIC_REQUEST,
                                  Kind.CONSUMER_GROUP_REQUEST, Kind.HA_CONTROLLER_REQUEST})
CLIENT_RESPONSE_KINDS = frozenset({Kind.APPEND_RESPONSE, Kind.READ_RESPONSE, Kind.STATUS_RESPONSE,
                                   Kind.TRANSFER_LEADER_RESPONSE, Kind.MEMBER_CHANGE_RESPONSE,
                                   Kind.GROUP_RESPONSE, Kind.KV_RESPONSE, Kind.BOOKIE_RESPONSE,
                                   Kind.TOPIC_RESPONSE, Kind.CONSUMER_GROUP_RESPONSE,
                                   Kind.HA_CONTROLLER_RESPONSE})
