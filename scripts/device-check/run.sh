#!/usr/bin/env bash
# warpalloc's GPU check: the one command to run on a GPU machine, in the
# folder `cargo xtask device-check` staged (the release `warpalloc` binary,
# this script, baseline.cu and report.py; no Rust toolchain needed).
#
#   OUT=/some/dir ./run.sh
#
# Runs every stress kernel at full scale (8 blocks per SM) in RPC and pool
# modes, the benchmark cases, the CUDA C++ baseline (CUDA's own device malloc
# with its heap raised to 8 GiB) and the atomics ceiling, then writes
# $OUT/device-check.json and $OUT/device-check.md. Each step, and each
# benchmark case, has a timeout: at most about 8 minutes in all, usually far
# less.
set -uo pipefail
cd "$(dirname "$0")"
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
step() { echo "== $*" >&2; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > "$OUT/gpu.csv" 2>&1
cat "$OUT/gpu.csv" >&2

step "warpalloc info"
timeout 20 ./warpalloc --gpu info > "$OUT/info.txt" 2>&1
cat "$OUT/info.txt" >&2

# Pool mode first: slabs mapped before the launch, no RPC on the slab path
# (and no large blocks here). Then RPC mode, where the host maps memory for
# running kernels (the part no CPU test can vouch for).
step "stress (pool)"
timeout 60 ./warpalloc --gpu stress --pool-slabs 1024 --large-one-in 0 --json > "$OUT/stress-pool.json" 2> "$OUT/stress-pool.err"
echo "exit $?" >> "$OUT/stress-pool.err"
step "stress (rpc)"
timeout 75 ./warpalloc --gpu stress --json > "$OUT/stress-rpc.json" 2> "$OUT/stress-rpc.err"
echo "exit $?" >> "$OUT/stress-rpc.err"

step "bench"
# One process per case (alloc-free one per size), each with its own limit:
# a case that runs out of time loses only its own rows (the report names it).
bench_case() {
  name=$1; limit=$2; shift 2
  timeout "$limit" ./warpalloc --gpu bench --json "$@" > "$OUT/bench-$name.json" 2> "$OUT/bench-$name.err"
  echo "exit $?" >> "$OUT/bench-$name.err"
}
for size in 4 64 1024 8192; do
  bench_case "alloc-free-$size" 20 --cases alloc-free --sizes "$size"
done
for case in pool mixed fragmentation footprint out-of-memory; do
  bench_case "$case" 15 --cases "$case"
done

step "baseline"
BASELINE=./baseline
if command -v nvcc > /dev/null; then
  nvcc -O3 -arch=sm_90 -std=c++17 -o baseline-here baseline.cu 2> "$OUT/nvcc.err" && BASELINE=./baseline-here
fi
# One case per process, each with its own limit: the atomics ceiling first,
# then CUDA malloc's cases from the cheapest; a case that runs out of time
# loses only its own row (the report shows it as missing).
: > "$OUT/baseline.jsonl"
: > "$OUT/baseline.err"
baseline_case() {
  limit=$1; shift
  timeout "$limit" "$BASELINE" "$@" >> "$OUT/baseline.jsonl" 2>> "$OUT/baseline.err"
  echo "$* exit $?" >> "$OUT/baseline.err"
}
baseline_case 20 ceiling
for threads in 10240 102400 1048576; do
  for size in 4 64 1024 8192; do
    baseline_case 10 alloc_free "$threads" "$size"
  done
done
baseline_case 15 mixed

step "report"
python3 report.py "$OUT"
cat "$OUT/device-check.md"
