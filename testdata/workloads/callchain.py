"""CPU-bound workload with a known call chain, for the BPF smoke test.

Root to leaf the Python stack is: <module> -> main -> outer_frame -> middle_frame -> leaf_spin.
Runs until killed, or for argv[1] seconds. Prints `ready` as it enters the loop.
"""
import sys
import time


def leaf_spin(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def middle_frame(n):
    return leaf_spin(n)


def outer_frame(n):
    return middle_frame(n)


def main():
    deadline = time.time() + (float(sys.argv[1]) if len(sys.argv) > 1 else 3600.0)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while time.time() < deadline:
        outer_frame(200000)


if __name__ == "__main__":
    main()
