"""A small Starlette service on uvicorn with uvloop (tests/tasks.rs; the packages come from scripts/setup's virtual
environment). Listens on 127.0.0.1, on a port the system picks, and prints `ready PORT`. GET /orders awaits a
simulated database (an asyncio sleep) and renders its answer with some CPU."""
import asyncio
import socket
import time

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


def render(n):
    end = time.perf_counter() + 0.004
    x = 0
    while time.perf_counter() < end:  # at:asgi_render
        x += 1
    return f"{n} orders\n"


async def query_db():
    await asyncio.sleep(0.02)  # at:asgi_query_db


async def orders(request):
    await query_db()  # at:asgi_orders_await
    return PlainTextResponse(render(3))  # at:asgi_orders_render


app = Starlette(routes=[Route("/orders", orders)])

sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
print(f"ready {sock.getsockname()[1]}", flush=True)
config = uvicorn.Config(app, loop="uvloop", http="httptools", log_level="warning", access_log=False)
uvicorn.Server(config).run(sockets=[sock])
