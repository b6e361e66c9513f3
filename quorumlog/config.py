"""A node's configuration: one table of keys, read from TOML, then QUORUMLOG_* variables, then --flags.

Precedence: flag > environment > file > default. The table (`CONFIG_KEYS`) is the single source: the node's
argument parser and the CLI's `quorumlog node` generate their flags from it, and `render_markdown()` writes
docs/configuration.md from it, so the docs cannot drift from the code.

Names are DLedger's (DLedgerConfig) in snake_case; where a default differs from DLedger's the table says why.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Mapping

from .peers import Address, parse_peers
from .raft import types as raft_types

ENV_PREFIX = "QUORUMLOG_"
MIB = 1024 * 1024


class ConfigError(ValueError):
    """A malformed configuration: the message names the key and the bad value."""



class Flush(StrEnum):
    """When a replica counts an entry it stored: after its fdatasync (`sync`), or once the write reached the
    page cache (`async`, DLedger's default; a power cut can lose what was acknowledged)."""
    SYNC = "sync"
    ASYNC = "async"

@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    default: Any
    type: str  # "str" | "int" | "float" | "bool" | "choice" | "peers"
    doc: str
    dledger: str = ""  # DLedger's name/default and why ours differs ("" = same as DLedger)
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def _k(name: str, default: Any, type_: str, doc: str, dledger: str = "", **kw: Any) -> ConfigKey:
    return ConfigKey(name, default, type_, doc, dledger, **kw)


CONFIG_KEYS: tuple[ConfigKey, ...] = (
    # -- identity -------------------------------------------------------------------------------------------
    _k("group", "default", "str", "Name of the Raft group; peers of another group are refused (UNKNOWN_GROUP).",
       "DLedger `group`, same default."),
    _k("node_id", None, "str", "This node's id; must be one of `peers`.",
       "DLedger `selfId` (default `n0`): required here, so two nodes never both default to n0.",
       aliases=("id",), required=True),
    _k("peers", None, "peers", "Every member: `n0=127.0.0.1:7001,n1=...` (DLedger's `n0-host:port;n1-...` accepted).",
       "DLedger `peers`; both spellings accepted.", required=True),
    _k("join", False, "bool", "Start as a new member of a running group: `peers` names the group's members and "
       "this node; it has no vote and never campaigns until the group's log adds it (`quorumlog member add`).",
       "Not in DLedger (it has no membership change)."),
    _k("data_dir", None, "str", "Directory of this node's store (segments, index, checkpoint, hard state).",
       "DLedger `storeBaseDir` (default ~/dledgerstore): required, no hidden default in $HOME.", required=True),
    _k("bind_host", "", "str", "Address to listen on; empty = the host given for this node in `peers`.",
       "Not in DLedger (it binds the peers address)."),
    _k("bind_port", 0, "int", "Port to listen on; 0 = the port given for this node in `peers` (set it when peers "
       "reach this node through a proxy or NAT).", "Not in DLedger (it binds the peers address).",
       minimum=0, maximum=65535),
    _k("http_port", 0, "int", "Port of the HTTP /status and /metrics endpoint; 0 = off.",
       "Not in DLedger (it has no HTTP endpoint).", minimum=0, maximum=65535),
    _k("rocketmq_port", 0, "int", "Port of the RocketMQ 5 gRPC front door (docs/rocketmq.md); 0 = off.",
       "RocketMQ's proxy listens on 8081; here every node is its own proxy.", minimum=0, maximum=65535),
    _k("kafka_port", 0, "int", "Port of the Kafka front door (docs/kafka.md); 0 = off.",
       "Not in RocketMQ (Kafka's brokers listen on 9092).", minimum=0, maximum=65535),
    # -- durability -----------------------------------------------------------------------------------------
    _k("flush", "sync", "choice",
       "`sync`: acknowledge an append only after a majority fdatasync'ed it (group commit). `async`: count an "
       "entry once it reached the OS page cache; flushed in the background (a power loss can lose acked entries).",
       "DLedger flushes asynchronously (`flushFileInterval` 10 ms) and acks before fsync; we default to `sync` "
       "because an acknowledged entry must survive a crash of every node. `async` is DLedger's behaviour.",
       choices=tuple(Flush)),
    _k("checkpoint_interval_ms", 1_000, "int", "How often the checkpoint (end index, committed index) is persisted.",
       "DLedger persists its checkpoint from the flush service (every ~3 s).", minimum=10),
    # -- election -------------------------------------------------------------------------------------------
    _k("heartbeat_interval_ms", raft_types.HEARTBEAT_INTERVAL_MS, "int", "Leader heartbeat period.",
       "DLedger `heartBeatTimeIntervalMs` = 2000: a LAN round trip is < 1 ms, so 100 ms gives sub-second failover.",
       minimum=1),
    _k("election_timeout_min_ms", raft_types.ELECTION_TIMEOUT_MIN_MS, "int",
       "Lower bound of the randomized election timeout (≥ 3 heartbeats).",
       "DLedger: `maxHeartBeatLeak` 3 × 2000 ms (~6 s) plus jitter; ours fails over in well under 1 s.", minimum=1),
    _k("election_timeout_max_ms", raft_types.ELECTION_TIMEOUT_MAX_MS, "int",
       "Upper bound of the randomized election timeout.", "See election_timeout_min_ms.", minimum=1),
    _k("pre_vote", True, "bool", "Pre-vote before a real election, so a node rejoining after a partition does "
       "not depose a healthy leader.", "DLedger has no pre-vote (its term bump on rejoin causes an election)."),
    _k("check_quorum", True, "bool", "A leader that hears no majority for an election timeout steps down.",
       "DLedger's leader steps down after `maxHeartBeatLeak` missed acks; same idea."),
    _k("quiesce", True, "bool", "A group with nothing to replicate goes quiet: no heartbeats, no timers; node "
       "pairs keep one heartbeat each, and a dead leader's node is noticed within the election timeout.",
       "Not in DLedger (one group per process); CockroachDB's quiesced ranges."),
    _k("preferred_leader_id", "", "str",
       "If set, leadership moves to this node once it has caught up (empty = none) — but not back to it for 20 "
       "election timeouts after it handed leadership over itself (a full or failing disk, an admin transfer, a "
       "shutdown), and never while its disk reports full.",
       "DLedger `preferredLeaderIds` (one id here)."),
    # -- client requests ------------------------------------------------------------------------------------
    _k("max_pending_requests", 10_000, "int", "Appends waiting for a quorum before new ones get LEADER_PENDING_FULL.",
       "DLedger `maxPendingRequestsNum`, same default.", minimum=1),
    _k("max_wait_ack_ms", 2_500, "int", "An append not committed within this time gets WAIT_QUORUM_ACK_TIMEOUT.",
       "DLedger `maxWaitAckTimeMs`, same default.", minimum=1),
    _k("max_entry_bytes", 4 * MIB, "int", "Largest entry body; bigger ones get ENTRY_TOO_LARGE.",
       "DLedger's 4 MiB entry buffer, same size.", minimum=1),
    # -- replication ----------------------------------------------------------------------------------------
    _k("max_push_timeout_ms", 1_000, "int", "A push not answered within this time is resent (a follower whose "
       "disk is full says so at once: it is probed again each heartbeat instead).",
       "DLedger `maxPushTimeOutMs`, same default.", minimum=1),
    _k("max_push_batch_bytes", 1 * MIB, "int", "Record bytes carried by one APPEND push.",
       "DLedger pushes one entry per request (batch push is optional, 4 KiB); we always batch, bounded by bytes.",
       minimum=1),
    _k("max_pending_pushes", 64, "int", "Pushes in flight per follower.",
       "DLedger `maxPendingSize` = 1000 entries; ours counts batched pushes, so 64 batches cover more data.",
       minimum=1),
    _k("peer_push_throttle_point", 300 * MIB, "int", "Lag in bytes beyond which a follower's push rate is capped.",
       "DLedger `peerPushThrottlePoint`, same default.", minimum=0),
    _k("peer_push_quota", 20 * MIB, "int", "Bytes per second pushed to a follower lagging beyond the throttle point.",
       "DLedger `peerPushQuota`, same default.", minimum=1),
    _k("learner_push_quota", 0, "int", "Bytes per second pushed to a learner lagging beyond the throttle point; "
       "0 = no limit, so a new member (`member add`) catches up at the speed of disk and network.",
       "Not in DLedger (no learners).", minimum=0),
    # -- store ----------------------------------------------------------------------------------------------
    _k("data_segment_size", 1024 * MIB, "int", "Size of one preallocated data segment file, in bytes.",
       "DLedger `mappedFileSizeForEntryData`, same default (small values are for tests).", minimum=4096),
    _k("index_segment_size", 128 * MIB, "int", "Size of one index segment file (32-byte units), in bytes.",
       "DLedger `mappedFileSizeForEntryIndex` (~160 MiB of 32-byte units); ours is a power of two.",
       minimum=128),
    _k("preallocate", True, "bool", "Reserve each new segment's blocks ahead of use (fallocate, on a background "
       "thread; test-sized segments are zero-filled), so a full disk shows when a segment is made, not in the middle "
       "of an append; false: sparse files.", "RocketMQ's `warmMapedFileEnable` zero-fills instead (off by default "
       "there); measured and dropped here: it writes every segment twice (README, Figures, Store)."),
    _k("disk_full_ratio", 0.85, "float", "Disk usage ratio at which appends are refused with DISK_FULL "
       "(reads keep working).", "DLedger forbids writes at `diskFullRatio` 0.90 and force-cleans at 0.85; we refuse "
       "at 0.85 so the preallocated next segment and the index still fit.", minimum=0.0, maximum=1.0),
    _k("file_reserved_hours", 72.0, "float", "Segments older than this whose entries are all committed and durable are deleted.",
       "DLedger `fileReservedHours`, same default; a leader also keeps what a follower has not acknowledged, "
       "and a follower that falls below the leader's begin anyway is reset to it ([store.md](store.md)).",
       minimum=0),
    _k("retention_interval_ms", 60_000, "int", "How often retention runs.",
       "DLedger checks every `cleanSpaceIntervalMs`-like period in its flush service.", minimum=10),
    _k("snapshot_every", 10_000, "int", "A group running a state machine (the `_meta` group's key/value store) "
       "snapshots it every this many applied entries; retention deletes only what the newest snapshot covers.",
       "DLedger 0.3's state machine snapshots by `snapshotThreshold` (1000 entries).", minimum=1),
    # -- the node's bookie and auto-recovery (docs/ledgers.md) ------------------------------------------------
    _k("journal_max_group_wait_ms", 2.0, "float", "A bookie's journal waits at most this long to group more adds "
       "into one fsync (it syncs at once when its queue is empty).", "BookKeeper `journalMaxGroupWaitMSec` (2).",
       minimum=0),
    _k("bookie_disk_usage_threshold", 0.95, "float", "A bookie whose disk is fuller than this turns read-only: new "
       "adds are refused (BOOKIE_READ_ONLY), reads, fencing and recovery writes go on.",
       "BookKeeper `diskUsageThreshold` (0.95).", minimum=0.01, maximum=1.0),
    _k("bookie_disk_usage_lwm", 0.90, "float", "A read-only bookie is writable again once its disk is below this.",
       "BookKeeper `diskUsageLwmThreshold` (0.90).", minimum=0.01, maximum=1.0),
    _k("max_ledger_entry_bytes", 16 * MIB, "int", "Largest ledger entry body a bookie takes; a bigger add gets "
       "ENTRY_TOO_LARGE (the client refuses it first, with the same default). At most 60 MiB (an entry must fit "
       "one journal record); a bookie takes at most max_frame_bytes - 64 KiB whatever this says (and one frame).",
       "BookKeeper bounds entries by `nettyMaxFrameSizeBytes` (5 MiB).", minimum=1, maximum=60 * MIB),
    _k("auditor_period_ms", 5_000, "int", "How often the auditor (on the `_meta` group's leader) checks which "
       "bookies are lost and marks their ledgers under-replicated; how often each node's replication worker "
       "looks for work.", "BookKeeper `auditorPeriodicBookieCheckInterval` (1 day; bookie loss is seen at once "
       "through ZooKeeper there).", minimum=100),
    _k("lost_bookie_recovery_delay_ms", 10_000, "int", "A bookie silent this long is lost: its ledgers are "
       "re-replicated (a bookie that restarts sooner costs no copying).", "BookKeeper `lostBookieRecoveryDelay` "
       "(0 s).", minimum=0),
    _k("open_ledger_rereplication_grace_period_ms", 30_000, "int", "The last fragment of a ledger still OPEN is "
       "re-replicated only after this long (its writer's own ensemble change normally replaces the bookie first); "
       "then the ledger is fenced and recovered.", "BookKeeper `openLedgerRereplicationGracePeriod` (30 s).",
       minimum=0),
    # -- transport ------------------------------------------------------------------------------------------
    _k("max_frame_bytes", 64 * MIB + 64 * 1024, "int", "Largest frame on the wire; an absurd length prefix closes the connection.",
       "Not in DLedger (Netty's frame decoder limit); must exceed max_entry_bytes and max_push_batch_bytes; equal to the transport's and the client's default.",
       minimum=1024),
    _k("max_connections", 1024, "int", "Client and peer connections accepted at once; more are closed.",
       "Not in DLedger.", minimum=1),
    _k("handshake_timeout_ms", 5_000, "int", "A connection that has not finished its handshake by then is closed.",
       "Not in DLedger.", minimum=1),
    # -- security -------------------------------------------------------------------------------------------
    _k("token", "", "str", "A shared secret every connection's handshake and every HTTP request must carry "
       "(compared in constant time; UNAUTHORIZED and the connection closed otherwise). Empty = no token. Prefer "
       "the environment variable or `token_file` to a flag (a flag shows in `ps`). Never logged, never in "
       "status or metrics.", "Not in DLedger (it has no authentication)."),
    _k("token_file", "", "str", "A file whose first line is the token (instead of `token`).", "Not in DLedger."),
    _k("tls_cert", "", "str", "PEM certificate of this node (its node id as a DNS subjectAltName): with it every "
       "port speaks TLS (1.2 at least); `cluster up --tls` makes one.", "Not in DLedger (plain TCP only)."),
    _k("tls_key", "", "str", "PEM private key of `tls_cert`.", "Not in DLedger."),
    _k("tls_ca", "", "str", "PEM of the cluster CA: peers must present a certificate it issued naming them (mutual "
       "TLS), and this node verifies the peers it dials the same way.", "Not in DLedger."),
    _k("tls_require_client_cert", False, "bool", "Refuse clients without a certificate of the cluster CA (peers "
       "always need one).", "Not in DLedger."),
    # -- runtime --------------------------------------------------------------------------------------------
    _k("tick_interval_ms", 10, "int", "How often the core is told the time.", "Not in DLedger (its threads sleep).",
       minimum=1, maximum=1000),
    _k("log_level", "info", "choice", "Logging level.", "", choices=("debug", "info", "warning", "error")),
)

KEYS_BY_NAME: dict[str, ConfigKey] = {}
for _key in CONFIG_KEYS:
    for _n in (_key.name, *_key.aliases):
        KEYS_BY_NAME[_n] = _key


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: str
    peers: dict[str, Address]
    data_dir: str
    group: str = "default"
    join: bool = False
    bind_host: str = ""
    bind_port: int = 0
    http_port: int = 0
    rocketmq_port: int = 0
    kafka_port: int = 0
    flush: Flush = Flush.SYNC
    checkpoint_interval_ms: int = 1_000
    heartbeat_interval_ms: int = raft_types.HEARTBEAT_INTERVAL_MS
    election_timeout_min_ms: int = raft_types.ELECTION_TIMEOUT_MIN_MS
    election_timeout_max_ms: int = raft_types.ELECTION_TIMEOUT_MAX_MS
    pre_vote: bool = True
    check_quorum: bool = True
    quiesce: bool = True
    preferred_leader_id: str = ""
    max_pending_requests: int = 10_000
    max_wait_ack_ms: int = 2_500
    max_entry_bytes: int = 4 * MIB
    max_push_timeout_ms: int = 1_000
    max_push_batch_bytes: int = 1 * MIB
    max_pending_pushes: int = 64
    peer_push_throttle_point: int = 300 * MIB
    peer_push_quota: int = 20 * MIB
    learner_push_quota: int = 0
    data_segment_size: int = 1024 * MIB
    index_segment_size: int = 128 * MIB
    preallocate: bool = True
    disk_full_ratio: float = 0.85
    file_reserved_hours: float = 72.0
    retention_interval_ms: int = 60_000
    snapshot_every: int = 10_000
    journal_max_group_wait_ms: float = 2.0
    bookie_disk_usage_threshold: float = 0.95
    bookie_disk_usage_lwm: float = 0.90
    max_ledger_entry_bytes: int = 16 * MIB  # wire/ledger.py MAX_LEDGER_ENTRY_BYTES
    auditor_period_ms: int = 5_000
    lost_bookie_recovery_delay_ms: int = 10_000
    open_ledger_rereplication_grace_period_ms: int = 30_000
    max_frame_bytes: int = 64 * MIB + 64 * 1024  # the transport's MAX_FRAME_BYTES
    max_connections: int = 1024
    handshake_timeout_ms: int = 5_000
    token: str = dataclasses.field(default="", repr=False)  # a secret: never in a repr (or a log line)
    token_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_require_client_cert: bool = False
    tick_interval_ms: int = 10
    log_level: str = "info"

    def __post_init__(self) -> None:
        _validate(self)
        object.__setattr__(self, "flush", Flush(self.flush))  # (given as the string, from a file or a flag)

    @property
    def address(self) -> Address:
        return self.peers[self.node_id]

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def auth_token(self) -> str | None:
        """The token connections and HTTP requests must carry (None: none required)."""
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as f:
                    token = f.readline().strip()
            except OSError as e:
                raise ConfigError(f"token_file={self.token_file!r}: {e.strerror}") from None
            if not token:
                raise ConfigError(f"token_file={self.token_file!r}: empty")
            return token
        return self.token or None

    @property
    def listen_host(self) -> str:
        return self.bind_host or self.peers[self.node_id][0]

    @property
    def listen_port(self) -> int:
        return self.bind_port or self.peers[self.node_id][1]

    def raft_config(self) -> raft_types.RaftConfig:
        return raft_types.RaftConfig(
            node_id=self.node_id, peers=tuple(self.peers), group=self.group, join=self.join,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            election_timeout_min_ms=self.election_timeout_min_ms,
            election_timeout_max_ms=self.election_timeout_max_ms,
            pre_vote=self.pre_vote, check_quorum=self.check_quorum,
            max_pending_requests=self.max_pending_requests, max_wait_ack_ms=self.max_wait_ack_ms,
            max_push_timeout_ms=self.max_push_timeout_ms, max_push_batch_bytes=self.max_push_batch_bytes,
            max_pending_pushes=self.max_pending_pushes, peer_push_throttle_point=self.peer_push_throttle_point,
            peer_push_quota=self.peer_push_quota, learner_push_quota=self.learner_push_quota,
            preferred_leader_id=self.preferred_leader_id or None, quiesce=self.quiesce,
        )

    def store_config(self):
        """The FileStore's StoreConfig (raises ValueError for values the store cannot use)."""
        from .store.config import StoreConfig
        return StoreConfig(
            data_segment_size_bytes=self.data_segment_size, index_segment_size_bytes=self.index_segment_size,
            max_entry_bytes=self.max_entry_bytes, disk_full_ratio=self.disk_full_ratio,
            file_reserved_hours=self.file_reserved_hours, preallocate=self.preallocate,
            checkpoint_interval_ms=self.checkpoint_interval_ms)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["peers"] = {k: f"{h}:{p}" for k, (h, p) in self.peers.items()}
        return d


def _validate(c: NodeConfig) -> None:
    for key in CONFIG_KEYS:
        value = getattr(c, key.name)
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"{key.name}={value!r}: must be ≥ {key.minimum:g}")
        if key.maximum is not None and value > key.maximum:
            raise ConfigError(f"{key.name}={value!r}: must be ≤ {key.maximum:g}")
        if key.choices and value not in key.choices:
            raise ConfigError(f"{key.name}={value!r}: must be one of {', '.join(key.choices)}")
    if c.node_id not in c.peers:
        raise ConfigError(f"node_id={c.node_id!r}: not one of the peers ({', '.join(c.peers)})")
    if c.preferred_leader_id and c.preferred_leader_id not in c.peers:
        raise ConfigError(f"preferred_leader_id={c.preferred_leader_id!r}: not one of the peers")
    if not c.data_dir:
        raise ConfigError("data_dir: required")
    if c.heartbeat_interval_ms * 3 > c.election_timeout_min_ms:
        raise ConfigError(f"heartbeat_interval_ms={c.heartbeat_interval_ms}: must be ≤ election_timeout_min_ms/3 "
                          f"({c.election_timeout_min_ms}/3)")
    if c.bookie_disk_usage_lwm > c.bookie_disk_usage_threshold:
        raise ConfigError(f"bookie_disk_usage_lwm={c.bookie_disk_usage_lwm}: must be ≤ bookie_disk_usage_threshold "
                          f"({c.bookie_disk_usage_threshold})")
    if (c.tls_cert or c.tls_key or c.tls_ca or c.tls_require_client_cert) and not (c.tls_cert and c.tls_key
                                                                                    and c.tls_ca):
        raise ConfigError("tls_cert, tls_key and tls_ca: give all three (TLS between nodes is mutual)")
    for name in ("tls_cert", "tls_key", "tls_ca"):
        if getattr(c, name) and not os.path.isfile(getattr(c, name)):
            raise ConfigError(f"{name}={getattr(c, name)!r}: no such file")
    if c.token and c.token_file:
        raise ConfigError("token and token_file: give one of them")
    if c.token_file:
        c.auth_token()  # readable now, not at the first connection
    if c.election_timeout_min_ms > c.election_timeout_max_ms:
        raise ConfigError(f"election_timeout_min_ms={c.election_timeout_min_ms}: must be ≤ election_timeout_max_ms "
                          f"({c.election_timeout_max_ms})")
    try:
        c.store_config()
    except ImportError:
        pass  # the file store is optional for tools that only parse configuration
    except ValueError as e:
        raise ConfigError(f"store: {e}") from None
    # A frame carries one entry (plus headers) or one push batch; both must fit.
    need = max(c.max_entry_bytes, c.max_push_batch_bytes) + 64 * 1024
    if c.max_frame_bytes < need:
        raise ConfigError(f"max_frame_bytes={c.max_frame_bytes}: must be ≥ max(max_entry_bytes, "
                          f"max_push_batch_bytes) + 64 KiB = {need}")


