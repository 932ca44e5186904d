#!/usr/bin/env bash
# Builds an application from kube-endpoints' README alone, as a crates.io
# user would: `cargo new`, the README's [dependencies] block, and its first
# example as the program (its hidden `# ` lines shown), against the crates
# as they would be published. Fails if the README leaves out something an application
# needs to compile.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
readme="$root/crates/kube-endpoints/README.md"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cargo new --quiet --vcs none --name readme-app "$dir/app"
# The first ```toml block as written, resolved as crates.io would resolve
# it, to the crates as `cargo publish --dry-run` packaged them (the step
# before this one in CI): what a user would download.
awk '/^```toml/{f=1;next} /^```/{if(f)exit} f && !/^\[dependencies\]/' "$readme" >>"$dir/app/Cargo.toml"
grep -q '^kube-endpoints = "' "$dir/app/Cargo.toml" || { echo "FAIL: no kube-endpoints = \"VERSION\" dependency in the README"; exit 1; }
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
echo "[patch.crates-io]" >>"$dir/app/Cargo.toml"
for crate in slice-model slice-cache endpoints-map informer-glue kube-endpoints; do
  packaged="$root/target/package/$crate-$version"
  [ -f "$packaged/Cargo.toml" ] || { echo "FAIL: $packaged is missing: run cargo publish --dry-run first"; exit 1; }
  echo "$crate = { path = \"$packaged\" }" >>"$dir/app/Cargo.toml"
done
# The first ```rust block, its hidden lines shown.
awk '/^```rust/{f=1;next} /^```/{if(f)exit} f' "$readme" | sed -e 's/^# //' -e 's/^#$//' >"$dir/app/src/example.rs"
cat >"$dir/app/src/main.rs" <<'MAIN'
mod example;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    example::example().await
}
MAIN
# The workspace's lock pins the versions it is tested with; its target
# directory spares rebuilding what the features share.
cp "$root/Cargo.lock" "$dir/app/Cargo.lock"
CARGO_TARGET_DIR="$root/target/readme-app" cargo build --quiet --manifest-path "$dir/app/Cargo.toml"
# kube-endpoints exposes no metrics, so an application does not build a
# metrics library for it.
if cargo tree --quiet --offline --manifest-path "$dir/app/Cargo.toml" -e normal -i prometheus-client >/dev/null 2>&1; then
  echo "FAIL: prometheus-client is in the README application's dependencies:"
  cargo tree --offline --manifest-path "$dir/app/Cargo.toml" -e normal -i prometheus-client
  exit 1
fi
echo "ok: an application from kube-endpoints' README compiles, without a metrics library"
