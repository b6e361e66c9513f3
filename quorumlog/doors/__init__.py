"""Front doors: a node's listeners for foreign protocols (RocketMQ 5's gRPC, Kafka's wire protocol), so that
existing clients and tools use quorumlog unchanged.

A door runs in the node's process, on a port of its own, and translates each foreign request into the requests
the own client sends (client/): it reaches the groups the way any client does, through their leaders, so the
same rules answer it — the same idempotent producer, the same committed reads, the same `_meta` for progress.
That makes every node a proxy for the whole cluster (RocketMQ 5's proxy in cluster mode): a door serves any
topic, whichever node leads its queues, and a client whose node dies goes on at the next one.

The node process starts the doors its configuration turns on (`rocketmq_port`, `kafka_port`) once the node
serves, and closes them before the node stops (server/runtime.py, the process's composition root: the server
layer itself never imports this package). Each door records where it listens in `_meta`
(`doors/<kind>/<node id>` = "host:port"), so any door can name the others to its clients.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..config import NodeConfig

DOORS_PREFIX = "doors/"


class Door(Protocol):
    kind: str  # "rocketmq", "kafka": the key under DOORS_PREFIX

    async def start(self) -> None: ...  # listening once it returns; raises OSError if the port is taken

    async def close(self) -> None: ...  # stop listening, end the open calls, close the door's clients

    def status(self) -> dict[str, Any]: ...


def door_key(kind: str, node_id: str) -> str:
    return f"{DOORS_PREFIX}{kind}/{node_id}"


def door_endpoints(cluster_doc: dict, kind: str) -> str:
    """"host:port,..." of a `cluster up` cluster's `kind` doors, from its cluster.json ("" when they are off)."""
    return ",".join(f"{n['address'].rsplit(':', 1)[0]}:{n[kind + '_port']}" for n in cluster_doc["nodes"]
                    if n.get(kind + "_port"))


def client_options(config: NodeConfig) -> dict[str, Any]:
    """The own client's options for a door of the node configured by `config`: the node's peers, token and CA
    (its own certificate too where the nodes require one of clients)."""
    options: dict[str, Any] = {"token": config.auth_token()}
    if config.tls:
        options["tls_ca"] = config.tls_ca
        if config.tls_require_client_cert:
            options["tls_cert"], options["tls_key"] = config.tls_cert, config.tls_key
    return options


def doors_for(config: NodeConfig) -> list[Door]:
    """The doors `config` turns on (none by default)."""
    out: list[Door] = []
    if config.rocketmq_port:
        from .rocketmq import RocketMqDoor
        out.append(RocketMqDoor(config))
    if config.kafka_port:
        from .kafka import KafkaDoor
        out.append(KafkaDoor(config))
    return out
