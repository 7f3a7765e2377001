"""Ping-pong workload of the off-CPU benchmark (bench/offcpu.py). Pure Python, standard library only, Python 3.6+.

Two threads of one process pass one byte back and forth through two pipes with os.read / os.write: every round
trip blocks each thread once in a read (a system call that sleeps, then returns), so the process makes context
switches at the rate the machine can hand a byte over, all of them short off-CPU intervals (microseconds).

  run SECONDS [WORK]
                    print "ready PID", wait for a line on stdin, then ping-pong for SECONDS; print
                    "result ROUND_TRIPS SECONDS SWITCHES VOLUNTARY CPU_NS WAIT_NS" (round trips done, the time
                    they took, context switches of the two threads in that time, of which voluntary, the two
                    threads' on-CPU time and their time runnable waiting for a CPU, ns) and exit.
                    WORK (default 0): units of Python work (one loop iteration each, ~30-50 ns) the main thread does
                    between two round trips, to bring the switch rate down to what the benchmark asks for.
  chunks WORK [N]   print "ready PID", then until killed: N round trips (default 2000), then print the time
                    (time.perf_counter(), CLOCK_MONOTONIC, s) at the end of them. One process, many chunks: a
                    profiler is attached and detached around it and the chunks of each window compared.
  forever [WORK]    ping-pong until killed, printing nothing: a target to record by hand.

Context switches: /proc/self/task/TID/status (voluntary_ctxt_switches + nonvoluntary_ctxt_switches) of both
threads, read at the start and at the end while both are alive (/proc/self/status would count the main thread
only); CPU and wait time: /proc/self/task/TID/schedstat, at the same moments.
"""
import os
import sys
import threading
import time


# PINGPONG_CPUS=A,B: the main thread runs on CPU A only, the other thread on CPU B (every hand-over is then a
# wakeup on the other CPU and every switch a block in read, none a preemption). Unset: the scheduler places them.
CPUS = [int(c) for c in os.environ.get("PINGPONG_CPUS", "").split(",") if c.strip()]
if CPUS and len(CPUS) != 2:
    sys.exit("PINGPONG_CPUS: two CPU numbers, A,B")


def switches(tids):
    """(voluntary, involuntary switches, on-CPU ns, run-queue wait ns) of the threads, summed."""
    vol = invol = run = wait = 0
    for tid in tids:
        with open("/proc/self/task/%d/status" % tid) as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    invol += int(line.split()[1])
        with open("/proc/self/task/%d/schedstat" % tid) as f:
            v = f.read().split()
        run += int(v[0])
        wait += int(v[1])
    return vol, invol, run, wait


def gettid():
    return threading.get_native_id() if hasattr(threading, "get_native_id") else os.getpid()


class Pong(threading.Thread):
    """The second thread: reads a byte from `r`, writes it back to `w`, until it reads b"q"."""

    def __init__(self, r, w):
        threading.Thread.__init__(self, name="pong", daemon=True)
        self.r, self.w = r, w
        self.tid = None
        self.started = threading.Event()

    def run(self):
        if CPUS:
            os.sched_setaffinity(0, {CPUS[1]})
        self.tid = gettid()
        self.started.set()
        read, write, r, w = os.read, os.write, self.r, self.w
        while True:
            b = read(r, 1)
            if not b or b == b"q":
                return
            write(w, b)


def work(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "forever"
    if CPUS:
        os.sched_setaffinity(0, {CPUS[0]})
    ping_r, ping_w = os.pipe()  # main -> pong
    pong_r, pong_w = os.pipe()  # pong -> main
    pong = Pong(ping_r, pong_w)
    pong.start()
    pong.started.wait()
    tids = [gettid(), pong.tid]
    read, write = os.read, os.write
    if mode == "forever":
        units = int(sys.argv[2]) if len(sys.argv) > 2 else 0
        while True:
            work(units)
            write(ping_w, b"x")
            read(pong_r, 1)
    if mode == "chunks":
        units = int(sys.argv[2]) if len(sys.argv) > 2 else 0
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
        sys.stdout.write("ready %d\n" % os.getpid())
        sys.stdout.flush()
        while True:
            for _ in range(n):
                work(units)
                write(ping_w, b"x")
                read(pong_r, 1)
            sys.stdout.write("%.6f\n" % time.perf_counter())
            sys.stdout.flush()
    if mode != "run":
        sys.exit("usage: pingpong.py run SECONDS [WORK] | chunks WORK [N] | forever [WORK]")
    secs = float(sys.argv[2])
    units = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    sys.stdout.write("ready %d\n" % os.getpid())
    sys.stdout.flush()
    sys.stdin.readline()
    s0 = switches(tids)
    t0 = time.perf_counter()
    deadline = t0 + secs
    n = 0
    now = t0
    while now < deadline:
        # 100 round trips between clock reads: the clock costs little next to them.
        for _ in range(100):
            work(units)
            write(ping_w, b"x")
            read(pong_r, 1)
        n += 100
        now = time.perf_counter()
    s1 = switches(tids)
    write(ping_w, b"q")
    pong.join()
    vol = s1[0] - s0[0]
    sys.stdout.write("result %d %.6f %d %d %d %d\n" % (n, now - t0, vol + s1[1] - s0[1], vol, s1[2] - s0[2],
                                                      s1[3] - s0[3]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
