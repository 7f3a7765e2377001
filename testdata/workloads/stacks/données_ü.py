# -*- coding: utf-8 -*-
"""Python 3 only: non-ASCII identifiers (see main.py). The file name is a 1-byte-kind str (é, ü);
calcul_é and Größe are 1-byte kind, 計算 2-byte kind, 𠮷 (U+20BB7) 4-byte kind."""
try:
    from time import process_time as now  # CPU time: phases get their samples on a busy machine too
except ImportError:  # 2.7
    from time import clock as now

N = 20000


class Größe(object):
    def 計算(self, n):
        t = 0
        for i in range(n): t += i  # @unicode.leaf
        return t


def calcul_é(end):
    g = Größe()
    while now() < end: g.計算(N)  # @unicode.calcul


def 𠮷(end):
    calcul_é(end)  # @unicode.astral


def phase_unicode(end):
    𠮷(end)  # @unicode.phase
