#!/usr/bin/env bash
# warpalloc's GPU check: the one command to run on a GPU machine, in the
# folder `cargo xtask device-check` staged (the release `warpalloc` binary,
# the first project's GPU build, this script, baseline.cu and report.py, and
# when it was given Gallatin's
# source, peers/gallatin-bench and peers/vmm_control; with --candidate REV,
# candidate/warpalloc, a second build timed beside this one; no Rust
# toolchain needed).
#
#   OUT=/some/dir ./run.sh
#   BACK=$OUT OUT=/tmp/device-check ./run.sh     (through the device tool:
#   BACK first, so that it takes the tool's $OUT, not the new one)
#
# BACK: a folder that gets exactly four files at the end — device-check.md,
# device-check.json, alloc-free.svg (when drawn) and device-check-raw.tgz
# (every output of OUT) — for a runner that brings back only a few files
# (the device tool: at most 8 from its $OUT). Give the device tool's
# `run` a timeout_s of at least BUDGET + 75 (540 by default): the budget,
# the kill grace of the last step and the report.
#
# Runs, in this order (what issue 20 asks first comes first, so that a run
# short of time loses the least needed steps): the first project (a user's
# program through cudarc), the benchmark cases, the CUDA C++ baseline
# (CUDA's own device malloc with its heap raised to 8 GiB) and the atomics
# ceiling, the peer allocator Gallatin through the same cases (when
# staged), every stress kernel at full scale (8 blocks per SM) in pool and
# RPC modes, lifetimes and churn at 10 and 300 rounds (drift), memcheck on
# the VMM control program (when staged) and compute-sanitizer on the stress
# kernels (synccheck in RPC mode, memcheck in pool mode with no large
# blocks; when compute-sanitizer is on PATH), and the allocator's events
# counted on the GPU (the kernels' events build: scans, locks and walk
# rounds, the simulator's proxies measured); then writes
# $OUT/device-check.json and $OUT/device-check.md.
#
# Every step, and each benchmark case, has its own timeout, cut to what is
# left of a budget of BUDGET seconds (default 465) for the whole script: it
# ends within 8 minutes even if everything hangs (the limits alone add up to
# more; in a normal run only CUDA malloc's slowest case reaches its limit). A
# case with no time left is skipped: its .err says so, then "exit 254".
set -uo pipefail
cd "$(dirname "$0")"
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
# Every output of an earlier run in a reused $OUT would read as this run's
# (a step left out of STEPS, or one that wrote nothing, would report the
# old figures): all of them go first — the files this script writes, and
# none other.
rm -f "$OUT"/gpu.csv "$OUT"/info.txt "$OUT"/first-project.txt "$OUT"/nvcc.err "$OUT"/jit-* \
  "$OUT"/stress-pool.* "$OUT"/stress-rpc.* "$OUT"/drift-* "$OUT"/bench-* "$OUT"/candidate-* \
  "$OUT"/baseline.jsonl "$OUT"/baseline.err "$OUT"/gallatin.jsonl "$OUT"/gallatin.err \
  "$OUT"/vmm-control-* "$OUT"/synccheck-stress.* \
  "$OUT"/memcheck-stress-pool.* "$OUT"/events-* "$OUT"/device-check.json "$OUT"/device-check.md
step() { echo "== $*" >&2; }
# compute-sanitizer: on PATH, else where a CUDA toolkit puts it.
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)

SECONDS=0
BUDGET=${BUDGET:-465}
# STEPS: the steps to run (default all): a shorter check for a GPU session
# that has little device time left, e.g. STEPS="stress bench gallatin".
# `candidate` runs within `bench` (each case right after this build's), so
# it needs `bench` too: STEPS="bench candidate" times a change alone.
STEPS=${STEPS:-"first-project stress drift bench candidate baseline gallatin events memcheck sanitizer"}
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# limited LIMIT CMD...: CMD under `timeout` with LIMIT seconds, or what is left
# of the budget if that is less; 254 without running it when none is left.
limited() {
  local want=$1 left
  shift
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt 1 ]; then
    echo "skipped: run.sh's time budget (${BUDGET} s) is spent" >&2
    return 254
  fi
  [ "$left" -lt "$want" ] && want=$left
  timeout -k 5 "$want" "$@"
}

