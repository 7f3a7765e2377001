"""The --native benchmark's target (bench/native.py): 20 Python frames, then 30 native ones (the test extension's
pyperf_deep, built by the benchmark into argv[1]), spinning at the leaf. argv[2]: seconds."""
import sys
import time

sys.path.insert(0, sys.argv[1])
import pyperf_native_test as ext  # noqa: E402


def down(n):
    if n > 1:
        return down(n - 1)
    ext.deep(29, 100000)


def main(seconds):
    n = 0
    end = time.time() + seconds
    while time.time() < end:
        down(18)
        n += 1
    print("iterations %d" % n, flush=True)


print("ready", flush=True)
main(float(sys.argv[2]))
