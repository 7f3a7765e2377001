# Threads taking turns at the GIL, for end-to-end tests (Python 3): THREADS threads each run bytecode for SECONDS.
# With more threads than CPUs, each is made to drop the GIL every switch interval and asks for it again: on 3.15+
# the interpreter says so per thread (tstate->gil_requested) while it waits.
#   thread: Thread bootstrap ... -> spin
#   main:   <module> -> main -> join (waits, off the CPU)
# Usage: contend.py THREADS SECONDS
import sys
import threading
import time


def spin(seconds):
    end = time.time() + seconds
    x = 0
    while time.time() < end:
        for i in range(1000):
            x = (x + i * 7) & 0xFFFF
    return x


def main():
    count, seconds = int(sys.argv[1]), float(sys.argv[2])
    threads = [threading.Thread(target=spin, args=(seconds,)) for _ in range(count)]
    print("ready", flush=True)
    for t in threads:
        t.start()
    for t in threads:
        t.join()


main()
