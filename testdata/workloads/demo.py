# The demo workload of `scripts/demo`: a small "service" doing a few kinds of CPU work for about three seconds.
import json
import re
import threading
import time

WORDS = "the quick brown fox jumps over the lazy dog and keeps running through the forest".split()


def parse_records(n):
    text = json.dumps([{"id": i, "name": WORDS[i % len(WORDS)], "tags": WORDS[: i % 7]} for i in range(n)])
    return json.loads(text)


def tokenize(records):
    pattern = re.compile(r"[aeiou]+")
    return sum(len(pattern.findall(r["name"] + " ".join(r["tags"]))) for r in records)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Service:
    def handle(self, n):
        records = parse_records(n)
        vowels = tokenize(records)
        return vowels + fib(18)


def background(seconds):
    end = time.time() + seconds
    while time.time() < end:
        sorted(range(20000), key=lambda x: -x)


def main(seconds=3.0):
    t = threading.Thread(target=background, args=(seconds,), name="background")
    t.start()
    svc = Service()
    end = time.time() + seconds
    while time.time() < end:
        svc.handle(300)
    t.join()


if __name__ == "__main__":
    main()
