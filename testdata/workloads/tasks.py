"""asyncio workload of tests/tasks.rs: named tasks, gather, create_task, nested awaits, a task awaited by two others,
tasks that end while it runs. Prints `ready`, then runs until killed; on SIGUSR1 prints its own clock of the two
waits of `waiter` since the start or the last SIGUSR2 ("waits short=S long=L" in seconds) and goes on. `still`: the same tasks, all parked for good once
`ready` is printed (for comparing two readers of the task tree); `uvloop`: run on uvloop's event loop; `pure`: without
the C `_asyncio` module (asyncio's pure-Python tasks, which pyperf does not read).

Lines the tests look for carry a `# at:NAME` comment (the line a suspended frame waits on, or a CPU leaf)."""
import sys

if "pure" in sys.argv[1:]:
    sys.modules["_asyncio"] = None  # asyncio falls back to its pure-Python Task

import asyncio
import signal
import time

WAITED = {"short": 0.0, "long": 0.0}
STILL = "still" in sys.argv[1:]


def crunch(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:  # at:crunch
        x += 1
    return x


async def compute():
    crunch(0.02)  # at:compute


async def park():
    await asyncio.Event().wait()  # at:park


async def fetch_orders(i):
    if STILL:
        await park()  # at:fetch_orders_still
    for _ in range(10):
        await compute()  # at:fetch_orders
        await asyncio.sleep(0.005)


async def audit(i):
    await asyncio.sleep(3600 if STILL else 0.3)  # at:audit


async def handle_request(i):
    orders = asyncio.create_task(fetch_orders(i), name=f"orders-{i}")
    await asyncio.gather(orders, audit(i))  # at:handle_request


async def shared_work():
    if STILL:
        await park()  # at:shared_still
    while True:
        crunch(0.01)  # at:shared_work
        await asyncio.sleep(0.01)


async def waits_for(task):
    await task  # at:waits_for


async def short_wait():
    await asyncio.sleep(0.1)  # at:short_wait


async def long_wait():
    await asyncio.sleep(0.3)  # at:long_wait


async def long_wait_still():
    await asyncio.sleep(3600)  # at:long_wait_still


async def waiter():
    if STILL:
        await long_wait_still()  # at:waiter_still
    while True:
        t = time.monotonic()
        await short_wait()  # at:waiter_short
        WAITED["short"] += time.monotonic() - t
        t = time.monotonic()
        await long_wait()  # at:waiter_long
        WAITED["long"] += time.monotonic() - t


def housekeeping():
    # A loop callback, not a task: the loop's own time, `[asyncio loop]` in the task view (2 ms every 50 ms).
    end = time.perf_counter() + 0.002
    while time.perf_counter() < end:  # at:housekeeping
        pass
    asyncio.get_running_loop().call_later(0.05, housekeeping)


async def serve():
    shared = asyncio.create_task(shared_work(), name="shared")
    asyncio.create_task(waits_for(shared), name="first")
    asyncio.create_task(waits_for(shared), name="second")
    asyncio.create_task(waiter(), name="waiter")
    n = 0
    if STILL:
        reqs = [asyncio.create_task(handle_request(k), name=f"request-{k}") for k in range(3)]
        await asyncio.sleep(0.05)
        print("ready", flush=True)
        await asyncio.gather(*reqs)  # at:serve_still
    print("ready", flush=True)
    housekeeping()
    while True:
        # A batch of requests, each ending in about half a second; the next batch is new tasks.
        reqs = [asyncio.create_task(handle_request(n + k), name=f"request-{n + k}") for k in range(3)]
        n += 3
        await asyncio.gather(*reqs)  # at:serve


def report(*_):
    print(f"waits short={WAITED['short']:.6f} long={WAITED['long']:.6f}", flush=True)


def reset(*_):
    # (A wait under way counts from here on only partly: its start is before. One wait in a few seconds' worth.)
    WAITED["short"] = WAITED["long"] = 0.0


signal.signal(signal.SIGUSR1, report)
signal.signal(signal.SIGUSR2, reset)
if "uvloop" in sys.argv[1:]:
    import uvloop

    uvloop.run(serve())
else:
    asyncio.run(serve())