# -- parsing ---------------------------------------------------------------------------------------------------
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _convert(key: ConfigKey, value: Any, source: str) -> Any:
    """One raw value (TOML value, env string or flag) → the key's type; ConfigError names key and source."""
    where = f"{key.name}={value!r} (from {source})"
    if value is None:
        return None
    try:
        if key.type in ("str", "choice"):
            if not isinstance(value, str):
                raise TypeError("expected a string")
            return value.strip()
        if key.type == "peers":
            if isinstance(value, Mapping):  # TOML table form: [peers] n0 = "127.0.0.1:7001"
                value = ",".join(f"{k}={v}" for k, v in value.items())
            if not isinstance(value, str):
                raise TypeError("expected a peers string like n0=127.0.0.1:7001,n1=...")
            return parse_peers(value)
        if key.type == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise TypeError("expected true or false")
        if key.type == "int":
            if isinstance(value, bool):
                raise TypeError("expected an integer")
            if isinstance(value, int):
                return value
            if isinstance(value, str):
                return int(value.strip().replace("_", ""))
            raise TypeError("expected an integer")
        if key.type == "float":
            if isinstance(value, bool):
                raise TypeError("expected a number")
            if isinstance(value, (int, float)):
                return float(value)
            if isinstance(value, str):
                return float(value.strip())
            raise TypeError("expected a number")
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
    raise AssertionError(f"unknown key type {key.type}")


