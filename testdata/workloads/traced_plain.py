"""tests/traces.rs: asyncio tasks with context variables of their own, and no OpenTelemetry SDK: about a second of
CPU time in tasks whose contexts hold a variable named like the SDK's (`current_context`) with a plain dict value,
which must not be taken for it."""
import asyncio
import contextvars

current = contextvars.ContextVar("current_context")


def burn():
    x = 0
    for i in range(40000):
        x += i * i
    return x


async def request(i):
    current.set({"current-span-x": i})
    for _ in range(4):
        burn()
        await asyncio.sleep(0)


async def main():
    for _ in range(40):  # a fixed amount of work: about a second of CPU time
        await asyncio.gather(*(request(i) for i in range(4)))


asyncio.run(main())
