#!/usr/bin/env python3
"""pyperf against py-spy (and perf) on the same workloads, in the same run. Driven by bench/run.sh, which builds
the binaries and installs py-spy first; see bench/README.md for what is measured and how.

Prints a markdown report and writes it to bench/out/profilers.md; with --write also into bench/RESULTS.md, between
the markers of the section "Profiler comparison".
"""
import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from common import NCPU, loadavg, logger, median, pin, write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "workloads", "work.py")
BEGIN = "<!-- bench/run.sh: begin (generated, replaced by the next `bench/run.sh --write`) -->"
END = "<!-- bench/run.sh: end -->"

TARGET_CPU = str(NCPU - 1)  # workloads of experiments 1, 2, 4, 6 run pinned here
TOOL_CPU = "0"  # profilers of those experiments run pinned here (when there are 2+ CPUs)

started_pids = []  # workloads we started, killed by pid on exit


log = logger("bench")


class Workload:
    """A workload process (bench/workloads/work.py), started and waited for "ready"."""

    def __init__(self, args, python, cpu=None):
        cmd = [python, WORK] + [str(a) for a in args]
        if cpu is not None:
            cmd = pin(cpu, cmd)
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True)
        started_pids.append(self.p.pid)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError("workload %r did not start: %r" % (args, line))
        self.pid = self.p.pid

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def result(self, timeout=600):
        out = self.p.stdout.read()
        self.p.wait(timeout)
        started_pids.remove(self.p.pid)
        return out

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        if self.p.pid in started_pids:
            started_pids.remove(self.p.pid)


class Run:
    """A profiler process; `finish` waits for it and takes its CPU time (rusage) and its output."""

    def __init__(self, cmd, cpu=TOOL_CPU):
        self.cmd = pin(cpu, cmd) if cpu is not None else cmd
        self.out = tempfile.TemporaryFile()
        self.p = subprocess.Popen(self.cmd, stdout=self.out, stderr=subprocess.STDOUT)
        self.t0 = time.time()

    def finish(self, timeout=600, check=True):
        deadline = time.time() + timeout
        while True:
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                self.p.kill()
                pid, status, ru = os.wait4(self.p.pid, 0)
                break
            time.sleep(0.02)
        self.p.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        self.cpu_s = ru.ru_utime + ru.ru_stime
        self.wall_s = time.time() - self.t0
        self.out.seek(0)
        self.text = self.out.read().decode("utf-8", "replace")
        self.out.close()
        if check and self.p.returncode != 0:
            raise RuntimeError("%s failed (%s):\n%s" % (" ".join(self.cmd), self.p.returncode, self.text[-2000:]))
        return self


def fresh(path):
    """Removes an earlier output (and the .old pyperf keeps), so that its appearance tells the profiler started."""
    for p in (path, path + ".old"):
        if os.path.exists(p):
            os.unlink(p)
    return path


def wait_started(run, out, extra=0.3, timeout=30):
    """pyperf creates its output only once the BPF program is loaded and the targets are registered, perf once its
    events are open: wait for it (py-spy, whose output appears at its end: a fixed second), then `extra` more."""
    deadline = time.time() + timeout
    if not out.endswith(".txt"):  # py-spy's output appears only at its end
        while not os.path.exists(out) and time.time() < deadline and run.p.poll() is None:
            time.sleep(0.02)
    else:
        time.sleep(1.0)
    time.sleep(extra)


def num(pattern, text, conv=float):
    m = re.search(pattern, text)
    return conv(m.group(1)) if m else None


class Tools:
    def __init__(self, a):
        self.pyperf = a.pyperf
        self.intern = a.pyperf_intern
        self.before = a.pyperf_before
        self.pyspy = a.py_spy
        self.perf = a.perf
        self.python = a.python
        self.out = a.out

    # ---- one recording per tool ----------------------------------------------------------------------------------

    def pyperf_cmd(self, pids, rate, secs, out, binary=None, bpf_stats=True):
        cmd = [binary or self.pyperf, "record", "-F", str(rate), "-o", out, "-p", ",".join(str(p) for p in pids)]
        if secs:
            cmd += ["-d", str(secs)]
        if bpf_stats:
            cmd.append("--bpf-stats")
        return cmd

    def parse_pyperf(self, r, out):
        t = r.text
        r.samples = num(r"pyperf: [0-9.]+ s, (\d+) samples", t, int)
        r.lost = num(r" samples, (\d+) lost", t, int)
        r.bpf_run_ns = num(r"BPF (\d+) runs, ", t, int)
        per_run = num(r"runs, ([0-9.]+) ns per run", t)
        r.bpf_total_ns = per_run * r.bpf_run_ns if per_run is not None and r.bpf_run_ns else None
        r.bpf_ns_per_sample = num(r"([0-9.]+) ns per target sample", t)
        r.size = os.path.getsize(out)
        if r.samples is None:
            raise RuntimeError("cannot parse pyperf's summary:\n" + t)
        return r

    def pyspy_cmd(self, pid, rate, secs, out, nonblocking=False):
        cmd = [self.pyspy, "record", "-r", str(rate), "-p", str(pid), "-f", "raw", "-o", out]
        if secs:
            cmd += ["-d", str(int(round(secs)))]  # py-spy takes whole seconds
        if nonblocking:
            cmd.append("--nonblocking")
        return cmd

    def parse_pyspy(self, r, out):
        r.samples = num(r"Samples: (\d+)", r.text, int)
        r.errors = num(r"Errors: (\d+)", r.text, int)
        r.size = os.path.getsize(out) if os.path.exists(out) else 0
        if r.samples is None:
            raise RuntimeError("cannot parse py-spy's output:\n" + r.text)
        return r

    def record_pyperf(self, pid, rate, secs, binary=None, tag="p"):
        out = os.path.join(self.out, "tmp-%s.pyp" % tag)
        r = Run(self.pyperf_cmd([pid], rate, secs, out, binary)).finish()
        return self.parse_pyperf(r, out)

    def record_pyspy(self, pid, rate, secs, nonblocking=False):
        out = os.path.join(self.out, "tmp-pyspy.txt")
        r = Run(self.pyspy_cmd(pid, rate, secs, out, nonblocking)).finish()
        return self.parse_pyspy(r, out)


