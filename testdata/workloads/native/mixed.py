"""Time in four places, in turns of ~50 ms, for the --native and --kernel tests (tests/native.rs):
 - cext_phase: Python -> C -> Python -> C through the test's C extension (pyperf_native_test, built by the test
   into argv[2]; "-" for none, e.g. on 2.7): through -> call_through -> pyperf_outer -> pyperf_inner -> callback
   -> spin -> pyperf_leaf_spin;
 - compress_work: zlib.compress, whose time is in libz (deflate);
 - read_random: reads of /dev/urandom, whose time is in the kernel;
 - py_phase: pure Python (py_spin recursing 5 deep, then a loop).
argv[1] is the seconds to run. Seconds of the process's CPU time (time.clock on 2.7), so that each place gets as
many samples on a loaded machine."""
import os
import sys
import time
import zlib

clock = getattr(time, "process_time", None) or time.clock

ext = None
if len(sys.argv) > 2 and sys.argv[2] != "-":
    sys.path.insert(0, sys.argv[2])
    import pyperf_native_test as ext  # noqa: E402


def callback():
    ext.spin(200000)


def through():
    ext.call_through(callback)


def cext_phase():
    end = clock() + 0.05
    while clock() < end:
        through()


def compress_work(data):
    end = clock() + 0.05
    while clock() < end:
        zlib.compress(data, 9)


def read_random(fd):
    end = clock() + 0.05
    while clock() < end:
        os.read(fd, 65536)


def py_spin(depth):
    if depth:
        return py_spin(depth - 1)
    x = 0
    for i in range(20000):
        x = (x * 31 + i) % 1000003
    return x


def py_phase():
    end = clock() + 0.05
    while clock() < end:
        py_spin(5)


def main(seconds):
    data = os.urandom(1 << 15) * 8
    fd = os.open("/dev/urandom", os.O_RDONLY)
    end = clock() + seconds
    while clock() < end:
        if ext is not None:
            cext_phase()
        compress_work(data)
        read_random(fd)
        py_phase()


sys.stdout.write("ready\n")
sys.stdout.flush()
main(float(sys.argv[1]))