# The thread counts of every alloc/free case (warpalloc, CUDA malloc,
# Gallatin), so that the report pairs each row; the most of them is also
# the thread count of the mixed and pool cases.
THREADS="10240 102400 1048576"
SIZES="4 64 1024 8192"

step "GPU"
limited 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > "$OUT/gpu.csv" 2>&1
cat "$OUT/gpu.csv" >&2

# With --link-check: a heap links a module loaded through cudarc in its own
# context and refuses one loaded in a second context (`WrongDevice`).
step "warpalloc info"
limited 20 ./warpalloc --gpu info --link-check > "$OUT/info.txt" 2>&1
echo "exit $?" >> "$OUT/info.txt"
cat "$OUT/info.txt" >&2

# The first project (examples/first-project built with `--features gpu`):
# a user's program on GPU 0 through cudarc — a heap attached to cudarc's
# context, a cudarc module linked to it, three allocating kernels on two
# streams; it checks what they wrote and exits non-zero when one is wrong.
if ! want first-project; then
  step "first-project: not in STEPS"
elif [ -x ./first-project ]; then
  step "first-project"
  limited 30 ./first-project > "$OUT/first-project.txt" 2>&1
  echo "exit $?" >> "$OUT/first-project.txt"
else
  step "first-project: none staged"
fi

if want bench; then
# The driver compiles each PTX module when a process first loads it and
# keeps the result in its cache: one small case loads the module first,
# under a limit of its own, so that the first timed case is not cut short
# by the compile (its seconds are the JIT's, recorded).
step "JIT warm-up (bench footprint, 1 024 threads)"
jit_start=$SECONDS
limited 60 ./warpalloc --gpu bench --json --threads 1024 --cases footprint > "$OUT/jit-bench.json" 2> "$OUT/jit-bench.err"
echo "exit $? after $((SECONDS - jit_start)) s" >> "$OUT/jit-bench.err"
step "bench"
# One process per case (alloc-free one per size), each with its own limit:
# a case that runs out of time loses only its own rows (the report names it).
bench_case() {
  name=$1; limit=$2; shift 2
  limited "$limit" ./warpalloc --gpu bench --json --threads "${THREADS// /,}" "$@" > "$OUT/bench-$name.json" 2> "$OUT/bench-$name.err"
  echo "exit $?" >> "$OUT/bench-$name.err"
}
# The candidate build (`cargo xtask device-check --candidate REV`): its
# alloc-free case at each size and its mixed case, each right after this
# build's, so that the two meet the GPU in the same state (the report sets
# them side by side). Not staged, or not in STEPS: nothing.
CANDIDATE=
if [ ! -x ./candidate/warpalloc ]; then
  step "candidate: none staged"
elif ! want candidate; then
  step "candidate: staged but not in STEPS"
else
  CANDIDATE=./candidate/warpalloc
  cp candidate/revision "$OUT/candidate-revision.txt"
  step "candidate: $(cat candidate/revision)"
fi
candidate_case() {
  [ -n "$CANDIDATE" ] || return 0
  name=$1; limit=$2; shift 2
  limited "$limit" "$CANDIDATE" --gpu bench --json --threads "${THREADS// /,}" "$@" > "$OUT/candidate-bench-$name.json" 2> "$OUT/candidate-bench-$name.err"
  echo "exit $?" >> "$OUT/candidate-bench-$name.err"
}
for size in $SIZES; do
  bench_case "alloc-free-$size" 20 --cases alloc-free --sizes "$size"
  candidate_case "alloc-free-$size" 20 --cases alloc-free --sizes "$size"
  bench_case "pool-$size" 15 --cases pool --sizes "$size"
done
for case in mixed rising fragmentation footprint out-of-memory; do
  bench_case "$case" 15 --cases "$case"
  [ "$case" = mixed ] && candidate_case mixed 15 --cases mixed
done
# Warmed: three heaps, five launches (a profile, a warmed-up heap, a spread).
bench_case warmed 25 --cases warmed
# Spill: the same fill under an 8 MiB device limit with host memory past it
# and without (nulls), side by side: what spilling costs in pairs/s.
bench_case spill 30 --cases spill
fi

