"""CPU-bound workload running at a known recursion depth, for the BPF smoke test.

Usage: deep.py DEPTH SECONDS
Root to leaf: <module> -> main -> recurse x DEPTH -> spin. Prints `ready` once at that depth.
"""
import sys
import time


def spin(deadline):
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while time.time() < deadline:
        total = 0
        for i in range(20000):
            total += i % 3


def recurse(n, deadline):
    if n <= 1:
        return spin(deadline)
    return recurse(n - 1, deadline)


def main():
    depth = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3600.0
    sys.setrecursionlimit(depth + 1000)
    recurse(depth, time.time() + seconds)


if __name__ == "__main__":
    main()
