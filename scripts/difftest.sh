#!/usr/bin/env bash
# Differential test: tracegen.py traces through `proxyd replay` and the Go
# reference (shared/reference/seedport); every output line must be identical.
#
#   scripts/difftest.sh                  # quick set (CI): small edge-case traces
#   scripts/difftest.sh --full           # also medium + large (minutes)
#   scripts/difftest.sh --regen-golden   # rewrite tests/golden/k_* from the reference
#
# PROXYD=path/to/proxyd picks the binary (default: target/debug/proxyd, built
# if missing). Without Go it says so and exits 0: the golden tests in
# `cargo test` cover the committed traces either way.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
shared="${PROXYD_SHARED:-$root/../shared}"
work="$(mktemp -d /tmp/proxyd-difftest.XXXXXX)"
trap 'rm -rf "$work"' EXIT

mode="${1:-quick}"
if ! command -v go >/dev/null 2>&1; then
  echo "difftest: skipped: Go is not installed (apt-get install -y golang-go) to build the reference"
  exit 0
fi
(cd "$shared/reference/seedport" && go build -o "$work/seedport" .)
proxyd="${PROXYD:-$root/target/debug/proxyd}"
[ -x "$proxyd" ] || (cd "$root" && cargo build -q -p proxyd)
gen() { python3 "$shared/bench/tracegen.py" "$@"; }

if [ "$mode" = "--regen-golden" ]; then
  g="$root/tests/golden"
  gen --profile small --services 6 --endpoints-per-service 3 --churn 150 --sync-every 15 --seed 7 -o "$g/k_edge_generated.jsonl"
  "$work/seedport" --node-name node-1 --quiet "$g/k_edge_generated.jsonl" > "$g/k_edge_generated.expected"
  "$work/seedport" --node-name node-1 --ip-family ipv6 --quiet "$g/k_edge_generated.jsonl" > "$g/k_edge_generated.v6.expected"
  echo "difftest: regenerated tests/golden/k_edge_generated*"
  exit 0
fi

pass=0; fail=0
compare() { # name trace flags...
  local name="$1" trace="$2"; shift 2
  "$work/seedport" --quiet "$@" "$trace" > "$work/go.out"
  "$proxyd" replay --quiet "$@" "$trace" > "$work/rs.out"
  if cmp -s "$work/go.out" "$work/rs.out"; then
    pass=$((pass + 1)); echo "PASS $name ($(wc -l < "$work/go.out") lines)"
  else
    fail=$((fail + 1)); echo "FAIL $name"
    python3 - "$work/go.out" "$work/rs.out" <<'PY'
import json, sys
a, b = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read().splitlines()
print(f"  reference {len(a)} lines, proxyd {len(b)} lines")
for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
        jx, jy = json.loads(x), json.loads(y)
        for k in jx:
            if jx[k] != jy.get(k):
                print(f"  line {i + 1}, field {k}: reference {json.dumps(jx[k])[:400]}")
                print(f"  line {i + 1}, field {k}: proxyd    {json.dumps(jy.get(k))[:400]}")
        break
PY
  fi
}

for seed in 1 2 3 4 5; do
  for size in 2 3 5 100; do
    node="node-$((seed % 3))"
    t="$work/small-$seed-$size.jsonl"
    gen --profile small --seed "$seed" --slice-size "$size" --local-node "$node" -o "$t" 2>/dev/null
    for fam in ipv4 ipv6; do
      compare "small seed=$seed slice-size=$size node=$node $fam" "$t" --node-name "$node" --ip-family "$fam"
    done
    compare "small seed=$seed slice-size=$size no node" "$t"
  done
done
if [ "$mode" = "--full" ]; then
  for p in medium large; do
    gen --profile "$p" -o "$work/$p.jsonl" 2>/dev/null
    compare "$p node-1" "$work/$p.jsonl" --node-name node-1
    compare "$p node-1 ipv6" "$work/$p.jsonl" --node-name node-1 --ip-family ipv6
    rm -f "$work/$p.jsonl"
  done
fi
echo "difftest: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
