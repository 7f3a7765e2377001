#!/usr/bin/env python3
"""Performance round 2 (issue #18): the issue's targets, pyperf builds and peers side by side in one run. Python 3
standard library only; needs root (BPF, perf events, py-spy and Tachyon attaching to other processes) and perf.

  bench/round2.py --pyperf BIN [--pyperf-before BIN --before-label TEXT] --py-spy BIN [--python PY]
                  [--python2 PY2] [--tachyon-python PY315] [--reps N] [--quick] [--only a,b,c] [--write] [--out DIR]
  bench/run.sh --only round2 [args]    # builds the release binary, installs py-spy, then runs this

Experiments (--only; default all; --quick leaves out slowdown unless it is named):
  startup     wall time of `PY -c pass` bare, under `pyperf record` (each build) and `py-spy record`, and of a
              one-line script under Tachyon (`python3.15 -m profiling.sampling run`) and bare 3.15; pyperf's first
              sample after the command's start (its Firefox Profiler export)
  bpf         BPF run time per sample (`record --bpf-stats`) at 20 and 200 distinct frames, each build
  symbols     samples with `[unknown code ...]` frames and the summary's lost symbols: short scripts and
              testdata/workloads/shortlived.py, on 3.11, 2.7 and 3.15, each build
  recorder    the recorder's CPU per sample at steady state (bench/recorder_cpu.py's method), each build
  interrupts  interrupts per second taken by an idle CPU while the profiler samples a process on another CPU
  peers       py-spy, Tachyon and pyperf on Python 3.15: cost per sample, start-up, accuracy
  slowdown    bench/bench.py --only toggle (experiment 2b) for pyperf, the floor and plain perf
  paired      the target slowdown again, both profilers at once: two identical processes share one CPU, one under
              pyperf -p, the other under plain perf -p (then the other way round); their CPU time per chunk of work

Prints a markdown block and writes it to OUT/round2.md; with --write also into bench/RESULTS.md, between the markers
of the section "Performance round 2 (issue #18)" (the section is appended when the markers are absent).
See bench/README.md.
"""
import argparse
import datetime
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from common import NCPU, loadavg, logger, median, pin, write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "workloads", "work.py")
SHORTLIVED = os.path.join(ROOT, "testdata", "workloads", "shortlived.py")
BENCH = os.path.join(ROOT, "bench", "bench.py")
SID315 = os.path.join(ROOT, "target", "tmp", "sid", "srv_pyperf-sid", "python3.15")
SECTION = "## Performance round 2 (issue #18)"
BEGIN = "<!-- bench/round2.py: begin (generated) -->"
END = "<!-- bench/round2.py: end -->"
EXPERIMENTS = ["startup", "bpf", "symbols", "recorder", "interrupts", "peers", "slowdown", "paired"]

# The helpers bench.py has already (same directory: on sys.path when this script runs).
from bench import fmt, fresh, shares  # noqa: E402

BUSY_CPU = str(NCPU - 1)  # the workloads run pinned here
TOOL_CPU = "0"  # the profilers run pinned here (experiment 5: on BUSY_CPU too, CPU 0 stays idle)

LIVE = []  # every process started (Popen), killed with its process group at exit if still running


log = logger("round2")


def num(pattern, text, conv=float):
    m = re.search(pattern, text or "")
    return conv(m.group(1)) if m else None


def cpu_times():
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def rotate(items, rep):
    k = rep % len(items) if items else 0
    return items[k:] + items[:k]


def killgroup(p):
    """SIGKILL to a process we started and its process group (each is started in its own session), then reap it."""
    if p.returncode is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(10)
        except (subprocess.TimeoutExpired, ChildProcessError):
            pass
    if p in LIVE:
        LIVE.remove(p)


def cleanup():
    for p in list(LIVE):
        killgroup(p)


class Proc:
    """A process started in its own session (so that it and its children can be killed by its id), output to a
    temporary file; `wait` takes its rusage, with a timeout after which the group is killed."""

    def __init__(self, cmd, cpu=None):
        self.cmd = pin(cpu, cmd)
        self.outf = tempfile.TemporaryFile()
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self.outf, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        LIVE.append(self.p)
        self.pid = self.p.pid
        self.text = ""
        self.rc = None
        self.cpu_s = None

    def running(self):
        return self.p.returncode is None and self.p.poll() is None

    def signal(self, sig):
        if self.p.returncode is None:
            try:
                os.kill(self.p.pid, sig)
            except OSError:
                pass

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            try:
                pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (poll)
                pid, status, ru = self.p.pid, 0, None
                break
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except OSError:
                    pass
                pid, status, ru = os.wait4(self.p.pid, 0)
                break
            time.sleep(0.01)
        self.wall_s = time.monotonic() - self.t0
        if ru is not None:
            self.p.returncode = os.waitstatus_to_exitcode(status)
            self.cpu_s = ru.ru_utime + ru.ru_stime
        self.rc = self.p.returncode
        try:  # leftovers of the group (a command pyperf started), if any
            os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.p in LIVE:
            LIVE.remove(self.p)
        self.outf.seek(0)
        self.text = self.outf.read().decode("utf-8", "replace")
        self.outf.close()
        if timed_out:
            self.rc = "timeout"
            log("timed out after %g s: %s" % (timeout, " ".join(self.cmd)))
        return self

    def stop(self, timeout=30):
        """SIGINT (pyperf, perf, py-spy and Tachyon write their output on it), then wait."""
        self.signal(signal.SIGINT)
        return self.wait(timeout)


def call(cmd, timeout, cpu=None):
    return Proc(cmd, cpu).wait(timeout)


class Workload:
    """A target process (bench/workloads/work.py), started pinned and waited for its "ready" line."""

    def __init__(self, python, args, cpu=BUSY_CPU, timeout=60):
        self.p = subprocess.Popen(pin(cpu, [python, WORK] + [str(a) for a in args]), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, universal_newlines=True, start_new_session=True)
        LIVE.append(self.p)
        self.pid = self.p.pid
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        line = self.p.stdout.readline() if r else ""
        if not line.startswith("ready"):
            self.kill()
            raise RuntimeError("workload %s %r did not start: %r" % (python, args, line))

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def result(self, timeout):
        try:
            out, _ = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("workload %d did not finish in %g s" % (self.pid, timeout))
        if self.p in LIVE:
            LIVE.remove(self.p)
        return out

    def kill(self):
        killgroup(self.p)


