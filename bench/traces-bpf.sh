#!/usr/bin/env bash
# The BPF cost of reading the OpenTelemetry span of each sample (docs/traces.md): A/B of two pyperf builds (A without
# trace reading, B with), both recording the same process at once (as bench/ab-bpf.sh: 997 and 1009 Hz, each
# repetition on the same machine), on testdata/workloads/traced.py (asyncio requests in spans, the SDK from
# target/otel-site: scripts/setup) and on bench/workloads/work.py (no SDK: what the reading costs a process that does
# not trace). Usage: bench/traces-bpf.sh A B [REPS [SECONDS]]   (root; defaults 10 repetitions of 3 s)
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 reps=${3:-10} secs=${4:-3}
py="${PYTHON:-$(pyenv root 2>/dev/null || echo /root/.pyenv)/versions/3.12.1/bin/python3.12}"
mkdir -p bench/out
ab() {
  local wl=$1
  for _ in $(seq "$reps"); do
    taskset -c 0 "$a" record -F 997 -d "$secs" --bpf-stats -p "$wl" -o bench/out/tr-a.pyp >bench/out/tr-a.log 2>&1 &
    local pa=$!
    taskset -c 0 "$b" record -F 1009 -d "$secs" --bpf-stats -p "$wl" -o bench/out/tr-b.pyp >bench/out/tr-b.log 2>&1 &
    local pb=$!
    wait "$pa" "$pb"
    echo "$(grep -o '[0-9.]* ns per target sample' bench/out/tr-a.log | cut -d' ' -f1)" \
         "$(grep -o '[0-9.]* ns per target sample' bench/out/tr-b.log | cut -d' ' -f1)"
  done | python3 -c "
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if len(l.split()) == 2]
if not rows:
    sys.exit('no measurement (see bench/out/tr-a.log, tr-b.log)')
print('  B/A per repetition: ' + ' '.join('%.2f' % (b / a) for a, b in rows))
print('  %d repetitions: A %.0f ns, B %.0f ns per sample (medians); B/A %.3f (median)' % (
    len(rows), statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows),
    statistics.median(r[1] / r[0] for r in rows)))
"
}
echo "traced service (asyncio requests in OpenTelemetry spans):"
PYTHONPATH="${PYPERF_OTEL_SITE:-target/otel-site}" taskset -c 1 "$py" testdata/workloads/traced.py asyncio 100000 >/dev/null &
wl=$!
trap 'kill $wl 2>/dev/null || true' EXIT
sleep 2
ab "$wl"
grep -o 'bpf_trace_found [0-9]*\|bpf_trace_unreadable [0-9]*' bench/out/tr-b.pyp >/dev/null 2>&1 || true
kill "$wl" 2>/dev/null || true
echo "no SDK (work.py busy 50):"
taskset -c 1 "$py" bench/workloads/work.py busy 50 3600 >/dev/null &
wl=$!
sleep 1
ab "$wl"
