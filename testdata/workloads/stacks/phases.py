# -*- coding: utf-8 -*-
"""Phases of the exact-stack workload that run on CPython 2.7 and 3.6+ (see main.py).

Each phase spends its time on ONE line (the `@...leaf` marker): a loop written on a single line, so that the
dominant stack is known to the line. Labels are unique over all the workload files.
"""
import sys
try:
    from time import process_time as now  # CPU time: phases get their samples on a busy machine too
except ImportError:  # 2.7
    from time import clock as now

import astral_module
import long_path_module_with_a_long_file_name_as_well

N = 20000
DEEP = 1200
TRUNCATED = 2100


def spin_deep(n):
    t = 0
    for i in range(n): t += i  # @deep.leaf
    return t


def recurse(n, end):
    if n > 1:
        return recurse(n - 1, end)  # @deep.rec
    while now() < end: spin_deep(N)  # @deep.bottom


def phase_deep(end):
    recurse(DEEP, end)  # @deep.phase


def spin_truncated(n):
    t = 0
    for i in range(n): t += i  # @trunc.leaf
    return t


def recurse_truncated(n, end):
    if n > 1:
        return recurse_truncated(n - 1, end)  # @trunc.rec
    while now() < end: spin_truncated(N)  # @trunc.bottom


def phase_truncated(end):
    recurse_truncated(TRUNCATED, end)  # @trunc.phase


class Worker(object):
    def __init__(self, n):
        self.n = n
        self.total = self.step()  # @init.step

    def step(self):
        t = 0
        for i in range(self.n): t += i  # @method.leaf
        return t

    def run(self, end):
        while now() < end: self.step()  # @method.run

    @classmethod
    def tally(cls, n):
        t = 0
        for i in range(n): t += i  # @classmethod.leaf
        return t

    @staticmethod
    def compute(n):
        t = 0
        for i in range(n): t += i  # @staticmethod.leaf
        return t


class Special(Worker):
    """Inherits run and step: the <= 3.10 heuristic names them after type(self), 3.11+ after Worker."""


def phase_method(end):
    Worker(N).run(end)  # @method.phase


def phase_inherited(end):
    Special(N).run(end)  # @inherited.phase


def phase_classmethod(end):
    while now() < end: Worker.tally(N)  # @classmethod.phase


def phase_staticmethod(end):
    while now() < end: Worker.compute(N)  # @staticmethod.phase


def phase_init(end):
    while now() < end: Worker(N)  # @init.phase


def phase_nested(end):
    def inner(n):
        t = 0
        for i in range(n): t += i  # @nested.leaf
        return t

    def middle():
        while now() < end: inner(N)  # @nested.middle

    middle()  # @nested.phase


def phase_lambda(end):
    hot = lambda n: sum(range(n))  # @lambda.leaf
    while now() < end: hot(10 * N)  # @lambda.phase


def numbers(n):
    while True:
        t = 0
        for i in range(n): t += i  # @gen.leaf
        yield t


def phase_generator(end):
    for t in numbers(N):  # @gen.phase
        if now() > end:
            break


def phase_listcomp(end):
    # Small ints in the list: freeing it (at the next assignment) is quick. A SIGPROF during a slow free, a fifth
    # of the time with big ints, is handled at the loop's next check, line `while`, which then was 6 of 10 walks once.
    while now() < end:
        squares = [i * i & 255 for i in range(N)]  # @listcomp.leaf


def phase_genexpr(end):
    while now() < end:
        found = sum(1 for i in range(N) if i % 7 == 3)  # @genexpr.leaf


def long_function_name_abcdefghij_00_abcdefghij_01_abcdefghij_02_abcdefghij_03_abcdefghij_04_abcdefghij_05_abcdefghij_06_abcdefghij_07_abcdefghij_08_abcdefghij_09_abcdefghij_10_abcdefghij_11_abcdefghij_12_abcdefghij_13_abcdefghij_14_abcdefghij_15_abcdefghij_16_abcdefghij_17_abcdefghij_18_abcdefghij_19_a(n):
    t = 0
    for i in range(n): t += i  # @longname.leaf
    return t


def phase_long_name(end):
    while now() < end: long_function_name_abcdefghij_00_abcdefghij_01_abcdefghij_02_abcdefghij_03_abcdefghij_04_abcdefghij_05_abcdefghij_06_abcdefghij_07_abcdefghij_08_abcdefghij_09_abcdefghij_10_abcdefghij_11_abcdefghij_12_abcdefghij_13_abcdefghij_14_abcdefghij_15_abcdefghij_16_abcdefghij_17_abcdefghij_18_abcdefghij_19_a(N)  # @longname.phase


