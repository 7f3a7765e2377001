# Code objects recreated at the addresses of freed ones (tests/symbols.rs, the check-word cache): each round
# compiles a function f_I whose def is on line I + 1 (so that each round's check word differs), runs it (it burns
# the CPU for ROUND_MS in the long-lived `burn`), then drops it and collects the garbage, so that its code object
# is freed before the next round allocates one of the same size; the allocator then often hands back the same
# address. Writes "I ADDRESS" per round (the address of f_I's code object) to OUT at the end.
# Usage: reuse.py ROUNDS ROUND_MS OUT    (Python 2.7 and 3.x)
import gc
import sys
import time


# The process's CPU time (time.clock on 2.7): each round gets as many samples however busy the machine is.
cpu = getattr(time, "process_time", None) or time.clock


def burn(seconds):
    end = cpu() + seconds
    while cpu() < end:
        pass


def main():
    rounds, ms, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    seen = []
    for i in range(rounds):
        src = "\n" * i + "def f_%d(burn):\n    burn(%r)\n" % (i, ms / 1000.0)
        ns = {}
        exec(compile(src, "reuse_%d.py" % i, "exec"), ns)
        f = ns["f_%d" % i]
        seen.append("%d %d" % (i, id(f.__code__)))
        f(burn)
        # f and its globals refer to each other: only the collector frees them.
        del f, ns
        gc.collect()
    with open(out, "w") as fh:
        fh.write("\n".join(seen) + "\n")


main()
