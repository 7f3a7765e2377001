# Off-CPU and wall-clock time, for end-to-end tests (issue #14; runs unchanged on Python 2.7 and 3.6+).
#
# The main thread runs five phases one after another, each in a function of its own, so that a stack tells them
# apart:
#   <module> -> main -> run_phases -> phase_cpu   -> spin          pure Python loop: on the CPU
#   <module> -> main -> run_phases -> phase_sleep                  time.sleep: off the CPU (select / clock_nanosleep)
#   <module> -> main -> run_phases -> phase_pipe                   os.read on a pipe a helper writes to later (read)
#   <module> -> main -> run_phases -> phase_lock                   threading.Lock held by a helper, released later
#                                                                  (futex, with the GIL released)
#   <module> -> main -> run_phases -> phase_gil   -> spin          pure Python loop while BURNERS other threads run
#                                                                  pure Python loops too: the main thread waits for
#                                                                  the GIL much of the time
# and, only when asked for (--phases ...,migrate; Python 3.3+, two CPUs allowed):
#   <module> -> main -> run_phases -> phase_migrate               short sleeps (time.sleep(0.005)) while a helper
#                                                                  moves the main thread between two CPUs every
#                                                                  3 ms (sched_setaffinity): most sleeps begin on
#                                                                  one CPU and end on the other
# Before the phases the main thread sleeps SETTLE seconds in `settle` (a recorder that starts the workload follows
# it only once it has found its interpreter, a few hundred ms into the run on a busy machine with a debug build).
# Each phase lasts about SECONDS of wall time (every thread's loop stops at a deadline, not after a fixed amount
# of work, so a busy machine stretches nothing), but phase_cpu, which runs until the main thread has had SECONDS of
# CPU time (so that its CPU samples do not depend on the machine's load). Helper threads start inside their phase's
# function.
#
# What it prints (one line each, `key=value` fields, seconds as decimals), the truth the tests check against:
#   tid main TID                                   the main thread's tid (get_native_id, or syscall(186) before 3.8)
#   phase NAME wall=S oncpu=S runq=S migrations=N core=S core_oncpu=S core_runq=S core_steal=S
#                                                  per phase, in order: wall time (monotonic clock; time.time on
#                                                  2.7), and the main thread's time on a CPU and runnable (waiting for
#                                                  a CPU) over the phase, from /proc/self/task/TID/schedstat, and how
#                                                  often it changed CPUs (/proc/self/task/TID/sched, -1 if unknown);
#                                                  then the same of the phase's core: its blocking call (sleep, read,
#                                                  acquire), or its loop (cpu and gil: `spin`, migrate: the sleeps),
#                                                  without the helpers' start and join; and at most how long a
#                                                  hypervisor took the CPU from the main thread during the core
#                                                  (/proc/stat's steal of every CPU: schedstat's time on a CPU leaves
#                                                  it out, a profiler's clock-driven samples count it)
#   helper ROLE TID                                every helper thread (pipe, lock, burn, flip)
#   total wall=S oncpu=S runq=S                    the main thread from the module's first line to the end of the
#                                                  phases (so with --settle's sleep)
# With --attach, first a thread (`blocked-0`) is started that blocks in os.read on a pipe nobody writes to until the
# end (Thread bootstrap ... -> helper.<locals>.run -> blocked_forever), and, once it is asleep in the kernel, the
# workload prints
#   ready blocked=TID main=TID
# and waits for a line on standard input (the main thread blocked in a read meanwhile) before it runs its phases;
# so a recorder attached with -p meanwhile finds one thread blocked since before it started. At the end the pipe is
# written to and the thread ends.
#
# Usage: phases.py [--attach] [--seconds SECONDS (0.7)] [--settle SECONDS (0.5; 0 with --attach)] [--burners N (2)]
#                  [--phases LIST (cpu,sleep,pipe,lock,gil; migrate too on request)]
import os
import sys
import threading
import time

try:
    clock = time.monotonic
except AttributeError:  # 2.7
    clock = time.time


