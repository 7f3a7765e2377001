"""Python 3 only: a running coroutine chain under asyncio (see main.py)."""
import asyncio
try:
    from time import process_time as now  # CPU time: phases get their samples on a busy machine too
except ImportError:  # 2.7
    from time import clock as now

N = 20000


async def leaf_coro(end):
    while now() < end:
        t = 0
        for i in range(N): t += i  # @async.leaf
        await asyncio.sleep(0)


async def middle_coro(end):
    await leaf_coro(end)  # @async.middle


async def outer_coro(end):
    await middle_coro(end)  # @async.outer


def phase_async(end):
    if hasattr(asyncio, "run"):
        asyncio.run(outer_coro(end))  # @async.phase
    else:  # 3.6
        loop = asyncio.new_event_loop()
        loop.run_until_complete(outer_coro(end))  # @async.phase36
        loop.close()
