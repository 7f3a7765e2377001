#!/usr/bin/env bash
# Where the BPF program's time goes, per section of a target sample (bench-only build with -DPYPERF_BENCH_PROFILE:
# one clock read per section, so the sum is a little above the shipped program's run time).
# Usage: bench/profile-bpf.sh [DEPTH ...]   (default 20 200; root; builds into target/bench-intern)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-$(pyenv root 2>/dev/null || echo /root/.pyenv)/versions/3.11.7/bin/python3.11}"
mkdir -p bench/out/bin
PYPERF_BPF_CFLAGS="-DPYPERF_BENCH_PROFILE" CARGO_TARGET_DIR=target/bench-intern \
  cargo build --release --locked --bin pyperf >&2
cp target/bench-intern/release/pyperf bench/out/bin/pyperf-profile
names=("header, comm" "thread state" "GIL, states" "leaf frame ptr" "frame walk" "ring buffer")
for depth in "${@:-20 200}"; do
  for d in $depth; do
    "$py" bench/workloads/work.py busy "$d" 20 >/dev/null &
    wl=$!
    sleep 0.3
    bench/out/bin/pyperf-profile record -F 1000 -d 4 -p "$wl" -o bench/out/tmp-profile.pyp 2>/dev/null &
    rec=$!
    sleep 3.5
    # The .bss of this program (other pyperf instances may run): the one with prof_samples.
    for id in $(bpftool -j map show | python3 -c '
import json, sys
ms = [m for m in json.load(sys.stdin) if m.get("name", "").endswith(".bss") and m.get("name", "").startswith("pyperf")]
print(" ".join(str(m["id"]) for m in reversed(ms)))'); do
      bpftool -j map dump id "$id" > bench/out/tmp-profile.json
      grep -q prof_samples bench/out/tmp-profile.json && break
    done
    wait "$rec"
    kill "$wl" 2>/dev/null || true
    wait "$wl" 2>/dev/null || true
    python3 - "$d" "${names[@]}" <<'PY'
import json, sys
depth, names = sys.argv[1], sys.argv[2:]
v = json.load(open("bench/out/tmp-profile.json"))[0]["formatted"]["value"]
vals = {}
for e in v[".bss"]:
    vals.update(e)
n = vals["prof_samples"]
ns = vals["prof_ns"]
total = sum(ns)
print("depth %s: %d samples, %.0f ns per sample (with %d clock reads)" % (depth, n, total / n, len(names)))
for name, t in zip(names, ns):
    print("  %-16s %6.0f ns  %4.1f%%" % (name, t / n, 100.0 * t / total))
c = vals.get("prof_cnt", [0] * 8)
if c[0]:
    print("  window reads: %.2f per sample (%.0f ns each), %.2f failed, %.2f of one frame, %.2f from a chunk's start"
          % (c[0] / n, c[4] / c[0], c[1] / n, c[2] / n, c[3] / n))
if c[5]:
    print("  frames the fast way: %.1f per sample" % (c[5] / n))
PY
  done
done