def _canonical(name: str, source: str) -> ConfigKey:
    key = KEYS_BY_NAME.get(name.replace("-", "_"))
    if key is None:
        raise ConfigError(f"unknown configuration key {name!r} (from {source})")
    return key


def read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config={path!r}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config={path!r}: not valid TOML: {e}") from None
    # Accept keys at the top level or under a [node] table.
    node = data.pop("node", None)
    if isinstance(node, dict):
        data.update(node)
    return data


def load_config(config_file: str | None = None, *, env: Mapping[str, str] | None = None,
                flags: Mapping[str, Any] | None = None) -> NodeConfig:
    """Build a NodeConfig: defaults < TOML file < QUORUMLOG_* environment < flags (None = not given).

    Raises ConfigError naming the first bad key and value; nothing is written.
    """
    env = os.environ if env is None else env
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    config_file = flags.pop("config", None) or config_file or env.get(ENV_PREFIX + "CONFIG") or None
    values: dict[str, Any] = {k.name: k.default for k in CONFIG_KEYS}
    if config_file:
        for name, raw in read_toml(config_file).items():
            key = _canonical(name, f"config file {config_file}")
            values[key.name] = _convert(key, raw, f"config file {config_file}")
    for key in CONFIG_KEYS:
        for env_name in (key.env, *(ENV_PREFIX + a.upper() for a in key.aliases)):
            if env_name in env and env[env_name] != "":
                values[key.name] = _convert(key, env[env_name], f"environment {env_name}")
    for name, raw in flags.items():
        key = _canonical(name, "flags")
        values[key.name] = _convert(key, raw, f"flag {key.flag}")
    for key in CONFIG_KEYS:
        if key.required and not values.get(key.name):
            raise ConfigError(f"{key.name}: required (give {key.flag}, {key.env} or `{key.name}` in the config file)")
    return NodeConfig(**values)


