#!/usr/bin/env python3
"""The recorder's own CPU per sample at steady state, for two (or more) pyperf binaries alternated in one run: an A/B
of a change to the recorder (issue #18's "recorder CPU per sample"). Python standard library; needs root and perf.

  bench/recorder_cpu.py NAME=BIN [NAME=BIN ...] [--depth 20] [--reps 4] [--python PY]

One `bench/workloads/work.py busy DEPTH` process runs throughout; each repetition records it with every binary in
turn (`record -F 999 -d 10 -p PID`). The recorder's task-clock (`perf stat -p`, exact, not clock ticks) from 2 s to
8 s into the recording, over that window's share of the samples, is its CPU per sample; medians of the repetitions.
"""
import argparse
import os
import re
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bins", nargs="+", help="NAME=PATH of a pyperf binary")
    ap.add_argument("--depth", default="20")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--python", default=os.environ.get("PYTHON") or os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python"))
    a = ap.parse_args()
    bins = dict(b.split("=", 1) for b in a.bins)
    work = os.path.join(ROOT, "bench", "workloads", "work.py")
    t = subprocess.Popen([a.python, work, "busy", a.depth, str(a.reps * len(bins) * 12 + 30)], stdout=subprocess.DEVNULL)
    time.sleep(1)

    def run(b):
        p = subprocess.Popen([b, "record", "-F", "999", "-d", "10", "-p", str(t.pid), "-o", "/tmp/recorder_cpu.pyp"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(2)
        ps = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock", "-p", str(p.pid), "--", "sleep", "6"],
                            capture_output=True, text=True)
        p.wait()
        n = int(re.search(r"pyperf: [0-9.]+ s, (\d+) samples", p.stderr.read().decode()).group(1))
        ms = float(ps.stderr.strip().splitlines()[-1].split(",")[0])
        return ms * 1e3 / (n * 6 / 10)

    res = {k: [] for k in bins}
    try:
        for _ in range(a.reps):
            for k, b in bins.items():
                res[k].append(run(b))
    finally:
        t.kill()
    for k in bins:
        print("%s: depth %s, recorder CPU per sample %.2f us (median; runs %s)"
              % (k, a.depth, statistics.median(res[k]), ", ".join("%.2f" % x for x in res[k])))


if __name__ == "__main__":
    main()