# ---- 1. cost per sample ---------------------------------------------------------------------------------------------


def task_ns(pid):
    """On-CPU ns of all threads of pid so far (schedstat: user + system, ns resolution)."""
    total = 0
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def exp_cost(t, a):
    """Recorder and py-spy CPU per sample in steady state, on one busy process at 1 kHz: the profiler's on-CPU
    time (all threads, /proc/PID/task/*/schedstat, ns) from 0.5 s after it started sampling to about 1 s before its
    end, over the samples of that window (its share of the run's samples: the rate is steady). Start-up (pyperf:
    mostly the kernel verifying the BPF program) is reported apart: rusage CPU of the whole run minus the samples
    at the steady cost. BPF run time per sample from the kernel's bpf_stats (all runs of the program, also the
    cheap ones on other processes, over the samples taken)."""
    rate = 1000
    secs = a.cost_secs
    rows = {}
    for depth in (20, 200):
        res = {k: [] for k in ("bpf", "bpf_i", "rec", "rec_i", "spy", "rec_start", "spy_start", "bytes",
                               "spy_rate", "bpf_b", "rec_b")}
        for rep in range(a.reps):
            wl = Workload(["busy", depth, 3600], t.python, TARGET_CPU)
            try:
                tools = ["pyperf", "pyspy"] + (["intern"] if t.intern else []) + (["before"] if t.before else [])
                if rep % 2:
                    tools.reverse()
                for tool in tools:
                    if tool == "pyspy":
                        out = fresh(os.path.join(t.out, "tmp-pyspy.txt"))
                        run = Run(t.pyspy_cmd(wl.pid, rate, secs, out))
                    else:
                        out = fresh(os.path.join(t.out, "tmp-%s.pyp" % tool))
                        binary = {"intern": t.intern, "before": t.before}.get(tool)
                        run = Run(t.pyperf_cmd([wl.pid], rate, secs, out, binary))
                    wait_started(run, out, 0.5)
                    c1, t1 = task_ns(run.p.pid), time.time()
                    # End the window 1 s before the profiler stops sampling (py-spy starts at once, pyperf when
                    # its output appears).
                    time.sleep(max(min(t1 + secs - 1.5, run.t0 + secs - 1.0) - time.time(), 0.5))
                    c2, t2 = task_ns(run.p.pid), time.time()
                    run.finish()
                    r = t.parse_pyspy(run, out) if tool == "pyspy" else t.parse_pyperf(run, out)
                    # Samples are spread evenly over the sampling time: pyperf's -d starts after its start-up;
                    # py-spy starts at once and, when it cannot keep up, runs until it has rate x seconds.
                    span = secs if tool != "pyspy" else max(run.wall_s - 0.1, secs)
                    window_samples = r.samples * (t2 - t1) / span
                    steady = (c2 - c1) / max(window_samples, 1)
                    start = max(r.cpu_s - steady * r.samples / 1e9, 0) * 1e3
                    if tool == "pyspy":
                        res["spy"].append(steady)
                        res["spy_start"].append(start)
                        res["spy_rate"].append(r.samples / span)
                    elif tool == "pyperf":
                        res["rec"].append(steady)
                        res["rec_start"].append(start)
                        res["bpf"].append(r.bpf_ns_per_sample)
                        res["bytes"].append(r.size / max(r.samples, 1))
                    elif tool == "before":
                        res["rec_b"].append(steady)
                        res["bpf_b"].append(r.bpf_ns_per_sample)
                    else:
                        res["rec_i"].append(steady)
                        res["bpf_i"].append(r.bpf_ns_per_sample)
                    log("cost depth %d rep %d %s: %d samples, steady %.0f ns/sample, start-up %.0f ms CPU%s" % (
                        depth, rep, tool, r.samples, steady, start,
                        "" if tool == "pyspy" else ", BPF %.0f ns/sample" % r.bpf_ns_per_sample))
            finally:
                wl.kill()
        rows[depth] = {k: median(v) for k, v in res.items()}
        rows[depth]["n"] = a.reps
    return rows


# ---- 2. slowdown ----------------------------------------------------------------------------------------------------


