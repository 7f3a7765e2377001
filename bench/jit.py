#!/usr/bin/env python3
"""What `pyperf record --native` costs and how complete its stacks are through JIT code and perf trampolines
(issue #32), on Debian sid's 3.15 (the sid root of scripts/setup). Python standard library only; needs root.

  bench/jit.py [--pyperf BIN] [--root DIR] [--reps N] [--secs S] [--write]

The target is testdata/workloads/split.py (pure Python loops, which the JIT compiles), pinned to the last CPU; the
recorder runs pinned to CPU 0 at 1000 Hz for S seconds, attached with -p. Configurations: the JIT off, the JIT on
(`PYTHON_JIT=1`: executors registered with their unwind rules, read by pyperf), and `-X perf` (trampolines). Per
configuration, medians of N repetitions of: the recorder's CPU time per sample at steady state (2 s in to 1 s
before the end) and over the whole run, the share of unwinds that reached the program's entry
(native_unwind_complete / native_unwinds) and of samples merged, the JIT list reads.

Prints a markdown report, writes it to bench/out/jit.md; with --write also into bench/RESULTS.md.
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import tempfile
import time

from common import NCPU, loadavg, logger, median, pin, write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## JIT code and perf trampolines in native stacks (issue #32)"
BEGIN = "<!-- bench/jit.py: begin (generated, replaced by the next `bench/jit.py --write`) -->"
END = "<!-- bench/jit.py: end -->"
TARGET_CPU = str(NCPU - 1)
TOOL_CPU = "0"
CONFIGS = [("JIT off", {"PYTHON_JIT": "0"}, []), ("JIT on", {"PYTHON_JIT": "1"}, []),
           ("-X perf", {"PYTHON_JIT": "0"}, ["-X", "perf"])]

log = logger("jit")


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return None


def counter(text, name):
    m = re.search(r"\b%s (\d+)" % re.escape(name), text)
    return int(m.group(1)) if m else None


def one(a, env, args):
    script = os.path.join(a.root, "tmp", "pyperf-bench-split.py")
    shutil.copy(os.path.join(ROOT, "testdata", "workloads", "split.py"), script)
    target = subprocess.Popen(pin(TARGET_CPU, ["chroot", a.root, "python3.15"] + args +
                                  ["/tmp/pyperf-bench-split.py", "1000"]),
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ, **env))
    assert target.stdout.readline().startswith("ready")
    time.sleep(1.0)
    tmp = tempfile.mkdtemp(prefix="pyperf-jit-bench-")
    out = os.path.join(tmp, "out.pyp")
    cmd = [a.pyperf, "record", "--native", "-F", "1000", "-d", str(a.secs), "-p", str(target.pid), "-o", out]
    p = subprocess.Popen(pin(TOOL_CPU, cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(2.0)
    t0 = cpu_ticks(p.pid)
    time.sleep(a.secs - 3.0)
    t1 = cpu_ticks(p.pid)
    text = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    target.kill()
    target.wait()
    r = {}
    if os.waitstatus_to_exitcode(status) != 0:
        log("pyperf failed: %s" % text[-2000:])
        return None
    report = subprocess.run([a.pyperf, "report", "-i", out], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True).stdout
    m = re.search(r"^  samples\s+(\d+)", report, re.M)
    r["samples"] = int(m.group(1)) if m else None
    hz = os.sysconf("SC_CLK_TCK")
    r["steady_us"] = ((t1 - t0) / hz) / (r["samples"] * (a.secs - 3.0) / a.secs) * 1e6 \
        if r["samples"] and t0 is not None and t1 is not None else None
    r["whole_us"] = (usage.ru_utime + usage.ru_stime) / r["samples"] * 1e6 if r["samples"] else None
    unwinds = counter(report, "native_unwinds") or 0
    r["complete"] = (counter(report, "native_unwind_complete") or 0) / unwinds if unwinds else None
    merged = counter(report, "native_merged") or 0
    r["merged"] = merged / r["samples"] if r["samples"] else None
    for k in ["native_jit_frames", "native_jit_stops", "native_jit_list_reads", "native_perf_trampolines"]:
        r[k] = counter(report, k)
    r["rss_mib"] = usage.ru_maxrss / 1024
    shutil.rmtree(tmp, ignore_errors=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pyperf", default=os.path.join(ROOT, "target", "release", "pyperf"))
    ap.add_argument("--root", default=os.environ.get("PYPERF_SID_ROOT", "/srv/pyperf-sid"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--secs", type=float, default=8.0)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    results = {}
    for rep in range(a.reps):
        for name, env, args in CONFIGS:
            log("rep %d: %s" % (rep + 1, name))
            r = one(a, env, args)
            if r:
                results.setdefault(name, []).append(r)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["Run of %s, `bench/jit.py --reps %d --secs %g`, %d CPUs, load %s, sid python3.15, %s." %
             (now, a.reps, a.secs, NCPU, loadavg(), a.pyperf), "",
             "| target | samples | recorder CPU us / sample, steady | whole run | unwinds complete | samples merged "
             "| JIT frames | JIT stops | JIT list reads | trampolines | peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f: "-" if v is None else f % v
    for name, _, _ in CONFIGS:
        rs = results.get(name, [])
        med = lambda k: median([r[k] for r in rs if r.get(k) is not None]) if rs else None
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, fmt(med("samples"), "%d"), fmt(med("steady_us"), "%.1f"), fmt(med("whole_us"), "%.1f"),
            fmt(med("complete") and 100 * med("complete"), "%.1f%%"), fmt(med("merged") and 100 * med("merged"),
                                                                        "%.1f%%"),
            fmt(med("native_jit_frames"), "%d"), fmt(med("native_jit_stops"), "%d"),
            fmt(med("native_jit_list_reads"), "%d"), fmt(med("native_perf_trampolines"), "%d"),
            fmt(med("rss_mib"), "%.1f")))
    lines += ["", "Medians of %d runs. Steady: the recorder's CPU between 2 s in and 1 s before the end (clock ticks "
              "of 10 ms), per sample of that window." % a.reps, ""]
    body = "\n".join(lines) + "\n"
    print(body)
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "out", "jit.md"), "w") as f:
        f.write(body)
    if a.write:
        log("wrote %s" % write_section(SECTION, BEGIN, END, "\n" + body))


if __name__ == "__main__":
    main()