def wait_file(proc, path, extra, timeout=30):
    """pyperf creates its output once the BPF program is loaded and the targets registered: wait for it, then
    `extra` seconds more."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline and proc.running():
        time.sleep(0.01)
    time.sleep(extra)
    return os.path.exists(path)


def task_clock_ms(perf, pid, secs):
    """CPU time (ms) of all threads of pid over the next secs seconds: `perf stat -e task-clock -p` (exact, not
    clock ticks), as bench/recorder_cpu.py does."""
    r = call([perf, "stat", "-x,", "-e", "task-clock", "-p", str(pid), "--", "sleep", str(secs)], secs + 30)
    for line in r.text.splitlines():
        if ",task-clock" in line:
            try:
                return float(line.split(",")[0])
            except ValueError:
                return None
    return None


def pyperf_summary(text):
    return {
        "samples": num(r"pyperf: [0-9.]+ s, (\d+) samples", text, int),
        "lost_symbols": num(r"(\d+) lost symbols", text, int),
        "bpf": num(r"([0-9.]+) ns per target sample", text),
        "runs": num(r"BPF (\d+) runs, ", text, int),
    }


def folded_counts(lines, needle):
    """(samples, samples whose stack contains needle) of folded lines "a;b;c COUNT"."""
    total = hit = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        if needle in stack:
            hit += int(count)
    return total, hit


def tail(text, n=600):
    return (text or "")[-n:].strip().replace("\n", " | ")


class Env:
    def __init__(self, a):
        self.a = a
        self.builds = [(a.label, a.pyperf)] + ([(a.before_label, a.pyperf_before)] if a.pyperf_before else [])
        self.py = a.python
        self.v = sh("%s -c 'import sys; print(\"%%d.%%d\" %% sys.version_info[:2])'" % self.py) or "?"
        self.py2 = a.python2 if a.python2 and os.access(a.python2, os.X_OK) else None
        self.py315 = a.tachyon_python if a.tachyon_python and os.access(a.tachyon_python, os.X_OK) else None
        if self.py315:
            # The wrapper exits 127 when the sid root is missing.
            r = call([self.py315, "-c", "import profiling.sampling"], 60)
            if r.rc != 0:
                log("3.15 wrapper %s unusable (%s): %s" % (self.py315, r.rc, tail(r.text)))
                self.py315 = None
        self.pyspy = a.py_spy
        self.perf = a.perf
        # Scratch under /tmp: the 3.15 wrapper's chroot sees /tmp (and the repo) at the same paths.
        self.tmp = tempfile.mkdtemp(prefix="round2-", dir="/tmp")

    def f(self, name):
        return fresh(os.path.join(self.tmp, name))


# ---- 1. start-up ----------------------------------------------------------------------------------------------------

IMPORTS = "import json, argparse, email.parser"


def first_sample_ms(binary, path, timeout=60):
    """Min over threads of the first sample's time (ms from the recording's start = the command's spawn), from the
    Firefox Profiler export; None when the recording has no sample."""
    r = call([binary, "report", "-i", path, "--gecko"], timeout)
    if r.rc != 0:
        raise RuntimeError("pyperf report --gecko failed: %s" % tail(r.text))
    d, _ = json.JSONDecoder().raw_decode(r.text[r.text.index("{"):])
    firsts = [t["samples"]["timeDeltas"][0] for t in d.get("threads", [])
              if t.get("samples", {}).get("length") and t["samples"].get("timeDeltas")]
    return min(firsts) if firsts else None


def exp_startup(e, a):
    """Wall time (time.monotonic around the whole run) of the bare command and of it under each profiler, tools
    interleaved in rotating order in each repetition; pyperf's first-sample latency."""
    script = os.path.join(e.tmp, "pass.py")
    with open(script, "w") as f:
        f.write("pass\n")
    tools = [("bare", e.v, lambda: [e.py, "-c", "pass"], None)]
    for label, binary in e.builds:
        tools.append(("pyperf " + label, e.v, (lambda b: lambda: [b, "record", "-F", "999", "-o",
                                                                       e.f("st.pyp"), "--", e.py, "-c", "pass"])(binary),
                      None))
    tools.append(("py-spy", e.v, lambda: [e.pyspy, "record", "-r", "999", "-f", "raw", "-o", e.f("st.txt"), "--",
                                             e.py, "-c", "pass"], None))
    if e.py315:
        tools.append(("bare", "3.15", lambda: [e.py315, script], None))
        tools.append(("Tachyon", "3.15", lambda: [e.py315, "-m", "profiling.sampling", "run", "-r", "999",
                                                  "--collapsed", "-o", e.f("st-tachyon.txt"), script], None))
        tools.append(("pyperf " + a.label, "3.15", lambda: [a.pyperf, "record", "-F", "999", "-o", e.f("st.pyp"),
                                                             "--", e.py315, script], None))
    # First sample on the target interpreter (a libpython) and on 3.15 (the interpreter in a static executable,
    # whose version and runtime are read from its multi-megabyte segments).
    firsts = [(e.v, e.py)] + ([("3.15", e.py315)] if e.py315 else [])
    for label, binary in e.builds:
        for ver, py in firsts:
            tools.append(("first " + label, ver, (lambda b, p: lambda: [b, "record", "-F", "999", "-o",
                                                                          e.f("first.pyp"), "--", p, "-c",
                                                                          IMPORTS])(binary, py), binary))
    walls = {(n, v): [] for n, v, _, _ in tools}
    fails = {(n, v): 0 for n, v, _, _ in tools}
    first = {(label, ver): [] for label, _ in e.builds for ver, _ in firsts}
    zero = {(label, ver): 0 for label, _ in e.builds for ver, _ in firsts}
    for rep in range(a.startup_reps):
        for name, ver, cmd, first_bin in rotate(tools, rep):
            r = call(cmd(), 60)
            if r.rc != 0:
                fails[(name, ver)] += 1
                log("startup %s (%s) failed (%s): %s" % (name, ver, r.rc, tail(r.text)))
                continue
            walls[(name, ver)].append(r.wall_s)
            if first_bin:
                key = (name[len("first "):], ver)
                ms = first_sample_ms(first_bin, os.path.join(e.tmp, "first.pyp"))
                if ms is None:
                    zero[key] += 1
                else:
                    first[key].append(ms)
        log("startup rep %d: %s" % (rep, ", ".join("%s %s %.0f ms" % (n, v, 1e3 * walls[(n, v)][-1])
                                                   for n, v, _, _ in tools if walls[(n, v)])))
    rows = {}
    for n, v, _, _ in tools:
        w = walls[(n, v)]
        rows[(n, v)] = {"median": median(w), "min": min(w) if w else None, "max": max(w) if w else None,
                        "n": len(w), "fails": fails[(n, v)]}
    return {"rows": rows, "order": [(n, v) for n, v, _, _ in tools], "reps": a.startup_reps,
            "first": {k: {"median": median(v), "max": max(v) if v else None, "n": len(v), "zero": zero[k]}
                      for k, v in first.items()}, "first_versions": [v for v, _ in firsts]}


# ---- 2. BPF run time per sample --------------------------------------------------------------------------------------


def idle_process(python):
    """A Python process that sleeps: a target that is never on a CPU."""
    p = subprocess.Popen([python, "-c", "import time; time.sleep(3600)"], stdin=subprocess.DEVNULL,
                         start_new_session=True)
    LIVE.append(p)
    time.sleep(0.3)
    return p


def exp_bpf(e, a):
    """BPF run time per target sample. A build that opens one event per CPU (`runs per sample` ~ the CPU count) also
    runs the program for whatever the other CPUs run; that run returns after one map lookup, and the kernel's run
    time counts it. Its cost ("miss") is measured on a sleeping target (every run a miss), and subtracted for the
    runs beyond one per sample: the target's runs only, the figure the after / before ratio is taken on."""
    miss = {label: [] for label, _ in e.builds}
    idle = idle_process(e.py)
    try:
        for rep in range(a.reps):
            for label, binary in rotate(e.builds, rep):
                r = call([binary, "record", "-F", "999", "-d", str(a.miss_secs), "--bpf-stats", "-p", str(idle.pid),
                          "-o", e.f("miss.pyp")], a.miss_secs + 60, TOOL_CPU)
                runs, per_run = num(r"BPF (\d+) runs, ", r.text, int), num(r"runs, ([0-9.]+) ns per run", r.text)
                if r.rc == 0 and runs:
                    miss[label].append(per_run)
                log("bpf miss rep %d %s: %s runs on a sleeping target, %s ns per run" % (rep, label, runs, per_run))
    finally:
        killgroup(idle)
    miss = {label: median(v) for label, v in miss.items()}
    rows = {"miss": miss}
    for depth in (20, 200):
        res = {label: {"bpf": [], "runs": [], "own": []} for label, _ in e.builds}
        ratios, own_ratios = [], []
        for rep in range(a.reps):
            wl = Workload(e.py, ["busy", depth, 3600])
            got = {}
            try:
                time.sleep(0.3)
                for label, binary in rotate(e.builds, rep):
                    out = e.f("bpf.pyp")
                    r = call([binary, "record", "-F", "999", "-d", str(a.bpf_secs), "--bpf-stats", "-p",
                              str(wl.pid), "-o", out], a.bpf_secs + 60, TOOL_CPU)
                    s = pyperf_summary(r.text)
                    if r.rc != 0 or s["bpf"] is None or not s["samples"]:
                        log("bpf %s depth %d: no figure (%s): %s" % (label, depth, r.rc, tail(r.text)))
                        continue
                    per = s["runs"] / s["samples"]
                    own = s["bpf"] - max(per - 1, 0) * (miss[label] or 0)
                    got[label] = (s["bpf"], own)
                    res[label]["bpf"].append(s["bpf"])
                    res[label]["runs"].append(per)
                    res[label]["own"].append(own)
                    log("bpf depth %d rep %d %s: %.0f ns per sample (%d samples, %.2f runs per sample; target's "
                        "runs only %.0f ns)" % (depth, rep, label, s["bpf"], s["samples"], per, own))
            finally:
                wl.kill()
            if a.pyperf_before and a.label in got and a.before_label in got:
                ratios.append(got[a.label][0] / got[a.before_label][0])
                own_ratios.append(got[a.label][1] / got[a.before_label][1])
        rows[depth] = {label: {"bpf": median(v["bpf"]), "min": min(v["bpf"]) if v["bpf"] else None,
                               "max": max(v["bpf"]) if v["bpf"] else None, "runs": median(v["runs"]),
                               "own": median(v["own"]), "n": len(v["bpf"])} for label, v in res.items()}
        rows[depth]["ratio"] = median(ratios)
        rows[depth]["own_ratio"] = median(own_ratios)
    return rows