def exp_slowdown(t, a):
    """Wall time of a fixed amount of Python work (20-frame stack), pinned to one CPU, without a profiler and under
    each profiler (pinned to another CPU, attached before the work starts). Paired per repetition: each profiled
    run is divided by the unprofiled run of the same repetition; medians of those ratios.
    Two references: "floor" = pyperf sampling ANOTHER (sleeping) process, so that on the target's CPU only the
    sampling interrupt and the program's first map lookup happen (what any perf-event sampler costs there), and
    plain `perf record -e cpu-clock` (no call graphs) on the target."""
    depth = 20
    # Calibrate: units for about a.work_secs of work.
    walls = []
    for _ in range(2):
        wl = Workload(["fixed", depth, 2000], t.python, TARGET_CPU)
        wl.go()
        walls.append(float(wl.result().split()[1]))
    units = max(int(2000 * a.work_secs / min(walls)), 1)
    log("slowdown: %d units = about %.1f s of work" % (units, a.work_secs))
    conds = [("none", None, 0)]
    for rate in (100, 1000, 10000):
        conds += [("pyperf", "pyperf", rate), ("py-spy", "pyspy", rate)]
        if t.before and rate >= 1000:
            conds.append(("pyperf-before", "before", rate))
        if rate >= 1000:
            conds += [("floor", "floor", rate), ("perf", "perf", rate)]
    walls = {(n, r): [] for n, _, r in conds}
    cpus = {(n, r): [] for n, _, r in conds}
    ratios = {(n, r): [] for n, _, r in conds}
    for rep in range(a.reps):
        order = conds[rep % len(conds):] + conds[:rep % len(conds)]
        rep_wall = {}
        for name, tool, rate in order:
            wl = Workload(["fixed", depth, units], t.python, TARGET_CPU)
            prof = None
            idle = None
            try:
                if tool == "floor":
                    idle = subprocess.Popen([t.python, "-c", "import time; time.sleep(3600)"])
                    started_pids.append(idle.pid)
                    out = fresh(os.path.join(t.out, "tmp-slow.pyp"))
                    prof = Run(t.pyperf_cmd([idle.pid], rate, None, out, bpf_stats=False))
                elif tool == "perf":
                    out = fresh(os.path.join(t.out, "tmp-slow.data"))
                    prof = Run([t.perf, "record", "-q", "-e", "cpu-clock", "-F", str(rate), "-p", str(wl.pid), "-o",
                                out])
                elif tool in ("pyperf", "before"):
                    out = fresh(os.path.join(t.out, "tmp-slow.pyp"))
                    prof = Run(t.pyperf_cmd([wl.pid], rate, None, out, t.before if tool == "before" else None,
                                            bpf_stats=False))
                elif tool == "pyspy":
                    out = fresh(os.path.join(t.out, "tmp-slow.txt"))
                    prof = Run(t.pyspy_cmd(wl.pid, rate, None, out))
                if prof:
                    wait_started(prof, out, a.attach_secs)
                else:
                    time.sleep(1.0 + a.attach_secs)
                wl.go()
                w, c = [float(x) for x in wl.result().split()[1:3]]
                if tool in ("floor", "perf"):
                    prof.p.send_signal(signal.SIGINT)
                    prof.finish(120, check=False)
                elif prof:
                    prof.finish(120)
            except Exception:
                wl.kill()
                raise
            finally:
                if idle:
                    idle.kill()
                    idle.wait()
                    started_pids.remove(idle.pid)
            walls[(name, rate)].append(w)
            cpus[(name, rate)].append(c)
            rep_wall[(name, rate)] = w
            log("slowdown rep %d %s %s Hz: %.3f s wall, %.3f s CPU" % (rep, name, rate or "-", w, c))
        for k, w in rep_wall.items():
            ratios[k].append(w / rep_wall[("none", 0)])
    base = walls[("none", 0)]
    return {
        "units": units,
        "base_median": median(base),
        "base_spread": (max(base) - min(base)) / median(base) if base else None,
        "rows": {k: {"wall": median(walls[k]), "cpu": median(cpus[k]), "slow": median(ratios[k]) - 1} for k in walls},
    }


# ---- 2b. slowdown, one process, profiler attached and detached --------------------------------------------------


def exp_toggle(t, a):
    """One long-lived workload process (20 frames, pinned) doing the same chunk of work again and again and
    printing the clocks after each; windows without a profiler alternate with windows under one (pyperf, floor,
    perf, py-spy at a.toggle_rate), each profiled window compared with the mean of the unprofiled windows on either
    side. Within one process, the differences between processes (memory layout, hash seeds: the 'none' spread of
    experiment 2) are gone, and a chunk that was preempted is one outlier among ~150 in a window (medians)."""
    import threading

    depth, rate = 20, a.toggle_rate
    # Calibrate the chunk: ~20 ms of work.
    probe = Workload(["chunks", depth, 20], t.python, TARGET_CPU)
    lines = [probe.p.stdout.readline() for _ in range(30)]
    probe.kill()
    walls = [float(x.split()[0]) for x in lines[5:]]
    per_unit = (walls[-1] - walls[0]) / (len(walls) - 1) / 20
    units = max(int(0.020 / per_unit), 1)
    wl = Workload(["chunks", depth, units], t.python, TARGET_CPU)
    chunks = []

    def reader():
        for line in wl.p.stdout:
            w, c = line.split()
            chunks.append((float(w), float(c)))

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    tools = a.toggle_tools
    windows = []  # (tool, start, end)
    idle = subprocess.Popen([t.python, "-c", "import time; time.sleep(3600)"])
    started_pids.append(idle.pid)
    try:
        time.sleep(1.0)
        for rep in range(a.toggle_reps):
            order = tools[rep % len(tools):] + tools[:rep % len(tools)]
            for tool in order:
                windows.append(("none",) + sleep_window(a.toggle_secs))
                windows.append(toggle_window(t, a, wl, idle, tool, rate))
            log("toggle rep %d done" % rep)
        windows.append(("none",) + sleep_window(a.toggle_secs))
    finally:
        wl.kill()
        idle.kill()
        idle.wait()
        started_pids.remove(idle.pid)
    th.join(5)

    def stat(start, end):
        ws, cs = [], []
        for (w0, c0), (w1, c1) in zip(chunks, chunks[1:]):
            if w0 >= start and w1 <= end:
                ws.append(w1 - w0)
                cs.append(c1 - c0)
        return (median(ws), median(cs), len(ws)) if ws else (None, None, 0)

    stats = [(tool,) + stat(s0, s1) for tool, s0, s1 in windows]
    res = {tool: {"wall": [], "cpu": [], "chunks": 0} for tool in ("pyperf", "floor", "perf", "pyspy") + tuple(tools)}
    for i, (tool, w, c, n) in enumerate(stats):
        if tool == "none" or w is None:
            continue
        before = [x for x in stats[:i] if x[0] == "none" and x[1] is not None][-1:]
        after = [x for x in stats[i + 1:] if x[0] == "none" and x[1] is not None][:1]
        ref = before + after
        if not ref:
            continue
        res[tool]["wall"].append(w / (sum(x[1] for x in ref) / len(ref)) - 1)
        res[tool]["cpu"].append(c / (sum(x[2] for x in ref) / len(ref)) - 1)
        res[tool]["chunks"] += n
    base = [x for x in stats if x[0] == "none" and x[1] is not None]
    return {
        "units": units,
        "chunk_ms": 1e3 * median([x[1] for x in base]),
        "none_spread": (max(x[1] for x in base) - min(x[1] for x in base)) / median([x[1] for x in base]),
        "rate": rate,
        "rows": res,
    }


