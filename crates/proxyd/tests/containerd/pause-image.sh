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
mkdir -p "$work/rootfs"
cc -static -Os -o "$work/rootfs/pause" "$here/pause.c"
"$here/../../../../scripts/oci-archive.sh" "$work/rootfs" "$out" "$name" '["/pause"]'
