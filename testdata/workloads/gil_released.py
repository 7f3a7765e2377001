# A workload with one thread that runs C code with the GIL released, for end-to-end tests
# (runs on Python 2.7 and 3.6+).
#   thread "zip": Thread bootstrap ... -> compress_loop   zlib.compress, which releases the GIL while it
#                                                        deflates: on the CPU, in C, without the GIL
#   main thread:  <module> -> main -> hold -> burn       Python bytecode: holds the GIL, until "zip" is done
# The amount of work is fixed (COUNT compressions of 1 MiB at level 9, ~30 ms each), not the time: on a busy
# machine the run takes longer but is sampled as often.
# Usage: gil_released.py [COUNT]
import hashlib
import sys
import threading
import zlib

# 1 MiB that deflate cannot squeeze much: level 9 works hard on it (md5 is built in on every version).
DATA = b"".join(hashlib.md5(str(i).encode("ascii")).digest() for i in range(1 << 16))


def compress_loop(count):
    for _ in range(count):
        zlib.compress(DATA, 9)


def burn(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def hold(thread):
    while thread.is_alive():
        burn(20000)


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    t = threading.Thread(target=compress_loop, args=(count,), name="zip")
    t.start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    hold(t)
    t.join()


main()
