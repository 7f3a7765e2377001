"""A module whose path is longer than 128 bytes (see main.py)."""
try:
    from time import process_time as now  # CPU time: phases get their samples on a busy machine too
except ImportError:  # 2.7
    from time import clock as now

N = 20000


def spin_far(end):
    while now() < end:
        t = 0
        for i in range(N): t += i  # @longpath.leaf
