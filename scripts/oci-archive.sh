#!/usr/bin/env bash
# Packs a directory into a one-layer OCI image archive that
# `ctr images import` (and `podman load`, `skopeo`) take, pulling nothing.
#
#   oci-archive.sh ROOTFS OUT.tar IMAGE-NAME ENTRYPOINT-JSON [CMD-JSON]
#
# e.g. oci-archive.sh rootfs proxyd.tar ghcr.io/proxyd/proxyd:0.1.0 '["/usr/local/bin/proxyd"]' '["run"]'
set -euo pipefail
rootfs="$1" out="$2" name="$3" entrypoint="$4" cmd="${5:-[]}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) arch="$(uname -m)" ;;
esac

mkdir -p "$work/image/blobs/sha256"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .

blob() { # FILE -> moves it into the layout, prints "DIGEST SIZE"
  local d s
  d="$(sha256sum "$1" | cut -d' ' -f1)"
  s="$(stat -c %s "$1")"
  mv "$1" "$work/image/blobs/sha256/$d"
  echo "$d $s"
}

read -r layer layer_size < <(blob "$work/layer.tar")
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":%s,"Cmd":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$arch" "$entrypoint" "$cmd" "$layer" >"$work/config.json"
read -r config config_size < <(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config" "$config_size" "$layer" "$layer_size" >"$work/manifest.json"
read -r manifest manifest_size < <(blob "$work/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$manifest_size" "$name" "${name##*:}" >"$work/image/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/image/oci-layout"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/image" -cf "$out" oci-layout index.json blobs
