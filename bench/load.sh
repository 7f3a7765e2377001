#!/usr/bin/env bash
# The recorder under load (issue 7): PROCS Python processes x THREADS busy threads, sampled at HZ per CPU for
# LOAD_SECONDS (default 16 x 4 at 1 kHz for 60 s; the CI test runs 8 x 4 for 10 s). Runs the load test of
# tests/faults.rs with those sizes on a release build and prints its figures: samples, lost samples, the
# recorder's peak RSS (getrusage of the child) and RSS while recording (VmRSS every 0.5 s), its CPU time, the file.
# Needs root. Results: bench/RESULTS.md, "Reliability and load".
set -euo pipefail
cd "$(dirname "$0")/.."
PYPERF_LOAD_PROCS="${PROCS:-16}" PYPERF_LOAD_THREADS="${THREADS:-4}" PYPERF_LOAD_SECONDS="${LOAD_SECONDS:-60}" \
PYPERF_LOAD_HZ="${HZ:-1000}" \
  cargo test --release --locked --test faults -- --exact load_many_busy_threads_at_1khz --nocapture 2>&1 |
  grep -E '^load:|^test result|panicked|assert'