def cut_function_name_klmnopqrstuvwxyz_000_klmnopqrstuvwxyz_001_klmnopqrstuvwxyz_002_klmnopqrstuvwxyz_003_klmnopqrstuvwxyz_004_klmnopqrstuvwxyz_005_klmnopqrstuvwxyz_006_klmnopqrstuvwxyz_007_klmnopqrstuvwxyz_008_klmnopqrstuvwxyz_009_klmnopqrstuvwxyz_010_klmnopqrstuvwxyz_011_klmnopqrstuvwxyz_012_klmnopqrstuvwxyz_013_klmnopqrstuvwxyz_014_klmnopqrstuvwxyz_015_klmnopqrstuvwxyz_016_klmnopqrstuvwxyz_017_klmnopqrstuvwxyz_018_klmnopqrstuvwxyz_019_klmnopqrstuvwxyz_020_klmnopqrstuvwxyz_021_klmnopqrstuvwxyz_022_klmnopqrstuvwxyz_023_klmnopqrstuvwxyz_024_klmnopqrstuvwxyz_025_klmnopqrstuvwxyz_026_klmnopqrstuvwxyz_027_klmnopqrstuvwxyz_028_klmnopqrstuvwxyz_029_klmnopqrstuvwxyz_030_klmnopqrstuvwxyz_031_klmnopqrstuvwxyz_032_klmnopqrstuvwxyz_033_klmnopqrstuvwxyz_034_klmnopqrstuvwxyz_035_klmnopqrstuvwxyz_036_klmnopqrstuvwxyz_037_klmnopqrstuvwxyz_038_klmnopqrstuvwxyz_039_klmnopqrstuvwxyz_040_klmnopqrstuvwxyz_041_klmnopqrstuvwxyz_042_klmnopqrstuvwxyz_043_klmnopqrstuvwxyz_044_klmnopqrstuvwxyz_045_klmnopqrstuvwxyz_046_klmnopqrstuvwxyz_047_klmnopqrstuvwxyz_048_klmnopqrstuvwxyz_049_klmnopqrstuvwxyz_050_klmnopqrstuvwxyz_051_klmnopqrstuvwxyz_052_klmnopqrstuvwxyz_053_klmnopqrstuvwxyz_054_klmnopqrstuvwxyz_055_klmnopqrstuvwxyz_056_klmnopqrstuvwxyz_057_klmnopqrstuvwxyz_058_klmnopqrstuvwxyz_059_klmnopqrstuvwxyz_060_klmnopqrstuvwxyz_061_klmnopqrstuvwxyz_062_klmnopqrstuvwxyz_063_klmnopqrstuvwxyz_064_klmnopqrstuvwxyz_065_klmnopqrstuvwxyz_066_klmnopqrstuvwxyz_067_klmnopqrstuvwxyz_068_klmnopqrstuvwxyz_069_klmnopqrstuv(n):
    t = 0
    for i in range(n): t += i  # @cutname.leaf
    return t


def phase_cut_name(end):
    while now() < end: cut_function_name_klmnopqrstuvwxyz_000_klmnopqrstuvwxyz_001_klmnopqrstuvwxyz_002_klmnopqrstuvwxyz_003_klmnopqrstuvwxyz_004_klmnopqrstuvwxyz_005_klmnopqrstuvwxyz_006_klmnopqrstuvwxyz_007_klmnopqrstuvwxyz_008_klmnopqrstuvwxyz_009_klmnopqrstuvwxyz_010_klmnopqrstuvwxyz_011_klmnopqrstuvwxyz_012_klmnopqrstuvwxyz_013_klmnopqrstuvwxyz_014_klmnopqrstuvwxyz_015_klmnopqrstuvwxyz_016_klmnopqrstuvwxyz_017_klmnopqrstuvwxyz_018_klmnopqrstuvwxyz_019_klmnopqrstuvwxyz_020_klmnopqrstuvwxyz_021_klmnopqrstuvwxyz_022_klmnopqrstuvwxyz_023_klmnopqrstuvwxyz_024_klmnopqrstuvwxyz_025_klmnopqrstuvwxyz_026_klmnopqrstuvwxyz_027_klmnopqrstuvwxyz_028_klmnopqrstuvwxyz_029_klmnopqrstuvwxyz_030_klmnopqrstuvwxyz_031_klmnopqrstuvwxyz_032_klmnopqrstuvwxyz_033_klmnopqrstuvwxyz_034_klmnopqrstuvwxyz_035_klmnopqrstuvwxyz_036_klmnopqrstuvwxyz_037_klmnopqrstuvwxyz_038_klmnopqrstuvwxyz_039_klmnopqrstuvwxyz_040_klmnopqrstuvwxyz_041_klmnopqrstuvwxyz_042_klmnopqrstuvwxyz_043_klmnopqrstuvwxyz_044_klmnopqrstuvwxyz_045_klmnopqrstuvwxyz_046_klmnopqrstuvwxyz_047_klmnopqrstuvwxyz_048_klmnopqrstuvwxyz_049_klmnopqrstuvwxyz_050_klmnopqrstuvwxyz_051_klmnopqrstuvwxyz_052_klmnopqrstuvwxyz_053_klmnopqrstuvwxyz_054_klmnopqrstuvwxyz_055_klmnopqrstuvwxyz_056_klmnopqrstuvwxyz_057_klmnopqrstuvwxyz_058_klmnopqrstuvwxyz_059_klmnopqrstuvwxyz_060_klmnopqrstuvwxyz_061_klmnopqrstuvwxyz_062_klmnopqrstuvwxyz_063_klmnopqrstuvwxyz_064_klmnopqrstuvwxyz_065_klmnopqrstuvwxyz_066_klmnopqrstuvwxyz_067_klmnopqrstuvwxyz_068_klmnopqrstuvwxyz_069_klmnopqrstuv(N)  # @cutname.phase


def phase_long_path(end):
    long_path_module_with_a_long_file_name_as_well.spin_far(end)  # @longpath.phase


def phase_astral_path(end):
    astral_module.spin_astral(end)  # @astral.phase


def phase_two_lines(end):
    """Time on two lines of one function (for the report's line merging)."""
    while now() < end:
        for i in range(N): pass  # @twolines.a
        for i in range(N): pass  # @twolines.b
