#!/usr/bin/env bash
# Builds litelet's static binary and its .deb and .rpm, and checks them.
#
#   scripts/package.sh static   static x86_64 binary (glibc, +crt-static, profile dist),
#                               checked with file and ldd
#   scripts/package.sh deb      .deb with dpkg-deb  (needs the static binary)
#   scripts/package.sh rpm      .rpm with rpmbuild  (needs the static binary)
#   scripts/package.sh check    lintian, dpkg -i into a temp root, litelet --version from it,
#                               rpm -qpl, systemd-analyze verify, the static binary
#                               running a pod against the test fakes
#
# Installs the Debian packages it uses (file, rpm, lintian, systemd for systemd-analyze)
# when missing, non-interactively. Output goes to $CARGO_TARGET_DIR/packages (or
# target/packages). Needs root (or sudo) for apt-get, dpkg --root and chroot.
#
#   scripts/package.sh target-dir   prints the resolved (absolute) target dir
set -euo pipefail

# The target dir is made absolute once, before the cd: a relative CARGO_TARGET_DIR
# means the caller's directory, and dpkg --root, chroot and rpmbuild all need
# absolute paths (a relative --root makes dpkg fail to run the maintainer scripts).
# Exported so cargo builds into the same place.
SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  TARGET_DIR=$(realpath -m -- "$CARGO_TARGET_DIR")
else
  TARGET_DIR=$(realpath -m -- "$SCRIPT_DIR/../target")
fi
export CARGO_TARGET_DIR="$TARGET_DIR"
cd "$SCRIPT_DIR/.."

TRIPLE=x86_64-unknown-linux-gnu
BIN="$TARGET_DIR/$TRIPLE/dist/litelet"
OUT="$TARGET_DIR/packages"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
REVISION=1
DEB="$OUT/litelet_${VERSION}-${REVISION}_amd64.deb"
RPM="$OUT/litelet-${VERSION}-${REVISION}.x86_64.rpm"
MAINTAINER="litelet maintainers <maintainers@litelet.invalid>"

log() { echo "package: $*"; }
die() { echo "package: error: $*" >&2; exit 1; }

# apt-get install the Debian packages that provide the given commands, when missing.
need() {
  local missing=()
  local pair cmd pkg
  for pair in "$@"; do
    cmd=${pair%%:*}
    pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

size_of() { stat -c %s "$1"; }
human() { numfmt --to=iec-i --suffix=B --format=%.1f "$(size_of "$1")"; }

build_static() {
  # musl would be the classic choice, but grpcio-sys compiles gRPC core (C++) and
  # Debian has no musl C++ compiler; glibc with crt-static gives a static-pie instead.
  # Packed relative relocations (RELR) make the static-pie's relocation table ~100
  # times smaller (about 330 KB less); glibc's static-pie start-up applies them. They
  # are passed to the final link only, so dependencies keep their build.
  RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo rustc --profile dist --locked --target "$TRIPLE" --bin litelet -- \
    -C link-arg=-Wl,-z,pack-relative-relocs
  check_static
}

check_static() {
  need file:file
  [ -x "$BIN" ] || die "$BIN missing: run make static"
  local kind lddout
  kind=$(file -b "$BIN")
  lddout=$(ldd "$BIN" 2>&1 || true)
  echo "file: $kind"
  echo "ldd:  $lddout"
  case "$kind" in
    *"static-pie linked"* | *"statically linked"*) ;;
    *) die "$BIN is not statically linked" ;;
  esac
  case "$lddout" in
    *"statically linked"* | *"not a dynamic executable"*) ;;
    *) die "ldd finds shared libraries in $BIN" ;;
  esac
  case "$kind" in *", stripped"*) ;; *) die "$BIN is not stripped" ;; esac
  log "static binary $BIN: $(size_of "$BIN") bytes ($(human "$BIN"))"
}