def sleep_window(secs):
    t0 = time.perf_counter()
    time.sleep(secs)
    t1 = time.perf_counter()
    time.sleep(0.2)  # the gap before the next window's profiler starts
    return t0, t1


def toggle_window(t, a, wl, idle, tool, rate):
    """Starts `tool` on the workload (floor: pyperf on the sleeping `idle` process), waits until it samples, measures
    a window, stops it."""
    if tool == "pyperf":
        out = fresh(os.path.join(t.out, "tmp-toggle.pyp"))
        prof = Run(t.pyperf_cmd([wl.pid], rate, None, out, bpf_stats=False))
    elif tool == "floor":
        out = fresh(os.path.join(t.out, "tmp-toggle.pyp"))
        prof = Run(t.pyperf_cmd([idle.pid], rate, None, out, bpf_stats=False))
    elif tool in ("perf", "perf-a", "perf-c0"):
        # perf: per-task events on the target (only its CPU is interrupted); perf-a: one event per CPU, every CPU
        # interrupted; perf-c0: only the profiler's CPU interrupted (does that slow the target's CPU?).
        out = fresh(os.path.join(t.out, "tmp-toggle.data"))
        where = {"perf": ["-p", str(wl.pid)], "perf-a": ["-a"], "perf-c0": ["-C", TOOL_CPU]}[tool]
        prof = Run([t.perf, "record", "-q", "-e", "cpu-clock", "-F", str(rate), "-o", out] + where)
    else:
        out = fresh(os.path.join(t.out, "tmp-toggle.txt"))
        prof = Run(t.pyspy_cmd(wl.pid, rate, None, out))
    wait_started(prof, out, 0.3)
    t0 = time.perf_counter()
    time.sleep(a.toggle_secs)
    t1 = time.perf_counter()
    prof.p.send_signal(signal.SIGINT)
    prof.finish(120, check=False)
    time.sleep(0.2)
    return (tool, t0, t1)


# ---- 3. highest rate without loss, every CPU busy -------------------------------------------------------------------


def max_sample_rate():
    try:
        with open("/proc/sys/kernel/perf_event_max_sample_rate") as f:
            return int(f.read())
    except OSError:
        return None


