"""A module in a directory whose name has 2- and 4-byte UTF-8 characters (see main.py)."""
try:
    from time import process_time as now  # CPU time: phases get their samples on a busy machine too
except ImportError:  # 2.7
    from time import clock as now

N = 20000


def spin_astral(end):
    while now() < end:
        t = 0
        for i in range(N): t += i  # @astral.leaf
