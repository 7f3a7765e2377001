# -*- coding: utf-8 -*-
"""Driver of the exact-stack workloads (tests/stacks.rs). Runs on CPython 2.7 and 3.6+.

Usage: main.py DUMP SECONDS PHASE[:SECONDS] [PHASE...] [--ready] [--repeat TOTAL]

Runs each PHASE (a `phase_NAME` function of phases.py, or on Python 3 of py3_async.py, données_ü.py or,
3.6 - 3.11, py3_legacy.py) for SECONDS of CPU time (or its own), each with one hot leaf whose exact stack the test knows
from the `# @label` markers in these files: every frame's line is the line carrying a marker.
`--repeat TOTAL` cycles through the phases until TOTAL seconds have passed; `--ready` prints `ready` first
(for tests that attach with -p). DUMP `-` writes no dump.

The interpreter's own view, for comparison: a SIGPROF every 20 ms of CPU time (or five times the last walk's cost, if more) walks the interrupted frame's
f_back chain (what tracebacks and sys._getframe show) and DUMP gets one record per walk, root first:
    S <phase>
    F <co_name> TAB <co_qualname or -> TAB <class of the self/cls heuristic or -> TAB <co_filename> TAB <f_lineno>
"""
import io
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LONG_DIR = ("long_path_a_directory_whose_name_alone_is_longer_than_the_128_bytes_"
            "the_seed_kept_of_a_file_name_so_the_path_must_come_out_complete")
ASTRAL_DIR = "chemin_ü_𝔘"  # 2-byte and 4-byte UTF-8: co_filename is a 4-byte-kind str on Python 3
for d in (HERE, os.path.join(HERE, LONG_DIR), os.path.join(HERE, ASTRAL_DIR)):
    sys.path.insert(0, d)
sys.setrecursionlimit(10000)

import phases  # noqa: E402

MODULES = [phases]
if sys.version_info[0] >= 3:
    import importlib
    MODULES.append(importlib.import_module("py3_async"))
    if sys.version_info < (3, 12):
        MODULES.append(importlib.import_module("py3_legacy"))
    MODULES.append(importlib.import_module(u"donn\u00e9es_\u00fc"))

DUMPS = []
CURRENT = [None]
TICK = 0.02


def tp_name(t):
    """PyTypeObject.tp_name: `__name__` for classes made by `class`, `module.Name` for static types."""
    if t.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE
        return t.__name__
    if t.__module__ in ("builtins", "__builtin__"):
        return t.__name__
    return t.__module__ + "." + t.__name__


def heuristic_class(frame):
    """The class the <= 3.10 self/cls heuristic names: type(self), or cls when it is a class."""
    co = frame.f_code
    if co.co_argcount < 1 or not co.co_varnames or co.co_varnames[0] not in ("self", "cls"):
        return None
    var = co.co_varnames[0]
    f_locals = frame.f_locals
    if var not in f_locals:
        return None
    obj = f_locals[var]
    if var == "self":
        t = type(obj)
    elif isinstance(obj, type):
        t = obj
    else:
        return None
    name = tp_name(t)
    if sys.version_info[0] == 2 and name in ("instance", "classobj"):
        return None  # old-style classes: no class name in the type
    return name


def on_tick(signum, frame):
    phase = CURRENT[0]
    if phase is None:
        return
    started = phases.now()
    stack = []
    f = frame
    while f is not None:
        co = f.f_code
        stack.append((co.co_name, getattr(co, "co_qualname", None), heuristic_class(f), co.co_filename, f.f_lineno))
        f = f.f_back
    stack.reverse()
    DUMPS.append((phase, stack))
    # The walk of a 2,100-frame stack (f_locals for the class heuristic) costs ~10 ms on 2.7, more on a busy
    # machine; at a fixed 20 ms the next SIGPROF can be due when it ends and the phase becomes all walks (9 of
    # 400 samples at its leaf once). Keep the walks under a fifth of the CPU whatever they cost.
    spent = phases.now() - started
    signal.setitimer(signal.ITIMER_PROF, max(TICK, 5 * spent), TICK)


def enc(x):
    if x is None:
        return b"-"
    if isinstance(x, bytes):
        return x
    if sys.version_info[0] >= 3:
        return str(x).encode("utf-8", "surrogateescape")
    return unicode(x).encode("utf-8")  # noqa: F821 (2.7 only)


def write_dumps(path):
    with io.open(path, "wb") as out:
        for phase, stack in DUMPS:
            out.write(b"S " + enc(phase) + b"\n")
            for name, qual, cls, filename, line in stack:
                out.write(b"F " + b"\t".join([enc(name), enc(qual), enc(cls), enc(filename), enc(line)]) + b"\n")


def find_phase(name):
    for m in MODULES:
        fn = getattr(m, "phase_" + name, None)
        if fn is not None:
            return fn
    raise SystemExit("unknown phase " + name)


def main():
    args = sys.argv[1:]
    ready = "--ready" in args
    repeat = None
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = float(args[i + 1])
        del args[i:i + 2]
    args = [a for a in args if a != "--ready"]
    dump, seconds, names = args[0], float(args[1]), args[2:]
    fns = []
    for arg in names:
        name, _, secs = arg.partition(":")
        fns.append((name, find_phase(name), float(secs) if secs else seconds))
    if ready:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
    signal.signal(signal.SIGPROF, on_tick)
    signal.setitimer(signal.ITIMER_PROF, TICK, TICK)
    stop = time.time() + (repeat or 0)
    while True:
        for name, fn, secs in fns:
            CURRENT[0] = name
            end = phases.now() + secs
            fn(end)  # @main.phase
            CURRENT[0] = None
        if repeat is None or time.time() >= stop:
            break
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    if dump != "-":
        write_dumps(dump)


if __name__ == "__main__":
    main()  # @main.call
