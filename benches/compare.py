#!/usr/bin/env python3
"""Side-by-side replay comparison: proxyd vs the Go reference (seedport).

Runs `proxyd replay --final-only --timing` and `seedport -final-only -timing`
on the same trace, alternating between the two (so machine noise hits both
alike), checks that their final lines are identical, and prints the median
of each phase and the ratios the issues set targets for.

    python3 benches/compare.py                      # large profile, 3 runs each
    python3 benches/compare.py --profile medium --runs 5
    python3 benches/compare.py --trace my.jsonl --node-name node-7
    python3 benches/compare.py --proxyd /tmp/proxyd-old   # an A/B: another build

Needs Go (apt-get install -y golang-go) to build the reference; exits 2 when
it is missing. Wall time and peak RSS come from the processes themselves
(wall measured around each run, VmHWM from the timing line).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.environ.get("PROXYD_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))


def build(args):
    if not shutil.which("go"):
        sys.exit("compare: Go is not installed (apt-get install -y golang-go); cannot build the reference")
    ref = os.path.join(SHARED, "reference", "seedport")
    out = os.path.join(args.workdir, "seedport")
    subprocess.run(["go", "build", "-o", out, "."], cwd=ref, check=True)
    if args.proxyd:
        return out, args.proxyd
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "proxyd"], cwd=ROOT, check=True)
    return out, os.path.join(ROOT, "target", "release", "proxyd")


def trace_path(args):
    if args.trace:
        return args.trace
    path = os.path.join(args.workdir, f"{args.profile}.jsonl")
    if not os.path.exists(path):
        gen = os.path.join(SHARED, "bench", "tracegen.py")
        subprocess.run([sys.executable, gen, "--profile", args.profile, "-o", path], check=True)
    return path


def run(cmd):
    start = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"compare: {cmd[0]} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    timing = json.loads(p.stderr.decode().strip().splitlines()[-1])
    timing["wall_s"] = wall
    return p.stdout, timing


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="large", choices=["small", "medium", "large"])
    ap.add_argument("--trace", help="an existing trace instead of a generated profile")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--node-name", default="node-1")
    ap.add_argument("--workdir", default="/tmp/proxyd-compare")
    ap.add_argument("--proxyd", help="a built proxyd binary to compare (else the workspace's, built first)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    go_bin, rs_bin = build(args)
    trace = trace_path(args)
    go_cmd = [go_bin, "-final-only", "-timing", "-quiet", "-node-name", args.node_name, trace]
    rs_cmd = [rs_bin, "replay", "--final-only", "--timing", "--quiet", "--node-name", args.node_name, trace]

    go_runs, rs_runs = [], []
    for i in range(args.runs):
        go_out, go_t = run(go_cmd)
        rs_out, rs_t = run(rs_cmd)
        if go_out != rs_out:
            sys.exit(f"compare: run {i + 1}: final lines differ")
        go_runs.append(go_t)
        rs_runs.append(rs_t)

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    phases = [("decode_ns", 1e9), ("update_ns", 1e9), ("sync_ns", 1e9), ("wall_s", 1), ("peak_rss_kib", 1024)]
    print(f"trace: {trace} ({os.path.getsize(trace) / 1e6:.0f} MB), {args.runs} runs each, medians; output identical")
    print(f"{'':14}{'go ref':>12}{'proxyd':>12}{'ratio':>10}")
    for key, div in phases:
        g, r = med(go_runs, key) / div, med(rs_runs, key) / div
        unit = "MiB" if key == "peak_rss_kib" else "s"
        print(f"{key:14}{g:>10.3f}{unit:>2}{r:>10.3f}{unit:>2}{g / r if r else float('inf'):>9.1f}x")
    us_go = statistics.median(r["update_ns"] + r["sync_ns"] for r in go_runs)
    us_rs = statistics.median(r["update_ns"] + r["sync_ns"] for r in rs_runs)
    print(f"update+sync: {us_go / us_rs:.1f}x faster; whole process: "
          f"{med(go_runs, 'wall_s') / med(rs_runs, 'wall_s'):.1f}x faster; peak RSS: "
          f"{med(rs_runs, 'peak_rss_kib') / med(go_runs, 'peak_rss_kib'):.2f}x the reference's")


if __name__ == "__main__":
    main()