# -- docs ------------------------------------------------------------------------------------------------------
def _fmt_default(key: ConfigKey) -> str:
    d = key.default
    if d is None:
        return "*(required)*"
    if isinstance(d, bool):
        return "`true`" if d else "`false`"
    if isinstance(d, int) and d >= MIB and d % MIB == 0:
        return f"`{d}` ({d // MIB} MiB)"
    if d == "":
        return '`""`'
    return f"`{d}`"


def render_markdown() -> str:
    """docs/configuration.md, generated from CONFIG_KEYS."""
    lines = [
        "# Configuration",
        "",
        "<!-- generated by `python -m quorumlog.config > docs/configuration.md`; edit quorumlog/config.py -->",
        "",
        "A node reads one TOML file (`--config F`, keys at the top level or under `[node]`), then environment",
        "variables `QUORUMLOG_<KEY>`, then command-line flags `--<key-with-dashes>`; a flag beats a variable,",
        "which beats the file, which beats the default. A malformed value stops the node with exit code 2 and one",
        "message naming the key, before anything is written. Names are DLedger's (DLedgerConfig) in snake_case.",
        "",
        "| key | default | type | meaning | vs. DLedger |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in CONFIG_KEYS:
        type_ = "/".join(k.choices) if k.choices else k.type
        name = f"`{k.name}`" + (" (alias " + ", ".join(f"`{a}`" for a in k.aliases) + ")" if k.aliases else "")
        lines.append(f"| {name} | {_fmt_default(k)} | {type_} | {k.doc} | {k.dledger or '—'} |")
    lines += [
        "",
        "Example `node.toml`:",
        "",
        "```toml",
        'group = "default"',
        'node_id = "n0"',
        'peers = "n0=127.0.0.1:7001,n1=127.0.0.1:7002,n2=127.0.0.1:7003"',
        'data_dir = "/var/lib/quorumlog/n0"',
        "http_port = 8001",
        'flush = "sync"',
        "```",
        "",
    ]
    return "\n".join(lines)


def add_argparse_flags(parser: Any) -> None:
    """Add one --flag per key (value kept as a string; load_config converts and validates)."""
    for k in CONFIG_KEYS:
        names = [k.flag] + ["--" + a.replace("_", "-") for a in k.aliases]
        parser.add_argument(*names, dest=k.name, default=None, metavar=k.type.upper(),
                            help=f"{k.doc} [env {k.env}; default {k.default!r}]".replace("%", "%%"))


if __name__ == "__main__":
    print(render_markdown(), end="")
