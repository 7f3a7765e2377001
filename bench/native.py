#!/usr/bin/env python3
"""What `pyperf record --native` and `--kernel` (issue #15) cost, against py-spy's `--native` in the same run.
Python standard library only; needs root, gcc and the pyenv 3.11.7 headers (the target runs there).

  bench/native.py [--pyperf BIN] [--py-spy BIN] [--python PY] [--reps N] [--secs S] [--quick] [--write]

The target (bench/workloads/native_deep.py) runs 20 Python frames, then 30 native ones of the test extension
(testdata/native/pyperf_native_test.c, built here with -O2 -fomit-frame-pointer), spinning at the leaf, pinned to
the last CPU; the recorder runs pinned to CPU 0 at 1000 Hz for S seconds, attached with -p. Per configuration,
medians of N repetitions of:
 - BPF time per sample (the kernel's run-time statistics, `--bpf-stats`): what the target's CPU pays;
 - the recorder's CPU time per sample (user + system, from wait4) and its peak RSS;
 - the file's bytes per sample;
 - the target's slowdown: its loop iterations against a run with no profiler.
py-spy's `--native` (which stops the process to unwind it with libunwind) and plain py-spy are the peers.
Also the size of the unwind tables pyperf keeps (the .eh_frame and .eh_frame_hdr of libpython and libc).

Prints a markdown report, writes it to bench/out/native.md; with --write also into bench/RESULTS.md between the
markers of the section "Native and kernel frames (issue #15)".
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from common import NCPU, logger, median, pin, write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "bench", "workloads", "native_deep.py")
EXT_C = os.path.join(ROOT, "testdata", "native", "pyperf_native_test.c")
SECTION = "## Native and kernel frames (issue #15)"
BEGIN = "<!-- bench/native.py: begin (generated, replaced by the next `bench/native.py --write`) -->"
END = "<!-- bench/native.py: end -->"
TARGET_CPU = str(NCPU - 1)
TOOL_CPU = "0"

# Targets of issue #15: in-kernel cost per sample if unwinding in BPF, or bytes per sample if in the recorder.
MAX_KERNEL_US = 5.0
MAX_BYTES_ADDED = 8.0


log = logger("native")


def build_ext(python, out):
    info = subprocess.check_output(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['include']); "
         "print(sysconfig.get_config_var('EXT_SUFFIX'))"], text=True).split()
    so = os.path.join(out, "pyperf_native_test" + info[1])
    subprocess.check_call(["gcc", "-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-fPIC", "-shared",
                           "-I", info[0], "-o", so, EXT_C])
    return out


def section_bytes(path, names):
    try:
        text = subprocess.check_output(["readelf", "-SW", path], text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    total = 0
    for line in text.splitlines():
        m = re.search(r"\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m and m.group(1) in names:
            total += int(m.group(2), 16)
    return total


def mapped(pid, needle):
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and needle in os.path.basename(parts[5]):
                return parts[5]
    return None


def cpu_ticks(pid):
    """utime + stime of a process (and its waited-for children: none here), in clock ticks."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return int(v[11]) + int(v[12])
    except (OSError, IndexError, ValueError):
        return None


