#!/usr/bin/env python3
"""What `pyperf top` (issue #17) costs against `pyperf record` on the same target: the recorder's own CPU time per
sample and its peak memory. Python standard library only; needs root.

  bench/top.py [--pyperf BIN] [--python PY] [--reps N] [--secs S] [--rate HZ] [--write]

Without --pyperf it builds the release binary and measures a copy (bench/out/bin/pyperf-top). One target process
(testdata/workloads/top.py: two busy threads) runs throughout; each repetition profiles it with `-p PID -F RATE -d
SECS` and with `-d 2xSECS` as `record -o FILE`, as `top` (plain tables every second to /dev/null) and as `top -o
FILE`, in turn. The recorder's CPU time (user + system, from wait4: it has no children with -p) of the longer run
less the shorter one's, over the samples it took more, is the cost per sample without the start-up (loading the BPF
program, which is the same for all); max RSS its peak memory (longer run). Medians of the repetitions; ratios
against `record` of the same run.

Prints a markdown report and writes it to bench/out/top.md; with --write also into bench/RESULTS.md, between the
markers of the section "pyperf top (issue #17)".
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

from common import median, write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "testdata", "workloads", "top.py")
SECTION = "## pyperf top (issue #17)"
BEGIN = "<!-- bench/top.py: begin (generated, replaced by the next `bench/top.py --write`) -->"
END = "<!-- bench/top.py: end -->"


def build():
    subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "pyperf"], cwd=ROOT, check=True)
    out = os.path.join(ROOT, "bench", "out", "bin")
    os.makedirs(out, exist_ok=True)
    dst = os.path.join(out, "pyperf-top")
    shutil.copy2(os.path.join(ROOT, "target", "release", "pyperf"), dst)
    return dst


def run(cmd):
    """(cpu seconds, max RSS KiB, samples) of one pyperf run."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = b""
    # wait4 gives this child's own rusage; stderr read after (a summary of a few lines fits the pipe).
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    if status != 0:
        sys.exit("pyperf failed: %s\n%s" % (" ".join(cmd), err))
    m = re.search(r"pyperf: [0-9.]+ s, (\d+) samples", err)
    if not m:
        sys.exit("no summary line in:\n" + err)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss, int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pyperf")
    ap.add_argument("--python", default=os.environ.get("PYTHON") or os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--secs", type=float, default=5)
    ap.add_argument("--rate", type=int, default=999)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    pyperf = a.pyperf or build()
    total = a.reps * 3 * (3 * a.secs + 2) + 30
    target = subprocess.Popen([a.python, WORKLOAD, str(total)])
    time.sleep(1)
    tmp = tempfile.mkdtemp()
    modes = {
        "record -o FILE": lambda: [pyperf, "record", "-o", os.path.join(tmp, "r.pyp")],
        "top": lambda: [pyperf, "top", "--interval", "1"],
        "top -o FILE": lambda: [pyperf, "top", "--interval", "1", "-o", os.path.join(tmp, "t.pyp")],
    }
    res = {m: [] for m in modes}
    try:
        for _ in range(a.reps):
            for m, cmd in modes.items():
                short, long_ = (
                    run(cmd() + ["-p", str(target.pid), "-F", str(a.rate), "-d", str(d)]) for d in (a.secs, 2 * a.secs)
                )
                res[m].append((long_[0] - short[0], long_[1], long_[2] - short[2], short[0]))
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    base = median(c / s * 1e6 for c, _, s, _ in res["record -o FILE"])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "`bench/top.py --reps %d --secs %g --rate %d` (release build, %s): one process of two busy threads "
        "(testdata/workloads/top.py, pyenv 3.11.7) profiled with `-p PID -F %d -d %g` in turn as each mode below; "
        "and with `-d %g`; medians of %d repetitions. CPU is the recorder's own (user + system, wait4): per sample, "
        "the longer run's less the shorter one's over the samples it took more (no start-up in it); the ratio is "
        "against `record` in the same run. Start-up is the shorter run's whole CPU time."
        % (a.reps, a.secs, a.rate, now, a.rate, a.secs, 2 * a.secs, a.reps),
        "",
        "| mode | samples (%gs more) | recorder CPU per sample (us) | vs record | CPU of the %gs run (s) | max RSS (MiB) |"
        % (a.secs, a.secs),
        "|---|---|---|---|---|---|",
    ]
    for m in modes:
        per = median(c / s * 1e6 for c, _, s, _ in res[m])
        samples = median(s for _, _, s, _ in res[m])
        rss = median(r for _, r, _, _ in res[m]) / 1024
        whole = median(w for _, _, _, w in res[m])
        lines.append("| `%s` | %d | %.2f | %.2fx | %.3f | %.1f |" % (m, samples, per, per / base, whole, rss))
    report = "\n".join(lines) + "\n"
    print(report)
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "out", "top.md"), "w") as f:
        f.write(report)
    if a.write:
        write_section(SECTION, BEGIN, END, "\n" + report)


if __name__ == "__main__":
    main()
