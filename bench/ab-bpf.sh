#!/usr/bin/env bash
# A/B of two pyperf builds' BPF run time per sample, both recording the same target at the same time.
# Usage: bench/ab-bpf.sh A B [DEPTH [REPS [SECONDS]]]   (root; defaults 200 frames, 12 repetitions of 3 s)
#
# This machine's speed drifts by 20-50% within seconds, so builds run one after the other (even alternated) differ
# by that much. Here both sample one `work.py busy DEPTH` process at once, so each repetition sees the same machine;
# at 997 and 1009 Hz, so that neither program runs right after the other (on memory the other just pulled into the
# cache) all the time. Prints each repetition's B/A and the medians; the ratio is what it measures.
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 depth=${3:-200} reps=${4:-12} secs=${5:-3}
py="${PYTHON:-$(pyenv root 2>/dev/null || echo /root/.pyenv)/versions/3.11.7/bin/python3.11}"
mkdir -p bench/out
taskset -c 1 "$py" bench/workloads/work.py busy "$depth" 3600 >/dev/null &
wl=$!
trap 'kill $wl 2>/dev/null || true' EXIT
sleep 1
for _ in $(seq "$reps"); do
  taskset -c 0 "$a" record -F 997 -d "$secs" --bpf-stats -p "$wl" -o bench/out/ab-a.pyp >bench/out/ab-a.log 2>&1 &
  pa=$!
  taskset -c 0 "$b" record -F 1009 -d "$secs" --bpf-stats -p "$wl" -o bench/out/ab-b.pyp >bench/out/ab-b.log 2>&1 &
  pb=$!
  wait "$pa" "$pb"
  echo "$(grep -o '[0-9.]* ns per target sample' bench/out/ab-a.log | cut -d' ' -f1)" \
       "$(grep -o '[0-9.]* ns per target sample' bench/out/ab-b.log | cut -d' ' -f1)"
done | python3 -c "
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if len(l.split()) == 2]
if not rows:
    sys.exit('no measurement (see bench/out/ab-a.log, ab-b.log)')
print('B/A per repetition: ' + ' '.join('%.2f' % (b / a) for a, b in rows))
print('depth $depth, %d repetitions: A %.0f ns, B %.0f ns per sample (medians); B/A %.3f (median)' % (
    len(rows), statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows),
    statistics.median(r[1] / r[0] for r in rows)))
"
