"""A bounded loopback client of asgi_app.py (tests/tasks.rs): N threads, each sending GET /orders on one
keep-alive connection to 127.0.0.1:PORT, until SECONDS have passed; prints `done REQUESTS`."""
import http.client
import sys
import threading
import time

port, seconds, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + seconds
count = [0] * n


def run(i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.monotonic() < end:
        c.request("GET", "/orders")
        r = c.getresponse()
        assert r.status == 200 and r.read() == b"3 orders\n"
        count[i] += 1


threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"done {sum(count)}", flush=True)
