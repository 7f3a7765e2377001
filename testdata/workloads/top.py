"""pyperf top's workload: the main thread spends most of its time in hot_a, a thread named "worker" in hot_b
(about a fifth of its time, sleeping the rest). Runs for argv[1] seconds; exits at once on Ctrl-C (the worker is a
daemon thread)."""
import sys
import threading
import time


def hot_a():
    x = 0
    for i in range(20000):
        x = (x + i * 7) & 0xFFFF
    return x


def hot_b():
    x = 0
    for i in range(20000):
        x = (x + i * 3) & 0xFFFF
    return x


def worker(end):
    while time.time() < end:
        hot_b()
        time.sleep(0.01)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    end = time.time() + seconds
    t = threading.Thread(target=worker, args=(end,), name="worker")
    t.daemon = True
    t.start()
    while time.time() < end:
        hot_a()


if __name__ == "__main__":
    main()
