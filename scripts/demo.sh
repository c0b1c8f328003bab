#!/usr/bin/env bash
# The litelet demo: a private containerd, litelet in standalone mode with a static pod
# (init container + sidecar + main container), a manifest edit, and a clean shutdown.
# Touches neither the host's containerd nor /var/lib/kubelet: everything lives under
# $DEMO_DIR (default /tmp/litelet-demo). Needs root (containerd, cgroups).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
demo=${DEMO_DIR:-/tmp/litelet-demo}
target=${CARGO_TARGET_DIR:-$here/target}
litelet="$target/debug/litelet"
node=demo-node
cgroup_root=/litelet-demo

if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (containerd and cgroups); run: sudo make demo" >&2
  exit 1
fi

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ps_pods() { "$litelet" ps --container-runtime-endpoint "unix://$demo/ctd/containerd.sock"; }
wait_for() { # wait_for DESCRIPTION SECONDS COMMAND...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 $((secs * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "demo: timed out waiting for: $what" >&2
  tail -n 30 "$demo/litelet.log" >&2 || true
  return 1
}
app_running() { ps_pods | grep -E " app +Running" | grep "$1" >/dev/null; }

cleanup() {
  set +e
  if [ -n "${litelet_pid:-}" ] && kill -0 "$litelet_pid" 2>/dev/null; then
    kill -TERM "$litelet_pid"; wait "$litelet_pid"
  fi
  "$here/tests/containerd/stop-containerd.sh" "$demo/ctd"
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c${cgroup_root#/}" ] && find "$c${cgroup_root#/}" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
}
trap cleanup EXIT

say "building litelet"
cargo build --quiet --bin litelet

say "starting a private containerd under $demo/ctd"
rm -rf "$demo"; mkdir -p "$demo/manifests"
LITELET_IMAGES="$demo/images" "$here/tests/containerd/start-containerd.sh" "$demo/ctd" >/dev/null
"$litelet" runtime-info --container-runtime-endpoint "unix://$demo/ctd/containerd.sock"

say "starting litelet (standalone: static pods from $demo/manifests)"
cp "$here/demo/manifests/web.yaml" "$demo/manifests/"
RUST_LOG=${RUST_LOG:-info} "$litelet" \
  --container-runtime-endpoint "unix://$demo/ctd/containerd.sock" \
  --pod-manifest-path "$demo/manifests" \
  --root-dir "$demo/root" --pod-logs-dir "$demo/logs" \
  --cgroup-root "$cgroup_root" --hostname-override "$node" \
  >"$demo/litelet.log" 2>&1 &
litelet_pid=$!

wait_for "the web pod's app container to run" 60 app_running "demo/web-$node"
say "what is running"
ps_pods
say "the app container's log"
cat "$demo"/logs/demo_web-${node}_*/app/0.log | cut -d' ' -f4-
say "the sidecar's log"
head -n 2 "$demo"/logs/demo_web-${node}_*/log-shipper/0.log | cut -d' ' -f4-

say "editing the manifest: a new greeting gives the pod a new UID"
old_uid=$(ps_pods | awk '/ app +Running/ {print $2; exit}')
sed -i 's/hello from litelet/hello again, after an edit/' "$demo/manifests/web.yaml"
new_pod_running() { ps_pods | grep -E " app +Running" | grep -v "$old_uid" >/dev/null; }
wait_for "the edited pod to run" 60 new_pod_running
old_gone() { ! ps_pods | grep "$old_uid" | grep Running >/dev/null; }
wait_for "the old pod to stop" 60 old_gone
ps_pods
say "the new app container's log"
for f in "$demo"/logs/demo_web-${node}_*/app/0.log; do cut -d' ' -f4- "$f"; done | grep again

say "removing the manifest stops the pod"
rm "$demo/manifests/web.yaml"
none_running() { ! ps_pods | grep Running >/dev/null; }
wait_for "every container to stop" 60 none_running
ps_pods

say "shutting down litelet and containerd"
kill -TERM "$litelet_pid"; wait "$litelet_pid" && echo "litelet exited cleanly"
litelet_pid=
grep -E "WARN|ERROR" "$demo/litelet.log" | head -n 5 || true
echo "demo done; litelet's log: $demo/litelet.log"