# ---- 3. lost symbols -------------------------------------------------------------------------------------------------


def exp_symbols(e, a):
    interps = [(e.v, e.py, "import json, argparse, email.parser, http.client")]
    if e.py2:
        interps.append(("2.7", e.py2, "import json, argparse, email.parser, httplib"))
    if e.py315:
        interps.append(("3.15", e.py315, "import json, argparse, email.parser, http.client"))
    kinds = [("imports", lambda py, imports: [py, "-c", imports]),
             ("shortlived", lambda py, imports: [py, SHORTLIVED, "40", "10"])]
    rows = {}
    for ver, py, imports in interps:
        for label, _ in e.builds:
            for kind, _ in kinds:
                rows[(ver, label, kind)] = {"recs": 0, "samples": 0, "unknown": 0, "lost": 0, "fails": 0}
        for rep in range(a.symbol_reps):
            for label, binary in rotate(e.builds, rep):
                for kind, cmd in kinds:
                    row = rows[(ver, label, kind)]
                    out = e.f("sym.pyp")
                    r = call([binary, "record", "-F", "999", "-o", out, "--"] + cmd(py, imports), 90)
                    s = pyperf_summary(r.text)
                    if r.rc != 0 or s["samples"] is None:
                        row["fails"] += 1
                        log("symbols %s %s %s failed (%s): %s" % (ver, label, kind, r.rc, tail(r.text)))
                        continue
                    f = call([binary, "report", "-i", out, "--folded"], 60)
                    if f.rc != 0:
                        row["fails"] += 1
                        log("symbols %s %s %s: report failed: %s" % (ver, label, kind, tail(f.text)))
                        continue
                    total, unknown = folded_counts(f.text.splitlines(), "[unknown code")
                    row["recs"] += 1
                    row["samples"] += total
                    row["unknown"] += unknown
                    row["lost"] += s["lost_symbols"] or 0
            log("symbols %s rep %d: %s" % (ver, rep, ", ".join(
                "%s %s %d/%d unknown, %d lost" % (label, kind, rows[(ver, label, kind)]["unknown"],
                                                  rows[(ver, label, kind)]["samples"], rows[(ver, label, kind)]["lost"])
                for label, _ in e.builds for kind, _ in kinds)))
    return {"rows": rows, "interps": [v for v, _, _ in interps], "kinds": [k for k, _ in kinds],
            "missing": [v for v, p in (("2.7", e.py2), ("3.15", e.py315)) if not p]}


# ---- 4. recorder CPU per sample --------------------------------------------------------------------------------------


def recorder_window(e, a, binary, pid, extra=()):
    """bench/recorder_cpu.py's method: `record -F 999 -d D -p PID`; the recorder's task-clock (perf stat -p) over a
    window from S s into the recording, over the window's share of the samples. Returns (ns per sample, summary)."""
    d, s, w = a.rec_secs
    out = e.f("rec.pyp")
    p = Proc([binary, "record", "-F", "999", "-d", str(d), "-p", str(pid), "-o", out] + list(extra), TOOL_CPU)
    time.sleep(s)
    ms = task_clock_ms(e.perf, p.pid, w) if p.running() else None
    p.wait(d + 60)
    summ = pyperf_summary(p.text)
    if p.rc != 0 or not summ["samples"] or ms is None:
        log("recorder window: no figure (%s, task-clock %s): %s" % (p.rc, ms, tail(p.text)))
        return None, summ
    return ms * 1e6 / (summ["samples"] * w / d), summ


def exp_recorder(e, a):
    res = {label: [] for label, _ in e.builds}
    wl = Workload(e.py, ["busy", 20, 3600])
    try:
        time.sleep(0.5)
        for rep in range(a.reps):
            for label, binary in rotate(e.builds, rep):
                ns, s = recorder_window(e, a, binary, wl.pid)
                res[label].append(ns)
                log("recorder rep %d %s: %s ns per sample (%s samples)" % (
                    rep, label, "-" if ns is None else "%.0f" % ns, s["samples"]))
    finally:
        wl.kill()
    return {label: {"ns": median(v), "min": min([x for x in v if x is not None], default=None),
                    "max": max([x for x in v if x is not None], default=None), "n": len([x for x in v if x])}
            for label, v in res.items()}


# ---- 5. interrupts on an idle CPU ------------------------------------------------------------------------------------


def interrupts(cpu=0):
    """(LOC, all rows) interrupt counts of one CPU from /proc/interrupts."""
    loc = total = 0
    with open("/proc/interrupts") as f:
        header = f.readline().split()
        col = header.index("CPU%d" % cpu)
        n = len(header)
        for line in f:
            parts = line.split()
            vals = parts[1:n + 1]
            if len(vals) < n or not all(v.isdigit() for v in vals):
                continue  # ERR, MIS: one total
            total += int(vals[col])
            if parts[0] == "LOC:":
                loc = int(vals[col])
    return loc, total


def lowest(v, base):
    """Lowest rate of a condition over the lowest unprofiled one: other work on the machine only adds interrupts."""
    return min(v) - min(base) if v and base else None


def exp_interrupts(e, a):
    """work.py busy 20 pinned to the last CPU and the profiler pinned there too: CPU 0 runs neither. Interrupts CPU
    0 takes in a window, per condition, interleaved; per repetition each profiled condition minus the unprofiled
    one of the same repetition."""
    if NCPU < 2:
        return {"skipped": "needs 2 CPUs"}
    conds = [("none", None)] + [("pyperf " + label, binary) for label, binary in e.builds] + [("perf", e.perf)]
    rates = {c: {"loc": [], "all": []} for c, _ in conds}
    diffs = {c: {"loc": [], "all": []} for c, _ in conds}
    wl = Workload(e.py, ["busy", 20, 3600])
    try:
        time.sleep(0.5)
        for rep in range(a.reps):
            got = {}
            for name, binary in rotate(conds, rep):
                prof = None
                if name == "none":
                    time.sleep(1.0)
                elif name == "perf":
                    prof = Proc([binary, "record", "-q", "-F", "1000", "-e", "cpu-clock", "-p", str(wl.pid), "-o",
                                 "/dev/null"], BUSY_CPU)
                    time.sleep(1.0)
                else:
                    out = e.f("irq.pyp")
                    prof = Proc([binary, "record", "-F", "1000", "-p", str(wl.pid), "-o", out], BUSY_CPU)
                    if not wait_file(prof, out, 0.5):
                        log("interrupts %s: did not start: %s" % (name, tail(prof.stop().text)))
                        continue
                if prof and not prof.running():
                    log("interrupts %s: exited early: %s" % (name, tail(prof.wait(5).text)))
                    continue
                l0, t0, w0 = interrupts(0) + (time.monotonic(),)
                time.sleep(a.irq_secs)
                l1, t1, w1 = interrupts(0) + (time.monotonic(),)
                if prof:
                    prof.stop(30)
                got[name] = ((l1 - l0) / (w1 - w0), (t1 - t0) / (w1 - w0))
                rates[name]["loc"].append(got[name][0])
                rates[name]["all"].append(got[name][1])
                time.sleep(0.3)
            if "none" in got:
                for name in got:
                    diffs[name]["loc"].append(got[name][0] - got["none"][0])
                    diffs[name]["all"].append(got[name][1] - got["none"][1])
            log("interrupts rep %d (CPU 0, LOC/s, all/s): %s" % (rep, ", ".join(
                "%s %.0f %.0f" % (n, v[0], v[1]) for n, v in got.items())))
    finally:
        wl.kill()
    return {"rows": {c: {"loc": median(rates[c]["loc"]), "all": median(rates[c]["all"]),
                         "loc_min": min(rates[c]["loc"], default=None), "loc_max": max(rates[c]["loc"], default=None),
                         "mloc": lowest(rates[c]["loc"], rates["none"]["loc"]),
                         "mall": lowest(rates[c]["all"], rates["none"]["all"]),
                         "dloc": median(diffs[c]["loc"]), "dall": median(diffs[c]["all"]), "n": len(rates[c]["loc"])}
                     for c, _ in conds},
            "order": [c for c, _ in conds]}


