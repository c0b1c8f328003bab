#!/usr/bin/env bash
# Installs, from Debian's packages, what building and testing litelet needs and this
# machine lacks: cmake (grpcio builds gRPC core), a C toolchain, and for the
# real-runtime tests containerd, runc, static busybox and the CNI plugins, and for the
# private-registry tests docker-registry and htpasswd, and for the
# D-Bus client tests dbus-daemon, for the certificate clock tests libfaketime, and
# for the scrape test (tests/apiserver/real_prometheus_scrape.rs) prometheus.
# Does nothing when all is present; needs root (or sudo) otherwise.
set -euo pipefail
needed=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep 'install ok installed' >/dev/null; }

have_cmd cmake || needed+=(cmake)
have_cmd gcc || needed+=(gcc)
have_cmd g++ || needed+=(g++)
have_cmd make || needed+=(make)
have_pkg libc6-dev || needed+=(libc6-dev)
have_cmd containerd || needed+=(containerd)
have_cmd runc || needed+=(runc)
have_pkg busybox-static || needed+=(busybox-static)
[ -x /usr/lib/cni/bridge ] || needed+=(containernetworking-plugins)
have_cmd file || needed+=(file)
# The private-registry tests: a real distribution registry with htpasswd (bcrypt) auth.
have_cmd docker-registry || needed+=(docker-registry)
have_cmd htpasswd || needed+=(apache2-utils)
# The D-Bus client tests talk to a private dbus-daemon.
have_cmd dbus-daemon || needed+=(dbus-daemon)
# The certificate tests run litelet with a clock behind the cluster's.
have_pkg libfaketime || needed+=(libfaketime)
# The scrape test runs Debian's Prometheus against a node.
have_cmd prometheus || needed+=(prometheus)

if [ ${#needed[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${needed[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${needed[@]}" >/dev/null
