"""The metadata store: state machines that a group runs over its committed entries (the `_meta` group's
versioned key/value store first) and the runner that feeds them. Sans-I/O; the node runtime and the simulator
drive them."""

from .kv import Change, KeyValue, KVStore, Result, encode_delete, encode_put
from .state_machine import StateMachine, StateMachineRunner

__all__ = ["Change", "KVStore", "KeyValue", "Result", "StateMachine", "StateMachineRunner", "encode_delete",
           "encode_put"]
