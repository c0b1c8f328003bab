#!/bin/bash
# VM scenario (/work/shared/vm): graceful node shutdown through the real systemd-logind.
# TASK_DIR holds: this script as run.sh, litelet (the binary), busybox.tar and pause.tar
# (tests/containerd/build-images.sh).
#
# Boot 1: litelet runs as a systemd unit with shutdownGracePeriod 30s (critical 10s), a
#   static pod whose preStop hook writes a marker to a hostPath on the VM's own disk and
#   whose container writes another when it gets SIGTERM. Checks: logind's
#   InhibitDelayMaxSec (5 s by default) is raised to 30 s through litelet's drop-in,
#   litelet holds a delay lock on shutdown, the container has memory.swap.max 0
#   (NoSwap on cgroup v2). Then exit 100: vm-task reboots through systemctl → logind
#   sends PrepareForShutdown and waits for the lock.
# Boot 2: the markers exist and were written after the reboot was asked for, the
#   preStop one before the TERM one; litelet's log shows the shutdown handled and the
#   lock released. Exit 0 only if every check passed.
set -u
cd /task
fail=0
check() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fail=1; fi; }
wait_for() { local n=$1; shift; for _ in $(seq "$n"); do eval "$*" && return 0; sleep 1; done; return 1; }
STATE=/var/lib/shutdown-scenario
MARKERS=$STATE/markers

if [ "${VM_BOOT:-1}" = 1 ]; then
  mkdir -p "$MARKERS" /etc/litelet/manifests /etc/containerd
  containerd config default > /etc/containerd/config.toml
  sed -i -e 's#sandbox_image = ".*"#sandbox_image = "localhost/litelet/pause:1.0"#' /etc/containerd/config.toml
  systemctl restart containerd
  wait_for 60 'ctr version >/dev/null 2>&1'
  ctr -n k8s.io images import pause.tar >/dev/null && ctr -n k8s.io images import busybox.tar >/dev/null
  install -m 0755 litelet /usr/local/bin/litelet
  cat > /etc/litelet/config.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10s
YAML
  cat > /etc/litelet/manifests/marker.yaml <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: marker
  namespace: default
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 15
  containers:
  - name: app
    image: localhost/litelet/busybox:1.0
    command: ["sh", "-c", "date +%s > /markers/started; trap 'date +%s > /markers/term; sync; exit 0' TERM; while true; do sleep 1; done"]
    resources:
      requests: {memory: 16Mi}
      limits: {memory: 64Mi}
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "date +%s > /markers/prestop; sync; sleep 2"]
    volumeMounts:
    - {name: markers, mountPath: /markers}
  volumes:
  - name: markers
    hostPath: {path: $MARKERS, type: Directory}
YAML
  busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec | tee "$STATE/delay-before"
  systemd-run --unit=litelet -p StandardOutput=append:/var/log/litelet.log -p StandardError=append:/var/log/litelet.log \
    -E RUST_LOG=info /usr/local/bin/litelet --container-runtime-endpoint unix:///run/containerd/containerd.sock \
    --config /etc/litelet/config.yaml --pod-manifest-path /etc/litelet/manifests --root-dir /var/lib/litelet
  check "the static pod runs" 'wait_for 300 "[ -s $MARKERS/started ]"'
  check "litelet holds a delay lock on shutdown" 'wait_for 60 "systemd-inhibit --list --no-pager | grep litelet | grep -q delay"'
  systemd-inhibit --list --no-pager
  busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec | tee "$STATE/delay-after"
  check "logind's delay was raised to 30 s" 'grep -q "t 30000000" "$STATE/delay-after"'
  check "litelet's logind drop-in" 'grep -q "InhibitDelayMaxSec=30" /etc/systemd/logind.conf.d/99-litelet.conf'
  swapmax=$(find /sys/fs/cgroup/kubepods -name memory.swap.max -path '*pod*/*' 2>/dev/null | while read -r f; do echo "$f=$(cat "$f")"; done)
  echo "container swap: $swapmax"
  check "a container of the pod has memory.swap.max 0 (NoSwap)" 'echo "$swapmax" | grep -q "/[0-9a-f]\{64\}/memory.swap.max=0"'
  date +%s > "$STATE/reboot-asked"
  echo "$fail" > "$STATE/boot1-fail"
  echo "rebooting through logind"
  exit 100
fi

echo "== after the reboot"
cp /var/log/litelet.log /task/litelet.log 2>/dev/null
cp -r "$MARKERS" /task/markers 2>/dev/null
asked=$(cat "$STATE/reboot-asked")
check "boot 1 passed its checks" '[ "$(cat $STATE/boot1-fail)" = 0 ]'
check "the preStop hook ran after the reboot was asked for" '[ -s $MARKERS/prestop ] && [ "$(cat $MARKERS/prestop)" -ge "$asked" ]'
check "the container got SIGTERM after its preStop hook" '[ -s $MARKERS/term ] && [ "$(cat $MARKERS/term)" -ge "$(cat $MARKERS/prestop)" ]'
check "litelet saw the shutdown" 'grep -q "the node is shutting down" /var/log/litelet.log'
check "litelet released the lock after the pods stopped" 'grep -q "inhibitor lock released" /var/log/litelet.log'
echo "asked=$asked prestop=$(cat $MARKERS/prestop 2>/dev/null) term=$(cat $MARKERS/term 2>/dev/null)"
grep -E "node shutdown|swap:" /var/log/litelet.log | tail -20
exit $fail