# Files shared by both packages, laid out under $1. $2 is deb or rpm.
stage() {
  local root=$1 flavour=$2
  rm -rf "$root"
  install -D -m 0755 "$BIN" "$root/usr/bin/litelet"
  # `kubelet` is litelet too: kubeadm's preflight runs `kubelet --version`, and tools
  # look for the kubelet by that name. The package conflicts with the kubelet package.
  ln -s litelet "$root/usr/bin/kubelet"
  install -D -m 0644 packaging/config.yaml "$root/etc/litelet/config.yaml"
  install -d -m 0755 "$root/etc/kubernetes/manifests"
  install -d -m 0700 "$root/var/lib/kubelet"
  install -d -m 0755 "$root/usr/share/man/man1" "$root/usr/share/doc/litelet"
  gzip -9n <packaging/litelet.1 >"$root/usr/share/man/man1/litelet.1.gz"
  chmod 0644 "$root/usr/share/man/man1/litelet.1.gz"
  ln -s litelet.1.gz "$root/usr/share/man/man1/kubelet.1.gz"
  # A drop-in for kubeadm nodes, installed by hand (README, "Join a cluster").
  install -D -m 0644 packaging/kubeadm/10-kubeadm.conf \
    "$root/usr/share/litelet/kubeadm/10-kubeadm.conf"
  if [ "$flavour" = deb ]; then
    install -D -m 0644 packaging/litelet.service "$root/lib/systemd/system/litelet.service"
    install -D -m 0644 packaging/litelet.default "$root/etc/default/litelet"
    install -m 0644 packaging/copyright "$root/usr/share/doc/litelet/copyright"
    gzip -9n <packaging/changelog >"$root/usr/share/doc/litelet/changelog.Debian.gz"
    chmod 0644 "$root/usr/share/doc/litelet/changelog.Debian.gz"
    install -D -m 0644 packaging/deb/lintian-overrides \
      "$root/usr/share/lintian/overrides/litelet"
  else
    install -D -m 0644 packaging/litelet.service "$root/usr/lib/systemd/system/litelet.service"
    install -D -m 0644 packaging/litelet.default "$root/etc/sysconfig/litelet"
    install -D -m 0644 LICENSE "$root/usr/share/licenses/litelet/LICENSE"
    install -m 0644 README.md "$root/usr/share/doc/litelet/README.md"
  fi
}

build_deb() {
  check_static >/dev/null
  need dpkg-deb:dpkg
  local root="$OUT/deb-root"
  stage "$root" deb
  install -d -m 0755 "$root/DEBIAN"
  local f
  for f in postinst prerm postrm; do
    install -m 0755 "packaging/deb/$f" "$root/DEBIAN/$f"
  done
  printf '%s\n' /etc/default/litelet /etc/litelet/config.yaml >"$root/DEBIAN/conffiles"
  local installed
  installed=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  sed -e "s/@VERSION@/${VERSION}-${REVISION}/" -e "s/@INSTALLED_SIZE@/$installed/" \
    -e "s/@MAINTAINER@/$MAINTAINER/" packaging/deb/control >"$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' |
    LC_ALL=C sort -z | xargs -0 md5sum >DEBIAN/md5sums)
  chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
  mkdir -p "$OUT"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$DEB" >/dev/null
  log "deb $DEB: $(size_of "$DEB") bytes ($(human "$DEB"))"
}

build_rpm() {
  check_static >/dev/null
  need rpmbuild:rpm
  local root="$OUT/rpm-root" top="$OUT/rpmbuild"
  stage "$root" rpm
  rm -rf "$top"
  mkdir -p "$top/SPECS" "$OUT"
  sed -e "s/@VERSION@/$VERSION/" -e "s/@RELEASE@/$REVISION/" \
    -e "s/@MAINTAINER@/$MAINTAINER/" packaging/rpm/litelet.spec >"$top/SPECS/litelet.spec"
  rpmbuild -bb --quiet \
    --define "_topdir $(realpath "$top")" \
    --define "_rpmdir $(realpath "$OUT")" \
    --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
    --define "litelet_stage $(realpath "$root")" \
    "$top/SPECS/litelet.spec"
  log "rpm $RPM: $(size_of "$RPM") bytes ($(human "$RPM"))"
}

# One check: name, then the command; counts passes and failures.
passed=0
failed=0
check() {
  local name=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
  fi
}

lintian_clean() {
  # Everything is shown, overridden tags too (O:, with the reason above them); an error
  # (E:) that is not overridden fails the check.
  local out
  out=$(lintian --fail-on none --display-info --show-overrides "$DEB" 2>&1) || return 1
  printf '%s\n' "$out"
  ! grep -q '^E: ' <<<"$out"
}