# ---- 6. peers: py-spy, Tachyon and pyperf ----------------------------------------------------------------------------


def pyspy_supports(e, python):
    """py-spy reads this interpreter: `py-spy dump` of a busy work.py shows its leaf function."""
    wl = Workload(python, ["busy", 20, 60])
    try:
        time.sleep(0.5)
        r = call([e.pyspy, "dump", "-p", str(wl.pid)], 30)
    finally:
        wl.kill()
    ok = r.rc == 0 and "leaf" in r.text
    if not ok:
        log("py-spy does not read %s (%s): %s" % (python, r.rc, tail(r.text)))
    return ok, tail(r.text, 200)


def peer_cost(e, a, tool, python, pid):
    """One run of tool on the busy pid at 999 Hz for D s: (steady CPU ns per sample of the profiler's process,
    whole-run CPU ns per sample, samples per second, BPF ns per sample or None)."""
    d, s, w = a.peer_secs
    if tool == "pyperf":
        out = e.f("peer.pyp")
        cmd = [a.pyperf, "record", "-F", "999", "-d", str(d), "--bpf-stats", "-p", str(pid), "-o", out]
    elif tool == "Tachyon":
        out = e.f("peer-tachyon.txt")
        cmd = [python, "-m", "profiling.sampling", "attach", "-r", "999", "-d", str(d), "--collapsed", "-o", out,
               str(pid)]
    else:
        out = e.f("peer-pyspy.txt")
        cmd = [e.pyspy, "record", "-r", "999", "-d", str(d), "-f", "raw", "-o", out, "-p", str(pid)]
    p = Proc(cmd, TOOL_CPU)
    time.sleep(s)
    ms = task_clock_ms(e.perf, p.pid, w) if p.running() else None
    p.wait(d + 60)
    bpf = None
    if tool == "pyperf":
        summ = pyperf_summary(p.text)
        samples, bpf = summ["samples"], summ["bpf"]
    elif tool == "Tachyon":
        samples = num(r"Captured (\d+) samples", p.text, int)
    else:
        samples = num(r"Samples: (\d+)", p.text, int)
    if p.rc != 0 or not samples or ms is None:
        log("peers %s: no figure (%s, %s samples, task-clock %s): %s" % (tool, p.rc, samples, ms, tail(p.text)))
        return None
    return {"steady": ms * 1e6 / (samples * w / d), "whole": p.cpu_s * 1e9 / samples, "rate": samples / d,
            "bpf": bpf}


def peer_accuracy(e, a, tool, python):
    """bench/bench.py exp_accuracy's method at 999 Hz: the split workload measures its own thread CPU time in
    alpha_work and beta_work; the tool's alpha share of the samples in either, against it. (error pp, samples)"""
    wl = Workload(python, ["split", a.acc_secs])
    try:
        if tool == "pyperf":
            out = e.f("acc.pyp")
            p = Proc([a.pyperf, "record", "-F", "999", "-p", str(wl.pid), "-o", out], TOOL_CPU)
            wait_file(p, out, 0.5)
        elif tool == "Tachyon":
            out = e.f("acc-tachyon.txt")
            # --mode cpu: samples of the thread on CPU only (the truth is its CPU time; the default is wall time).
            p = Proc([python, "-m", "profiling.sampling", "attach", "-r", "999", "--mode", "cpu", "--collapsed",
                      "-o", out, str(wl.pid)], TOOL_CPU)
            time.sleep(1.5)
        else:
            out = e.f("acc-pyspy.txt")
            p = Proc([e.pyspy, "record", "-r", "999", "-f", "raw", "-o", out, "-p", str(wl.pid)], TOOL_CPU)
            time.sleep(1.5)
        wl.go()
        res = wl.result(a.acc_secs + 60).split()
        p.wait(60)  # each ends when its target exits
    finally:
        wl.kill()
    if p.rc != 0 or len(res) < 3:
        log("accuracy %s: failed (%s): %s" % (tool, p.rc, tail(p.text)))
        return None
    if tool == "pyperf":
        f = call([a.pyperf, "report", "-i", out, "--folded", "--no-lines"], 60)
        al, be = shares(f.text.splitlines())
    else:
        with open(out) as fh:
            al, be = shares(fh)
    a_cpu, b_cpu = float(res[1]), float(res[2])
    truth = 100.0 * a_cpu / (a_cpu + b_cpu)
    share = 100.0 * al / max(al + be, 1)
    return {"err": abs(share - truth), "share": share, "truth": truth, "n": al + be}


def exp_peers(e, a):
    rows = []
    if not e.py315:
        setups = [(e.v, e.py, ["pyperf", "py-spy"])]
        note = "no Python 3.15 (%s): Tachyon not measured" % a.tachyon_python
        spy_ok = None
    else:
        spy_ok, spy_msg = pyspy_supports(e, e.py315)
        if spy_ok:
            setups = [("3.15", e.py315, ["pyperf", "Tachyon", "py-spy"])]
            note = None
        else:
            setups = [("3.15", e.py315, ["pyperf", "Tachyon"]), (e.v, e.py, ["pyperf", "py-spy"])]
            note = "py-spy does not read Python 3.15 (`py-spy dump`: %s): measured on %s next to pyperf" % (spy_msg, e.v)
    for ver, python, tools in setups:
        cost = {t: [] for t in tools}
        acc = {t: [] for t in tools}
        for rep in range(a.reps):
            wl = Workload(python, ["busy", 20, 3600])
            try:
                time.sleep(0.5)
                for tool in rotate(tools, rep):
                    c = peer_cost(e, a, tool, python, wl.pid)
                    cost[tool].append(c)
                    if c:
                        log("peers %s rep %d %s: steady %.0f ns/sample, whole run %.0f ns/sample, %.0f samples/s%s" % (
                            ver, rep, tool, c["steady"], c["whole"], c["rate"],
                            "" if c["bpf"] is None else ", BPF %.0f ns/sample" % c["bpf"]))
            finally:
                wl.kill()
            for tool in rotate(tools, rep):
                r = peer_accuracy(e, a, tool, python)
                acc[tool].append(r)
                if r:
                    log("peers %s rep %d accuracy %s: %.2f%% (truth %.2f%%, %d samples)" % (
                        ver, rep, tool, r["share"], r["truth"], r["n"]))
        for tool in tools:
            c = [x for x in cost[tool] if x]
            r = [x for x in acc[tool] if x]
            rows.append({
                "tool": tool, "ver": ver,
                "steady": median([x["steady"] for x in c]), "whole": median([x["whole"] for x in c]),
                "rate": median([x["rate"] for x in c]), "bpf": median([x["bpf"] for x in c]),
                "err": median([x["err"] for x in r]), "max_err": max([x["err"] for x in r], default=None),
                "truth": median([x["truth"] for x in r]), "share": median([x["share"] for x in r]),
                "n": len(c), "acc_n": len(r), "samples": median([x["n"] for x in r]),
            })
    return {"rows": rows, "note": note, "pyspy_315": spy_ok}


# ---- 7. slowdown (bench/bench.py experiment 2b) ----------------------------------------------------------------------


def exp_slowdown(e, a):
    out = os.path.join(e.tmp, "toggle")
    cmd = [sys.executable, BENCH, "--only", "toggle", "--toggle-tools", "pyperf,floor,perf", "--pyperf", a.pyperf,
           "--py-spy", e.pyspy, "--perf", e.perf, "--python", e.py, "--out", out] + (["--quick"] if a.quick else [])
    log("slowdown: %s" % " ".join(cmd))
    r = call(cmd, 600 if a.quick else 2400)
    if r.rc != 0:
        log("bench.py --only toggle failed (%s): %s" % (r.rc, tail(r.text, 2000)))
        return {"failed": "bench.py --only toggle exited %s" % r.rc}
    rows = {}
    pat = r"^\| %s \| \*\*(-?[0-9.]+)%%\*\* \| (-?[0-9.]+)%% - (-?[0-9.]+)%% \| (-?[0-9.]+)%% \| (\d+) \| (\d+) \|"
    for key, label in (("pyperf", r"\*\*pyperf\*\*"), ("floor", r"floor: [^|]*"),
                       ("perf", r"`perf record -e cpu-clock -p` [^|]*")):
        m = re.search(pat % label, r.text, re.M)
        if m:
            rows[key] = {"wall": float(m.group(1)), "min": float(m.group(2)), "max": float(m.group(3)),
                         "cpu": float(m.group(4)), "windows": int(m.group(5)), "chunks": int(m.group(6))}
    if "pyperf" not in rows or "floor" not in rows:
        return {"failed": "no 2b table rows in bench.py's output: %s" % tail(r.text, 400)}
    return {"rows": rows, "spread": num(r"Unprofiled windows spread ([0-9.]+)%", r.text),
            "chunk_ms": num(r"\(\d+ units, ([0-9.]+) ms unprofiled\)", r.text),
            "windows": rows["pyperf"]["windows"]}


