#!/usr/bin/env bash
# Report speed: folded export vs plain zstd decompression of a 10-million-sample recording.
# Usage: bench/report/run.sh [--samples N] [--reps N] [--regen]     (see README.md beside this script)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo run --release --locked -q -p pyperf-report --example bench_report -- "$@"