def oncpu_ns(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/schedstat" % pid) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def exp_maxrate(t, a):
    """NCPU busy Python processes (20 frames, not pinned): pyperf at increasing rates per CPU; samples taken, lost
    (ring buffer full), samples per second of the targets' on-CPU time (schedstat) against the rate asked. Then
    py-spy on each process at the same rate, for comparison: its samples/s per process (it never drops a sample,
    it falls behind)."""
    rows = []
    secs = a.rate_secs
    for rate in a.rates:
        wls = [Workload(["busy", 20, 3600], t.python) for _ in range(NCPU)]
        try:
            out = fresh(os.path.join(t.out, "rate-%d.pyp" % rate))
            run = Run(t.pyperf_cmd([w.pid for w in wls], rate, secs, out), cpu=None)
            wait_started(run, out, 0.5)  # start-up (BPF verification) done: sampling runs
            c0, t0, r0 = oncpu_ns([w.pid for w in wls]), time.time(), task_ns(run.p.pid)
            time.sleep(max(t0 + secs - 1.5 - time.time(), 0.5))
            c1, t1, r1 = oncpu_ns([w.pid for w in wls]), time.time(), task_ns(run.p.pid)
            r = t.parse_pyperf(run.finish(), out)
            per_oncpu = None
            spy = None
            if rate <= a.pyspy_max_rate:
                outs = [os.path.join(t.out, "tmp-rate-%d.txt" % i) for i in range(len(wls))]
                runs = [Run(t.pyspy_cmd(w.pid, rate, secs, o), cpu=None) for w, o in zip(wls, outs)]
                spy = [t.parse_pyspy(x.finish(), o) for x, o in zip(runs, outs)]
        finally:
            for w in wls:
                w.kill()
        row = {
            "rate": rate,
            "samples": r.samples,
            "lost": r.lost,
            "per_cpu": r.samples / secs / NCPU,
            # Targets' CPU share while sampling; samples per second of target on-CPU time ~ the rate achieved
            # (the window's share of the samples: the rate is steady).
            "busy": (c1 - c0) / 1e9 / (t1 - t0) / NCPU,
            "per_oncpu": r.samples * (t1 - t0) / secs / max((c1 - c0) / 1e9, 1e-9),
            "bpf": r.bpf_ns_per_sample,
            "rec_cpu": (r1 - r0) / 1e9 / (t1 - t0) * 100,
            "max_rate": max_sample_rate(),
            "spy_per_proc": (sum(x.samples for x in spy) / secs / len(spy)) if spy else None,
            "spy_cpu": (sum(x.cpu_s for x in spy) / secs * 100) if spy else None,
            "file": out,
        }
        rows.append(row)
        log("max rate %d Hz: %d samples (%.0f/s per CPU), %d lost, BPF %.0f ns/sample, kernel max rate %s%s" % (
            rate, r.samples, row["per_cpu"], r.lost, r.bpf_ns_per_sample or 0, row["max_rate"],
            "" if spy is None else ", py-spy %.0f samples/s per process" % row["spy_per_proc"]))
    return rows


# ---- 4. file size ---------------------------------------------------------------------------------------------------


def exp_size(t, a):
    """One busy process, 1 kHz, pyperf + py-spy (raw, --nonblocking so that it does not pause the process under
    the other two) + perf record -g, all three at once on the same process for the same seconds: bytes per
    sample of each file."""
    rows = []
    for depth in (20, 200):
        res = {"pyperf": [], "pyspy": [], "perf": []}
        for rep in range(max(a.reps // 2, 1)):
            wl = Workload(["busy", depth, 3600], t.python, TARGET_CPU)
            try:
                po = fresh(os.path.join(t.out, "size.pyp"))
                so = fresh(os.path.join(t.out, "size-pyspy.txt"))
                fo = fresh(os.path.join(t.out, "size-perf.data"))
                runs = [Run(t.pyperf_cmd([wl.pid], 1000, a.size_secs, po, bpf_stats=False)),
                        Run(t.pyspy_cmd(wl.pid, 1000, a.size_secs, so, nonblocking=True)),
                        Run([t.perf, "record", "-q", "-F", "1000", "-g", "-p", str(wl.pid), "-o", fo, "--",
                             "sleep", str(a.size_secs)])]
                p, s, f = [x.finish() for x in runs]
                t.parse_pyperf(p, po)
                t.parse_pyspy(s, so)
                perf_samples = perf_count(t, fo)
            finally:
                wl.kill()
            res["pyperf"].append(p.size / max(p.samples, 1))
            res["pyspy"].append(s.size / max(s.samples, 1))
            res["perf"].append(os.path.getsize(fo) / max(perf_samples, 1))
            log("size depth %d: pyperf %d B / %d samples, py-spy %d B / %d, perf %d B / %d" % (
                depth, p.size, p.samples, s.size, s.samples, os.path.getsize(fo), perf_samples))
        rows.append((depth, {k: median(v) for k, v in res.items()}))
    return rows


def perf_count(t, path):
    out = subprocess.run([t.perf, "report", "-i", path, "--stats"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, universal_newlines=True).stdout
    m = re.search(r"SAMPLE events:\s+(\d+)", out)
    return int(m.group(1)) if m else 0


# ---- 5. report speed ------------------------------------------------------------------------------------------------


def exp_report(t, a, real_file):
    """bench/report/run.sh (folded export vs plain zstd decompression) on its synthetic 10 M-sample recording, and
    on the biggest real recording of this run."""
    res = []
    for label, extra in (("synthetic, 10 M samples (bench/report)", []),
                         ("real, from experiment 3", ["--file", real_file] if real_file else None)):
        if extra is None:
            continue
        cmd = [os.path.join(ROOT, "bench", "report", "run.sh"), "--reps", str(max(a.reps, 5))] + extra
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                             cwd=ROOT).stdout
        res.append({
            "label": label,
            "samples": num(r"decompressed, (\d+) samples", out, int),
            "dec": num(r"decompress only: median ([0-9.]+) s", out),
            "fold": num(r"folded export:\s+median ([0-9.]+) s", out),
            "ratio": num(r"ratio folded / decompress: ([0-9.]+)", out),
        })
        log("report %s: %s" % (label, res[-1]))
    return res


# ---- 6. accuracy ----------------------------------------------------------------------------------------------------


def shares(lines):
    """(alpha, beta) sample counts from folded lines "a;b;c COUNT"."""
    al = be = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        if "alpha_work" in stack:
            al += int(count)
        elif "beta_work" in stack:
            be += int(count)
    return al, be


def exp_accuracy(t, a):
    """A workload alternating alpha_work() and beta_work() (about 70 / 30) that measures its own CPU time in each
    (time.thread_time around every call): each profiler's alpha share of the samples in either function against
    that truth, at 100 Hz and 1 kHz, one profiler at a time."""
    rows = {}
    for rate in (100, 1000):
        for tool in ("pyperf", "py-spy"):
            errs, got, truth, counts = [], [], [], []
            for rep in range(a.reps):
                wl = Workload(["split", a.acc_secs], t.python, TARGET_CPU)
                try:
                    if tool == "pyperf":
                        out = fresh(os.path.join(t.out, "tmp-acc.pyp"))
                        prof = Run(t.pyperf_cmd([wl.pid], rate, None, out, bpf_stats=False))
                    else:
                        out = fresh(os.path.join(t.out, "tmp-acc.txt"))
                        prof = Run(t.pyspy_cmd(wl.pid, rate, None, out))
                    wait_started(prof, out, a.attach_secs)
                    wl.go()
                    res = wl.result().split()
                    prof.finish(120)
                except Exception:
                    wl.kill()
                    raise
                a_cpu, b_cpu = float(res[1]), float(res[2])
                if tool == "pyperf":
                    folded = subprocess.run([t.pyperf, "report", "-i", out, "--folded", "--no-lines"],
                                            stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
                    al, be = shares(folded.splitlines())
                else:
                    with open(out) as f:
                        al, be = shares(f)
                share = 100.0 * al / max(al + be, 1)
                true = 100.0 * a_cpu / (a_cpu + b_cpu)
                got.append(share)
                counts.append(al + be)
                truth.append(true)
                errs.append(abs(share - true))
                log("accuracy %s %d Hz rep %d: %.2f%% (truth %.2f%%, %d samples)" % (tool, rate, rep, share, true,
                                                                                    al + be))
            p = median(got) / 100
            rows[(tool, rate)] = {"share": median(got), "truth": median(truth), "err": median(errs),
                                  "max_err": max(errs), "sd": 100 * (p * (1 - p) / max(median(counts), 1)) ** 0.5}
    return rows


# ---- report ---------------------------------------------------------------------------------------------------------


def fmt(v, spec="%.0f"):
    return "-" if v is None else spec % v


def verdict(ok):
    return "**met**" if ok else "**missed**"


def machine(t, load0, load1, a):
    def sh(cmd):
        try:
            return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                                  shell=True).stdout.strip()
        except OSError:
            return "?"

    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("awk '/MemTotal/ {printf \"%.0f GiB\", $2/1048576}' /proc/meminfo")
    return [
        "Machine: %s, %d CPUs, %s, Linux %s; target Python %s; %s; %s; pyperf %s." % (
            cpu, NCPU, mem, os.uname().release, sh("%s -c 'import sys; print(sys.version.split()[0])'" % t.python),
            sh("%s --version" % t.pyspy), sh("%s --version 2>&1 | head -1" % t.perf),
            sh("git -C %s describe --always --dirty" % ROOT)),
        "Run: `bench/run.sh%s`, ended %s, %d repetitions, load average (1, 5, 15 min) %s at the start, %s at the end." % (
            " --quick" if a.quick else "", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            a.reps, load0, load1),
    ]


def pct(x):
    return "-" if x is None else "%.2f%%" % (100 * x)


def render(t, a, load0, load1, cost, slow, toggle, rates, size, report, acc):
    L = []
    L += machine(t, load0, load1, a)
    L.append("")
    summary = []
    if cost:
        c = cost[20]
        total = c["bpf"] + c["rec"]
        ratio = c["spy"] / total
        summary.append(("Cost per sample, 1 kHz, 20 frames: pyperf (BPF + recorder) vs py-spy",
                        "<= 1/20 of py-spy", "%.1f us vs %.1f us = 1/%.0f" % (total / 1e3, c["spy"] / 1e3, ratio),
                        ratio >= 20))
    if toggle and toggle["rows"]["pyperf"]["wall"]:
        r = toggle["rows"]
        s = 100 * median(r["pyperf"]["wall"])
        summary.append(("Target slowdown under pyperf at 1 kHz (2b: one process, attached / detached)", "<= 1%",
                        "%.2f%% (interrupt floor %s, plain perf %s)" % (
                            s, pct(median(r["floor"]["wall"])), pct(median(r["perf"]["wall"]))), s <= 1.0))
    elif slow:
        s = slow["rows"][("pyperf", 1000)]["slow"] * 100
        summary.append(("Target slowdown under pyperf at 1 kHz", "<= 1%", "%.2f%%" % s, s <= 1.0))
    if rates:
        r10 = [r for r in rates if r["rate"] == 10000]
        if r10:
            r = r10[0]
            summary.append(("Lost samples at 10 kHz per CPU, every CPU busy", "0",
                            "%d of %d (%.0f samples/s per CPU)" % (r["lost"], r["samples"] + r["lost"], r["per_cpu"]),
                            r["lost"] == 0))
    if cost:
        b = cost[20]["bytes"]
        summary.append(("Bytes per sample on disk, steady workload at 1 kHz (20 frames)", "<= 8", "%.2f" % b, b <= 8))
    for rr in report or []:
        if rr["ratio"] is not None:
            summary.append(("Report: folded export / zstd decompression, %s" % rr["label"], "<= 2x",
                            "%.2fx" % rr["ratio"], rr["ratio"] <= 2.0))
    if acc:
        e = max(acc[("pyperf", r)]["err"] for r in (100, 1000))
        summary.append(("Share error (pyperf, median of repetitions, worst of 100 Hz / 1 kHz)", "<= 2 pp",
                        "%.2f pp" % e, e <= 2.0))
    L.append("| target | bound | measured | |")
    L.append("|---|---|---|---|")
    for what, bound, got, ok in summary:
        L.append("| %s | %s | %s | %s |" % (what, bound, got, verdict(ok)))
    L.append("")

    if cost:
        L.append("### 1. Cost per sample (1 kHz, one busy process, medians of %d)" % cost[20]["n"])
        L.append("")
        L.append("%g s recordings of a busy process. Recorder / py-spy: on-CPU time of the profiler process (all "
                 "threads, user + system, /proc/PID/task/*/schedstat) from 0.5 s after it started sampling "
                 "(pyperf: its output file exists; py-spy: 1 s after launch) to about 1 s before its end, over the "
                 "samples of that window. BPF: kernel bpf_stats run time of the program (all its "
                 "runs, also the cheap ones for other processes) over the samples taken. Start-up: CPU time of the "
                 "whole run (rusage) minus its samples at the steady cost (pyperf: mostly the kernel verifying the "
                 "BPF program)." % (a.cost_secs,))
        L.append("")
        L.append("| stack | pyperf BPF | pyperf recorder | **pyperf total** | py-spy | **py-spy / pyperf** | "
                 "py-spy's rate achieved | start-up CPU pyperf / py-spy |")
        L.append("|---|---|---|---|---|---|---|---|")
        for d in (20, 200):
            c = cost[d]
            tot = c["bpf"] + c["rec"]
            L.append("| %d frames | %s ns | %s ns | **%s ns** | %s ns | **%.0fx** | %s | %s / %s ms |" % (
                d, fmt(c["bpf"]), fmt(c["rec"]), fmt(tot), fmt(c["spy"]), c["spy"] / tot,
                fmt(c["spy_rate"], "%.0f/s"), fmt(c["rec_start"]), fmt(c["spy_start"])))
        L.append("")
        if cost[20].get("bpf_b") is not None:
            L.append("Before (%s, same run): BPF %s / %s ns per sample, recorder "
                     "%s / %s ns per sample (20 / 200 frames)." % (a.before_label, fmt(cost[20]["bpf_b"]),
                                                                  fmt(cost[200]["bpf_b"]),
                                                                  fmt(cost[20]["rec_b"]), fmt(cost[200]["rec_b"])))
            L.append("")
        if cost[20].get("bpf_i") is not None:
            L.append("In-kernel interning (issue 3): the same measurement with the bench-only BPF variant "
                     "(`-DPYPERF_BENCH_INTERN`: per new code object, co_name (64 B) and co_filename (128 B) read with "
                     "bpf_probe_read_user_str into a zeroed key, looked up / inserted in a BPF hash map).")
            L.append("")
            L.append("| stack | shipped: BPF ns/sample | interning: BPF ns/sample | extra per sample | extra per frame |")
            L.append("|---|---|---|---|---|")
            for d in (20, 200):
                c = cost[d]
                extra = c["bpf_i"] - c["bpf"]
                L.append("| %d frames | %s | %s | %s ns (+%.0f%%) | %.0f ns |" % (
                    d, fmt(c["bpf"]), fmt(c["bpf_i"]), fmt(extra), 100 * extra / c["bpf"], extra / d))
            L.append("")

    if slow:
        L.append("### 2. Target slowdown (20 frames, medians of %d paired repetitions)" % a.reps)
        L.append("")
        L.append("Fixed work (%d units, %.2f s unprofiled; spread of the unprofiled runs %.1f%%), workload pinned to "
                 "CPU %s, profiler to CPU %s, started (pyperf: output file created; py-spy: 1 s after launch) %.1f "
                 "s before the work starts. Slowdown = wall time / wall "
                 "time of the unprofiled run of the same repetition - 1." % (
                     slow["units"], slow["base_median"], 100 * slow["base_spread"], TARGET_CPU, TOOL_CPU,
                     a.attach_secs))
        L.append("")
        L.append("| rate | pyperf slowdown | py-spy slowdown | pyperf wall | py-spy wall | target CPU time pyperf / "
                 "py-spy |")
        L.append("|---|---|---|---|---|---|")
        L.append("| none | | | %.3f s | | %.3f s |" % (slow["rows"][("none", 0)]["wall"],
                                                          slow["rows"][("none", 0)]["cpu"]))
        for rate in (100, 1000, 10000):
            p, s = slow["rows"][("pyperf", rate)], slow["rows"][("py-spy", rate)]
            L.append("| %d Hz | **%.2f%%** | %.2f%% | %.3f s | %.3f s | %.3f / %.3f s |" % (
                rate, 100 * p["slow"], 100 * s["slow"], p["wall"], s["wall"], p["cpu"], s["cpu"]))
        L.append("")
        rows = slow["rows"]
        if ("floor", 1000) in rows:
            L.append("References, same run: **floor** (pyperf sampling another, sleeping process: on the target's CPU "
                     "only the sampling interrupt and one map lookup) %s; plain `perf record -e cpu-clock` (no call "
                     "graph) %s. pyperf's own share = its slowdown minus the floor: %s." % (
                         ", ".join("%.2f%% at %d Hz" % (100 * rows[("floor", r)]["slow"], r) for r in (1000, 10000)),
                         ", ".join("%.2f%% at %d Hz" % (100 * rows[("perf", r)]["slow"], r) for r in (1000, 10000)),
                         ", ".join("%.2f%% at %d Hz" % (100 * (rows[("pyperf", r)]["slow"] - rows[("floor", r)]["slow"]),
                                                       r) for r in (1000, 10000))))
            L.append("")
        if ("pyperf-before", 1000) in slow["rows"]:
            L.append("Before (%s, same run): %s." % (a.before_label, ", ".join(
                "%.2f%% at %d Hz" % (100 * slow["rows"][("pyperf-before", r)]["slow"], r) for r in (1000, 10000))))
            L.append("")

    if toggle:
        r = toggle["rows"]
        L.append("### 2b. Target slowdown, one process, profiler attached and detached (%d Hz, 20 frames)"
                 % toggle["rate"])
        L.append("")
        L.append("One workload process pinned to CPU %s repeats the same chunk of work (%d units, %.1f ms unprofiled) "
                 "and prints its clocks after each. %g s windows without a profiler alternate with %g s windows "
                 "under one (started, then measured from 0.3 s after it samples; pinned to CPU %s), %d per profiler, "
                 "in rotating order. Per window: the median chunk time; a profiled window's slowdown is its median "
                 "over the mean of the unprofiled windows either side, minus 1. Unprofiled windows spread %.2f%%. "
                 "Wall: what the target's work takes; CPU: the target thread's CPU time (the sampling interrupt and "
                 "the BPF program are charged to it, preemption by other processes is not)." % (
                     TARGET_CPU, toggle["units"], toggle["chunk_ms"], a.toggle_secs, a.toggle_secs, TOOL_CPU,
                     a.toggle_reps, 100 * toggle["none_spread"]))
        L.append("")
        L.append("| profiler | wall slowdown, median | min - max | CPU slowdown, median | windows | chunks |")
        L.append("|---|---|---|---|---|---|")
        names = {"pyperf": "**pyperf**", "floor": "floor: pyperf sampling another, sleeping process",
                 "perf": "`perf record -e cpu-clock -p` (no call graph)", "pyspy": "py-spy",
                 "perf-a": "`perf record -e cpu-clock -a` (every CPU)",
                 "perf-c0": "`perf record -e cpu-clock -C %s` (the other CPU only)" % TOOL_CPU}
        for tool in r:
            x = r[tool]
            if not x["wall"]:
                continue
            L.append("| %s | **%.2f%%** | %.2f%% - %.2f%% | %.2f%% | %d | %d |" % (
                names[tool], 100 * median(x["wall"]), 100 * min(x["wall"]), 100 * max(x["wall"]),
                100 * median(x["cpu"]), len(x["wall"]), x["chunks"]))
        L.append("")
        if r["pyperf"]["wall"] and r["floor"]["wall"]:
            L.append("pyperf's own part (its slowdown minus the floor): %.2f%% wall, %.2f%% CPU." % (
                100 * (median(r["pyperf"]["wall"]) - median(r["floor"]["wall"])),
                100 * (median(r["pyperf"]["cpu"]) - median(r["floor"]["cpu"]))))
            L.append("")

    if rates:
        L.append("### 3. Rate with every CPU busy (%d busy processes, 20 frames, %g s per rate)" % (NCPU, a.rate_secs))
        L.append("")
        L.append("Achieved = samples per second of the targets' own on-CPU time (schedstat, while recording): what "
                 "the rate asked means when the targets do not get a whole CPU each (the recorder and the rest of "
                 "the machine use some). Recorder CPU: share of one CPU, in the same window (start-up excluded). "
                 "py-spy: one per process, run after pyperf on the same processes.")
        L.append("")
        L.append("| requested per CPU | pyperf samples | **lost** | achieved | targets' CPU share | BPF ns/sample | "
                 "recorder CPU | kernel max sample rate after | py-spy achieved per process | py-spy CPU |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in rates:
            L.append("| %d Hz | %d | **%d** | %.0f/s | %.0f%% | %s | %.1f%% | %s | %s | %s |" % (
                r["rate"], r["samples"], r["lost"], r["per_oncpu"], 100 * r["busy"], fmt(r["bpf"]), r["rec_cpu"],
                r["max_rate"], fmt(r["spy_per_proc"], "%.0f/s"), fmt(r["spy_cpu"], "%.0f%%")))
        ok = [r["rate"] for r in rates if r["lost"] == 0]
        L.append("")
        L.append("Highest requested rate without a lost sample: %s." % ("%d Hz per CPU" % max(ok) if ok else "none"))
        L.append("")

    if size:
        L.append("### 4. File size (1 kHz, %g s, the three recorders on the same process at once)" % a.size_secs)
        L.append("")
        L.append("py-spy's raw output is folded text, one line per distinct stack with a count: no time, thread or "
                 "state per sample, so it stays small on a steady workload. perf.data holds each sample's native "
                 "call chain (no Python frames).")
        L.append("")
        L.append("| stack | pyperf .pyp | py-spy raw (folded text) | perf.data (`perf record -g`) |")
        L.append("|---|---|---|---|")
        for d, r in size:
            L.append("| %d frames | **%.2f B/sample** | %.2f B/sample (%.2fx pyperf's) | %.1f B/sample (%.0fx pyperf's) |"
                     % (d, r["pyperf"], r["pyspy"], r["pyspy"] / r["pyperf"], r["perf"], r["perf"] / r["pyperf"]))
        if cost:
            L.append("")
            L.append("pyperf alone (experiment 1's %g s recordings, the target's measure): %.2f B/sample (20 frames), "
                     "%.2f B/sample (200 frames)." % (a.cost_secs, cost[20]["bytes"], cost[200]["bytes"]))
        L.append("")

    if report:
        L.append("### 5. Report speed")
        L.append("")
        L.append("| recording | samples | zstd decompression | folded export | ratio |")
        L.append("|---|---|---|---|---|")
        for r in report:
            L.append("| %s | %s | %s s | %s s | **%s** |" % (r["label"], fmt(r["samples"], "%d"),
                                                           fmt(r["dec"], "%.4f"), fmt(r["fold"], "%.4f"),
                                                           fmt(r["ratio"], "%.2fx")))
        L.append("")

    if acc:
        L.append("### 6. Accuracy (alpha_work share of alpha + beta samples, %g s, medians of %d)" % (a.acc_secs,
                                                                                                      a.reps))
        L.append("")
        L.append("Sampling alone gives an error of about one binomial standard deviation, sqrt(p (1 - p) / n), "
                 "shown as 'sampling sd' for pyperf's sample count.")
        L.append("")
        L.append("| rate | truth (thread CPU time) | pyperf | pyperf error | sampling sd | py-spy | py-spy error |")
        L.append("|---|---|---|---|---|---|---|")
        for rate in (100, 1000):
            p, s = acc[("pyperf", rate)], acc[("py-spy", rate)]
            L.append("| %d Hz | %.2f%% | %.2f%% | **%.2f pp** (max %.2f) | %.2f pp | %.2f%% | %.2f pp (max %.2f) |" % (
                rate, p["truth"], p["share"], p["err"], p["max_err"], p["sd"], s["share"], s["err"], s["max_err"]))
        L.append("")
    return "\n".join(L) + "\n"


def write_results(text):
    log("wrote %s" % write_section("## Profiler comparison", BEGIN, END, "\n\n" + text + "\n"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pyperf", required=True)
    ap.add_argument("--pyperf-intern")
    ap.add_argument("--pyperf-before", help="an earlier pyperf binary, measured next to this one (experiments 1, 2)")
    ap.add_argument("--before-label", default="an earlier build", help="what --pyperf-before is, for the report")
    ap.add_argument("--py-spy", required=True)
    ap.add_argument("--perf", default="perf")
    ap.add_argument("--python", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--only", default="cost,slowdown,toggle,rates,size,report,accuracy")
    ap.add_argument("--write", action="store_true", help="also write the results into bench/RESULTS.md")
    ap.add_argument("--toggle-tools", default="pyperf,floor,perf,pyspy",
                    help="experiment 2b's profilers; also perf-a (perf on every CPU), perf-c0 (on the profiler's CPU)")
    a = ap.parse_args()
    if a.quick:
        a.reps = a.reps or 1
        a.cost_secs, a.work_secs, a.rate_secs, a.size_secs, a.acc_secs = 4, 1.0, 3, 2, 3
        a.rates = [1000, 10000]
    else:
        a.reps = a.reps or 5
        a.cost_secs, a.work_secs, a.rate_secs, a.size_secs, a.acc_secs = 8, 2.0, 6, 10, 10
        a.rates = [1000, 2000, 5000, 10000, 20000, 50000]
    a.pyspy_max_rate = 10000
    a.toggle_rate = 1000
    a.toggle_tools = a.toggle_tools.split(",")
    a.toggle_reps = 2 if a.quick else 12
    a.toggle_secs = 1.5 if a.quick else 3.0
    a.attach_secs = 0.5  # after the profiler has started (pyperf: its output exists; py-spy: 1 s)
    os.makedirs(a.out, exist_ok=True)
    only = set(a.only.split(","))
    t = Tools(a)
    load0 = loadavg()
    log("load average %s" % load0)
    cost = exp_cost(t, a) if "cost" in only else None
    slow = exp_slowdown(t, a) if "slowdown" in only else None
    toggle = exp_toggle(t, a) if "toggle" in only else None
    size = exp_size(t, a) if "size" in only else None
    acc = exp_accuracy(t, a) if "accuracy" in only else None
    rates = None
    if "rates" in only:
        saved = max_sample_rate()
        try:
            rates = exp_maxrate(t, a)
        finally:
            # The kernel lowers it when sampling interrupts take too long: put the machine back as it was.
            if saved is not None and max_sample_rate() != saved:
                with open("/proc/sys/kernel/perf_event_max_sample_rate", "w") as f:
                    f.write(str(saved))
                log("restored kernel.perf_event_max_sample_rate = %d" % saved)
    real = None
    if rates:
        real = max(rates, key=lambda r: r["samples"])["file"]
    report = exp_report(t, a, real) if "report" in only else None
    load1 = loadavg()
    text = render(t, a, load0, load1, cost, slow, toggle, rates, size, report, acc)
    with open(os.path.join(a.out, "profilers.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    if a.write:
        write_results(text)


if __name__ == "__main__":
    try:
        main()
    finally:
        for pid in list(started_pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
