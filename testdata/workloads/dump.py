# A process for `pyperf dump` tests (Python 2.7 and 3.6+): named threads in known states, each at a known line.
#   spinner   busy in spin()           (running, or waiting for the GIL)
#   napper    in nap() -> time.sleep   (waiting in a sleep system call)
#   waiter    in wait_lock() -> a Lock held by the main thread (waiting in futex, not for the GIL)
#   left/right  a deadlock: each holds one lock and waits for the other's, in grab()
# Prints `ready` once every thread is in place, then sleeps in main().
import sys
import threading
import time

held = threading.Lock()
held.acquire()
a = threading.Lock()
b = threading.Lock()
in_place = threading.Semaphore(0)


def spin():
    in_place.release()
    x = 0
    while True:
        x += 1


def nap():
    in_place.release()
    while True:
        time.sleep(3600)


def wait_lock():
    in_place.release()
    held.acquire()


def grab(first, second, ready):
    first.acquire()
    ready.release()
    ready_all.acquire()
    ready_all.release()
    in_place.release()
    second.acquire()


ready_all = threading.Lock()
ready_all.acquire()


def main():
    go = threading.Semaphore(0)
    threads = [
        threading.Thread(target=spin, name="spinner"),
        threading.Thread(target=nap, name="napper"),
        threading.Thread(target=wait_lock, name="waiter"),
        threading.Thread(target=grab, args=(a, b, go), name="left"),
        threading.Thread(target=grab, args=(b, a, go), name="right"),
    ]
    for t in threads:
        t.daemon = True
        t.start()
    go.acquire()
    go.acquire()
    ready_all.release()
    for _ in threads:
        in_place.acquire()
    time.sleep(0.3)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        time.sleep(3600)


main()
