"""A small service instrumented with the OpenTelemetry SDK (tests/traces.rs): requests of two kinds, each in a span
of its own, `render` CPU-heavy and `lookup` light, one after another (`threads`: two threads) or as concurrent
asyncio tasks (`asyncio`: each task runs in a context of its own). Prints one JSON line per span when it ends: its
trace and span ids (lowercase hex, as W3C trace context writes them), its kind, and the CPU time its code ran
(thread CPU time around each step it ran: an asyncio task's own steps only). Then `done`.

Usage: traced.py threads|io|asyncio ROUNDS: a fixed amount of work (about 40 ms of CPU time a round), however busy
the machine is. `io` is `threads` whose lookups also wait 2 ms (a sleep: off CPU) inside their span.
"""
import asyncio
import json
import sys
import threading
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("traced")
out_lock = threading.Lock()
WORK = {"render": 6, "lookup": 2}  # steps of burn() per request


def burn():
    x = 0
    for i in range(40000):
        x += i * i
    return x


def report(span, kind, cpu_ns):
    ctx = span.get_span_context()
    line = {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}", "kind": kind, "cpu_ns": cpu_ns}
    with out_lock:
        print(json.dumps(line), flush=True)


IO_WAIT = {"render": 0.0, "lookup": 0.0}


def request(kind):
    with tracer.start_as_current_span(kind) as span:
        t0 = time.thread_time_ns()
        for _ in range(WORK[kind]):
            burn()
        if IO_WAIT[kind]:
            time.sleep(IO_WAIT[kind])
        cpu = time.thread_time_ns() - t0
    report(span, kind, cpu)


def serve(kinds, n):
    for i in range(n):
        request(kinds[i % len(kinds)])


async def arequest(kind):
    with tracer.start_as_current_span(kind) as span:
        cpu = 0
        for _ in range(WORK[kind]):
            t0 = time.thread_time_ns()
            burn()
            cpu += time.thread_time_ns() - t0
            await asyncio.sleep(0)  # let the other requests run: interleaved tasks, each in its own context
    report(span, kind, cpu)


async def aserve(rounds):
    for _ in range(rounds):
        await asyncio.gather(*(arequest(k) for k in ("render", "lookup", "lookup", "render")))


def main():
    mode, rounds = sys.argv[1], int(sys.argv[2])
    if mode == "io":
        IO_WAIT["lookup"] = 0.002
    if mode in ("threads", "io"):
        # A round: render + lookup in one thread, two lookups in the other.
        work = [(["render", "lookup"], 2 * rounds), (["lookup"], 2 * rounds)]
        workers = [threading.Thread(target=serve, args=w) for w in work]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    else:
        asyncio.run(aserve(rounds))
    print("done", flush=True)


main()
