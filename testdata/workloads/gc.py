# -*- coding: utf-8 -*-
"""Garbage collection workload (tests/gc.rs). CPython 2.7 and 3.6+.

Usage: gc.py SECONDS

The main thread alternates two phases until SECONDS of its own CPU time have passed: `work` (pure Python
arithmetic, no allocation to speak of) and `collect` (makes cyclic garbage, then gc.collect(), which traverses a
heap of 300,000 long-lived container objects). Automatic collection is off, so the collector runs only in
gc.collect(), whose CPU time the thread measures itself (its own CPU clock around each call; gc.callbacks do not
exist on 2.7). A second thread compresses with zlib the whole time: on CPU with the GIL released, beside the
collections, never collecting. Prints `ready MAIN_TID ZLIB_TID` once both run, and at the end
`gc GC_SECONDS TOTAL_SECONDS` (the main thread's CPU time in gc.collect() and in all, since the thread started).
"""
import ctypes
import gc
import os
import sys
import threading
import time
import zlib


def tid():
    try:
        return threading.get_native_id()
    except AttributeError:  # before 3.8
        return int(os.readlink("/proc/thread-self").rsplit("/", 1)[1])


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)
_CLOCK_THREAD_CPUTIME_ID = 3


def thread_cpu():
    """This thread's CPU time, seconds."""
    if hasattr(time, "thread_time"):  # 3.7+
        return time.thread_time()
    if hasattr(time, "clock_gettime"):  # 3.3+
        return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
    # 2.7: clock_gettime through ctypes. Not /proc/thread-self/schedstat, whose run time of a running thread is the
    # one of its last scheduler event (up to a tick old): measured 1-4 points off the samples' share.
    ts = _Timespec()
    if _libc.clock_gettime(_CLOCK_THREAD_CPUTIME_ID, ctypes.byref(ts)) != 0:
        raise OSError(ctypes.get_errno(), "clock_gettime")
    return ts.tv_sec + ts.tv_nsec / 1e9


stop = threading.Event()
zlib_tid = []


def compress():
    zlib_tid.append(tid())
    data = os.urandom(1 << 16) * 32
    while not stop.is_set():
        zlib.compress(data, 6)


def work(n):
    t = 0
    for i in range(n):
        t += i * i % 7
    return t


def main():
    seconds = float(sys.argv[1])
    gc.disable()
    keep = [[i] for i in range(300000)]  # long-lived containers: a full collection traverses them all
    t = threading.Thread(target=compress, name="zlib")
    t.daemon = True
    t.start()
    while not zlib_tid:
        time.sleep(0.001)
    sys.stdout.write("ready %d %d\n" % (tid(), zlib_tid[0]))
    sys.stdout.flush()
    in_gc = 0.0
    # The thread's CPU clock counts from its start, as the recorder samples it (the interpreter's start-up and
    # imports included: 1-2% of the samples, which a clock started here left out).
    while thread_cpu() < seconds:
        work(400000)
        for _ in range(2000):
            a = []
            a.append(a)
        del a
        c0 = thread_cpu()
        gc.collect()
        in_gc += thread_cpu() - c0
    total = thread_cpu()
    stop.set()
    t.join()
    sys.stdout.write("gc %.6f %.6f\n" % (in_gc, total))
    sys.stdout.flush()
    return len(keep)


if __name__ == "__main__":
    main()
