#!/usr/bin/env bash
# What recording asyncio tasks' run roots (#31) costs the BPF program per sample, with the process's task tracking
# off and on: tests/coro_roots.rs's bench_run_roots_cost (release build), which loads two samplers on one target at
# once, tracking off in one and on in the other, at 997 and 1009 Hz (swapped every repetition: ab-bpf.sh's method,
# since this machine's speed drifts too much for runs one after the other), and reports the kernel's run time of
# each program over its samples (bpf_stats); on an asyncio stack (bench/workloads/coro.py: the loop's frames, then a
# task's coroutine awaiting a chain of coroutines, the leaf burning the CPU) and a plain one (work.py) of DEPTH
# frames in all, pinned to the last CPU (the samplers to CPU 0). Also the ring's bytes per sample (168-byte header
# since #31, 120 before).
# Usage: bench/tasks-bpf.sh [DEPTH [REPS [SECONDS [PYTHON...]]]]   (root; defaults 20 frames, 12 repetitions of
# 3 s, pyenv's 3.11.7; PYTHON: names of testdata/interpreters, e.g. 3.12.1 sid-3.14)
set -euo pipefail
cd "$(dirname "$0")/.."
depth=${1:-20} reps=${2:-12} secs=${3:-3}
shift $(($# < 3 ? $# : 3))
pythons=("${@:-3.11.7}")
cargo test --release --locked -p pyperf --test coro_roots --no-run >&2
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for py in "${pythons[@]}"; do
  PYPERF_BENCH_PYTHON="$py" PYPERF_BENCH_DEPTH="$depth" PYPERF_BENCH_REPS="$reps" PYPERF_BENCH_SECS="$secs" \
    cargo test --release --locked -p pyperf --test coro_roots -- --ignored --exact bench_run_roots_cost \
    --nocapture 2>&1 | grep -E '^(RESULT|coroutine|plain)'
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
