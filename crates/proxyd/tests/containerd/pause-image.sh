#!/usr/bin/env bash
# Builds the sandbox ("pause") image of the containerd test tier with no
# registry: a static binary that sleeps until SIGTERM, packed as an OCI
# image archive that `ctr images import` takes.
#
#   pause-image.sh OUT.tar IMAGE-NAME
set -euo pipefail
out="$1" name="$2"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) arch="$(uname -m)" ;;
esac

mkdir -p "$work/rootfs" "$work/image/blobs/sha256"
cc -static -Os -o "$work/rootfs/pause" "$here/pause.c"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/rootfs" -cf "$work/layer.tar" pause

blob() { # FILE -> moves it into the layout, prints "DIGEST SIZE"
  local d s
  d="$(sha256sum "$1" | cut -d' ' -f1)"
  s="$(stat -c %s "$1")"
  mv "$1" "$work/image/blobs/sha256/$d"
  echo "$d $s"
}

read -r layer layer_size < <(blob "$work/layer.tar")
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$arch" "$layer" >"$work/config.json"
read -r config config_size < <(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config" "$config_size" "$layer" "$layer_size" >"$work/manifest.json"
read -r manifest manifest_size < <(blob "$work/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$manifest_size" "$name" "${name##*:}" >"$work/image/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/image/oci-layout"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/image" -cf "$out" oci-layout index.json blobs