if want baseline; then
step "baseline"
BASELINE=./baseline
# Staged built (`cargo xtask device-check`, cudart linked statically);
# rebuilt here only when it cannot load its libraries, within 40 s.
if command -v nvcc > /dev/null && { [ ! -x ./baseline ] || ldd ./baseline 2>&1 | grep -q "not found"; }; then
  limited 40 nvcc -O3 -arch=sm_90 -std=c++17 -o baseline-here baseline.cu 2> "$OUT/nvcc.err" && BASELINE=./baseline-here
fi
# One case per process, each with its own limit: the atomics ceiling first,
# then CUDA malloc's cases from the cheapest; a case that runs out of time
# loses only its own row (the report shows it as missing).
: > "$OUT/baseline.jsonl"
: > "$OUT/baseline.err"
baseline_case() {
  limit=$1; shift
  limited "$limit" "$BASELINE" "$@" >> "$OUT/baseline.jsonl" 2>> "$OUT/baseline.err"
  echo "$* exit $?" >> "$OUT/baseline.err"
}
baseline_case 20 ceiling
for threads in $THREADS; do
  for size in $SIZES; do
    baseline_case 10 alloc_free "$threads" "$size"
  done
done
baseline_case 15 mixed
fi

# The peer allocator Gallatin (PPoPP 2024) through the same cases, when
# `cargo xtask device-check` was given its source (GALLATIN_DIR).
if ! want gallatin; then
  step "gallatin: not in STEPS"
elif [ -x ./peers/gallatin-bench ]; then
  step "gallatin"
  : > "$OUT/gallatin.jsonl"
  : > "$OUT/gallatin.err"
  gallatin_case() {
    limited 10 ./peers/gallatin-bench "$@" >> "$OUT/gallatin.jsonl" 2>> "$OUT/gallatin.err"
    echo "$* exit $?" >> "$OUT/gallatin.err"
  }
  for threads in $THREADS; do
    for size in $SIZES; do
      gallatin_case alloc_free "$threads" "$size"
    done
  done
  gallatin_case mixed
else
  step "gallatin: not staged (no peers/gallatin-bench), the report has no Gallatin column"
fi

# Pool mode first: slabs mapped before the launch, no RPC on the slab path
# (and no large blocks here). Then RPC mode, where the host maps memory for
# running kernels (the part no CPU test can vouch for).
if want stress; then
step "stress (pool)"
limited 60 ./warpalloc --gpu stress --pool-slabs 1024 --large-one-in 0 --json > "$OUT/stress-pool.json" 2> "$OUT/stress-pool.err"
echo "exit $?" >> "$OUT/stress-pool.err"
step "stress (rpc)"
limited 75 ./warpalloc --gpu stress --json > "$OUT/stress-rpc.json" 2> "$OUT/stress-rpc.err"
echo "exit $?" >> "$OUT/stress-rpc.err"
fi

# Drift: the kernels whose speed and footprint aged on the first GPU run
# (lifetimes 32x slower at 300 rounds than at 10; churn mapped the whole
# reservation and got nulls), at 10 and at 300 rounds per thread. The
# report pairs them: allocs/s at 300 ÷ at 10 (target ≥ 0.8), nulls, and
# each kernel's peak mapped ÷ the peak of the bytes its threads held.
if want drift; then
for rounds in 10 300; do
  step "drift: stress at $rounds rounds"
  limited 90 ./warpalloc --gpu stress --kernels lifetimes --kernels churn --iterations "$rounds" --json \
    > "$OUT/drift-$rounds.json" 2> "$OUT/drift-$rounds.err"
  echo "exit $?" >> "$OUT/drift-$rounds.err"
done
fi

# memcheck's control: a kernel's first write into a granule mapped before the
# launch (expect no error) and while the kernel runs (memcheck reports one).
if ! want memcheck; then
  step "memcheck control: not in STEPS"
elif [ ! -x ./peers/vmm_control ]; then
  step "memcheck control: not staged (no peers/vmm_control)"
elif [ -z "$SANITIZER" ]; then
  step "memcheck control: no compute-sanitizer"
else
  step "memcheck control (vmm_control)"
  for when in before during; do
    limited 30 "$SANITIZER" --tool memcheck ./peers/vmm_control "$when" > "$OUT/vmm-control-$when.txt" 2>&1
    echo "exit $?" >> "$OUT/vmm-control-$when.txt"
  done
