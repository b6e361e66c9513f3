#!/usr/bin/env bash
# Debian packages the project needs on a fresh machine. Idempotent: installs only what is missing.
set -euo pipefail
need=()
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v ip >/dev/null || need+=(iproute2)
# nft: random packet loss inside the soak's network namespaces (this kernel has no tc netem).
command -v nft >/dev/null || need+=(nftables)
# cc: the store's compiled record codec and the soak's failing-disk shim (both fall back without it).
command -v cc >/dev/null || need+=(gcc libc6-dev)
# chromium + its driver: the status page's test in a real headless browser (selenium drives Debian's own
# chromedriver; nothing is downloaded at run time).
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# systemd-analyze: the shipped systemd unit is verified in the tests.
command -v systemd-analyze >/dev/null || need+=(systemd)
# kcat: the Kafka front door's command-line path is tested with the real tool.
command -v kcat >/dev/null || need+=(kcat)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then echo "system-deps: missing ${need[*]} and not root; install them by hand" >&2; exit 1; fi
# Another apt (unattended upgrades on a fresh machine) may hold the lock: wait for it, saying so, rather than fail.
lock=(-o DPkg::Lock::Timeout=600)
echo "system-deps: installing ${need[*]} (apt waits up to 10 min for another package manager's lock)" >&2
apt-get "${lock[@]}" update -qq
DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq "${need[@]}"