# ---- 8. slowdown, paired ---------------------------------------------------------------------------------------------


def irq_time_accounting():
    """Whether the kernel charges interrupt time apart from the interrupted task (CONFIG_IRQ_TIME_ACCOUNTING); None
    when its config cannot be read."""
    for path in ("/boot/config-" + os.uname().release, "/proc/config.gz"):
        try:
            if path.endswith(".gz"):
                import gzip
                with gzip.open(path, "rt") as f:
                    text = f.read()
            else:
                with open(path) as f:
                    text = f.read()
        except OSError:
            continue
        return "CONFIG_IRQ_TIME_ACCOUNTING=y" in text
    return None


def exp_paired(e, a):
    """Two identical `work.py chunks 20 U` processes pinned to one CPU: the scheduler runs them in turns of a few ms,
    so both see the machine's speed of the moment, which drifts by tens of percent within seconds here and is what
    limits 2b. Each chunk's thread CPU time includes the sampling interrupt and the BPF program (charged to the
    interrupted task when the kernel has no IRQ time accounting; checked). Per window, one process's median chunk
    CPU over the other's: with pyperf on A and perf on B, then perf on A and pyperf on B, the ratio of the two
    ratios is ((1 + pyperf) / (1 + perf))^2, whatever the two processes' own difference. The same with perf and
    nothing gives the sampling interrupt's own cost."""
    acct = irq_time_accounting()
    if acct:
        return {"failed": "this kernel has CONFIG_IRQ_TIME_ACCOUNTING: interrupt time is not in the target's CPU time"}
    binary = a.pyperf
    conds = [("none", "none"), ("pyperf", "perf"), ("perf", "pyperf"), ("perf", "none"), ("none", "perf")]
    # A chunk of ~20 ms of CPU (as 2b): calibrated alone.
    probe = Workload(e.py, ["chunks", 20, 20])
    lines = [probe.p.stdout.readline() for _ in range(25)]
    probe.kill()
    cpus = [float(x.split()[1]) for x in lines[5:]]
    units = max(int(0.020 / ((cpus[-1] - cpus[0]) / (len(cpus) - 1) / 20)), 1)
    wls = [Workload(e.py, ["chunks", 20, units]) for _ in range(2)]
    chunks = [[], []]

    def reader(k):
        for line in wls[k].p.stdout:
            w, c = line.split()
            chunks[k].append((float(w), float(c)))

    import threading
    ths = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(2)]
    for th in ths:
        th.start()
    windows = []  # (cond, t0, t1)
    try:
        time.sleep(1.0)
        for rep in range(a.paired_reps):
            for cond in rotate(conds, rep):
                procs = []
                for k, tool in enumerate(cond):
                    if tool == "pyperf":
                        out = e.f("paired-%d.pyp" % k)
                        procs.append((Proc([binary, "record", "-F", "1000", "-p", str(wls[k].pid), "-o", out],
                                           TOOL_CPU), out))
                    elif tool == "perf":
                        out = e.f("paired-%d.data" % k)
                        procs.append((Proc([e.perf, "record", "-q", "-e", "cpu-clock", "-F", "1000", "-p",
                                            str(wls[k].pid), "-o", out], TOOL_CPU), out))
                for pr, out in procs:
                    wait_file(pr, out, 0)
                time.sleep(0.3)
                t0 = time.perf_counter()
                time.sleep(a.paired_secs)
                t1 = time.perf_counter()
                for pr, _ in procs:
                    pr.stop(60)
                    if pr.rc not in (0, -2, 130):
                        log("paired: %s exited %s: %s" % (pr.cmd[2 if pr.cmd[0] == "taskset" else 0], pr.rc,
                                                          tail(pr.text)))
                windows.append((cond, t0, t1))
                time.sleep(0.2)
            log("paired rep %d done" % rep)
    finally:
        for w in wls:
            w.kill()
    for th in ths:
        th.join(5)

    def per_chunk(k, t0, t1):
        c = chunks[k]
        return [c1 - c0 for (w0, c0), (w1, c1) in zip(c, c[1:]) if w0 >= t0 and w1 <= t1]

    ratio = {}  # cond -> [A/B per window, in order]
    n_chunks = []
    for cond, t0, t1 in windows:
        xa, xb = per_chunk(0, t0, t1), per_chunk(1, t0, t1)
        if len(xa) < 5 or len(xb) < 5:
            continue
        n_chunks.append(min(len(xa), len(xb)))
        ratio.setdefault(cond, []).append(median(xa) / median(xb))

    def effect(x, y):
        """(median, min, max, n) in % of ((x on A / y on B) / (y on A / x on B))^(1/2) - 1, paired by repetition."""
        r1, r2 = ratio.get((x, y), []), ratio.get((y, x), [])
        v = [100 * ((p / q) ** 0.5 - 1) for p, q in zip(r1, r2)]
        return {"median": median(v), "min": min(v), "max": max(v), "n": len(v)} if v else None

    nn = ratio.get(("none", "none"), [])
    return {"units": units, "chunk_ms": 1e3 * median([c for k in range(2) for c in per_chunk(k, 0, 1e12)]),
            "pyperf_perf": effect("pyperf", "perf"), "perf_none": effect("perf", "none"),
            "none_spread": (100 * (max(nn) - min(nn)) / median(nn)) if nn else None,
            "chunks": median(n_chunks) if n_chunks else None, "reps": a.paired_reps, "irq_acct": acct}


# ---- report ---------------------------------------------------------------------------------------------------------


def verdict(ok):
    return "-" if ok is None else ("**met**" if ok else "**missed**")