fi

# compute-sanitizer on every stress kernel, at a scale it finishes at
# (sanitizers slow kernels down by orders of magnitude; 64 blocks of 128
# threads, 4 rounds each): synccheck in RPC mode (memory mapped while the
# kernels run, as users run it), memcheck in pool mode with no large blocks
# — every slab mapped before the launch, since memcheck reports a first
# write into memory mapped during a kernel even when it is correct (the
# control above shows it). `size_sweep` and `aligned` ask for large blocks
# whatever `--large-one-in` says (sizes of 1-3 MiB, alignments of 2 and 4
# MiB), which the host maps while the kernel runs: memcheck runs the other
# kernels, with `--pool-fallback` so that `collections` (infallible, not
# run on a capped heap) runs too; 1 024 slabs hold what 8 192 threads of 4
# rounds ask for, so the fallback maps nothing. The slowest steps, each
# limited to 90 s of what is left of the budget (cut, or skipped with exit
# 254, when the steps before took it). Each writes the sanitizer's log, the
# stress run's JSON (it proves warpalloc served the kernels: heap traffic)
# and its exit status.
if ! want sanitizer; then
  step "sanitizer: not in STEPS"
elif [ -n "$SANITIZER" ]; then
  sanitized() {
    name=$1; tool=$2; shift 2
    step "compute-sanitizer $tool: stress $*"
    limited 90 "$SANITIZER" --tool "$tool" --log-file "$OUT/$name.log" \
      ./warpalloc --gpu stress --blocks 64 --threads 128 --iterations 4 --json "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
    echo "exit $?" >> "$OUT/$name.log"
  }
  sanitized synccheck-stress synccheck
  sanitized memcheck-stress-pool memcheck --pool-slabs 1024 --pool-fallback --large-one-in 0 \
    --kernels churn,fill,lifetimes,collections,resize,bad_input
else
  step "sanitizer: no compute-sanitizer (not on PATH, nor in /usr/local/cuda*/bin)"
fi

# Events: the allocator's own counts on the GPU — scans, slot locks, walk
# rounds and looks per warp-pair (per free group with mixed sizes) — from the
# kernels' events build (`bench --events`: a reduction per event, so its
# rates are not the allocator's and the report shows none). The simulator's
# contention test holds its warm launches to 0.1 extra walk rounds and 1.2
# scans per group-malloc; these say whether the GPU's launches do the same.
# Last: the least needed of the steps (a counting build).
if want events; then
# The events build is a module of its own: its compile first, as above.
step "JIT warm-up (events build, bench footprint, 1 024 threads)"
jit_start=$SECONDS
limited 60 ./warpalloc --gpu bench --json --events --threads 1024 --cases footprint > "$OUT/jit-events.json" 2> "$OUT/jit-events.err"
echo "exit $? after $((SECONDS - jit_start)) s" >> "$OUT/jit-events.err"
step "events (the kernels' events build)"
events_case() {
  name=$1; limit=$2; shift 2
  limited "$limit" ./warpalloc --gpu bench --json --events "$@" > "$OUT/events-$name.json" 2> "$OUT/events-$name.err"
  echo "exit $?" >> "$OUT/events-$name.err"
}
for size in 64 8192; do
  events_case "alloc-free-$size" 20 --threads 102400,1048576 --cases alloc-free --sizes "$size"
done
events_case mixed 15 --threads 1048576 --cases mixed
fi

step "report"
status=0
if ! python3 report.py "$OUT"; then
  echo "run.sh: report.py failed: no report of this run (the outputs are in $OUT)" >&2
  status=1
fi
# BACK: the report and every raw output in one archive, four files in all.
if [ -n "${BACK:-}" ]; then
  mkdir -p "$BACK"
  tar -czf "$BACK/device-check-raw.tgz" -C "$OUT" . || status=1
  for f in device-check.md device-check.json alloc-free.svg; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$BACK/"
  done
  echo "run.sh: $(ls "$BACK" | tr '\n' ' ')in $BACK" >&2
fi
[ -f "$OUT/device-check.md" ] && cat "$OUT/device-check.md"
exit $status
