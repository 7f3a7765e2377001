#!/usr/bin/env python3
"""What `pyperf record --off-cpu` (issue #14) costs: per context switch of a followed thread, per context switch of
the rest of the host, in target slowdown, and in file size. Python standard library only; needs root.

  bench/offcpu.py [--pyperf BIN] [--python PY] [--reps N] [--secs S] [--rate SWITCHES] [--quick] [--write]

Without --pyperf it builds the release binary (`cargo build --release --locked --bin pyperf`) and measures a copy
(bench/out/bin/pyperf-offcpu: other work in the tree may rebuild target/release meanwhile). The target interpreter
is $PYTHON, else pyenv's 3.11.7, else python3. `bench/run.sh --only offcpu [--quick] [--reps N] [--write]` runs
this script alone. See bench/README.md ("bench/offcpu.py") for what is measured and how.

Prints a markdown report and writes it to bench/out/offcpu.md; with --write also into bench/RESULTS.md, between the
markers of the section "Off-CPU recording (issue #14)".
"""
import argparse
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from common import NCPU, loadavg, logger, median, pin, write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PINGPONG = os.path.join(ROOT, "bench", "workloads", "pingpong.py")
SECTION = "## Off-CPU recording (issue #14)"
BEGIN = "<!-- bench/offcpu.py: begin (generated, replaced by the next `bench/offcpu.py --write`) -->"
END = "<!-- bench/offcpu.py: end -->"

TARGET_CPU = str(NCPU - 1)  # the ping-pong runs pinned here (both threads)
TOOL_CPU = "0"  # pyperf runs pinned here

started = []  # processes we started, killed by pid on exit

# Targets of issue #14.
MAX_FOLLOWED_NS = 2000
MAX_UNRELATED_NS = 100


log = logger("offcpu")


def steal_jiffies():
    with open("/proc/stat") as f:
        v = f.readline().split()
    return int(v[8]) if len(v) > 8 else 0


def bpf_stats_sysctl():
    try:
        with open("/proc/sys/kernel/bpf_stats_enabled") as f:
            return f.read().strip()
    except OSError:
        return "?"


class PingPong:
    """bench/workloads/pingpong.py run SECS WORK: started, waited for "ready"; `go` starts the timed window."""

    def __init__(self, a, secs, work, split=False):
        cmd = [a.python, PINGPONG, "run", str(secs), str(work)]
        env = dict(os.environ)
        if split:
            # main thread on the target CPU, the other thread on the tool's CPU: every switch a block in read
            env["PINGPONG_CPUS"] = "%s,%s" % (TARGET_CPU, TOOL_CPU)
        else:
            env.pop("PINGPONG_CPUS", None)
            cmd = pin(TARGET_CPU, cmd)
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True,
                                  env=env)
        started.append(self.p)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError("ping-pong did not start: %r" % line)
        self.pid = self.p.pid

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def result(self, timeout):
        deadline = time.time() + timeout
        line = self.p.stdout.readline()
        m = re.match(r"result (\d+) ([0-9.]+) (\d+) (\d+) (\d+) (\d+)", line)
        if not m:
            raise RuntimeError("ping-pong: no result: %r" % line)
        self.p.wait(max(deadline - time.time(), 1))
        started.remove(self.p)
        n, secs, sw, vol = int(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4))
        cpu_ns, wait_ns = int(m.group(5)), int(m.group(6))
        # cpu_share: the threads' on-CPU time over the window (1 = no other process took their CPU)
        return {"rt_s": n / secs, "sw_s": sw / secs, "vol": vol / max(sw, 1), "secs": secs, "switches": sw,
                "cpu_share": cpu_ns / 1e9 / secs, "wait_share": wait_ns / 1e9 / secs}


