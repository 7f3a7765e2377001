# A workload with a known shape, for end-to-end tests (runs on Python 2.7 and 3.6+).
#   <module> -> main -> Runner.run -> heavy -> burn   (3 units of work)
#   <module> -> main -> Runner.run -> light -> burn   (1 unit of work)
# for SECONDS of the main thread's CPU time (wall time on 2.7, which has no thread clock),
# then, with --threads N, N threads each running spin() for the same time (of its own CPU time).
# Usage: split.py SECONDS [--threads N [--thread-seconds S]] [--go PATH]
# With --go, it waits (after printing `ready`) until PATH exists before it starts: a test attaching with -p starts
# the work once the recorder records, whatever time a loaded machine takes to start it.
#
# At the end of the Runner.run phase it prints `cpu heavy=SECONDS light=SECONDS`: the CPU time this thread really
# spent in each (thread CPU clock; wall clock on 2.7), the truth a profile's split is checked against. The nominal
# 3:1 is not exact: how fast the same loop runs depends on the CPU and the interpreter (0.735 measured by both
# pyperf and py-spy on one machine before the timing below was added).
#
# Each round's size is drawn at random (light n, heavy 3n): with a fixed size one round takes a fixed time, and
# a sampler with a fixed period then hits the same few phases of it again and again (aliasing). CI saw a 0.696
# share for a 0.75 split that way on an interpreter whose round took 1.6 sample periods.
import functools
import os
import random
import sys
import threading
import time

UNIT = 20000

try:
    # A C callable: no Python frame of its own in the stacks of the loops that call it.
    cpu_now = functools.partial(time.clock_gettime, time.CLOCK_THREAD_CPUTIME_ID)
except AttributeError:  # Python 2.7
    cpu_now = time.time


def burn(n):
    # Small ints only, so every iteration costs the same (i * i would turn into a two-digit int in heavy only).
    x = 0
    for i in range(n):
        x = (x + i * 7) & 0xFFFF
    return x


def light(n):
    return burn(n)


def heavy(n):
    return burn(3 * n)


class Runner(object):
    def run(self, seconds):
        rng = random.Random(1)
        in_heavy = in_light = 0.0
        # SECONDS of this thread's CPU time (wall time on 2.7): as many samples however busy the machine is.
        end = cpu_now() + seconds
        while cpu_now() < end:
            n = rng.randint(UNIT // 2, 3 * UNIT // 2)
            t0 = cpu_now()
            light(n)
            t1 = cpu_now()
            heavy(n)
            t2 = cpu_now()
            in_light += t1 - t0
            in_heavy += t2 - t1
        sys.stdout.write("cpu heavy=%.6f light=%.6f\n" % (in_heavy, in_light))
        sys.stdout.flush()


def spin(seconds):
    # SECONDS of this thread's CPU time (wall time on 2.7), as Runner.run.
    end = cpu_now() + seconds
    while cpu_now() < end:
        burn(UNIT)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    threads = 0
    thread_seconds = seconds
    go = None
    args = sys.argv[2:]
    while args:
        if args[0] == "--threads":
            threads = int(args[1])
        elif args[0] == "--thread-seconds":
            thread_seconds = float(args[1])
        elif args[0] == "--go":
            go = args[1]
        args = args[2:]
    sys.stdout.write("ready %d\n" % threads)
    sys.stdout.flush()
    while go is not None and not os.path.exists(go):
        time.sleep(0.01)
    Runner().run(seconds)
    if threads:
        ts = [threading.Thread(target=spin, args=(thread_seconds,), name="spin-%d" % i) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


main()
