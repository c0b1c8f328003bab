#!/usr/bin/env bash
# Stops a containerd started by start-containerd.sh DIR and cleans up what it left:
# its task processes, mounts under DIR, and DIR itself unless KEEP=1.
set -uo pipefail
dir=$(realpath -m "${1:?usage: stop-containerd.sh DIR}")
if [ -f "$dir/containerd.pid" ]; then
  pid=$(cat "$dir/containerd.pid")
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
fi
# containerd-shim processes outlive containerd by design; end those of this instance.
for shim in $(pgrep -f "containerd-shim-runc-v2 .*-address $dir/containerd.sock" 2>/dev/null); do
  pkill -9 -P "$shim" 2>/dev/null
  kill -9 "$shim" 2>/dev/null
done
grep -F " $dir/" /proc/self/mounts | cut -d' ' -f2 | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
# The pod network's bridge, if start-containerd.sh made one.
if [ -f "$dir/cni-bridge" ]; then
  ip link del "$(cat "$dir/cni-bridge")" 2>/dev/null
fi
[ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