class Profiler:
    """One `pyperf record` run; `finish` stops it (SIGINT unless it ends with its target) and parses its summary."""

    def __init__(self, a, args, out):
        for p in (out, out + ".old"):
            if os.path.exists(p):
                os.unlink(p)
        self.out = out
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen(pin(TOOL_CPU, [a.pyperf, "record"] + args + ["-o", out]), stdout=self.log,
                                  stderr=subprocess.STDOUT)
        started.append(self.p)
        # pyperf creates its output once the BPF programs are loaded and the target is registered
        deadline = time.time() + 60
        while not os.path.exists(out) and self.p.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        if not os.path.exists(out):
            raise RuntimeError("pyperf did not start:\n%s" % self.text())
        time.sleep(a.settle)

    def text(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def finish(self, follows_target):
        if not follows_target:
            self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        started.remove(self.p)
        text = self.text()
        self.log.close()
        if self.p.returncode != 0:
            raise RuntimeError("pyperf exited %s:\n%s" % (self.p.returncode, text[-3000:]))
        return parse(text, os.path.getsize(self.out))


def parse(text, size):
    r = {"size": size, "text": text}

    def num(pattern, conv=float):
        m = re.search(pattern, text)
        return conv(m.group(1)) if m else None

    r["samples"] = num(r"pyperf: [0-9.]+ s, (\d+) samples", int)
    r["intervals"] = num(r"pyperf: (\d+) off-CPU intervals", int)
    r["sampled"] = num(r"off-CPU intervals \((\d+) short ones sampled", int)
    r["dropped"] = num(r"short ones sampled, (\d+) dropped", int)
    r["lost"] = num(r"dropped, (\d+) lost\)", int)
    r["followed_ns"] = num(r"([0-9.]+) ns per followed switch")
    r["followed"] = num(r"ns per followed switch \((\d+) switches\)", int)
    r["progs"] = {}
    for name in ("sched_switch", "sched_wakeup", "sys_exit"):
        m = re.search(r"%s (\d+) runs, ([0-9.]+) ns per run" % name, text)
        if m:
            r["progs"][name] = (int(m.group(1)), float(m.group(2)))
    return r


class Idle:
    """An idle Python process (sleeping): what pyperf records when the ping-pong is *not* followed."""

    def __init__(self, a):
        self.p = subprocess.Popen(pin(TOOL_CPU, [a.python, "-c", "import time; time.sleep(100000)"]))
        started.append(self.p)
        time.sleep(0.3)  # let it become Python
        self.pid = self.p.pid


class Floor:
    """Reference programs, not pyperf's: minimal raw-tracepoint BPF programs on the same three tracepoints, loaded
    with the bpf(2) system call directly (ctypes), with the kernel's run-time statistics on (BPF_ENABLE_STATS) while
    they are attached. "empty" returns at once: what any program on these tracepoints costs here (the tracepoint,
    the BPF dispatch and the statistics' own clock reads). "lookup" does the map work of pyperf's unrelated path:
    bpf_get_current_pid_tgid() and one lookup of the tgid in a 4096-entry hash map (two in sched_switch), without
    pyperf's task-field loads. A raw tracepoint runs through the same __bpf_trace_run as pyperf's tp_btf programs."""

    NR_BPF = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine, 321)
    TRACEPOINTS = ("sched_switch", "sched_wakeup", "sys_exit")

    def __init__(self, kind, stats=True):
        import ctypes
        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fds = []
        self.progs = {}
        try:
            if stats:
                self.fds.append(self.bpf(32, struct_pack("I", 0)))  # BPF_ENABLE_STATS, BPF_STATS_RUN_TIME
            map_fd = None
            if kind == "lookup":
                # BPF_MAP_CREATE: hash, u32 key, 128-byte value, 4096 entries
                map_fd = self.bpf(0, struct_pack("IIIII", 1, 4, 128, 4096, 0))
                self.fds.append(map_fd)
            for tp in self.TRACEPOINTS:
                insns = self.program(kind, map_fd, 2 if tp == "sched_switch" else 1)
                prog = self.load(insns, ("floor_" + tp)[:15])
                name = self.ctypes.create_string_buffer(tp.encode())
                link = self.bpf(17, struct_pack("QI", self.ctypes.addressof(name), prog))  # RAW_TRACEPOINT_OPEN
                self.fds.append(link)
                self.progs[tp] = prog
        except BaseException:
            self.close()
            raise

    def bpf(self, cmd, attr):
        buf = self.ctypes.create_string_buffer(attr, max(len(attr), 16))
        r = self.libc.syscall(self.NR_BPF, cmd, buf, len(buf))
        if r < 0:
            e = self.ctypes.get_errno()
            raise OSError(e, "bpf(%d): %s" % (cmd, os.strerror(e)))
        return r

    @staticmethod
    def program(kind, map_fd, lookups):
        def insn(code, dst=0, src=0, off=0, imm=0):
            return struct_pack("BBhi", code, (src << 4) | dst, off, imm)

        code = b""
        if kind == "lookup":
            for k in range(lookups):
                code += insn(0x85, imm=14)  # call bpf_get_current_pid_tgid
                code += insn(0x77, dst=0, imm=32)  # r0 >>= 32 (tgid)
                if k:
                    code += insn(0x07, dst=0, imm=k)  # r0 += k: another key (pyperf looks up prev's and next's)
                code += insn(0x63, dst=10, src=0, off=-4)  # *(u32 *)(r10 - 4) = r0
                code += insn(0x18, dst=1, src=1, imm=map_fd) + insn(0)  # r1 = map (ld_imm64, BPF_PSEUDO_MAP_FD)
                code += insn(0xbf, dst=2, src=10)  # r2 = r10
                code += insn(0x07, dst=2, imm=-4)  # r2 += -4
                code += insn(0x85, imm=1)  # call bpf_map_lookup_elem
        code += insn(0xb7, dst=0, imm=0)  # r0 = 0
        code += insn(0x95)  # exit
        return code

    def load(self, insns, name):
        c = self.ctypes
        ins = c.create_string_buffer(insns, len(insns))
        lic = c.create_string_buffer(b"GPL")
        log = c.create_string_buffer(65536)
        # BPF_PROG_LOAD: prog_type RAW_TRACEPOINT (17), insn_cnt, insns, license, log_level, log_size, log_buf,
        # kern_version, prog_flags, prog_name[16]
        attr = struct_pack("IIQQIIQII", 17, len(insns) // 8, c.addressof(ins), c.addressof(lic), 1, len(log),
                           c.addressof(log), 0, 0) + name.encode().ljust(16, b"\0")
        try:
            fd = self.bpf(5, attr)
        except OSError as e:
            raise OSError(e.errno, "%s: %s" % (e, log.value.decode("utf-8", "replace")[-2000:]))
        self.fds.append(fd)
        return fd

    def stats(self):
        """{tracepoint: (runs, ns per run)}, from the programs' /proc/self/fdinfo."""
        r = {}
        for tp, fd in self.progs.items():
            v = {}
            with open("/proc/self/fdinfo/%d" % fd) as f:
                for line in f:
                    k, _, val = line.partition(":")
                    v[k.strip()] = val.strip()
            runs = int(v.get("run_cnt", 0))
            r[tp] = (runs, int(v.get("run_time_ns", 0)) / max(runs, 1))
        return r

    def close(self):
        for fd in reversed(self.fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def struct_pack(fmt, *v):
    import struct
    return struct.pack("<" + fmt, *v)


# Conditions. Slowdown: no --bpf-stats (kernel BPF statistics time every program run, which costs by itself).
# follows: pyperf follows the ping-pong (ends when it exits) rather than the idle process.
CONDITIONS = {
    "none": {"args": None, "follows": False},
    "cpu": {"args": [], "follows": True},
    "offcpu": {"args": ["--off-cpu"], "follows": True},
    "unrelated": {"args": ["--off-cpu"], "follows": False},
    "stats-1ms": {"args": ["--off-cpu", "--bpf-stats"], "follows": True},
    "stats-0": {"args": ["--off-cpu", "--off-cpu-min", "0", "--bpf-stats"], "follows": True},
    "stats-unrelated": {"args": ["--off-cpu", "--bpf-stats"], "follows": False},
    "split-1ms": {"args": ["--off-cpu", "--bpf-stats"], "follows": True, "split": True},
    "split-0": {"args": ["--off-cpu", "--off-cpu-min", "0", "--bpf-stats"], "follows": True, "split": True},
    "floor-empty": {"args": None, "follows": False, "floor": "empty"},
    "floor-lookup": {"args": None, "follows": False, "floor": "lookup"},
}
SLOWDOWN = ["none", "cpu", "offcpu", "unrelated"]
SLOWDOWN_PROFILED = SLOWDOWN[1:]
STATS = ["stats-1ms", "stats-0", "stats-unrelated", "split-1ms", "split-0", "floor-empty", "floor-lookup"]
ROUND = ["none"] + STATS


def trial(a, idle, name):
    c = CONDITIONS[name]
    split = c.get("split", False)
    w = PingPong(a, a.secs, 0 if split else a.work, split=split)
    prof = floor = None
    st0 = steal_jiffies()
    try:
        if c.get("floor"):
            floor = Floor(c["floor"])
        if c["args"] is not None:
            target = w.pid if c["follows"] else idle.pid
            out = os.path.join(a.out, "offcpu-%s.pyp" % name)
            prof = Profiler(a, c["args"] + ["-p", str(target), "-d", str(int(a.secs + 60))], out)
        w.go()
        r = w.result(a.secs + 60)
        r["prof"] = prof.finish(c["follows"]) if prof else None
        if floor:
            r["prof"] = {"progs": floor.stats(), "followed_ns": None}
    except BaseException:
        for p in (w.p, prof.p if prof else None):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        raise
    finally:
        if floor:
            floor.close()
    r["steal_s"] = (steal_jiffies() - st0) / os.sysconf("SC_CLK_TCK")
    r["load1"] = float(loadavg().split()[0])
    return r


# Experiment 3b: what kernel BPF statistics do not see. A program on the sys_exit tracepoint puts every system
# call of the host on the kernel's slow path (syscall tracing work on entry and exit) and runs the tracepoint's
# dispatch around the program; the statistics time only the program itself (and add their own clock reads).
# A loop of getppid() (the cheapest system call) pinned to the target CPU, CPU time per call (thread_time_ns).
SYSCALL_LOOP = ("import os, time\nn = %d\nt = time.thread_time_ns()\nfor _ in range(n):\n    os.getppid()\n"
                "print((time.thread_time_ns() - t) / n)")
SYSCALL_CONDS = ["sc-none", "sc-empty", "sc-empty-stats", "sc-pyperf-cpu", "sc-pyperf-offcpu"]


def syscall_trial(a, idle, name):
    floor = prof = None
    try:
        if name in ("sc-empty", "sc-empty-stats"):
            floor = Floor("empty", stats=name == "sc-empty-stats")
        elif name.startswith("sc-pyperf"):
            args = ["--off-cpu"] if name == "sc-pyperf-offcpu" else []
            prof = Profiler(a, args + ["-p", str(idle.pid), "-d", "120"],
                            os.path.join(a.out, "offcpu-%s.pyp" % name))
        out = subprocess.run(pin(TARGET_CPU, [a.python, "-c", SYSCALL_LOOP % a.syscalls]), stdout=subprocess.PIPE,
                             universal_newlines=True, check=True, timeout=300).stdout
        return float(out.split()[-1])
    finally:
        if floor:
            floor.close()
        if prof:
            prof.finish(False)


def exp_syscalls(a, idle):
    res = {n: [] for n in SYSCALL_CONDS}
    for rep in range(a.sc_reps):
        k = rep % len(SYSCALL_CONDS)
        for n in SYSCALL_CONDS[k:] + SYSCALL_CONDS[:k]:
            res[n].append(syscall_trial(a, idle, n))
        log("system-call loop %d/%d: %s" % (rep + 1, a.sc_reps, ", ".join(
            "%s %.0f ns" % (n[3:], res[n][-1]) for n in SYSCALL_CONDS)))
    return res


class Chunks:
    """bench/workloads/pingpong.py chunks WORK: one ping-pong process printing the end time of every chunk of round
    trips; a reader thread keeps them."""

    def __init__(self, a):
        import threading
        self.p = subprocess.Popen(pin(TARGET_CPU, [a.python, PINGPONG, "chunks", str(a.work), str(a.chunk)]),
                                  stdout=subprocess.PIPE, universal_newlines=True)
        started.append(self.p)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError("ping-pong did not start: %r" % line)
        self.pid = self.p.pid
        self.ends = []
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        for line in self.p.stdout:
            try:
                self.ends.append(float(line))
            except ValueError:
                pass

    def window(self, t0, t1):
        """Median time of the chunks that lie wholly in [t0, t1] (perf_counter is CLOCK_MONOTONIC, the same clock in
        every process), and their number."""
        e = list(self.ends)
        d = [b - a for a, b in zip(e, e[1:]) if a >= t0 and b <= t1]
        return (median(d), len(d))

    def pause(self):
        os.kill(self.p.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.p.pid, signal.SIGCONT)

    def stop(self):
        self.p.kill()
        self.p.wait()
        started.remove(self.p)


def exp_toggle(a, idle):
    """Slowdown, one ping-pong process: unprofiled windows alternate with windows under each profiler (rotating
    order); each profiled window's median chunk time over the mean of the unprofiled windows either side. The
    process is stopped (SIGSTOP) between windows, while pyperf starts and stops: the CPU is not kept busy for
    minutes on end (on this VM that has stalled the host side's work, e.g. its vsock and balloon queues)."""
    w = Chunks(a)
    res = {n: [] for n in SLOWDOWN_PROFILED}
    unprof = []

    def window():
        w.resume()
        time.sleep(0.2)
        t0 = time.perf_counter()
        time.sleep(a.window)
        r = w.window(t0, time.perf_counter())
        w.pause()
        return r

    try:
        time.sleep(1.0)
        prev = window()
        unprof.append(prev)
        for rep in range(a.toggle_reps):
            k = rep % len(SLOWDOWN_PROFILED)
            for n in SLOWDOWN_PROFILED[k:] + SLOWDOWN_PROFILED[:k]:
                c = CONDITIONS[n]
                target = w.pid if c["follows"] else idle.pid
                prof = Profiler(a, c["args"] + ["-p", str(target), "-d", "600"],
                                os.path.join(a.out, "offcpu-toggle-%s.pyp" % n))
                cur = window()
                prof.finish(False)
                nxt = window()
                unprof.append(nxt)
                ref = (prev[0] + nxt[0]) / 2
                res[n].append({"slow": cur[0] / ref - 1, "chunks": cur[1], "rt_s": a.chunk / cur[0]})
                log("toggle %d/%d %-10s %+.1f%% (%d chunks of %.1f ms; unprofiled either side %.1f / %.1f ms)" % (
                    rep + 1, a.toggle_reps, n, 100 * res[n][-1]["slow"], cur[1], 1e3 * cur[0], 1e3 * prev[0],
                    1e3 * nxt[0]))
                prev = nxt
    finally:
        w.stop()
    times = [u[0] for u in unprof]
    adjacent = [abs(b - c) / ((b + c) / 2) for b, c in zip(times, times[1:])]
    return {"rows": res, "unprof": unprof, "adjacent": median(adjacent), "spread": (min(times), max(times)),
            "rt_s": a.chunk / median(times)}


def calibrate(a):
    """Units of work per round trip for about a.rate context switches per second (2 per round trip)."""
    def rate(work):
        w = PingPong(a, a.cal_secs, work)
        w.go()
        return w.result(a.cal_secs + 30)

    r0 = rate(0)
    if r0["sw_s"] <= a.rate:
        return 0, r0
    work = 600
    for _ in range(3):
        r = rate(work)
        # time per round trip = t0 + work * k: solve for the work that gives the rate asked
        t0, t1 = 1 / r0["rt_s"], 1 / r["rt_s"]
        k = (t1 - t0) / work
        want = 2 / a.rate
        new = max(int(round((want - t0) / k)), 0) if k > 0 else work
        log("calibration: work %d -> %.0f switches/s; next %d" % (work, r["sw_s"], new))
        if abs(new - work) <= max(work // 20, 5):
            return work, r
        work = new
    return work, rate(work)


def run(a):
    idle = Idle(a)
    res = {n: [] for n in CONDITIONS}
    # Rounds: every condition once per round (a fresh ping-pong process each), in an order rotated each round.
    for rep in range(a.reps):
        k = rep % len(ROUND)
        for n in ROUND[k:] + ROUND[:k]:
            r = trial(a, idle, n)
            res[n].append(r)
            p = r["prof"]
            extra = ""
            if p and p["followed_ns"] is not None and CONDITIONS[n]["follows"]:
                extra = ", %.0f ns/followed switch, %s intervals" % (p["followed_ns"], p["intervals"])
            elif p and p["progs"]:
                extra = ", sched_switch %.0f ns/run" % p["progs"]["sched_switch"][1]
            log("rep %d/%d %-15s %7.0f round trips/s, %6.0f switches/s (%.0f%% voluntary)%s; load %.2f" % (
                rep + 1, a.reps, n, r["rt_s"], r["sw_s"], 100 * r["vol"], extra, r["load1"]))
    res["toggle"] = exp_toggle(a, idle)
    res["syscalls"] = exp_syscalls(a, idle)
    idle.p.kill()
    idle.p.wait()
    started.remove(idle.p)
    return res


# ---- report ------------------------------------------------------------------------------------------------------

def sh(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                              shell=True).stdout.strip()
    except OSError:
        return "?"


def tree():
    """The tree the binary is built from, read before the build (HEAD may move while the benchmark runs)."""
    head = sh("git -C %s rev-parse --short HEAD" % ROOT)
    # read-only: no index refresh written (GIT_OPTIONAL_LOCKS=0)
    dirty = sh("GIT_OPTIONAL_LOCKS=0 git -C %s status --porcelain --untracked-files=no | wc -l" % ROOT)
    return "HEAD %s%s" % (head, ", %s files modified in the tree" % dirty if dirty not in ("", "0") else "")


def machine(a, load0, load1, steal):
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("awk '/MemTotal/ {printf \"%.0f GiB\", $2/1048576}' /proc/meminfo")
    return [
        "Machine: %s, %d CPUs, %s, Linux %s; target Python %s; %s (built from %s)." % (
            cpu, NCPU, mem, os.uname().release, sh("%s -c 'import sys; print(sys.version.split()[0])'" % a.python),
            sh("%s --version" % a.pyperf), a.tree if a.built else "--pyperf %s" % a.pyperf),
        "Run: `bench/offcpu.py%s`, ended %s, %d rounds (every condition once) of %g s windows; "
        "load average (1, 5, 15 min) %s at the start, %s at the end; steal time %.1f s over the run; "
        "kernel.bpf_stats_enabled %s outside pyperf's --bpf-stats runs." % (
            " --quick" if a.quick else "", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            a.reps, a.secs, load0, load1, steal, a.stats_sysctl),
    ]


def prog_ns(p, name):
    return p["progs"][name][1] if name in p["progs"] else None


def total_ns(p):
    return sum(n * ns for n, ns in p["progs"].values())


def followed_rows(rs):
    """Medians over the repetitions of one --bpf-stats condition that follows the ping-pong."""
    ps = [r["prof"] for r in rs]
    return {
        "followed_ns": median([p["followed_ns"] for p in ps]),
        "switch": median([prog_ns(p, "sched_switch") for p in ps]),
        "wakeup": median([prog_ns(p, "sched_wakeup") for p in ps]),
        "sys_exit": median([prog_ns(p, "sys_exit") for p in ps]),
        "followed_s": median([p["followed"] / r["secs"] for p, r in zip(ps, rs)]),
        "host_sw_s": median([p["progs"]["sched_switch"][0] / r["secs"] for p, r in zip(ps, rs)]),
        "sw_s": median([r["sw_s"] for r in rs]),
        "vol": median([r["vol"] for r in rs]),
        "intervals_s": median([p["intervals"] / r["secs"] for p, r in zip(ps, rs)]),
        "dropped_s": median([p["dropped"] / r["secs"] for p, r in zip(ps, rs)]),
        "sampled_s": median([p["sampled"] / r["secs"] for p, r in zip(ps, rs)]),
        "lost": sum(p["lost"] or 0 for p in ps),
        "size": median([p["size"] for p in ps]),
        "bytes": median([p["size"] / max(p["intervals"], 1) for p in ps]),
        "spread": (min(p["followed_ns"] for p in ps), max(p["followed_ns"] for p in ps)),
        "n": len(ps),
    }


def render(a, res, load0, load1, steal):
    L = machine(a, load0, load1, steal)
    L.append("")
    unprofiled = res["none"]
    base = median([r["rt_s"] for r in unprofiled])
    f1, f0 = followed_rows(res["stats-1ms"]), followed_rows(res["stats-0"])
    s1, s0 = followed_rows(res["split-1ms"]), followed_rows(res["split-0"])
    def unrelated(name):
        ps = [r["prof"] for r in res[name]]
        d = {k: median([p["progs"][k][1] for p in ps]) for k in ("sched_switch", "sched_wakeup", "sys_exit")}
        d["runs_s"] = {k: median([p["progs"][k][0] / r["secs"] for p, r in zip(ps, res[name])])
                       for k in ("sched_switch", "sched_wakeup", "sys_exit")}
        per = [total_ns(p) / p["progs"]["sched_switch"][0] for p in ps]
        d["per_switch"] = median(per)
        d["spread"] = (min(per), max(per))
        d["n"] = len(ps)
        return d

    un, fe, fl = unrelated("stats-unrelated"), unrelated("floor-empty"), unrelated("floor-lookup")
    un_per = un["per_switch"]

    L.append("| target | bound | measured | |")
    L.append("|---|---|---|---|")
    above = sum(1 for r in res["stats-1ms"] if r["prof"]["followed_ns"] > MAX_FOLLOWED_NS)
    L.append("| BPF time per followed switch, ping-pong, default --off-cpu-min (1ms) | <= %d ns | %.0f ns (median; "
             "%.0f - %.0f, %d of %d runs above) | **%s** |" % (
                 MAX_FOLLOWED_NS, f1["followed_ns"], f1["spread"][0], f1["spread"][1], above, f1["n"],
                 "met" if f1["followed_ns"] <= MAX_FOLLOWED_NS else "missed"))
    L.append("| BPF time per unrelated switch (ping-pong not followed, pyperf on an idle process) | <= %d ns | %.0f ns "
             "(median; %.0f - %.0f) | **%s** |" % (MAX_UNRELATED_NS, un_per, un["spread"][0], un["spread"][1],
                                                  "met" if un_per <= MAX_UNRELATED_NS else "missed"))
    L.append("")
    L.append("Not a target, same run: --off-cpu-min 0 (every interval walked and written), %.0f ns per followed "
             "switch (%s the 2 us bound)." % (f0["followed_ns"],
                                              "within" if f0["followed_ns"] <= MAX_FOLLOWED_NS else "above"))
    L.append("")

    L.append("### 1. Workload")
    L.append("")
    L.append("`bench/workloads/pingpong.py run %g %d`: two threads of one process pass a byte back and forth through "
             "two pipes (os.read / os.write), the main thread doing %d units of Python work between round trips "
             "(calibrated at the start for about %d context switches per second), both threads pinned to CPU %s, "
             "pyperf to CPU %s. Unprofiled, medians of %d: **%.0f round trips/s, %.0f context switches/s** (%.0f%% "
             "voluntary: the thread blocked in `read`; the rest are the main thread preempted on `write` by the "
             "thread it wakes, on the same CPU)." % (
                 a.secs, a.work, a.work, a.rate, TARGET_CPU, TOOL_CPU, len(unprofiled), base,
                 median([r["sw_s"] for r in unprofiled]), 100 * median([r["vol"] for r in unprofiled])))
    L.append("")

    L.append("### 2. Cost per followed switch (`record --off-cpu --bpf-stats -p PINGPONG`), medians of %d" % f1["n"])
    L.append("")
    L.append("ns per followed switch = the three programs' total run time (kernel BPF statistics, every run on the "
             "host) over the followed threads' off-CPU intervals that ended. Host switches = sched_switch runs, "
             "every context switch of the machine.")
    L.append("")
    L.append("| workload | --off-cpu-min | followed switches/s | host switches/s | **ns per followed switch** | min - max "
             "| sched_switch ns/run | sched_wakeup ns/run | sys_exit ns/run |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for label, m, f in (("one CPU (above)", "1ms", f1), ("one CPU (above)", "0", f0),
                        ("threads on 2 CPUs, no work, every switch a block in read", "1ms", s1),
                        ("threads on 2 CPUs, no work, every switch a block in read", "0", s0)):
        L.append("| %s | %s | %.0f | %.0f | **%.0f** | %.0f - %.0f | %.0f | %.0f | %.0f |" % (
            label, m, f["followed_s"], f["host_sw_s"], f["followed_ns"], f["spread"][0], f["spread"][1],
            f["switch"], f["wakeup"], f["sys_exit"]))
    L.append("")

    L.append("### 3. Cost per unrelated switch (ping-pong not followed; `record --off-cpu --bpf-stats` on an idle "
             "Python process), medians of %d" % un["n"])
    L.append("")
    L.append("Per context switch = the three programs' total run time over the sched_switch runs (each context switch "
             "runs sched_switch once; sys_exit runs once per system call, sched_wakeup once per wakeup). References "
             "in the same rounds, same ping-pong, pyperf not running: the same three tracepoints with an *empty* "
             "raw-tracepoint program (what any BPF program there costs on this machine, statistics included), and "
             "with a program doing only the unrelated path's map work (`bpf_get_current_pid_tgid` + one hash "
             "lookup of the tgid, two in sched_switch).")
    L.append("")
    L.append("| program | runs/s (host) | **pyperf** ns/run | empty program ns/run | lookup-only program ns/run |")
    L.append("|---|---|---|---|---|")
    for k in ("sched_switch", "sched_wakeup", "sys_exit"):
        L.append("| %s | %.0f | **%.0f** | %.0f | %.0f |" % (k, un["runs_s"][k], un[k], fe[k], fl[k]))
    L.append("| **all three, per context switch** | %.0f switches/s | **%.0f** | %.0f | %.0f |" % (
        un["runs_s"]["sched_switch"], un_per, fe["per_switch"], fl["per_switch"]))
    L.append("")
    sc = res["syscalls"]
    sc_med = {n: median(v) for n, v in sc.items()}
    # per round, against the unprofiled loop of the same round
    sc_add = {n: median([x - b for x, b in zip(sc[n], sc["sc-none"])]) for n in SYSCALL_CONDS[1:]}
    L.append("### 3b. What the statistics do not see: a system-call loop, medians of %d rounds" % len(sc["sc-none"]))
    L.append("")
    L.append("A program on the sys_exit tracepoint puts every system call of the host on the kernel's slow path "
             "(syscall tracing work at entry and exit) and runs the tracepoint's BPF dispatch around the program: "
             "kernel BPF statistics time only the program (plus their own clock reads). Here: %d calls of "
             "`os.getppid()` in a Python loop pinned to CPU %s, the loop's CPU time per call (thread_time_ns), "
             "conditions in rotating order; added = the condition's time minus the unprofiled loop's of the same "
             "round." % (a.syscalls, TARGET_CPU))
    L.append("")
    L.append("| condition | ns per loop iteration | **added per system call** | BPF statistics' ns per sys_exit run "
             "(section 3) |")
    L.append("|---|---|---|---|")
    sc_labels = {"sc-none": "nothing attached",
                 "sc-empty": "empty programs on the three tracepoints, statistics off",
                 "sc-empty-stats": "empty programs, statistics on",
                 "sc-pyperf-cpu": "`pyperf record` (CPU only) on the idle process",
                 "sc-pyperf-offcpu": "`pyperf record --off-cpu` on the idle process (statistics off)"}
    stat_ref = {"sc-empty-stats": "%.0f" % fe["sys_exit"], "sc-pyperf-offcpu": "%.0f (with --bpf-stats)" % un["sys_exit"]}
    for n in SYSCALL_CONDS:
        L.append("| %s | %.0f | %s | %s |" % (sc_labels[n], sc_med[n], "-" if n == "sc-none" else
                                              "**%.0f ns**" % sc_add[n], stat_ref.get(n, "")))
    L.append("")
    tg = res["toggle"]
    labels = {"cpu": "`pyperf record` (CPU only, 99 Hz) following it",
              "offcpu": "`pyperf record --off-cpu` following it",
              "unrelated": "`pyperf record --off-cpu` on an unrelated idle process"}
    L.append("### 4. Ping-pong slowdown (no --bpf-stats): one process, profiler attached and detached, medians of "
             "%d windows each" % a.toggle_reps)
    L.append("")
    L.append("One ping-pong process (the same work per round trip, pinned to CPU %s) prints the time at the end of "
             "every %d round trips. %g s windows without a profiler alternate with %g s windows under one (started "
             "while the process is stopped, then the window; pyperf stopped with SIGINT after it), the profilers "
             "in rotating order; the process is stopped (SIGSTOP) between windows and each window starts 0.2 s after "
             "it continues. Per window: the median chunk time; a profiled window's slowdown is its median over "
             "the mean of the unprofiled windows either side, minus 1 (time per round trip). Separate processes "
             "(one per run) differ by tens of percent on this machine, more than the effects measured." % (
                 TARGET_CPU, a.chunk, a.window, a.window))
    L.append("")
    L.append("| condition | round trips/s (median window) | **slowdown, median** | min - max | windows |")
    L.append("|---|---|---|---|---|")
    L.append("| no profiler | %.0f | - | | %d |" % (tg["rt_s"], len(tg["unprof"])))
    for n in SLOWDOWN_PROFILED:
        rows = tg["rows"][n]
        sl = [r["slow"] for r in rows]
        L.append("| %s | %.0f | **%.1f%%** | %.1f%% - %.1f%% | %d |" % (
            labels[n], median([r["rt_s"] for r in rows]), 100 * median(sl), 100 * min(sl), 100 * max(sl), len(sl)))
    L.append("")
    L.append("Unprofiled windows: chunk times %.1f - %.1f ms over the whole experiment; two consecutive ones differ "
             "by %.1f%% (median): the noise floor of a window's slowdown." % (
                 1e3 * tg["spread"][0], 1e3 * tg["spread"][1], 100 * tg["adjacent"]))
    L.append("For scale, the BPF run time alone (section 2, one CPU, 1ms): %.0f ns x %.0f followed switches/s = %.1f%% "
             "of the target's CPU; section 3's unrelated path: %.0f ns x %.0f switches/s = %.1f%% of a CPU." % (
                 f1["followed_ns"], f1["followed_s"], f1["followed_ns"] * f1["followed_s"] / 1e7,
                 un_per, un["runs_s"]["sched_switch"], un_per * un["runs_s"]["sched_switch"] / 1e7))
    L.append("")

    L.append("### 5. The file (ping-pong on one CPU, medians of %d)" % f1["n"])
    L.append("")
    L.append("| --off-cpu-min | off-CPU intervals written/s | short ones kept (sampled)/s | dropped/s | lost (all runs) | file "
             "| **bytes per interval** | ns per followed switch |")
    L.append("|---|---|---|---|---|---|---|---|")
    for m, f in (("1ms (default)", f1), ("0 (every interval)", f0)):
        L.append("| %s | %.0f | %.0f | %.0f | %d | %.1f KiB | **%.1f** | %.0f |" % (
            m, f["intervals_s"], f["sampled_s"], f["dropped_s"], f["lost"], f["size"] / 1024, f["bytes"],
            f["followed_ns"]))
    L.append("")
    L.append("Bytes per interval = file size / intervals, over the whole recording (the ping-pong's %g s window "
             "and pyperf's start and end around it); the file also holds the CPU samples (99 Hz), the symbols and "
             "the header (%d CPU samples in the median 1ms recording)." % (
                 a.secs, median([r["prof"]["samples"] for r in res["stats-1ms"]])))
    L.append("")
    return "\n".join(L) + "\n", {"f1": f1, "f0": f0, "un_per": un_per}


def write_results(text):
    log("wrote %s" % write_section(SECTION, BEGIN, END, "\n\n" + text + "\n"))


def build(a):
    log("building pyperf (release)")
    subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "pyperf"], cwd=ROOT, check=True,
                   stdout=sys.stderr)
    os.makedirs(os.path.join(a.out, "bin"), exist_ok=True)
    dst = os.path.join(a.out, "bin", "pyperf-offcpu")
    shutil.copy2(os.path.join(ROOT, "target", "release", "pyperf"), dst)
    return dst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pyperf", help="pyperf binary to measure (default: build the release binary, measure a copy)")
    ap.add_argument("--python", help="target interpreter (default: $PYTHON, else pyenv 3.11.7, else python3)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--reps", type=int, help="rounds (every condition once per round; default 7, --quick 1)")
    ap.add_argument("--secs", type=float, help="timed ping-pong window per run, s (default 5, --quick 2)")
    ap.add_argument("--rate", type=int, default=50000, help="context switches/s to calibrate the ping-pong for")
    ap.add_argument("--work", type=int, help="units of work per round trip (skips the calibration)")
    ap.add_argument("--quick", action="store_true", help="one short round: checks the harness")
    ap.add_argument("--write", action="store_true", help="also write the results into bench/RESULTS.md")
    ap.add_argument("--only", default="offcpu", help=argparse.SUPPRESS)  # from bench/run.sh --only offcpu
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/offcpu.py: needs root (BPF)")
    a.reps = a.reps or (1 if a.quick else 7)
    a.secs = a.secs or (2.0 if a.quick else 5.0)
    a.cal_secs = 1.0 if a.quick else 2.0
    a.syscalls = 300000 if a.quick else 2000000  # getppid() calls per run of experiment 3b
    a.sc_reps = 2 if a.quick else 11
    a.settle = 0.3  # after pyperf's output exists, before the timed window
    a.window = 1.5 if a.quick else 3.0  # experiment 4's windows, s
    a.chunk = 2000  # round trips per chunk (experiment 4)
    a.toggle_reps = 2 if a.quick else 12  # windows per profiler (experiment 4)
    a.python = a.python or os.environ.get("PYTHON")
    if not a.python:
        a.python = os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python3.11")
        if not os.access(a.python, os.X_OK):
            a.python = shutil.which("python3")
    os.makedirs(a.out, exist_ok=True)
    a.built = not a.pyperf
    if a.built:
        a.tree = tree()
        a.pyperf = build(a)
    a.stats_sysctl = bpf_stats_sysctl()
    load0 = loadavg()
    steal0 = steal_jiffies()
    log("load average %s; pyperf %s; target %s" % (load0, a.pyperf, a.python))
    if a.work is None:
        a.work, r = calibrate(a)
        log("work %d per round trip: %.0f round trips/s, %.0f switches/s" % (a.work, r["rt_s"], r["sw_s"]))
    res = run(a)
    load1 = loadavg()
    steal = (steal_jiffies() - steal0) / os.sysconf("SC_CLK_TCK")
    text, _ = render(a, res, load0, load1, steal)
    with open(os.path.join(a.out, "offcpu.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    if a.write:
        write_results(text)


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in list(started):
            if p.poll() is None:
                try:
                    p.kill()
                    p.wait()
                except OSError:
                    pass
