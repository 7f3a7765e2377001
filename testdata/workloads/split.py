# A workload with a known shape, for end-to-end tests (runs on Python 2.7 and 3.6+).
#   <module> -> main -> Runner.run -> heavy -> burn   (3 units of work)
#   <module> -> main -> Runner.run -> light -> burn   (1 unit of work)
# then, with --threads N, N threads each running spin() for the same time.
# Usage: split.py SECONDS [--threads N [--thread-seconds S]]
import sys
import threading
import time

UNIT = 20000


def burn(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def light():
    return burn(UNIT)


def heavy():
    return burn(3 * UNIT)


class Runner(object):
    def run(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            light()
            heavy()


def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        burn(UNIT)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    threads = 0
    thread_seconds = seconds
    args = sys.argv[2:]
    while args:
        if args[0] == "--threads":
            threads = int(args[1])
        elif args[0] == "--thread-seconds":
            thread_seconds = float(args[1])
        args = args[2:]
    sys.stdout.write("ready %d\n" % threads)
    sys.stdout.flush()
    Runner().run(seconds)
    if threads:
        ts = [threading.Thread(target=spin, args=(thread_seconds,), name="spin-%d" % i) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


main()
