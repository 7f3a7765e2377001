"""Run roots of coroutine frames (tests/coro_roots.rs). Python 3.8+.

Three threads busy on the CPU; two run their own event loop, each a task that never returns to its loop:
  "task": the task `spinner`, whose coroutine spin() awaits mid(), which awaits leaf(), which burns CPU: the
          thread's stack is its loop's frames, Handle._run, then spin <- mid <- leaf, one run of coroutine frames
          whose root is spin's.
  "gen":  the same, but leaf() burns the CPU in a generator, burn(), that it resumes with next(): burn's frame is a
          run of its own behind the C-stack entry frame of next() (3.12+; 3.11 chains it to leaf directly).
  "plain": no event loop: a function resumes burn() with next(), so burn's frame is the one run root, a generator's
          (what must not wake user space as an unknown task would).
Prints, for each thread, "NAME TID SPIN_COROUTINE_ID BURN_GENERATOR_ID" (0: none), then "ready" once all burn.
"""
import asyncio
import sys
import threading

started = {"task": threading.Event(), "gen": threading.Event(), "plain": threading.Event()}
facts = {}


def burn_chunk():
    total = 0
    for i in range(2000):
        total += i * i % 7
    return total


def burn():
    while True:
        burn_chunk()
        yield


async def leaf(name):
    started[name].set()
    if name == "gen":
        g = facts[name][2]
        while True:
            next(g)
    while True:
        burn_chunk()


async def mid(name):
    await leaf(name)


async def spin(name):
    await mid(name)


async def main(name):
    coro = spin(name)
    gen = burn() if name == "gen" else None
    facts[name] = (threading.get_native_id(), id(coro), gen)
    await asyncio.get_running_loop().create_task(coro, name="spinner")


def thread(name):
    if name == "plain":
        g = burn()
        facts[name] = (threading.get_native_id(), 0, g)
        started[name].set()
        while True:
            next(g)
    asyncio.run(main(name))


for name in started:
    threading.Thread(target=thread, args=(name,), name=name, daemon=True).start()
for name, event in started.items():
    event.wait()
    tid, coro, gen = facts[name]
    print(name, tid, coro, id(gen) if gen is not None else 0, flush=True)
print("ready", flush=True)
seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3600
threading.Event().wait(seconds)
