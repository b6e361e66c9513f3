"""Real partitions with network namespaces (needs root and `ip`): each node in its own namespace, joined to
the soak's bridge in the root namespace by a veth pair; isolating a node sets its host-side veth down, so
its packets are really lost (to peers and clients alike). The per-link proxies still run in the root
namespace, on the bridge's address, for one-way cuts, delay, rate and resets.

Random packet loss, duplication and reordering: `tc netem` on each node's veth when the kernel has netem
(probed: our machines' kernels do not, see /work/shared/design/FAULT-NOTES.md); else random loss with
`nft ... numgen random mod 100 < N drop` inside each node's namespace when nft is installed. What runs is
reported by packet_faults(); without either, the runner uses the proxy's TCP-level equivalents.

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


def _ok(argv: list[str]) -> bool:
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=10)
        return True
    except (OSError, subprocess.SubprocessError):
        return False


NFT_TABLE = "quorumlog_soak"


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
        self.packet_faulted: set[str] = set()
        self._packet_mechanism: str | None = None

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

    def packet_faults(self) -> str:
        """"netem", "nft" or "" (neither works here): probed once, on the first member's namespace."""
        if self._packet_mechanism is None:
            m = self.members[0]
            ns, nv = self.ns[m], self.node_veth[m]
            if _ok(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", nv, "root", "netem", "delay", "1ms"]):
                _ok(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", nv, "root"])
                self._packet_mechanism = "netem"
            elif _ok(["ip", "netns", "exec", ns, "nft", "add", "table", "inet", NFT_TABLE]):
                _ok(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", NFT_TABLE])
                self._packet_mechanism = "nft"
            else:
                self._packet_mechanism = ""
        return self._packet_mechanism

    def loss(self, percent: int, duplicate_percent: int = 0, reorder_percent: int = 0) -> str:
        """Random packet loss (and, with netem, duplication and reordering) on every node's veth, both
        directions (netem on egress in each namespace; nft on input and output). Returns what it did."""
        mech = self.packet_faults()
        assert mech, "no netem and no nft: use the proxy's TCP-level faults"
        for m in self.members:
            ns, nv = self.ns[m], self.node_veth[m]
            if mech == "netem":
                args = ["tc", "qdisc", "add", "dev", nv, "root", "netem", "delay", "5ms", "2ms",
                        "loss", f"{percent}%"]
                if duplicate_percent:
                    args += ["duplicate", f"{duplicate_percent}%"]
                if reorder_percent:
                    args += ["reorder", f"{reorder_percent}%", "50%"]
                subprocess.run(["ip", "netns", "exec", ns, *args], check=True, capture_output=True, timeout=10)
            else:
                rules = (f"add table inet {NFT_TABLE}\n"
                         f"add chain inet {NFT_TABLE} in {{ type filter hook input priority 0; }}\n"
                         f"add chain inet {NFT_TABLE} out {{ type filter hook output priority 0; }}\n"
                         f"add rule inet {NFT_TABLE} in iifname \"{nv}\" numgen random mod 100 < {percent} drop\n"
                         f"add rule inet {NFT_TABLE} out oifname \"{nv}\" numgen random mod 100 < {percent} drop\n")
                subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules.encode(), check=True,
                               capture_output=True, timeout=10)
            self.packet_faulted.add(m)
        if mech == "netem":
            return f"netem loss {percent}% duplicate {duplicate_percent}% reorder {reorder_percent}%"
        return f"nft random loss {percent}% each way on every node (no netem: no duplication/reordering)"

    def heal_packets(self) -> None:
        for m in list(self.packet_faulted):
            ns, nv = self.ns[m], self.node_veth[m]
            _ok(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", nv, "root"])
            _ok(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", NFT_TABLE])
            self.packet_faulted.discard(m)

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
