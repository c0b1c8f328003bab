#!/usr/bin/env bash
# make vm: the VM tier (tests/vm_node.rs). litelet's own .deb installed with dpkg in a
# Debian VM with systemd as PID 1, cgroup v2 and containerd (../shared/vm, under QEMU),
# joined with kubeadm to a real control plane on this machine. Needs root.
# The image is built once into ~/.cache/litelet-vm (LITELET_VM_IMAGE); the package is
# built here unless LITELET_DEB names one; the control plane comes from
# KUBEBUILDER_ASSETS (unpacked from ../shared when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "make vm: needs root (the VM image and its task disks)" >&2
  exit 1
fi
if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  if [ ! -f ../shared/k8s-assets/unpack.sh ]; then
    echo "make vm: KUBEBUILDER_ASSETS is unset and ../shared/k8s-assets/unpack.sh is missing" >&2
    exit 1
  fi
  KUBEBUILDER_ASSETS=$(bash ../shared/k8s-assets/unpack.sh "$HOME/.cache/k8s-assets" | tail -n 1)
fi
export KUBEBUILDER_ASSETS
if [ -z "${LITELET_DEB:-}" ]; then
  ./scripts/package.sh static
  ./scripts/package.sh deb
fi
# Real parts are mandatory here: a skipped run must not look like a passed one.
export CI=true
exec "${CARGO:-cargo}" test --test vm_node -- --ignored --nocapture --test-threads=2
