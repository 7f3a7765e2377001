"""An asyncio workload of the profiler benchmark (bench/tasks-bpf.sh). Python 3.7+.

  busy DEPTH SECONDS   burn CPU for SECONDS in one task, at a stack of DEPTH Python frames in all: the event loop's
                       frames (asyncio.run ... Handle._run), then the task's coroutine, which awaits a chain of
                       distinct coroutines (each its own code object, as in work.py) down to the leaf coroutine,
                       which burns the CPU without returning to the loop. Prints "ready LOOP_FRAMES COROUTINES"
                       once it burns.
"""
import asyncio
import sys
import time

UNIT = 2000


def chain(n):
    """The root of n distinct coroutine functions, the last of which burns the CPU until `deadline`."""
    ns = {"time": time, "UNIT": UNIT}
    src = (
        "async def c%d(deadline):\n"
        "    total = 0\n"
        "    while time.time() < deadline:\n"
        "        for i in range(UNIT):\n"
        "            total += i * i %% 7\n"
        "    return total\n" % (n - 1)
    )
    exec(compile(src, "<coro-chain>", "exec"), ns)
    for k in range(n - 2, -1, -1):
        src = "async def c%d(deadline):\n    return await c%d(deadline)\n" % (k, k + 1)
        exec(compile(src, "<coro-chain>", "exec"), ns)
    return ns["c0"]


def depth_here():
    """Python frames of this thread from the caller of this function to the root."""
    f, n = sys._getframe(1), 0
    while f is not None:
        n, f = n + 1, f.f_back
    return n


async def top(depth, seconds):
    # Frames rootward of this coroutine, and this one.
    below = depth_here()
    n = max(depth - below, 1)
    sys.stdout.write("ready %d %d\n" % (below - 1, n + 1))
    sys.stdout.flush()
    return await chain(n)(time.time() + seconds)


async def main(depth, seconds):
    await asyncio.ensure_future(top(depth, seconds))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "busy":
        sys.exit(__doc__)
    asyncio.run(main(int(sys.argv[2]), float(sys.argv[3])))
