"""1,000 live asyncio tasks, mostly waiting (bench/tasks.py): 250 request chains of 4 tasks (a request awaiting a
gather of two tasks, one of which awaits a third), each waiting in a three-deep coroutine chain, woken every few
seconds; plus one task using a little CPU. Prints `ready` once all are started."""
import asyncio
import random
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000


async def query(d):
    await asyncio.sleep(d)


async def fetch(d):
    await query(d)


async def leaf(d):
    while True:
        await fetch(d * random.uniform(0.5, 1.5))


async def middle(d):
    await asyncio.create_task(leaf(d), name="leaf")


async def request(i):
    await asyncio.gather(middle(2.0), leaf(3.0))


async def busy():
    while True:
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0.01)


async def main():
    reqs = [asyncio.create_task(request(i), name=f"request-{i}") for i in range(N // 4)]
    asyncio.create_task(busy(), name="busy")
    await asyncio.sleep(0.5)
    print("ready", len(asyncio.all_tasks()), flush=True)
    await asyncio.gather(*reqs)


asyncio.run(main())