def native_tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    import ctypes
    return ctypes.CDLL(None).syscall(186)  # gettid, x86_64


def schedstat(tid):
    """(seconds on a CPU, seconds runnable waiting for a CPU) of thread `tid` so far."""
    f = open("/proc/self/task/%d/schedstat" % tid)
    try:
        fields = f.read().split()
    finally:
        f.close()
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


def steal():
    """Time the hypervisor took from each CPU so far (/proc/stat's steal, in ticks), {} if the kernel does not say."""
    ticks = {}
    try:
        f = open("/proc/stat")
    except (IOError, OSError):
        return ticks
    try:
        for line in f:
            fields = line.split()
            if len(fields) > 8 and fields[0].startswith("cpu") and fields[0] != "cpu":
                ticks[fields[0]] = int(fields[8])
    finally:
        f.close()
    return ticks


def steal_bound(before, after):
    """At most how long the hypervisor took the CPU from a thread running between two steal() readings: the time
    stolen from every CPU meanwhile, a tick more each for the counters' rounding."""
    ticks = 0
    for cpu, t in after.items():
        if t > before.get(cpu, t):
            ticks += t - before[cpu] + 1
    return ticks / float(os.sysconf("SC_CLK_TCK"))


def migrations(tid):
    """How many times thread `tid` changed CPUs so far (se.nr_migrations), -1 if the kernel does not say."""
    try:
        f = open("/proc/self/task/%d/sched" % tid)
    except (IOError, OSError):
        return -1
    try:
        for line in f:
            if line.startswith("se.nr_migrations"):
                return int(line.split(":")[1])
    finally:
        f.close()
    return -1


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


HELPERS = []


def helper(role, target, *args):
    def run():
        HELPERS.append((role, native_tid()))
        target(*args)

    t = threading.Thread(target=run, name="%s-%d" % (role, len(HELPERS)))
    t.start()
    return t


def spin(end):
    x = 0
    while clock() < end:
        for i in range(500):
            x = (x + i * 7) & 0xFFFF
    return x


# The core of the phase that runs: (wall, on CPU, runnable) of its blocking call or of the main thread's loop.
CORE = {}


class core(object):
    """Measures the main thread's core of a phase (a `with` block) into CORE."""

    def __init__(self, tid):
        self.tid = tid

    def __enter__(self):
        self.s0 = steal()
        self.c0, self.q0 = schedstat(self.tid)
        self.t0 = clock()

    def __exit__(self, *exc):
        t1 = clock()
        c1, q1 = schedstat(self.tid)
        CORE["wall"], CORE["oncpu"], CORE["runq"] = t1 - self.t0, c1 - self.c0, q1 - self.q0
        CORE["steal"] = steal_bound(self.s0, steal())
        return False


def phase_cpu(seconds):
    tid = native_tid()
    with core(tid):
        # SECONDS of this thread's time on a CPU (longer in wall time on a busy machine): as many CPU samples
        # however busy the machine is.
        c0 = schedstat(tid)[0]
        while schedstat(tid)[0] - c0 < seconds:
            spin(clock() + 0.01)


def phase_sleep(seconds):
    with core(native_tid()):
        time.sleep(seconds)


def write_later(fd, seconds):
    time.sleep(seconds)
    os.write(fd, b"x")


def phase_pipe(seconds):
    r, w = os.pipe()
    t = helper("pipe", write_later, w, seconds)
    with core(native_tid()):
        os.read(r, 1)
    t.join()
    os.close(r)
    os.close(w)


def hold_lock(lock, held, seconds):
    lock.acquire()
    held.release()
    time.sleep(seconds)
    lock.release()


def phase_lock(seconds):
    lock = threading.Lock()
    held = threading.Lock()
    held.acquire()
    t = helper("lock", hold_lock, lock, held, seconds)
    held.acquire()  # until the helper holds `lock` (a few hundred microseconds)
    with core(native_tid()):
        lock.acquire()  # blocks until the helper releases it
    lock.release()
    t.join()


