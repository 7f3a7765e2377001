# -*- coding: utf-8 -*-
"""Line costs for `pyperf annotate` (tests/annotate.rs). CPython 2.7 and 3.6+.

Usage: annotate_lines.py SECONDS

`checksums` runs two lines in a loop until SECONDS of the thread's CPU time have passed: the line marked
`# line A` checksums a buffer three times as long as the one of the line marked `# line B` (zlib.crc32: C code, so
the time is the line's self time; the interpreter's own work per line is microseconds against milliseconds). The
thread times each line itself with its CPU clock, and prints `ready` when it starts and at the end
`lines A_SECONDS B_SECONDS`: the split the samples of those two lines must show.

Between two rounds a third line checksums a piece of random length (32-512 KiB, made beforehand; untimed): a loop of fixed
length sampled at a fixed rate beats with it, and the samples then see some phases of the loop more than others
(once 4.9 standard errors off beside a load); the jitter spreads them over every phase.
"""
import random
import sys
import time
import zlib


def thread_cpu():
    """This thread's CPU time, seconds (the process's on 2.7: it has this one thread)."""
    if hasattr(time, "thread_time"):  # 3.7+
        return time.thread_time()
    if hasattr(time, "clock_gettime"):  # 3.3+
        return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
    # 2.7: clock(3), the process's CPU time to the microsecond. Not /proc/thread-self/schedstat, which moves by
    # scheduler ticks (4 ms): a millisecond line timed with it is a sample of its own, as noisy as pyperf's.
    return time.clock()


def checksums(seconds, big, small):
    a = b = 0.0
    start = thread_cpu()
    crc = 0
    draw = random.Random(1)
    # Pieces made once: a slice in the loop would copy (and, past 128 KiB, map and fault in) memory every round.
    pieces = [small[: (k + 1) << 15] for k in range(16)]
    while thread_cpu() - start < seconds:
        t0 = thread_cpu()
        crc = zlib.crc32(big, crc)  # line A
        t1 = thread_cpu()
        crc = zlib.crc32(small, crc)  # line B
        t2 = thread_cpu()
        a += t1 - t0
        b += t2 - t1
        crc = zlib.crc32(pieces[draw.randrange(16)], crc)  # jitter
    return a, b


def main():
    seconds = float(sys.argv[1])
    small = b"\x5a" * (1 << 20)
    big = small * 3
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    a, b = checksums(seconds, big, small)
    sys.stdout.write("lines %.6f %.6f\n" % (a, b))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
