#!/usr/bin/env bash
# Packs proxyd into an OCI image archive without pulling anything: the
# binary, the shared libraries it links, and `nft` with its libraries (the
# fallback writer, `--nft-writer nft`, and an operator's `nft list`), on
# no base image. Tagged as the DaemonSets in deploy/ name it.
#
#   deploy/image.sh [OUT.tar] [PROXYD-BINARY]
#   ctr -n k8s.io images import OUT.tar     # or: podman load -i OUT.tar
#
# Defaults: proxyd-image.tar, target/release/proxyd (cargo build --release -p proxyd).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:-proxyd-image.tar}")"
binary="${2:-$root/target/release/proxyd}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1)"
name="ghcr.io/proxyd/proxyd:$version"
[ -x "$binary" ] || { echo "image.sh: no proxyd binary at $binary (cargo build --release -p proxyd)" >&2; exit 1; }
nft="$(command -v nft)" || { echo "image.sh: nft is not installed (Debian: nftables)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

# PROGRAM DEST: the program at DEST in the image, and every library it
# links at the path the loader finds it on this machine.
put() {
  install -D -m 0755 "$1" "$rootfs$2"
  ldd "$1" | grep -o '/[^ ]*' | while read -r lib; do
    [ -e "$rootfs$lib" ] || install -D -m 0755 "$(realpath "$lib")" "$rootfs$lib"
  done
}
put "$binary" /usr/local/bin/proxyd
put "$nft" /usr/sbin/nft
# Debug information is for the build machine, not the node.
strip --strip-debug "$rootfs/usr/local/bin/proxyd"
# The DaemonSet's root filesystem is read-only; nothing here is written.
mkdir -p "$rootfs/tmp" "$rootfs/etc"
echo 'root:x:0:0:root:/root:/usr/sbin/nologin' >"$rootfs/etc/passwd"

"$root/scripts/oci-archive.sh" "$rootfs" "$out" "$name" '["/usr/local/bin/proxyd"]' '["run"]'
echo "$name $out"
