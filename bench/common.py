"""Helpers every bench/ script shares: logging to stderr, medians that skip missing values, CPU pinning, the load
average, and writing a section of bench/RESULTS.md. Python standard library only; imports nothing else of bench/ (the
scripts import it, from their own directory, which is on sys.path when they run)."""
import os
import shutil
import statistics
import sys

NCPU = os.cpu_count() or 1


def logger(name):
    """A `log(msg)` writing `[name] msg` lines to stderr."""
    def log(msg):
        sys.stderr.write("[%s] %s\n" % (name, msg))
        sys.stderr.flush()
    return log


def median(v):
    """The median of the values that are not None; None if there is none."""
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def pin(cpu, cmd):
    """`cmd` run on CPU `cpu` (taskset) where there are 2+ CPUs and taskset; as it is otherwise, or if `cpu` is None."""
    return (["taskset", "-c", cpu] + list(cmd)) if cpu is not None and NCPU > 1 and shutil.which("taskset") else list(cmd)


def loadavg():
    """The 1, 5 and 15 minute load averages, as /proc/loadavg writes them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def write_section(section, begin, end, body):
    """Puts `begin + body + end` into bench/RESULTS.md: in place of what stands between the two markers, else right
    under the heading `section`, else at the end under that heading. Returns the file's path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
    with open(path) as f:
        doc = f.read()
    block = begin + body + end
    if begin in doc and end in doc and doc.index(begin) < doc.index(end):
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    elif section in doc:
        at = doc.index(section) + len(section)
        doc = doc[:at] + "\n\n" + block + doc[at:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + section + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(doc)
    return path
