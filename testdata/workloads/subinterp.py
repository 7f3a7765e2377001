"""Subinterpreters (tests/subinterp.rs, issue 32): the main thread burns CPU in func_a (main interpreter) while a
second thread, `runner`, calls Interpreter.exec into a subinterpreter (3.14+ concurrent.interpreters; 3.13
_interpreters) that burns CPU in func_b, each with its own GIL. Each times its own CPU with time.thread_time, and
the workload stops when both have used SECONDS of CPU (argv[1], default 2): its own signal, not a fixed sleep.

With `sleep` as argv[2], func_b sleeps instead (time.sleep in 50 ms steps, SECONDS of wall time in all): its
waits are off-CPU time in the subinterpreter (record --off-cpu).

Prints `ids MAIN_TID RUNNER_TID SUB_ID` (SUB_ID: the subinterpreter's id as the interpreter gives it) when both run,
then `cpu MAIN RUNNER_TOTAL RUNNER_IN_EXEC` (seconds of thread CPU: the main thread's, the runner thread's in all,
and of it the part inside exec, in the subinterpreter) and `wall RUNNER_IN_EXEC` (seconds of wall time in exec).
"""

import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
SLEEP = len(sys.argv) > 2 and sys.argv[2] == "sleep"

try:
    from concurrent import interpreters  # 3.14+

    def create():
        interp = interpreters.create()
        return interp.id, interp.exec
except ImportError:
    try:  # 3.13: the private module
        import _interpreters

        def create():
            sid = _interpreters.create()
            return sid, lambda code: _interpreters.exec(sid, code)
    except ImportError:  # 3.12: its predecessor, which runs the interpreter's first thread state on any thread
        import _xxsubinterpreters

        def create():
            sid = _xxsubinterpreters.create()
            return int(sid), lambda code: _xxsubinterpreters.run_string(sid, code)


# Runs in the subinterpreter: its module `<module>` calls func_b, which burns SECONDS of this thread's CPU.
SUB_CODE = """
import time

def func_b(seconds, sleep):
    if sleep:
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            time.sleep(0.05)
        return 0
    t0 = time.thread_time()
    n = 0
    while time.thread_time() - t0 < seconds:
        for i in range(2000):
            n += i * i
    return n

func_b(%r, %r)
""" % (SECONDS, SLEEP)

started = threading.Event()
done = {}


def runner(exec_code):
    t0, w0 = time.thread_time(), time.monotonic()
    started.set()
    exec_code(SUB_CODE)
    done["in_exec"] = time.thread_time() - t0
    done["wall"] = time.monotonic() - w0
    done["total"] = time.thread_time()


def func_a(seconds):
    t0 = time.thread_time()
    n = 0
    while time.thread_time() - t0 < seconds:
        for i in range(2000):
            n += i * i
    return n


def main():
    sub_id, exec_code = create()
    t = threading.Thread(target=runner, args=(exec_code,), name="runner")
    t.start()
    started.wait()
    print("ids", threading.get_native_id(), t.native_id, sub_id, flush=True)
    func_a(SECONDS)
    t.join()
    print("cpu %.6f %.6f %.6f" % (time.thread_time(), done["total"], done["in_exec"]), flush=True)
    print("wall %.6f" % done["wall"], flush=True)


main()
