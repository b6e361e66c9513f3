"""Real partitions with network namespaces (needs root and `ip`): each node in its own namespace, joined to
the soak's bridge in the root namespace by a veth pair; isolating a node sets its host-side veth down, so
its packets are really lost (to peers and clients alike). The per-link proxies still run in the root
namespace, on the bridge's address, for one-way cuts, delay, rate and resets (no nft/iptables or netem
here; see /work/shared/design/FAULT-NOTES.md).

Everything is named after a per-run tag and removed by teardown(), also after a failure.
"""

from __future__ import annotations

import logging
import os
import subprocess

log = logging.getLogger(__name__)


def available() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
        return True
    except (OSError, subprocess.SubprocessError):
        return False


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class NetnsLinks:
    def __init__(self, members: list[str], tag: int) -> None:
        self.tag = tag % 10_000
        self.members = members
        subnet = 100 + (tag % 150)
        self.bridge = f"qsb{self.tag}"
        self.bridge_host = f"10.77.{subnet}.254"
        self.ns = {m: f"qs{self.tag}n{i}" for i, m in enumerate(members)}
        self.host_veth = {m: f"qs{self.tag}h{i}" for i, m in enumerate(members)}
        self.node_veth = {m: f"qs{self.tag}v{i}" for i, m in enumerate(members)}
        self.host = {m: f"10.77.{subnet}.{i + 1}" for i, m in enumerate(members)}
        self.down: set[str] = set()

    def setup(self) -> None:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.bridge_host}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for m in self.members:
                ns, hv, nv = self.ns[m], self.host_veth[m], self.node_veth[m]
                _ip("netns", "add", ns)
                _ip("link", "add", hv, "type", "veth", "peer", "name", nv)
                _ip("link", "set", nv, "netns", ns)
                _ip("link", "set", hv, "master", self.bridge)
                _ip("link", "set", hv, "up")
                _ip("-n", ns, "addr", "add", f"{self.host[m]}/24", "dev", nv)
                _ip("-n", ns, "link", "set", nv, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.teardown()
            raise

    def exec_prefix(self, member: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[member]]

    def isolate(self, nodes: list[str]) -> None:
        for m in nodes:
            _ip("link", "set", self.host_veth[m], "down")
            self.down.add(m)

    def heal(self) -> None:
        for m in list(self.down):
            _ip("link", "set", self.host_veth[m], "up")
            self.down.discard(m)

    def teardown(self) -> None:
        for m in self.members:
            for args in (("link", "del", self.host_veth[m]), ("netns", "del", self.ns[m])):
                try:
                    _ip(*args)
                except (OSError, subprocess.SubprocessError):
                    pass
        try:
            _ip("link", "del", self.bridge)
        except (OSError, subprocess.SubprocessError):
            pass
