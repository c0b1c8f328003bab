#!/usr/bin/env bash
# make conformance: upstream's node-conformance suite against litelet as the node of a
# real control plane (tests/node_conformance.rs). Needs root. Takes the control plane
# from KUBEBUILDER_ASSETS and the suite from LITELET_E2E_DIR, each unpacked from
# ../shared when unset. Exits non-zero when a spec fails that is not on
# tests/node-conformance/environmental-failures.txt.
# LITELET_CONFORMANCE_PROCS (default 8), LITELET_CONFORMANCE_FOCUS (a subset) and
# LITELET_CONFORMANCE_OUT (reports; default /tmp/litelet-conformance) tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "make conformance: needs root (a private containerd, a node address on lo)" >&2
  exit 1
fi
shared=../shared
unpack() { # FOLDER-OF-unpack.sh CACHE-DIR
  if [ ! -f "$shared/$1/unpack.sh" ]; then
    echo "make conformance: $2 is unset and $shared/$1/unpack.sh is missing" >&2
    exit 1
  fi
  bash "$shared/$1/unpack.sh" "$3" | tail -n 1
}
if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  KUBEBUILDER_ASSETS=$(unpack k8s-assets KUBEBUILDER_ASSETS "$HOME/.cache/k8s-assets")
fi
if [ -z "${LITELET_E2E_DIR:-}" ]; then
  LITELET_E2E_DIR=$(unpack conformance LITELET_E2E_DIR "$HOME/.cache/k8s-e2e")
fi
export KUBEBUILDER_ASSETS LITELET_E2E_DIR
# Real parts are mandatory here: a skipped run must not look like a passed one.
export CI=true
exec "${CARGO:-cargo}" test --test node_conformance -- --ignored --nocapture \
  node_conformance_suite
