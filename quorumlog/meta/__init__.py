"""The metadata store: state machines that a group runs over its committed entries (the `_meta` group's
versioned key/value store first). Sans-I/O; the node runtime and the simulator drive them."""

from .kv import Change, KeyValue, KVStore, Result, encode_delete, encode_put

__all__ = ["Change", "KVStore", "KeyValue", "Result", "encode_delete", "encode_put"]