def sh(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              shell=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine(e, a):
    def pyver(py):
        return sh("%s -c 'import sys; print(sys.version.split()[0])' 2>&1" % py) if py else "-"

    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("awk '/MemTotal/ {printf \"%.0f GiB\", $2/1048576}' /proc/meminfo")
    builds = "; ".join("%s `%s` (%s)" % (label, b, sh("%s --version" % b)) for label, b in e.builds)
    return ("Machine: %s, %d CPUs, %s, Linux %s; Python %s (%s), %s (%s), %s (%s, Debian sid, chrooted); %s; %s; "
            "tree %s; pyperf builds: %s." % (
                cpu, NCPU, mem, os.uname().release, pyver(e.py), e.py, pyver(e.py2), e.py2 or "missing",
                pyver(e.py315), e.py315 or "missing", sh("%s --version" % e.pyspy),
                sh("%s --version 2>&1 | head -1" % e.perf), sh("git -C %s describe --always --dirty" % ROOT), builds))


def render(e, a, meta, res):
    st, bpf, sym, rec, irq, peers, slow, paired = (res.get(k) for k in EXPERIMENTS)
    after, before = a.label, a.before_label if a.pyperf_before else None
    L = [machine(e, a),
         "Run: `bench/round2.py%s` (%s), ended %s, took %.1f min; load average (1, 5, 15 min) %s at the start, %s at "
         "the end; steal %.1f%% of CPU time during the run." % (
             meta["args"], ", ".join(meta["only"]), meta["ended"], meta["minutes"], meta["load0"], meta["load1"],
             meta["steal"]),
         ""]
    summary = []
    if st:
        p, s = st["rows"].get(("pyperf " + after, e.v)), st["rows"].get(("py-spy", e.v))
        if p and s and p["median"] and s["median"]:
            summary.append(("Start-up: wall time of `record -- PY -c pass`, pyperf against py-spy (medians)",
                            "pyperf <= py-spy", "%.0f ms vs %.0f ms" % (1e3 * p["median"], 1e3 * s["median"]),
                            p["median"] <= s["median"]))
        fs = [(v, st["first"][(after, v)]) for v in st["first_versions"] if (after, v) in st["first"]]
        if fs:
            summary.append(("First sample after the command's start (`record -- PY -c '%s'`, median; max)" % IMPORTS,
                            "<= 50 ms", "; ".join("%s: %s ms (max %s ms)%s" % (
                                v, fmt(f["median"], "%.1f"), fmt(f["max"], "%.1f"),
                                ", %d recordings without a sample" % f["zero"] if f["zero"] else "") for v, f in fs),
                            None if any(f["median"] is None for _, f in fs)
                            else all(f["median"] <= 50 and not f["zero"] for _, f in fs)))
    if bpf:
        for depth, bound in ((20, 2500), (200, 10000)):
            v = bpf[depth][after]["bpf"]
            summary.append(("BPF run time per sample, %d frames" % depth, "<= %d ns" % bound, fmt(v, "%.0f ns"),
                            None if v is None else v <= bound))
        if before and bpf[20]["own_ratio"] is not None:
            r = bpf[20]["own_ratio"]
            summary.append(("BPF per sample, %s / %s, 20 frames, the target's runs only (the code-object copies "
                            "may add 10%%)" % (after, before), "<= 1.10",
                            "%.2f (%s / %s ns; as reported %s / %s ns = %.2f)" % (
                                r, fmt(bpf[20][after]["own"]), fmt(bpf[20][before]["own"]), fmt(bpf[20][after]["bpf"]),
                                fmt(bpf[20][before]["bpf"]), bpf[20]["ratio"]), r <= 1.10))
    if sym:
        tot_u = sum(sym["rows"][(v, after, k)]["unknown"] for v in sym["interps"] for k in sym["kinds"])
        tot_l = sum(sym["rows"][(v, after, k)]["lost"] for v in sym["interps"] for k in sym["kinds"])
        tot_s = sum(sym["rows"][(v, after, k)]["samples"] for v in sym["interps"] for k in sym["kinds"])
        tot_r = sum(sym["rows"][(v, after, k)]["recs"] for v in sym["interps"] for k in sym["kinds"])
        tot_f = sum(sym["rows"][(v, after, k)]["fails"] for v in sym["interps"] for k in sym["kinds"])
        summary.append(("Lost symbols: `[unknown code` samples / lost symbols, %d recordings on %s" % (
            tot_r, ", ".join(sym["interps"])), "0 / 0", "%d of %d samples / %d%s" % (
            tot_u, tot_s, tot_l, ", %d recordings failed" % tot_f if tot_f else ""), tot_u == 0 and tot_l == 0 and not tot_f))
    if rec:
        v = rec[after]["ns"]
        summary.append(("Recorder CPU per sample, 20 frames, steady state", "<= 2000 ns", fmt(v, "%.0f ns"),
                        None if v is None else v <= 2000))
    if irq and "rows" in irq:
        d = irq["rows"]["pyperf " + after]["mloc"]
        dp = irq["rows"]["pyperf " + after]["dloc"]
        summary.append(("Interrupts on an idle CPU added by `record -F 1000 -p PID` (local timer, lowest over the "
                        "lowest without a profiler)", "~0/s (< 100/s)",
                        "%s (paired median %s)" % (fmt(d, "%+.0f/s"), fmt(dp, "%+.0f/s")), None if d is None else d < 100))
    if slow and "rows" in slow:
        # The bare timer-interrupt floor: with per-task events (`-p`), the same interrupt on the target's CPU with
        # nothing done in it is plain `perf record -e cpu-clock -p`; "pyperf on another, sleeping process" no longer
        # interrupts the target at all.
        q = slow["rows"].get("perf")
        base, name = (q, "plain perf -p") if q else (slow["rows"]["floor"], "the floor")
        d = slow["rows"]["pyperf"]["wall"] - base["wall"]
        summary.append(("Target slowdown at 1 kHz above the bare timer interrupt (%s; bench.py 2b, wall)" % name,
                        "<= 0.3%", "%.2f%% (pyperf %.2f%%, %s %.2f%%, sleeping-process floor %.2f%%)" % (
                            d, slow["rows"]["pyperf"]["wall"], name, base["wall"], slow["rows"]["floor"]["wall"]),
                        d <= 0.3))
    if paired and paired.get("pyperf_perf"):
        pp, pn = paired["pyperf_perf"], paired["perf_none"]
        summary.append(("Target slowdown at 1 kHz above plain perf -p, paired (both at once, two processes on one "
                        "CPU; section 8)", "<= 0.3%", "%.2f%% (range %.2f%% - %.2f%%, %d pairs; plain perf -p itself "
                        "%s over nothing)" % (pp["median"], pp["min"], pp["max"], pp["n"],
                                               "%.2f%%" % pn["median"] if pn else "-"), pp["median"] <= 0.3))
    L.append("| target | bound | measured (%s) | |" % after)
    L.append("|---|---|---|---|")
    for what, bound, got, ok in summary:
        L.append("| %s | %s | %s | %s |" % (what, bound, got, verdict(ok)))
    L.append("")

    if st:
        L.append("### 1. Start-up (medians of %d repetitions)" % st["reps"])
        L.append("")
        L.append("Wall time of each whole run (time.monotonic around it, output to a file), tools in rotating order in "
                 "every repetition: `PY -c pass` bare, under `pyperf record -F 999 -o F --` and `py-spy record -r 999 "
                 "-f raw -o F --`; on 3.15, a one-line script (`pass`) bare, under Tachyon (`python3.15 -m "
                 "profiling.sampling run -r 999 --collapsed -o F script`) and under pyperf. The 3.15 runs go through "
                 "the sid root's chroot wrapper (in every 3.15 row, bare included). Over bare: the median minus the "
                 "bare run's of the same interpreter.")
        L.append("")
        L.append("| run | Python | median | min - max | over bare | failed |")
        L.append("|---|---|---|---|---|---|")
        for key in st["order"]:
            n, v = key
            if n.startswith("first "):
                continue
            r = st["rows"][key]
            bare = st["rows"].get(("bare", v), {}).get("median")
            over = None if r["median"] is None or bare is None or n == "bare" else r["median"] - bare
            L.append("| %s | %s | %s | %s - %s | %s | %d |" % (
                n, v, fmt(r["median"] and 1e3 * r["median"], "%.0f ms"), fmt(r["min"] and 1e3 * r["min"], "%.0f"),
                fmt(r["max"] and 1e3 * r["max"], "%.0f ms"), fmt(over and 1e3 * over, "%+.0f ms"), r["fails"]))
        L.append("")
        L.append("First sample: `pyperf record -F 999 -o F -- PY -c '%s'`, then `pyperf report --gecko`: the first "
                 "sample's time of each thread (ms from the recording's start, which is the command's spawn), the "
                 "earliest thread's." % IMPORTS)
        L.append("")
        L.append("| build | Python | first sample, median | max | recordings | without a sample |")
        L.append("|---|---|---|---|---|---|")
        for v in st["first_versions"]:
            for label, _ in e.builds:
                f = st["first"][(label, v)]
                L.append("| %s | %s | %s | %s | %d | %d |" % (label, v, fmt(f["median"], "%.1f ms"),
                                                             fmt(f["max"], "%.1f ms"), f["n"] + f["zero"], f["zero"]))
        L.append("")
    if bpf:
        L.append("### 2. BPF run time per sample (medians of %d)" % a.reps)
        L.append("")
        L.append("`work.py busy DEPTH` (Python %s, distinct functions) pinned to CPU %s; `pyperf record -F 999 -d %d "
                 "--bpf-stats -p PID` pinned to CPU %s, builds in rotating order on the same target: the kernel's "
                 "run time of the program (all its runs) over the target's samples, as pyperf reports it. A build "
                 "with one event per CPU (runs per sample ~ %d) also runs the program for whatever the other CPUs "
                 "run, which returns after one map lookup (a miss: %s, measured with `-p` on a sleeping Python "
                 "process, %d s); target's runs only = the figure minus (runs per sample - 1) misses." % (
                     pyver_short(e.py), BUSY_CPU, a.bpf_secs, TOOL_CPU, NCPU,
                     ", ".join("%s %s" % (label, fmt(bpf["miss"][label], "%.0f ns per run") if bpf["miss"][label]
                                          else "no run") for label, _ in e.builds), a.miss_secs))
        L.append("")
        L.append("| build | 20 frames | min - max | runs per sample | target's runs only | 200 frames | min - max | "
                 "runs per sample | target's runs only |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for label, _ in e.builds:
            x, y = bpf[20][label], bpf[200][label]
            L.append("| %s | **%s** | %s - %s | %s | %s | **%s** | %s - %s | %s | %s |" % (
                label, fmt(x["bpf"], "%.0f ns"), fmt(x["min"]), fmt(x["max"]), fmt(x["runs"], "%.2f"),
                fmt(x["own"], "%.0f ns"), fmt(y["bpf"], "%.0f ns"), fmt(y["min"]), fmt(y["max"]),
                fmt(y["runs"], "%.2f"), fmt(y["own"], "%.0f ns")))
        if before:
            L.append("| %s / %s (median of paired runs) | %s | | | **%s** | %s | | | **%s** |" % (
                after, before, fmt(bpf[20]["ratio"], "%.2f"), fmt(bpf[20]["own_ratio"], "%.2f"),
                fmt(bpf[200]["ratio"], "%.2f"), fmt(bpf[200]["own_ratio"], "%.2f")))
        L.append("")
    if sym:
        L.append("### 3. Lost symbols (%d recordings per cell)" % a.symbol_reps)
        L.append("")
        L.append("`pyperf record -F 999 -o F -- PY ...`: `-c 'import json, argparse, email.parser, http.client'` "
                 "(`httplib` on 2.7) and `testdata/workloads/shortlived.py 40 10` (code objects that live 10 ms). "
                 "Unknown: samples whose folded stack (`pyperf report --folded`) holds an `[unknown code ...]` frame; "
                 "lost: the summary's `N lost symbols`, summed.%s" % (
                     " Not measured: Python %s (missing)." % ", ".join(sym["missing"]) if sym["missing"] else ""))
        L.append("")
        L.append("| Python | build | imports: unknown / samples | lost | shortlived: unknown / samples | lost | failed |")
        L.append("|---|---|---|---|---|---|---|")
        for v in sym["interps"]:
            for label, _ in e.builds:
                i, s = sym["rows"][(v, label, "imports")], sym["rows"][(v, label, "shortlived")]
                L.append("| %s | %s | **%d** / %d | %d | **%d** / %d | %d | %d |" % (
                    v, label, i["unknown"], i["samples"], i["lost"], s["unknown"], s["samples"], s["lost"],
                    i["fails"] + s["fails"]))
        L.append("")
    if rec:
        d, s, w = a.rec_secs
        L.append("### 4. Recorder CPU per sample (20 frames, medians of %d)" % a.reps)
        L.append("")
        L.append("bench/recorder_cpu.py's method: one `work.py busy 20` (CPU %s) throughout; `pyperf record -F 999 -d "
                 "%d -p PID` (CPU %s), builds in rotating order; the recorder's task-clock (`perf stat -p`) from %g s "
                 "to %g s into the recording over that window's share of the samples." % (BUSY_CPU, d, TOOL_CPU, s,
                                                                                        s + w))
        L.append("")
        L.append("| build | recorder CPU per sample | min - max |")
        L.append("|---|---|---|")
        for label, _ in e.builds:
            r = rec[label]
            L.append("| %s | **%s** | %s - %s |" % (label, fmt(r["ns"], "%.0f ns"), fmt(r["min"]), fmt(r["max"])))
        L.append("")
    if irq:
        L.append("### 5. Interrupts on an idle CPU (medians of %d)" % a.reps)
        L.append("")
        if "rows" not in irq:
            L.append("Not measured: %s." % irq["skipped"])
        else:
            L.append("`work.py busy 20` and the profiler both pinned to CPU %s; CPU 0 runs neither. Interrupts CPU 0 "
                     "takes in %g s (/proc/interrupts: the local timer row, and all rows), per condition in rotating "
                     "order. Other work on the machine only adds interrupts, and moves the baseline a lot (see the "
                     "unprofiled range): added, lowest = the condition's lowest rate minus the lowest unprofiled "
                     "rate (judged); added, paired = the median over repetitions of the condition's rate minus the "
                     "unprofiled window's of the same repetition. `perf record -e cpu-clock -p` opens per-task "
                     "events: the reference for ~0." % (BUSY_CPU, a.irq_secs))
            L.append("")
            L.append("| condition | local timer /s | min - max | **added, lowest** | added, paired | all interrupts /s | "
                     "added, lowest | added, paired |")
            L.append("|---|---|---|---|---|---|---|---|")
            names = {"perf": "`perf record -F 1000 -e cpu-clock -p PID`", "none": "no profiler"}
            for c in irq["order"]:
                r = irq["rows"][c]
                none = c == "none"
                L.append("| %s | %s | %s - %s | %s | %s | %s | %s | %s |" % (
                    names.get(c, "`%s` `record -F 1000 -p PID`" % c), fmt(r["loc"]), fmt(r["loc_min"]),
                    fmt(r["loc_max"]), "" if none else "**%s**" % fmt(r["mloc"], "%+.0f"),
                    "" if none else fmt(r["dloc"], "%+.0f"), fmt(r["all"]), "" if none else fmt(r["mall"], "%+.0f"),
                    "" if none else fmt(r["dall"], "%+.0f")))
        L.append("")
    if peers:
        d, s, w = a.peer_secs
        L.append("### 6. py-spy, Tachyon and pyperf (medians of %d)" % a.reps)
        L.append("")
        L.append("`work.py busy 20` pinned to CPU %s, one profiler at a time pinned to CPU %s, in rotating order, "
                 "999 Hz for %d s: `pyperf record --bpf-stats -p`, Tachyon `python3.15 -m profiling.sampling attach "
                 "-r 999 -d %d --collapsed` (default mode: wall), `py-spy record -r 999 -f raw` (default: blocking). "
                 "Cost per sample: pyperf's BPF run time per sample plus its recorder's CPU; the others, their "
                 "process's CPU. Steady: task-clock (`perf stat -p`) from %g s to %g s after the launch over that "
                 "window's share of the samples (samples: pyperf's summary, Tachyon's `Captured N samples`, py-spy's "
                 "`Samples: N`); whole run: rusage over all samples (start-up included). Start-up: experiment 1's "
                 "median over the bare run of the same interpreter. Accuracy: bench/bench.py's experiment 6 at 999 "
                 "Hz, %g s (`work.py split`: alpha_work's share of the samples in alpha_work or beta_work against "
                 "the workload's own thread CPU time; Tachyon with `--mode cpu`), |error| in percentage points." % (
                     BUSY_CPU, TOOL_CPU, d, d, s, s + w, a.acc_secs))
        if peers["note"]:
            L.append("")
            L.append("Note: %s." % peers["note"])
        L.append("")
        L.append("| tool | Python | **cost per sample, steady** | vs pyperf | whole run | samples/s | start-up over "
                 "bare | accuracy error (max) |")
        L.append("|---|---|---|---|---|---|---|---|")
        base = {}
        for r in peers["rows"]:
            total = r["steady"] + (r["bpf"] or 0) if r["steady"] is not None else None
            r["total"] = total
            if r["tool"] == "pyperf":
                base[r["ver"]] = total
        for r in peers["rows"]:
            total = r["total"]
            if r["tool"] == "pyperf":
                cost = "**%s** (BPF %s + recorder %s)" % (fmt(total, "%.0f ns"), fmt(r["bpf"]), fmt(r["steady"]))
                whole = fmt(r["whole"] + (r["bpf"] or 0) if r["whole"] is not None else None, "%.0f ns")
            else:
                cost = "**%s**" % fmt(total, "%.0f ns")
                whole = fmt(r["whole"], "%.0f ns")
            b = base.get(r["ver"])
            ratio = "%.1fx" % (total / b) if total and b else "-"
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["tool"], r["ver"], cost, ratio, whole, fmt(r["rate"]), startup_over(st, r["tool"], r["ver"], after, e.v),
                "-" if r["err"] is None else "%.2f pp (%.2f)" % (r["err"], r["max_err"])))
        L.append("")
    if slow:
        L.append("### 7. Target slowdown (bench/bench.py experiment 2b: pyperf, the floor, plain perf)")
        L.append("")
        if "rows" not in slow:
            L.append("Not measured: %s." % slow["failed"])
        else:
            p, f = slow["rows"]["pyperf"], slow["rows"]["floor"]
            L.append("`bench/bench.py --only toggle --toggle-tools pyperf,floor,perf%s` (pyperf %s): one `work.py "
                     "chunks 20` process, chunks of %s ms; windows without a profiler alternate with windows under "
                     "pyperf at 1 kHz, under the floor (pyperf sampling another, sleeping process) and under `perf "
                     "record -e cpu-clock -p` (the sampling interrupt alone, per-task events, no BPF program); "
                     "unprofiled windows spread %s%%. Medians over windows. When pyperf's `-p` opens per-task events "
                     "the floor takes no interrupt on the target's CPU any more, and pyperf minus plain perf is its "
                     "own part." % (" --quick" if a.quick else "", after, fmt(slow["chunk_ms"], "%.1f"),
                                    fmt(slow["spread"], "%.2f")))
            L.append("")
            L.append("| profiler | wall slowdown | min - max | CPU slowdown | windows |")
            L.append("|---|---|---|---|---|")
            names = (("pyperf", "pyperf"), ("floor", "floor"), ("perf", "`perf record -e cpu-clock -p`"))
            for key, name in names:
                r = slow["rows"].get(key)
                if r:
                    L.append("| %s | **%.2f%%** | %.2f%% - %.2f%% | %.2f%% | %d |" % (
                        name, r["wall"], r["min"], r["max"], r["cpu"], r["windows"]))
            L.append("| pyperf minus the floor | **%.2f%%** | | %.2f%% | |" % (p["wall"] - f["wall"], p["cpu"] - f["cpu"]))
            q = slow["rows"].get("perf")
            if q:
                L.append("| pyperf minus plain perf | %.2f%% | | %.2f%% | |" % (p["wall"] - q["wall"], p["cpu"] - q["cpu"]))
        L.append("")
    if paired:
        L.append("### 8. Target slowdown, paired (pyperf and plain perf at once, on one CPU)")
        L.append("")
        if "failed" in paired:
            L.append("Not measured: %s." % paired["failed"])
        else:
            L.append("Two `work.py chunks 20 %d` processes (A, B; chunks of %s ms of CPU) pinned to CPU %s, so the "
                     "scheduler runs them in turns of a few ms and both see the machine's speed of the moment (it "
                     "drifts by tens of percent within seconds here: 2b's limit). Per %g s window (started 0.3 s "
                     "after the profilers are ready, ~%s chunks each): A's median thread CPU per chunk over B's; the "
                     "sampling interrupt and the BPF program are charged to the interrupted thread (this kernel %s "
                     "IRQ time accounting). Windows in rotating order, %d repetitions: (nothing, nothing), (pyperf, "
                     "perf), (perf, pyperf), (perf, nothing), (nothing, perf), every profiler at 1 kHz with `-p` "
                     "(per-task events) and pinned to CPU %s. Slowdown of X over Y = sqrt(ratio(X on A, Y on B) / "
                     "ratio(Y on A, X on B)) - 1, per repetition: the processes' own difference cancels. Unprofiled "
                     "(nothing, nothing) windows' A/B ratio spread %s%%." % (
                         paired["units"], fmt(paired["chunk_ms"], "%.1f"), BUSY_CPU, a.paired_secs,
                         fmt(paired["chunks"], "%.0f"), "has no" if paired["irq_acct"] is False else "may have",
                         paired["reps"], TOOL_CPU, fmt(paired["none_spread"], "%.2f")))
            L.append("")
            L.append("| slowdown of | over | median | min - max | repetitions |")
            L.append("|---|---|---|---|---|")
            for key, x, y in (("pyperf_perf", "pyperf " + after, "plain `perf record -e cpu-clock -p`"),
                              ("perf_none", "plain `perf record -e cpu-clock -p`", "nothing")):
                r = paired.get(key)
                if r:
                    L.append("| %s | %s | **%.2f%%** | %.2f%% - %.2f%% | %d |" % (x, y, r["median"], r["min"],
                                                                              r["max"], r["n"]))
        L.append("")
    return "\n".join(L).rstrip("\n") + "\n"


