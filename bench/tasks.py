#!/usr/bin/env python3
"""The user-space cost of the asyncio task view (#31) with 1,000 live tasks: the recorder's CPU (`record --off-cpu`)
with the sweep of suspended tasks at its default (10 Hz, spaced to stay under 1% of a CPU), at a fixed `--rate`
(`--async-rate`, not spaced), and without it (`--async-rate 0`), alternated in one run; and the sweep's own time from
the trailer (`task_sweep_us`). Python standard library; needs root and a release build.

  bench/tasks.py [--bin target/release/pyperf] [--python PY] [--tasks 1000] [--rate 10] [--reps 4] [--seconds 10]

One `bench/workloads/tasks_1000.py` process runs throughout (1,000 tasks: 250 request chains of four, each waiting
in a three-deep coroutine chain, and one task using a little CPU). Each repetition records it for `--seconds` with
the sweep on and off, in alternating order. The recorder's CPU is its utime + stime (/proc/PID/stat, clock ticks)
over the recording; the share of one CPU is that over the wall time. Medians of the repetitions.
"""
import argparse
import os
import subprocess
import tempfile
import time

from common import loadavg, median

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / TICK


def record(binary, pid, extra, seconds, out):
    p = subprocess.Popen(
        [binary, "record", "-p", str(pid), "--off-cpu", *extra, "-d", str(seconds), "-o", out],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    t0 = time.monotonic()
    last = 0.0
    while p.poll() is None:
        try:
            last = cpu_s(p.pid)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
        time.sleep(0.05)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode()
    if p.returncode != 0:
        raise SystemExit(f"record failed: {err}")
    return last, wall


def counters(binary, path):
    text = subprocess.run([binary, "report", "-i", path], capture_output=True, text=True, check=True).stdout
    line = next(l for l in text.splitlines() if l.strip().startswith("counters"))
    out = {}
    for kv in line.split("counters", 1)[1].split(","):
        k, _, v = kv.strip().rpartition(" ")
        if v.isdigit():
            out[k] = int(v)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "pyperf"))
    ap.add_argument("--python", default=os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3"))
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=10)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    work = os.path.join(ROOT, "bench", "workloads", "tasks_1000.py")
    w = subprocess.Popen([a.python, work, str(a.tasks)], stdout=subprocess.PIPE, text=True)
    ready = w.stdout.readline().split()
    print(f"workload: {a.python} {ready[1] if len(ready) > 1 else '?'} tasks; load {loadavg()}")
    configs = {"default": [], f"{a.rate} Hz": ["--async-rate", str(a.rate)], "no sweep": ["--async-rate", "0"]}
    cpu = {k: [] for k in configs}
    size = {k: [] for k in configs}
    sweep = {k: [] for k in configs}
    rate = {k: [] for k in configs}
    waits = {k: [] for k in configs}
    try:
        with tempfile.TemporaryDirectory() as d:
            for rep in range(a.reps):
                names = list(configs)
                if rep % 2:
                    names.reverse()
                for k in names:
                    out = os.path.join(d, f"r{rep}-{len(cpu[k])}-{k.replace(' ', '')}.pyp")
                    c, wall = record(a.bin, w.pid, configs[k], a.seconds, out)
                    cpu[k].append(c / wall)
                    size[k].append(os.path.getsize(out) / wall)
                    n = counters(a.bin, out)
                    sweeps = n.get("task_sweeps", 0)
                    sweep[k].append(n.get("task_sweep_us", 0) / sweeps if sweeps else None)
                    rate[k].append(sweeps / a.seconds)
                    waits[k].append(n.get("task_waits", 0) / sweeps if sweeps else None)
    finally:
        w.kill()
    print(f"record --off-cpu of {a.tasks} tasks, medians of {a.reps} x {a.seconds:.0f} s:")
    print("| sweep | recorder CPU (share of one CPU) | sweeps/s | one sweep (wall) | waits written a sweep | file |")
    print("|---|---|---|---|---|---|")
    for k in configs:
        one = median(sweep[k])
        print(f"| {k} | {100 * median(cpu[k]):.2f}% | {median(rate[k]):.1f} | "
              f"{'-' if one is None else f'{one / 1000:.2f} ms'} | {median(waits[k]) or '-'} | "
              f"{median(size[k]) / 1024:.1f} KiB/s |")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
