"""The data source's options, parsed once on the driver into a frozen, picklable value.

Names follow Spark's Kafka connector where they mean the same (startingIndex ~ startingOffsets,
maxRecordsPerTrigger ~ maxOffsetsPerTrigger, minPartitions, failOnDataLoss). Spark hands options over as a
case-insensitive map of strings; a bad value is reported naming the option.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Mapping

from ..peers import format_peers, parse_peers

EARLIEST = "earliest"
LATEST = "latest"
READ_FROM = ("leader", "followers", "any")

DEFAULT_MAX_BYTES_PER_PARTITION = 64 * 1024 * 1024  # one Spark task reads about this much
DEFAULT_PAGE_BYTES = 4 * 1024 * 1024  # one read_records page; several are in flight per task
DEFAULT_PAGES_IN_FLIGHT = 4
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_FOLLOWER_WAIT_MS = 5_000  # how long a partition waits for its replica to commit before failing over
DEFAULT_WRITE_BATCH_BYTES = 1024 * 1024  # one idempotent append_batch from a write task
DEFAULT_WRITE_BATCH_ROWS = 8192
DEFAULT_WRITES_IN_FLIGHT = 8
assert DEFAULT_PAGE_BYTES <= DEFAULT_MAX_BYTES_PER_PARTITION


class OptionError(ValueError):
    """A data source option is missing or malformed (the message names it)."""


def _get(options: Mapping[str, str], *names: str) -> str | None:
    lower = {str(k).lower(): v for k, v in options.items()}
    for name in names:
        v = lower.get(name.lower())
        if v is not None and str(v) != "":
            return str(v)
    return None


def _int(options: Mapping[str, str], name: str, default: int | None, *aliases: str, minimum: int = 0) -> int | None:
    text = _get(options, name, *aliases)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise OptionError(f"option {name}: must be ≥ {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}: expected true or false, got {text!r}")


def _position(options: Mapping[str, str], name: str, default: str) -> str | int:
    text = _get(options, name) or default
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name}: expected earliest, latest or an index, got {text!r}") from None
    if value < 0:
        raise OptionError(f"option {name}: an index is ≥ 0, got {value}")
    return value


def read_cluster_dir(path: str) -> tuple[str, str | None]:
    """`cluster up`'s directory → (peers text, group)."""
    peers, group, _ = read_cluster_doc(path)
    return peers, group


def read_cluster_doc(path: str) -> tuple[str, str | None, str | None]:
    """`cluster up`'s directory → (peers text, group, its TLS CA certificate if `cluster up --tls`)."""
    file = os.path.join(path, "cluster.json")
    try:
        with open(file, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise OptionError(f"option cluster: cannot read {file}: {e}") from None
    peers = doc.get("peers")
    if isinstance(peers, dict):
        peers = ",".join(f"{k}={v}" if isinstance(v, str) else f"{k}={v[0]}:{v[1]}" for k, v in peers.items())
    if not isinstance(peers, str):
        raise OptionError(f"option cluster: {file} has no peers")
    return peers, doc.get("group"), doc.get("tls_ca")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    peers: str  # canonical peers text (picklable, parsed again where used)
    group: str = "default"
    starting_index: str | int = EARLIEST
    ending_index: str | int = LATEST
    min_partitions: int | None = None
    read_from: str = "leader"
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    page_bytes: int = DEFAULT_PAGE_BYTES
    pages_in_flight: int = DEFAULT_PAGES_IN_FLIGHT
    max_records_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    follower_wait_ms: int = DEFAULT_FOLLOWER_WAIT_MS
    write_batch_bytes: int = DEFAULT_WRITE_BATCH_BYTES
    write_batch_rows: int = DEFAULT_WRITE_BATCH_ROWS
    writes_in_flight: int = DEFAULT_WRITES_IN_FLIGHT
    write_id: str | None = None  # fixes the writer's identity (idempotence key) instead of a fresh job id
    ledger_stream: str | None = None  # read this ledger stream (client/ledger_stream.py) instead of a group
    topic: str | None = None  # read this topic (client/topics.py; option topic or Kafka's subscribe)
    starting_offsets: str | None = None  # topic: "earliest", "latest" or JSON {"T": {"0": 23, "1": -2}}
    ending_offsets: str | None = None  # topic: "latest" or JSON per queue (-1 latest)
    token: str | None = field(default=None, repr=False)  # the cluster's token; None: QUORUMLOG_TOKEN (a secret)
    tls_ca: str | None = None  # TLS to the nodes, verified with this CA; None: QUORUMLOG_TLS_CA if set

    @property
    def node_ids(self) -> list[str]:
        return list(parse_peers(self.peers))

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        peers = _get(options, "peers")
        cluster = _get(options, "cluster")
        group = _get(options, "group")
        if (peers is None) == (cluster is None):
            raise OptionError("give exactly one of option peers (n0=host:port,...) or option cluster (a directory "
                              "made by `quorumlog cluster up`)")
        tls_ca = _get(options, "tlsCa")
        if cluster is not None:
            peers, cluster_group, cluster_ca = read_cluster_doc(cluster)
            group = group or cluster_group
            tls_ca = tls_ca or cluster_ca
        try:
            peers = format_peers(parse_peers(peers))
        except ValueError as e:
            raise OptionError(f"option peers: {e}") from None
        read_from = (_get(options, "readFrom") or "leader").lower()
        if read_from not in READ_FROM:
            raise OptionError(f"option readFrom: one of {', '.join(READ_FROM)}, got {read_from!r}")
        starting = _position(options, "startingIndex", EARLIEST)
        ending = _position(options, "endingIndex", LATEST)
        if starting == LATEST and ending != LATEST:
            raise OptionError("option startingIndex latest needs endingIndex latest")
        if isinstance(starting, int) and isinstance(ending, int) and ending < starting:
            raise OptionError(f"option endingIndex {ending} is before startingIndex {starting}")
        return cls(
            peers=peers,
            group=group or "default",
            starting_index=starting,
            ending_index=ending,
            min_partitions=_int(options, "minPartitions", None, minimum=1),
            read_from=read_from,
            max_bytes_per_partition=_int(options, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION,
                                         minimum=1),
            page_bytes=_int(options, "pageBytes", DEFAULT_PAGE_BYTES, minimum=1),
            pages_in_flight=_int(options, "pagesInFlight", DEFAULT_PAGES_IN_FLIGHT, minimum=1),
            max_records_per_trigger=_int(options, "maxRecordsPerTrigger", None, "maxOffsetsPerTrigger", minimum=1),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            timeout_ms=_int(options, "timeoutMs", DEFAULT_TIMEOUT_MS, minimum=1),
            follower_wait_ms=_int(options, "followerWaitMs", DEFAULT_FOLLOWER_WAIT_MS, minimum=0),
            write_batch_bytes=_int(options, "writeBatchBytes", DEFAULT_WRITE_BATCH_BYTES, minimum=1),
            write_batch_rows=_int(options, "writeBatchRows", DEFAULT_WRITE_BATCH_ROWS, minimum=1),
            writes_in_flight=_int(options, "writesInFlight", DEFAULT_WRITES_IN_FLIGHT, minimum=1),
            write_id=_get(options, "writeId"),
            ledger_stream=_get(options, "ledgerStream"),
            topic=_get(options, "topic", "subscribe"),
            starting_offsets=_get(options, "startingOffsets"),
            ending_offsets=_get(options, "endingOffsets"),
            token=_get(options, "token"),
            tls_ca=tls_ca,
        )
