#!/usr/bin/env bash
# Recorder cost and throughput on one busy Python process (issue 3's measurements).
# For each rate: samples/s achieved, BPF run time per sample (kernel bpf_stats), bytes per sample in the file.
# Usage: bench/record-rates.sh [SECONDS] [PYTHON]     (root; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-5}"
py="${2:-$(pyenv root 2>/dev/null || echo /root/.pyenv)/versions/3.11.7/bin/python3.11}"
cargo build --release --locked --bin pyperf >/dev/null 2>&1
out=$(mktemp -d)
trap 'rm -rf "$out"; kill $wl 2>/dev/null || true' EXIT
"$py" testdata/workloads/split.py $((secs * 3 + 10)) >/dev/null &
wl=$!
sleep 0.5
printf '| rate (Hz) | samples | samples/s | lost | BPF ns/run | BPF ns/target sample | bytes/sample |\n|---|---|---|---|---|---|---|\n'
for f in 99 999 9999; do
  log="$out/log.$f"
  ./target/release/pyperf record -F "$f" -d "$secs" --bpf-stats -p "$wl" -o "$out/r$f.pyp" 2>"$log"
  samples=$(sed -nE 's/^pyperf: [0-9.]+ s, ([0-9]+) samples.*/\1/p' "$log")
  lost=$(sed -nE 's/.* samples, ([0-9]+) lost.*/\1/p' "$log")
  per_run=$(sed -nE 's/.*runs, ([0-9]+) ns per run.*/\1/p' "$log")
  per_sample=$(sed -nE 's/.* ([0-9]+) ns per target sample.*/\1/p' "$log")
  bps=$(sed -nE 's/.*, ([0-9.]+) bytes\/sample.*/\1/p' "$log")
  rate=$(awk -v s="$samples" -v d="$secs" 'BEGIN { printf "%.0f", s / d }')
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$f" "$samples" "$rate" "$lost" "$per_run" "$per_sample" "$bps"
done
