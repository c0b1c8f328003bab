#!/usr/bin/env bash
# Starts a private containerd for tests and the demo, never touching the host's own:
# its root, state, sockets, runc root and CNI config all live under DIR.
# Usage: start-containerd.sh DIR   -> socket DIR/containerd.sock, pid in DIR/containerd.pid
# The test images (build-images.sh) are built once into DIR/../images or $LITELET_IMAGES
# and imported; the pause image is the sandbox image unless LITELET_SANDBOX_IMAGE
# names another.
set -euo pipefail
dir=$(realpath -m "${1:?usage: start-containerd.sh DIR}")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"/{root,state,runc,runc-alt,cni,opt}
sock="$dir/containerd.sock"

for tool in containerd runc ctr; do
  command -v "$tool" >/dev/null || { echo "start-containerd: $tool is not installed (apt-get install containerd runc)" >&2; exit 1; }
done

cat > "$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
oom_score = 0

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${LITELET_SANDBOX_IMAGE:-localhost/litelet/pause:1.0}"
  # This VM cannot lower oom_score_adj (no CAP_SYS_RESOURCE): without this, runc fails.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "${LITELET_SNAPSHOTTER:-overlayfs}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/runc"
    # A second handler (RuntimeClass tests): runc again, with its own state root, so
    # a test can tell which handler ran a sandbox.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-alt]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-alt.options]
        SystemdCgroup = false
        Root = "$dir/runc-alt"
    # Upstream's node e2e suite expects a handler named test-handler (RuntimeClass specs).
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler.options]
        SystemdCgroup = false
        Root = "$dir/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
TOML

# Registry hosts (LITELET_REGISTRY_HOSTS=DIR of <host>/hosts.toml): how the CRI plugin
# reaches a private test registry (its https endpoint and CA; loopback hosts would
# otherwise be tried over plain http).
if [ -n "${LITELET_REGISTRY_HOSTS:-}" ]; then
  cat >> "$dir/config.toml" <<TOML
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$LITELET_REGISTRY_HOSTS"
TOML
fi

# A pod network when asked (LITELET_CNI_SUBNET=a.b.c.0/24, LITELET_CNI_BRIDGE=name):
# a private bridge with host-local addresses, no masquerade (nothing leaves the host).
# Without it the runtime reports NetworkReady=false and only host-network pods run.
if [ -n "${LITELET_CNI_SUBNET:-}" ]; then
  bridge=${LITELET_CNI_BRIDGE:?LITELET_CNI_BRIDGE names the bridge}
  gateway=${LITELET_CNI_SUBNET%.0/24}.1
  cat > "$dir/cni/10-litelet.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "litelet-test",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni-ipam",
              "ranges": [[{"subnet": "$LITELET_CNI_SUBNET", "gateway": "$gateway"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
JSON
  echo "$bridge" > "$dir/cni-bridge"
fi

containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
echo $! > "$dir/containerd.pid"
for _ in $(seq 1 100); do
  [ -S "$sock" ] && ctr -a "$sock" version >/dev/null 2>&1 && break
  sleep 0.1
done
if ! ctr -a "$sock" version >/dev/null 2>&1; then
  echo "start-containerd: containerd did not come up; its log:" >&2
  tail -n 30 "$dir/containerd.log" >&2
  exit 1
fi

images=${LITELET_IMAGES:-$dir/images}
if [ ! -f "$images/busybox.tar" ] || [ ! -f "$images/pause.tar" ]; then
  "$here/build-images.sh" "$images" >/dev/null
fi
# LITELET_EXTRA_IMAGES: more OCI archives to import (space-separated paths), e.g. the
# node-conformance suite's images.
for archive in "$images/pause.tar" "$images/busybox.tar" ${LITELET_EXTRA_IMAGES:-}; do
  ctr -a "$sock" -n k8s.io images import --no-unpack=false "$archive" >/dev/null
done
echo "$sock"
