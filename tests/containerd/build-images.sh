#!/usr/bin/env bash
# Builds the two test images as OCI archives, with no registry:
#   localhost/litelet/busybox:1.0  busybox-static plus applet symlinks, Cmd ["sh"]
#   localhost/litelet/pause:1.0    a tiny static pause program (the sandbox image)
# Usage: build-images.sh OUT_DIR   -> OUT_DIR/busybox.tar, OUT_DIR/pause.tar
set -euo pipefail
out=$(realpath -m "${1:?usage: build-images.sh OUT_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

busybox_bin=${BUSYBOX:-/bin/busybox}
if ! file -L "$busybox_bin" 2>/dev/null | grep -q 'statically linked' && ! ldd "$busybox_bin" 2>&1 | grep -q 'not a dynamic'; then
  echo "build-images: $busybox_bin is not a static busybox (apt-get install busybox-static)" >&2
  exit 1
fi

sha() { sha256sum "$1" | cut -d' ' -f1; }

# make_image NAME TAG ROOTFS CONFIG_JSON ARCHIVE
make_image() {
  local ref=$1 rootfs=$2 config=$3 archive=$4
  local img="$work/img-$(basename "$archive" .tar)"
  mkdir -p "$img/blobs/sha256"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$img/layer.tar" .
  local diff_id; diff_id=$(sha "$img/layer.tar")
  gzip -n -9 -c "$img/layer.tar" > "$img/layer.tar.gz"
  local layer; layer=$(sha "$img/layer.tar.gz")
  local layer_size; layer_size=$(stat -c %s "$img/layer.tar.gz")
  mv "$img/layer.tar.gz" "$img/blobs/sha256/$layer"
  rm "$img/layer.tar"

  printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$config" "$diff_id" > "$img/config.json"
  local cfg; cfg=$(sha "$img/config.json")
  local cfg_size; cfg_size=$(stat -c %s "$img/config.json")
  mv "$img/config.json" "$img/blobs/sha256/$cfg"

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
    "$cfg" "$cfg_size" "$layer" "$layer_size" > "$img/manifest.tmp"
  local man; man=$(sha "$img/manifest.tmp")
  local man_size; man_size=$(stat -c %s "$img/manifest.tmp")
  mv "$img/manifest.tmp" "$img/blobs/sha256/$man"

  printf '{"imageLayoutVersion":"1.0.0"}' > "$img/oci-layout"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$man" "$man_size" "$ref" "${ref##*:}" > "$img/index.json"
  printf '[{"Config":"blobs/sha256/%s","RepoTags":["%s"],"Layers":["blobs/sha256/%s"]}]' \
    "$cfg" "$ref" "$layer" > "$img/manifest.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$img" -cf "$archive" .
}

# busybox image
bb="$work/busybox-root"
mkdir -p "$bb/bin" "$bb/tmp" "$bb/etc" "$bb/proc" "$bb/sys" "$bb/dev"
cp "$busybox_bin" "$bb/bin/busybox"
for applet in sh ash sleep cat echo ls ps kill true false env id date head tail wc grep sed \
  mkdir rm touch printf test nc wget hostname yes dd mount df free top seq expr tr sort; do
  ln -sf busybox "$bb/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$bb/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' > "$bb/etc/group"
make_image "localhost/litelet/busybox:1.0" "$bb" \
  '{"Cmd":["sh"],"Env":["PATH=/bin"],"WorkingDir":"/"}' "$out/busybox.tar"

# pause image
pz="$work/pause-root"
mkdir -p "$pz"
gcc -static -Os -s -o "$pz/pause" "$here/pause.c"
make_image "localhost/litelet/pause:1.0" "$pz" '{"Entrypoint":["/pause"]}' "$out/pause.tar"

echo "build-images: wrote $out/busybox.tar ($(stat -c %s "$out/busybox.tar") bytes), $out/pause.tar"
