"""Workloads of the profiler benchmark (bench/run.sh). Python 3.6+.

Every stack is made of DEPTH *distinct* functions (f0 -> f1 -> ... -> leaf), not one recursive function:
each frame has its own code object, which is the costly case for a walker that reads something per code object.

  busy DEPTH SECONDS        burn CPU at a stack of DEPTH Python frames (<module> and main included) for SECONDS.
  fixed DEPTH UNITS         print "ready", wait for a line on stdin, then do UNITS units of work at that depth;
                            print "elapsed WALL CPU" (seconds) and exit. The same work every run.
  chunks DEPTH UNITS        print "ready", then forever: do UNITS units of work at that depth and print "WALL CPU" (the
                            clocks at the end of the chunk, seconds). One process, many chunks: a profiler is attached
                            and detached around it and the chunks of each window compared (bench.py, experiment 2b).
  split SECONDS             print "ready", wait for a line on stdin, then alternate alpha_work() and beta_work()
                            (about 70 / 30 of the time) for SECONDS; print "truth ALPHA_CPU BETA_CPU ALPHA_WALL
                            BETA_WALL" (seconds spent inside each, measured by the workload itself) and exit.
                            Each call's length is random (0.5-1.5x its mean): a fixed cycle would alias with a
                            fixed sampling period and bias any sampling profiler.
"""
import random
import sys
import time

UNIT = 2000


def leaf(units, deadline):
    total = 0
    if deadline:
        while time.time() < deadline:
            for i in range(UNIT):
                total += i * i % 7
    else:
        for _ in range(units):
            for i in range(UNIT):
                total += i * i % 7
    return total


def chain(depth):
    """Returns f0, the root of depth distinct functions ending in leaf()."""
    # <module> and main are 2 frames, leaf is 1: depth - 3 generated functions.
    n = max(depth - 3, 0)
    ns = {"leaf": leaf}
    for k in range(n - 1, -1, -1):
        callee = "f%d" % (k + 1) if k + 1 < n else "leaf"
        src = "def f%d(units, deadline):\n    return %s(units, deadline)\n" % (k, callee)
        exec(compile(src, "<chain>", "exec"), ns)
    return ns["f0"] if n else leaf


def alpha_work(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def beta_work(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def split(seconds):
    cpu = time.thread_time if hasattr(time, "thread_time") else time.process_time
    wall = time.perf_counter
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    a_cpu = b_cpu = a_wall = b_wall = 0.0
    rnd = random.Random(1).random
    end = wall() + seconds
    while wall() < end:
        na = int(7 * UNIT * (0.5 + rnd()))
        nb = int(3 * UNIT * (0.5 + rnd()))
        c0, w0 = cpu(), wall()
        alpha_work(na)
        c1, w1 = cpu(), wall()
        beta_work(nb)
        c2, w2 = cpu(), wall()
        a_cpu += c1 - c0
        b_cpu += c2 - c1
        a_wall += w1 - w0
        b_wall += w2 - w1
    sys.stdout.write("truth %.6f %.6f %.6f %.6f\n" % (a_cpu, b_cpu, a_wall, b_wall))
    sys.stdout.flush()


def main():
    mode = sys.argv[1]
    if mode == "busy":
        depth, seconds = int(sys.argv[2]), float(sys.argv[3])
        sys.setrecursionlimit(depth + 100)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        chain(depth)(0, time.time() + seconds)
    elif mode == "fixed":
        depth, units = int(sys.argv[2]), int(sys.argv[3])
        sys.setrecursionlimit(depth + 100)
        f = chain(depth)
        f(1, 0)  # warm up
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
        w0, c0 = time.perf_counter(), time.process_time()
        f(units, 0)
        w1, c1 = time.perf_counter(), time.process_time()
        sys.stdout.write("elapsed %.6f %.6f\n" % (w1 - w0, c1 - c0))
        sys.stdout.flush()
    elif mode == "chunks":
        depth, units = int(sys.argv[2]), int(sys.argv[3])
        sys.setrecursionlimit(depth + 100)
        f = chain(depth)
        out = sys.stdout
        wall, cpu = time.perf_counter, time.thread_time
        out.write("ready\n")
        out.flush()
        while True:
            f(units, 0)
            out.write("%.6f %.6f\n" % (wall(), cpu()))
            out.flush()
    elif mode == "split":
        split(float(sys.argv[2]))
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