def phase_gil(seconds, burners):
    end = clock() + seconds
    threads = [helper("burn", spin, end) for _ in range(burners)]
    with core(native_tid()):
        spin(end)
    for t in threads:
        t.join()


def flip_affinity(tid, cpus, end):
    i = 0
    while clock() < end:
        os.sched_setaffinity(tid, set([cpus[i % 2]]))
        i += 1
        time.sleep(0.003)


def phase_migrate(seconds, tid):
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("phase_migrate needs os.sched_setaffinity (Python 3.3+)")
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        raise SystemExit("phase_migrate needs two CPUs, this thread may use %s" % allowed)
    end = clock() + seconds
    t = helper("flip", flip_affinity, tid, allowed[:2], end)
    with core(tid):
        while clock() < end:
            time.sleep(0.005)
    t.join()
    os.sched_setaffinity(tid, set(allowed))


def settle(seconds):
    time.sleep(seconds)


def run_phases(tid, seconds, burners, names):
    phases = {
        "cpu": (phase_cpu, (seconds,)),
        "sleep": (phase_sleep, (seconds,)),
        "pipe": (phase_pipe, (seconds,)),
        "lock": (phase_lock, (seconds,)),
        "gil": (phase_gil, (seconds, burners)),
        "migrate": (phase_migrate, (seconds, tid)),
    }
    lines = []
    for name in names:
        fn, args = phases[name]
        CORE.clear()
        c0, q0 = schedstat(tid)
        m0 = migrations(tid)
        t0 = clock()
        fn(*args)
        t1 = clock()
        c1, q1 = schedstat(tid)
        m1 = migrations(tid)
        lines.append(
            "phase %s wall=%.6f oncpu=%.6f runq=%.6f migrations=%d core=%.6f core_oncpu=%.6f core_runq=%.6f"
            " core_steal=%.6f"
            % (name, t1 - t0, c1 - c0, q1 - q0, m1 - m0 if m0 >= 0 and m1 >= 0 else -1,
               CORE["wall"], CORE["oncpu"], CORE["runq"], CORE["steal"])
        )
    return lines


def blocked_forever(fd):
    os.read(fd, 1)


def asleep(tid):
    """Whether thread `tid` is asleep in the kernel (state S)."""
    f = open("/proc/self/task/%d/stat" % tid)
    try:
        stat = f.read()
    finally:
        f.close()
    return stat[stat.rindex(")") + 2] == "S"


def main(start, start_cpu, start_runq):
    args = sys.argv[1:]
    attach = "--attach" in args
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 0.7
    burners = int(args[args.index("--burners") + 1]) if "--burners" in args else 2
    names = args[args.index("--phases") + 1].split(",") if "--phases" in args else ["cpu", "sleep", "pipe", "lock", "gil"]
    pause = float(args[args.index("--settle") + 1]) if "--settle" in args else (0.0 if attach else 0.5)
    tid = native_tid()
    blocked = None
    if attach:
        r, w = os.pipe()
        blocked = helper("blocked", blocked_forever, r)
        while len(HELPERS) < 1:
            time.sleep(0.001)
        btid = HELPERS[0][1]
        # Asleep in its read (not merely in the GIL hand-over), and then some.
        while not asleep(btid):
            time.sleep(0.001)
        time.sleep(0.05)
        out("ready blocked=%d main=%d" % (btid, tid))
        sys.stdin.readline()
    settle(pause)
    lines = run_phases(tid, seconds, burners, names)
    end = clock()
    cpu, runq = schedstat(tid)
    if blocked is not None:
        os.write(w, b"x")
        blocked.join()
    out("tid main %d" % tid)
    for line in lines:
        out(line)
    for role, htid in HELPERS:
        out("helper %s %d" % (role, htid))
    out("total wall=%.6f oncpu=%.6f runq=%.6f" % (end - start, cpu - start_cpu, runq - start_runq))


if __name__ == "__main__":
    _start = clock()
    _cpu, _runq = schedstat(native_tid())
    main(_start, _cpu, _runq)
