#!/usr/bin/env bash
# Puts a containerd that streams CRI container events (GetContainerEvents, containerd
# 1.7) beside Debian 12's 1.6, for the benchmarks: Debian 13's package, whose binaries
# need only glibc 2.34 and run on Debian 12. Prints the folder holding containerd and
# its runc shim; `make bench EVENTS=1` puts it first on PATH, so the private containerd
# of tests/containerd/start-containerd.sh is this one. Nothing is installed system-wide.
#
# The package is checked as apt would: trixie's InRelease against Debian's archive keys
# (debian-archive-keyring), the Packages index against InRelease, the .deb against the
# index. Cached under ~/.cache; a second run prints the folder without a download.
set -euo pipefail
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=trixie
cache="${XDG_CACHE_HOME:-$HOME/.cache}/litelet-containerd-events"
bin="$cache/usr/bin"

if [ -x "$bin/containerd" ] && [ -x "$bin/containerd-shim-runc-v2" ]; then
  echo "$bin"
  exit 0
fi
for tool in curl gpgv xz dpkg-deb sha256sum; do
  command -v "$tool" >/dev/null || { echo "containerd-with-events: $tool is missing" >&2; exit 1; }
done
keyrings=(/usr/share/keyrings/debian-archive-"$suite"-*.gpg)
[ -e "${keyrings[0]}" ] || {
  echo "containerd-with-events: no $suite archive key (apt-get install debian-archive-keyring)" >&2
  exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/litelet-containerd.XXXXXX")
trap 'rm -rf "$work"' EXIT
fetch() { curl -fsS --retry 3 -o "$2" "$1"; }

fetch "$mirror/dists/$suite/InRelease" "$work/InRelease"
keyring_args=()
for k in "${keyrings[@]}"; do keyring_args+=(--keyring "$k"); done
# InRelease also carries signatures by keys newer than Debian 12's keyring (the next
# release's): gpgv then exits non-zero, so what counts is a good signature by one of
# the trixie keys, read from its status output.
gpgv "${keyring_args[@]}" --status-fd 3 --output "$work/Release" "$work/InRelease" \
  3>"$work/gpgv.status" 2>"$work/gpgv.log" || true
grep -q '^\[GNUPG:\] VALIDSIG ' "$work/gpgv.status" && [ -s "$work/Release" ] || {
  cat "$work/gpgv.log" >&2
  echo "containerd-with-events: $suite's InRelease is not signed by Debian's archive key" >&2
  exit 1
}
index=main/binary-amd64/Packages.xz
index_sum=$(awk -v f="$index" '/^SHA256:/{s=1; next} /^[^ ]/{s=0} s && $3 == f {print $1}' "$work/Release")
[ -n "$index_sum" ] || { echo "containerd-with-events: $index not in $suite's Release" >&2; exit 1; }
fetch "$mirror/dists/$suite/$index" "$work/Packages.xz"
echo "$index_sum  $work/Packages.xz" | sha256sum --quiet -c -

# The containerd stanza: its pool path and checksum.
read -r filename deb_sum < <(xz -dc "$work/Packages.xz" | awk '
  /^Package: /{p = ($2 == "containerd")}
  p && /^Filename: /{f = $2}
  p && /^SHA256: /{s = $2}
  /^$/ && f && s {print f, s; exit}')
[ -n "${filename:-}" ] || { echo "containerd-with-events: no containerd in $suite" >&2; exit 1; }
fetch "$mirror/$filename" "$work/containerd.deb"
echo "$deb_sum  $work/containerd.deb" | sha256sum --quiet -c -

rm -rf "$cache.new"
mkdir -p "$cache.new"
dpkg-deb -x "$work/containerd.deb" "$cache.new"
"$cache.new/usr/bin/containerd" --version >&2
rm -rf "$cache"
mv "$cache.new" "$cache"
echo "$bin"