def pyver_short(py):
    return sh("%s -c 'import sys; print(sys.version.split()[0])' 2>&1" % py)


def startup_over(st, tool, ver, after, v0):
    if not st:
        return "-"
    name = {"pyperf": "pyperf " + after, "Tachyon": "Tachyon", "py-spy": "py-spy"}[tool]
    for v in (ver, v0):
        r = st["rows"].get((name, v))
        bare = st["rows"].get(("bare", v), {}).get("median")
        if r and r["median"] is not None and bare is not None:
            return "%+.0f ms%s" % (1e3 * (r["median"] - bare), "" if v == ver else " (on %s)" % v)
    return "-"


def write_results(text):
    log("wrote %s" % write_section(SECTION, BEGIN, END, "\n\n" + text + "\n"))


def main():
    ap = argparse.ArgumentParser(description="Performance round 2 (issue #18); see bench/README.md")
    ap.add_argument("--pyperf", required=True, help="the pyperf build under test")
    ap.add_argument("--label", default="after", help="what --pyperf is, for the report")
    ap.add_argument("--pyperf-before", help="an earlier pyperf build, measured in the same run")
    ap.add_argument("--before-label", default="before", help="what --pyperf-before is, for the report")
    ap.add_argument("--py-spy", required=True)
    ap.add_argument("--perf", default=shutil.which("perf") or "perf")
    ap.add_argument("--python", default=os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python3.11"))
    ap.add_argument("--python2", default=os.path.expanduser("~/.pyenv/versions/2.7.18/bin/python2"))
    ap.add_argument("--tachyon-python", default=SID315, help="Python 3.15 (Tachyon; default: the sid root's wrapper)")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--quick", action="store_true", help="few repetitions, short runs: checks the harness")
    ap.add_argument("--only", help="comma-separated: " + ",".join(EXPERIMENTS))
    ap.add_argument("--write", action="store_true", help="also write the results into bench/RESULTS.md")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/round2.py: needs root (BPF, perf events, attaching to other processes)")
    if a.only:
        only = [x for x in a.only.split(",") if x]
        bad = [x for x in only if x not in EXPERIMENTS]
        if bad:
            ap.error("unknown experiment(s) %s; known: %s" % (",".join(bad), ",".join(EXPERIMENTS)))
    else:
        only = [x for x in EXPERIMENTS if not (a.quick and x == "slowdown")]
    if a.quick:
        a.reps = a.reps or 1
        a.startup_reps, a.symbol_reps = 3, 1
        a.bpf_secs, a.irq_secs, a.acc_secs, a.miss_secs = 3, 2, 3, 1
        a.rec_secs = (5, 1.5, 2)  # -d, window start, window length
        a.peer_secs = (4, 1.0, 2)
        a.paired_reps, a.paired_secs = 2, 1.5
    else:
        a.reps = a.reps or 5
        a.startup_reps, a.symbol_reps = max(15, a.reps), 5
        a.bpf_secs, a.irq_secs, a.acc_secs, a.miss_secs = 8, 5, 8, 2
        a.rec_secs = (10, 2.0, 6)
        a.peer_secs = (8, 2.0, 5)
        a.paired_reps, a.paired_secs = 10, 3.0
    for b in [a.pyperf, a.pyperf_before, a.py_spy, a.python]:
        if b and not os.access(b, os.X_OK):
            sys.exit("bench/round2.py: %s is not an executable" % b)
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    e = Env(a)
    t0 = time.monotonic()
    stat0 = cpu_times()
    load0 = loadavg()
    log("load average %s; experiments %s; scratch %s" % (load0, ",".join(only), e.tmp))
    fns = {"startup": exp_startup, "bpf": exp_bpf, "symbols": exp_symbols, "recorder": exp_recorder,
           "interrupts": exp_interrupts, "peers": exp_peers, "slowdown": exp_slowdown, "paired": exp_paired}
    res = {}
    try:
        for name in EXPERIMENTS:
            if name in only:
                t1 = time.monotonic()
                log("== %s" % name)
                res[name] = fns[name](e, a)
                log("== %s took %.0f s" % (name, time.monotonic() - t1))
    finally:
        cleanup()
        shutil.rmtree(e.tmp, ignore_errors=True)
    stat1 = cpu_times()
    d = [y - x for x, y in zip(stat0, stat1)]
    argv = " ".join(x if re.match(r"^[\w./,=:+-]+$", x) else repr(x) for x in sys.argv[1:])
    meta = {"args": (" " + argv) if argv else "", "only": only,
            "ended": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "minutes": (time.monotonic() - t0) / 60, "load0": load0, "load1": loadavg(),
            "steal": 100.0 * d[7] / max(sum(d[:8]), 1) if len(d) > 7 else 0.0}
    text = render(e, a, meta, res)
    with open(os.path.join(a.out, "round2.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    if a.write:
        write_results(text)


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