dpkg_into_root() {
  local root="$OUT/dpkg-root"
  rm -rf "$root"
  mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
  : >"$root/var/lib/dpkg/status"
  # Maintainer scripts run outside the root with DPKG_ROOT set; they skip systemd.
  dpkg --root="$root" --force-script-chrootless -i "$DEB" &&
    dpkg --root="$root" -s litelet | grep '^Status: install ok installed$' >/dev/null &&
    [ -d "$root/var/lib/kubelet" ] && [ -d "$root/etc/kubernetes/manifests" ] &&
    [ -f "$root/etc/litelet/config.yaml" ]
}

version_from_root() {
  local got
  # The root holds nothing but the package: chroot proves the binary needs no library.
  got=$(chroot "$OUT/dpkg-root" /usr/bin/litelet --version)
  echo "$got"
  # Upstream's form, which kubeadm's preflight reads from `kubelet --version`.
  [[ $got == "Kubernetes v1.36."*"+litelet.$VERSION" ]] &&
    [ "$(chroot "$OUT/dpkg-root" /usr/bin/kubelet --version)" = "$got" ]
}

rpm_lists_files() {
  local listing expected
  listing=$(rpm -qpl "$RPM" 2>/dev/null)
  echo "$listing"
  for expected in /usr/bin/litelet /usr/bin/kubelet /usr/lib/systemd/system/litelet.service \
    /etc/litelet/config.yaml /etc/sysconfig/litelet /etc/kubernetes/manifests \
    /var/lib/kubelet /usr/share/man/man1/litelet.1.gz /usr/share/licenses/litelet/LICENSE; do
    grep -qx "$expected" <<<"$listing" || { echo "missing $expected"; return 1; }
  done
  # Not `grep -q`: it would stop reading early and, under pipefail, the SIGPIPE
  # that rpm gets for its next line would fail the check.
  rpm -qp --configfiles "$RPM" 2>/dev/null | grep -x /etc/litelet/config.yaml >/dev/null
}

# The static binary (LTO, opt-level z) runs a pod end to end against the test fakes:
# the tests otherwise run the debug build, and a crash only the optimised build has
# must fail here rather than on a node.
static_runs_a_pod() {
  LITELET_TEST_BINARY="$(realpath "$BIN")" cargo test --locked --test fakes -- \
    --exact kubelet_e2e::b40_api_pod_runs_and_reports_running
}

unit_verifies() {
  # run_checks installs systemd when it is missing: a unit left unverified is a failure.
  command -v systemd-analyze >/dev/null 2>&1 || { echo "systemd-analyze missing"; return 1; }
  # The unit as the deb installed it, with ExecStart pointing into the temp root (so
  # the binary is checked to exist and be executable there).
  local root="$OUT/dpkg-root" dir="$OUT/unit-check"
  rm -rf "$dir"
  mkdir -p "$dir"
  sed "s|/usr/bin/litelet|$(realpath "$root")/usr/bin/litelet|" \
    "$root/lib/systemd/system/litelet.service" >"$dir/litelet.service"
  SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$dir/litelet.service" \
    >"$dir/out" 2>&1 || true
  cat "$dir/out"
  ! grep -q "litelet.service" "$dir/out"
}

run_checks() {
  need lintian:lintian rpm:rpm file:file systemd-analyze:systemd
  [ -f "$DEB" ] || die "$DEB missing: run make deb"
  [ -f "$RPM" ] || die "$RPM missing: run make rpm"
  check_static
  log "sizes: binary $(size_of "$BIN"), deb $(size_of "$DEB"), rpm $(size_of "$RPM") bytes"
  check "lintian (no errors)" lintian_clean
  check "dpkg -i into a temp root" dpkg_into_root
  check "litelet --version from the root" version_from_root
  check "rpm -qpl lists the files" rpm_lists_files
  check "systemd-analyze verify" unit_verifies
  check "the static binary runs a pod (kubelet_e2e b40)" static_runs_a_pod
  echo "package-check: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

case "${1:-}" in
  static) build_static ;;
  deb) build_deb ;;
  rpm) build_rpm ;;
  check) run_checks ;;
  target-dir) echo "$TARGET_DIR" ;;
  *) die "usage: $0 static|deb|rpm|check|target-dir" ;;
esac
