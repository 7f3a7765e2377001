#!/usr/bin/env bash
# pyperf against py-spy (and perf) on the same workloads, in one run: cost per sample, target slowdown, highest
# rate without loss, file size, report speed, accuracy; plus the in-kernel interning variant (issue 3).
# See bench/README.md. Needs root. Installs what it needs: linux-perf (apt), py-spy (PyPI, in a virtualenv
# under bench/out/), and builds the release binary and the bench-only BPF variant.
#
# Usage: bench/run.sh [--quick] [--reps N] [--only cost,slowdown,toggle,rates,size,report,accuracy] [--write]
#   --quick   short runs, one repetition (checks the harness; about 3 minutes)
#   --write   also put the results into bench/RESULTS.md ("Profiler comparison")
#   --only offcpu            bench/offcpu.py instead (issue #14; it builds pyperf itself)
#   --only round2 [args]     bench/round2.py instead (issue #18), on the release build copied to bench/out/bin/pyperf;
#                            args are its own: --pyperf-before BIN --before-label TEXT, --quick, --reps N,
#                            --only startup,bpf,..., --write
# Environment: PYTHON (target interpreter; default pyenv 3.11.7, else python3), PYSPY_VERSION (default 0.4.*).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/bench/out"
mkdir -p "$out/bin"

if [ "$(id -u)" != 0 ]; then
  echo "bench/run.sh: needs root (BPF, perf events, py-spy attaching to other processes)" >&2
  exit 1
fi
if [[ " $* " == *" --only offcpu "* || " $* " == *" --only=offcpu "* ]]; then exec python3 "$root/bench/offcpu.py" "$@"; fi  # issue #14: bench/offcpu.py alone (it builds pyperf itself)

if ! command -v perf >/dev/null 2>&1; then
  echo "== installing linux-perf" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
fi

if [ ! -x "$out/venv/bin/py-spy" ]; then
  echo "== installing py-spy into $out/venv" >&2
  if ! python3 -m venv "$out/venv" 2>/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$out/venv"
    python3 -m venv "$out/venv"
  fi
  "$out/venv/bin/pip" install -q "py-spy==${PYSPY_VERSION:-0.4.*}"
fi

py="${PYTHON:-}"
if [ -z "$py" ]; then
  py="$(pyenv root 2>/dev/null || echo /root/.pyenv)/versions/3.11.7/bin/python3.11"
  [ -x "$py" ] || py=$(command -v python3)
fi
# sizeof(PyASCIIObject) of the target Python, for the interning variant's string reads.
str_off=$("$py" -c 'import sys; print(40 if sys.version_info >= (3, 12) else 48)')

echo "== building pyperf (release)" >&2
cargo build --release --locked --bin pyperf >&2
# Copies: other work in this tree may rebuild target/release while the benchmark runs.
cp target/release/pyperf "$out/bin/pyperf"
if [[ " $* " == *" --only round2 "* || " $* " == *" --only=round2 "* ]]; then  # issue #18: bench/round2.py alone
  args=()  # the arguments without `--only round2` (round2.py has an --only of its own)
  prev=
  for x in "$@"; do
    if [ "$x" = --only=round2 ]; then prev=; continue; fi
    if [ "$prev" = --only ] && [ "$x" = round2 ]; then unset 'args[${#args[@]}-1]'; prev=; continue; fi
    args+=("$x")
    prev=$x
  done
  exec python3 "$root/bench/round2.py" --pyperf "$out/bin/pyperf" --py-spy "$out/venv/bin/py-spy" \
    --perf "$(command -v perf)" --python "$py" --out "$out" ${args[@]+"${args[@]}"}
fi
echo "== building the bench-only in-kernel interning variant (own target directory)" >&2
PYPERF_BPF_CFLAGS="-DPYPERF_BENCH_INTERN -DPYPERF_BENCH_STR_OFF=$str_off" CARGO_TARGET_DIR="$root/target/bench-intern" \
  cargo build --release --locked --bin pyperf >&2
cp target/bench-intern/release/pyperf "$out/bin/pyperf-intern"

exec python3 "$root/bench/bench.py" --pyperf "$out/bin/pyperf" --pyperf-intern "$out/bin/pyperf-intern" \
  --py-spy "$out/venv/bin/py-spy" --perf "$(command -v perf)" --python "$py" --out "$out" "$@"
