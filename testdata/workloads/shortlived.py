# Code objects that live a few milliseconds (tests/symbols.rs): each round compiles a small module, runs it (its
# function burns the CPU for ROUND_MS) and drops it, so its code objects are freed right after. Then it exits at
# once. A profiler that reads code objects after the sample finds most of them gone.
# The rounds' file and function names are kept alive (as interned names and module paths are in real programs):
# a code object recreated at the address of a freed one, with the same name and file *objects* and first line,
# cannot be told from it by pyperf before 3.14 (docs/how-it-works.md, "Never a wrong name"), and this workload would otherwise
# recreate exactly that (the allocator hands the same addresses back in the same order).
# Usage: shortlived.py [ROUNDS] [ROUND_MS]    (Python 2.7 and 3.x)
import sys
import time


# The process's CPU time (time.clock on 2.7): each round gets as many samples however busy the machine is.
cpu = getattr(time, "process_time", None) or time.clock


def burn(seconds):
    end = cpu() + seconds
    while cpu() < end:
        pass


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    ms = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    names = []
    for i in range(rounds):
        src = "def gen_%d(burn):\n    burn(%r)\n\ngen_%d(burn)\n" % (i, ms / 1000.0, i)
        code = compile(src, "gen_%d.py" % i, "exec")
        names.append((code.co_filename, code.co_names))
        exec(code, {"burn": burn})
        del code


main()
