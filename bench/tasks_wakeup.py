#!/usr/bin/env python3
"""How many of a real service's short tasks' samples get their task view (#31), with and without the program waking
the recorder for a task it does not know yet (bpf/tasks.bpf.h), and what that costs: two recorder binaries (before
and after that change) alternated in one run on the same service. Python standard library; needs root, release
builds and scripts/setup's asgi venv (uvicorn, uvloop, Starlette on pyenv's 3.12.1).

  bench/tasks_wakeup.py --base /tmp/pyperf-base [--bin target/release/pyperf] [--reps 5] [--seconds 4]

Each repetition starts testdata/workloads/asgi_app.py (a request lives ~25 ms and renders at its end), records it
with `record -p PID --off-cpu` while asgi_client.py sends requests from 8 threads for `--seconds`, and counts the
CPU samples in the endpoint's `render`: the share under their request task (`[task Task-N]` root), the recorder's
CPU (utime + stime, /proc/PID/stat) per second, the program's wakeups for unknown tasks (`bpf_task_wakeups`) per
second, and the requests served (the service's throughput, which the target's share of the wakeups would lower).
Medians of the repetitions.
"""
import argparse
import os
import signal
import subprocess
import tempfile
import time

from common import loadavg, median

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
WORKLOADS = os.path.join(ROOT, "testdata", "workloads")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / TICK


def one(binary, py, seconds, clients, extra, tmp):
    app = subprocess.Popen([py, os.path.join(WORKLOADS, "asgi_app.py")], stdout=subprocess.PIPE)
    try:
        port = app.stdout.readline().decode().split()[1]
        out = os.path.join(tmp, "asgi.pyp")
        rec = subprocess.Popen(
            [binary, "record", "-p", str(app.pid), "--off-cpu", *extra, "-o", out],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        # Recording once the file has its header.
        while not (os.path.exists(out) and os.path.getsize(out) > 0):
            if rec.poll() is not None:
                raise SystemExit(f"record failed: {rec.stderr.read().decode()}")
            time.sleep(0.02)
        t0 = time.monotonic()
        client = subprocess.run(
            [py, os.path.join(WORKLOADS, "asgi_client.py"), port, str(seconds), str(clients)],
            capture_output=True,
            check=True,
        )
        served = int(client.stdout.decode().split()[1])
        cpu = cpu_s(rec.pid)
        wall = time.monotonic() - t0
        rec.send_signal(signal.SIGINT)
        if rec.wait() != 0:
            raise SystemExit(f"record failed: {rec.stderr.read().decode()}")
    finally:
        app.kill()
        app.wait()
    folded = subprocess.run([binary, "report", "-i", out, "--folded"], capture_output=True, check=True).stdout
    total = tasked = 0
    for line in folded.decode().splitlines():
        stack, n = line.rsplit(" ", 1)
        if not any(f == "render" or f.startswith("render (") for f in stack.split(";")):
            continue
        total += int(n)
        if stack.startswith("[task "):
            tasked += int(n)
    text = subprocess.run([binary, "report", "-i", out], capture_output=True, check=True).stdout.decode()
    wakeups = 0
    for c in text.replace("\n", ", ").split(", "):
        if c.strip().startswith("bpf_task_wakeups "):
            wakeups = int(c.split()[1])
    return {
        "stitched": tasked / total if total else 0.0,
        "render": total,
        "cpu_ms_s": 1000 * cpu / wall,
        "wakeups_s": wakeups / wall,
        "req_s": served / seconds,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="recorder without the wakeups")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "pyperf"))
    ap.add_argument("--python", default=os.path.join(ROOT, "target", "asgi-venv", "bin", "python"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--clients", type=int, default=4, help="client threads (concurrent requests)")
    ap.add_argument("--record-args", default="", help="more `record` arguments, e.g. '--async-rate 50'")
    a = ap.parse_args()
    runs = {"base": [], "wakeup": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.reps):
            order = [("base", a.base), ("wakeup", a.bin)]
            for name, binary in order if r % 2 == 0 else order[::-1]:
                res = one(binary, a.python, a.seconds, a.clients, a.record_args.split(), tmp)
                runs[name].append(res)
                print(f"rep {r} {name}: {res}", flush=True)
    print(f"load average {loadavg()}")
    print("| recorder | endpoint samples under their task | render samples | recorder CPU ms/s | wakeups/s | requests/s |")
    print("|---|---|---|---|---|---|")
    for name, rs in runs.items():
        m = {k: median([x[k] for x in rs]) for k in rs[0]}
        print(
            f"| {name} | {100 * m['stitched']:.0f}% | {m['render']:.0f} | {m['cpu_ms_s']:.1f} | "
            f"{m['wakeups_s']:.0f} | {m['req_s']:.0f} |"
        )


if __name__ == "__main__":
    main()