def run_one(a, ext_dir, config):
    """One repetition of one configuration: a fresh target, the recorder attached for a.secs."""
    target = subprocess.Popen(pin(TARGET_CPU, [a.python, WORKLOAD, ext_dir, str(a.secs + 2.5)]),
                              stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().startswith("ready")
    time.sleep(0.5)
    tmp = tempfile.mkdtemp(prefix="pyperf-native-bench-")
    out = os.path.join(tmp, "out")
    r = {}
    if config == "none":
        time.sleep(a.secs)
        rc, usage, text = 0, None, ""
    else:
        if config.startswith("py-spy"):
            cmd = [a.py_spy, "record", "-r", "1000", "-d", str(int(a.secs)), "-p", str(target.pid), "-o", out,
                   "-f", "raw"] + (["--native"] if "native" in config else ["--nonblocking"])
        else:
            cmd = [a.pyperf, "record", "-F", "1000", "-d", str(a.secs), "-p", str(target.pid), "-o", out,
                   "--bpf-stats"] + config.split()[1:]
        p = subprocess.Popen(pin(TOOL_CPU, cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Steady state: the recorder's CPU time between 2 s in and 1 s before the end (start-up left out).
        time.sleep(2.0)
        t0 = cpu_ticks(p.pid)
        time.sleep(a.secs - 3.0)
        t1 = cpu_ticks(p.pid)
        r["steady_s"] = (t1 - t0) / os.sysconf("SC_CLK_TCK") if t0 is not None and t1 is not None else None
        r["steady_window"] = a.secs - 3.0
        text = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        rc = os.waitstatus_to_exitcode(status)
    rest = target.stdout.read()
    target.wait()
    m = re.search(r"iterations (\d+)", rest)
    r["iterations"] = int(m.group(1)) if m else None
    if config != "none":
        if rc != 0:
            log("%s failed (%d): %s" % (config, rc, text[-2000:]))
            return None
        r["cpu_s"] = usage.ru_utime + usage.ru_stime
        r["rss_kib"] = usage.ru_maxrss
        r["size"] = os.path.getsize(out) if os.path.exists(out) else None
        if config.startswith("py-spy"):
            m = re.search(r"Samples: (\d+)", text)
            r["samples"] = int(m.group(1)) if m else None
        else:
            m = re.search(r"pyperf: [0-9.]+ s, (\d+) samples", text)
            r["samples"] = int(m.group(1)) if m else None
            m = re.search(r"([0-9.]+) ns per target sample", text)
            r["bpf_ns"] = float(m.group(1)) if m else None
            m = re.search(r"native_unmerged\D+(\d+)", text)
        r["text"] = text
    shutil.rmtree(tmp, ignore_errors=True)
    return r


CONFIGS = ["none", "pyperf", "pyperf --native", "pyperf --kernel", "pyperf --native --kernel", "py-spy",
           "py-spy --native"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pyperf")
    ap.add_argument("--py-spy", dest="py_spy", default=os.path.join(ROOT, "bench", "out", "venv", "bin", "py-spy"))
    ap.add_argument("--python", default=os.environ.get("PYTHON", "/root/.pyenv/versions/3.11.7/bin/python3.11"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--secs", type=float, default=8.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.secs = 1, 3.0
    if os.geteuid() != 0:
        sys.exit("bench/native.py: needs root")
    if not a.pyperf:
        log("building pyperf (release)")
        subprocess.check_call(["cargo", "build", "--release", "--locked", "--bin", "pyperf"], cwd=ROOT,
                              stdout=sys.stderr)
        os.makedirs(os.path.join(ROOT, "bench", "out", "bin"), exist_ok=True)
        a.pyperf = os.path.join(ROOT, "bench", "out", "bin", "pyperf-native")
        shutil.copy(os.path.join(ROOT, "target", "release", "pyperf"), a.pyperf)
    if not os.path.exists(a.py_spy):
        sys.exit("bench/native.py: no py-spy at %s (bench/run.sh installs it)" % a.py_spy)
    ext_dir = build_ext(a.python, tempfile.mkdtemp(prefix="pyperf-native-ext-"))
    res = {c: [] for c in CONFIGS}
    for rep in range(a.reps):
        for c in CONFIGS:
            log("rep %d/%d: %s" % (rep + 1, a.reps, c))
            r = run_one(a, ext_dir, c)
            if r:
                res[c].append(r)
    # Unwind tables: those of the target's libpython and libc, as pyperf holds them.
    probe = subprocess.Popen([a.python, WORKLOAD, ext_dir, "2"], stdout=subprocess.PIPE, text=True)
    probe.stdout.readline()
    libs = [mapped(probe.pid, "libpython"), mapped(probe.pid, "libc.so")]
    probe.kill()
    probe.wait()
    tables = [(l, section_bytes(l, (".eh_frame", ".eh_frame_hdr"))) for l in libs if l]
    text = render(a, res, tables)
    print(text)
    with open(os.path.join(ROOT, "bench", "out", "native.md"), "w") as f:
        f.write(text)
    if a.write:
        write_results(text)


def render(a, res, tables):
    base_it = median([r["iterations"] for r in res["none"]])
    base_size = median([r["size"] / r["samples"] for r in res["pyperf"] if r.get("samples")])
    lines = []
    lines.append("Run of %s, `bench/native.py --reps %d --secs %g`, %d CPUs, load %s, target %s." % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), a.reps, a.secs, NCPU,
        " ".join(open("/proc/loadavg").read().split()[:3]), a.python))
    lines.append("")
    lines.append("| recorder | samples | BPF ns / sample | recorder CPU us / sample, steady | recorder CPU us / sample, "
                 "whole run | peak RSS MiB | bytes / sample | bytes added | target slowdown |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for c in CONFIGS[1:]:
        rs = res[c]
        if not rs:
            lines.append("| `%s` | failed | | | | | | | |" % c)
            continue
        samples = median([r.get("samples") for r in rs])
        bpf = median([r.get("bpf_ns") for r in rs])
        cpu_us = median([r["cpu_s"] * 1e6 / r["samples"] for r in rs if r.get("samples")])
        steady = median([r["steady_s"] * 1e6 / (r["samples"] * r["steady_window"] / a.secs) for r in rs
                         if r.get("samples") and r.get("steady_s") is not None])
        rss = median([r["rss_kib"] / 1024 for r in rs])
        bps = median([r["size"] / r["samples"] for r in rs if r.get("samples") and r.get("size")])
        added = (bps - base_size) if (bps is not None and base_size is not None and c.startswith("pyperf")) else None
        it = median([r["iterations"] for r in rs])
        slow = (1 - it / base_it) * 100 if it and base_it else None

        def f(v, fmt):
            return fmt % v if v is not None else "-"
        lines.append("| `%s` | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            c, f(samples, "%.0f"), f(bpf, "%.0f"), f(steady, "%.1f"), f(cpu_us, "%.1f"), f(rss, "%.1f"),
            f(bps, "%.2f"), f(added, "%+.2f"), f(slow, "%.1f%%")))
    lines.append("")
    lines.append("Recorder CPU, steady: its user + system time between 2 s in and 1 s before the end (clock ticks of "
                 "10 ms: +-1.3 us per sample at these counts); whole run: start-up included (BPF loading and "
                 "verification, ELF parsing).")
    lines.append("")
    lines.append("Unwind tables pyperf keeps in memory (.eh_frame + .eh_frame_hdr): " + ", ".join(
        "%s %.0f KiB" % (os.path.basename(l), (n or 0) / 1024) for l, n in tables) + ".")
    nat = res["pyperf --native"]
    if nat:
        bpf = median([r.get("bpf_ns") for r in nat])
        bps = median([r["size"] / r["samples"] for r in nat if r.get("samples")])
        added = bps - base_size if bps is not None and base_size is not None else None
        lines.append("")
        lines.append("Targets: BPF time per sample with --native %s ns (unwinding in BPF would have to stay under "
                     "%.0f us: not needed, pyperf unwinds in the recorder); bytes per sample added on disk %s "
                     "(target at most %.0f): %s." % (
                         "%.0f" % bpf if bpf else "-", MAX_KERNEL_US, "%.2f" % added if added is not None else "-",
                         MAX_BYTES_ADDED,
                         "met" if added is not None and added <= MAX_BYTES_ADDED else "missed"))
    return "\n".join(lines) + "\n"


def write_results(text):
    write_section(SECTION, BEGIN, END, "\n" + text)


if __name__ == "__main__":
    main()
