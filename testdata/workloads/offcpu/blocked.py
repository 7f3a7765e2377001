# Two threads blocked for good in known places, for the user-space stack walk (tests/walk.rs), which checks the
# functions and the lines marked below. Runs on Python 2.7 and 3.6+.
#   main thread:       <module> -> f -> g -> h -> lock.acquire()
#   thread "waiter":   threading's bootstrap -> waiter -> wait_here -> other.acquire()
# Prints "worker TID", "main TID" (kernel tids), then "ready" just before the main thread blocks; runs until killed.
import sys
import threading


def native_tid():
    get = getattr(threading, "get_native_id", None)  # 3.8+
    if get is not None:
        return get()
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(186)  # gettid, x86-64


lock = threading.Lock()
lock.acquire()
other = threading.Lock()
other.acquire()
started = threading.Event()
tids = {}


def wait_here():
    tids["worker"] = native_tid()
    started.set()
    other.acquire()  # MARK wait_here


def waiter():
    wait_here()  # MARK waiter


def h():
    sys.stdout.write("main %d\nready\n" % native_tid())
    sys.stdout.flush()
    lock.acquire()  # MARK h


def g():
    h()  # MARK g


def f():
    g()  # MARK f


t = threading.Thread(target=waiter, name="waiter")
t.daemon = True
t.start()
started.wait()
sys.stdout.write("worker %d\n" % tids["worker"])
f()  # MARK <module>
