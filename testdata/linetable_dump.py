# -*- coding: utf-8 -*-
"""Dump CPython's own line-number answers for tests/conformance.rs (record/python/linetable.rs).

Runs unchanged on CPython 2.7 and 3.6 - 3.13 (keep it 2.7-syntax compatible).

The oracle is the running interpreter itself, never a Python re-implementation:
  * LINES: ctypes call of the interpreter's exported C function PyCode_Addr2Line(code, byte_offset)
    at EVERY byte offset of the code (including CACHE entries, EXTENDED_ARG prefixes, odd offsets)
    and a few past the end.  This is exactly what PyFrame_GetLineNumber / tracebacks use.
  * cross-checked in this script against `dis` (dis.findlinestarts for <= 3.9, co_lines() for 3.10+,
    co_positions() for 3.11+); any disagreement prints MISMATCH and exits non-zero.
  * FRAME: live frames stopped in calls to probe(): the raw per-frame value the BPF program reads
    (f_lasti int for <= 3.10; prev_instr / instr_ptr minus the code object's address for 3.11+), read
    from the frame's memory with ctypes at the DWARF-verified offsets below, together with the
    interpreter's own frame.f_lineno (no tracing active, so it is PyFrame_GetLineNumber).
  * synthetic tables (CODE records after the real ones): random tables put on a code object with
    CodeType/replace, evaluated by the same C function (only tables whose decoding is well defined in C).

Output, one record per line, fields separated by one space:
  VERSION <major> <minor>
  CODE <id> <co_firstlineno> <n_offsets> <table bytes as hex, or -> <co_name, or <synthetic>>
  LINES <PyCode_Addr2Line at offset 0> ... <at offset n_offsets-1>     (C int; negative = no line)
  FRAME <code id> <raw, as u32> <offsetof(PyCodeObject, co_code_adaptive), 0 before 3.11> <f_lineno or None>
  END <number of CODE records> <number of FRAME records>
"""
from __future__ import print_function

import binascii
import ctypes
import dis
import random
import sys
import types

V = sys.version_info[:2]
EXTRA = 8  # offsets evaluated past the end of the bytecode

addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int

# PyFrameObject.f_lasti offset (<= 3.10), from DWARF of the pyenv builds (gdb: &((PyFrameObject*)0)->f_lasti).
LASTI_OFF = {(2, 7): 120, (3, 6): 120, (3, 7): 104, (3, 8): 104, (3, 9): 104, (3, 10): 96}
# 3.11+: PyFrameObject.f_frame = 24; _PyInterpreterFrame.f_code (f_executable in 3.13) and
# .prev_instr (3.11, 3.12) / .instr_ptr (3.13) = 56.
IFRAME_OFF = 24
ICODE_OFF = {(3, 11): 32, (3, 12): 0, (3, 13): 0, (3, 14): 0, (3, 15): 0}
IINSTR_OFF = 56

failures = []
out = []


def emit(*fields):
    out.append(" ".join(str(f) for f in fields))


def table_of(co):
    if V >= (3, 10):
        return co.co_linetable
    return co.co_lnotab


def hexlify(b):
    if not b:
        return "-"
    h = binascii.hexlify(b)
    if not isinstance(h, str):
        h = h.decode("ascii")
    return h


# ---------------------------------------------------------------------------------------------
# Test source.  Line layout matters (gaps, multi-line statements), so it is built as text.

def gap(n):
    return "".join("    # gap line %d\n" % i for i in range(n))


COMMON = '''
class Box(object):
    def __init__(self, v):
        self.v = v
    def __getattr__(self, name):
        return probe(name)
    def __iter__(self):
        probe()
        return iter([self.v,
                     self.v])
    def __eq__(self, other):
        return probe(other) == 0
    __hash__ = object.__hash__
    def __enter__(self):
        probe()
        return self
    def __exit__(self, *exc):
        probe(
            exc)
        return False
    @property
    def prop(self):
        return probe(
            self.v)

def simple(a, b):
    x = a + b
    probe()
    y = probe(
        x,
        b)
    z = (x +
         probe(y) +
         b)
    return z

def loops(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
        else:
            probe()
    while n > 0:
        n -= 1
        total += probe(
            n)
    return total

def tries(x):
    try:
        probe()
        raise ValueError(x)
    except ValueError as e:
        probe(
            e)
    except (TypeError,
            KeyError):
        pass
    else:
        probe()
    finally:
        probe()
    try:
        try:
            1 / 0
        finally:
            probe()
    except ZeroDivisionError:
        probe()
    return x

def comps(n):
    a = [probe(i) for i in range(n)]
    b = dict((k, probe(k))
             for k in range(n))
    c = set(probe(
        j) for j in range(n) if j)
    d = [[probe(q) for q in range(2)]
         for p in range(2)]
    f = lambda v: probe(
        v)
    return a, b, c, d, f(3), sorted([3, 1, 2], key=lambda k: probe(k) + k)

def nested(n):
    def inner(m):
        def innermost():
            return probe(m,
                         n)
        return innermost()
    return inner(n) + inner(
        n + 1)

def gen(n):
    for i in range(n):
        probe()
        yield i
        yield probe(
            i)

def drive_gen():
    t = 0
    for v in gen(3):
        t += v
    return t

def withs(b):
    with b:
        probe()
    with b as c, \\
         b:
        x = c.prop
    return x

def special(b):
    r = b.missing_attr
    r = (b ==
         1)
    for v in b:
        probe(v)
    r = b.prop
    return r

def decorated(fn):
    probe()
    return fn

@decorated
def deco_target():
    return probe()

class Klass(object):
    probe()
    attr = probe(
        1)
    def method(self):
        return probe()

def long_lines(o):
    t = 0
    for i in range(2):
        t += 1
''' + gap(140) + '''        probe()
''' + gap(300) + '''        t += probe(
''' + gap(300) + '''            i)
        t = t + ''' + " + ".join("i" for _ in range(220)) + ''' + probe()
        u = (''' + ",\n             ".join("i" for _ in range(150)) + ''',
             probe())
    return t

def big_loop(n):
    v0 = 0
    for i in range(n):
''' + "".join("        v%d = v%d + %d\n" % (k, k - 1, k) for k in range(1, 160)) + '''        probe(v159)
        if i:
            continue
''' + "".join("        v%d = v%d * 2\n" % (k, k) for k in range(1, 120)) + '''    probe()
    return v0

class Many(object):
''' + "".join("    a%d = %d\n" % (k, k) for k in range(300)) + '''    def __getattr__(self, name):
        return probe(name)

def many_names(o):
''' + "".join("    x%d = o.a%d\n" % (k, k) for k in range(300)) + \
    "    return o.name_after_300_others + probe(x299)\n" + '''
def many_consts():
    t = (''' + ", ".join(str(k * 7 + 1000) for k in range(300)) + ''')
    probe(t)
    return probe(
        -12345.5)

def main():
    b = Box(1)
    simple(1, 2)
    loops(4)
    tries(1)
    comps(3)
    nested(2)
    drive_gen()
    withs(b)
    special(b)
    deco_target()
    Klass().method()
    long_lines(b)
    big_loop(2)
    many_names(Many())
    many_consts()
'''

# 3.6+ only syntax.
PY36 = '''
def kwonly(a, *, b=1):
    return probe(f"{a} {b}",
                 f"{probe(a)}")

class Agen:
    def __init__(self):
        self.n = 0
    def __aiter__(self):
        return self
    async def __anext__(self):
        self.n += 1
        if self.n > 2:
            raise StopAsyncIteration
        return probe(self.n)

async def coro(n):
    probe()
    async for v in Agen():
        probe(v)
    r = [x async for x in Agen()]
    return await sub(
        n)

async def sub(n):
    return probe(n)

def yf(n):
    yield from gen2(n)

def gen2(n):
    probe()
    yield n

def counter():
    c = 0
    def inc():
        nonlocal c
        c += probe()
        return c
    return inc()

def main():
    kwonly(1, b=2)
    c = coro(3)
    try:
        c.send(None)
    except StopIteration:
        pass
    list(yf(2))
    counter()
'''

PY38 = '''
def walrus(xs, /, k=1):
    if (n := len(xs)) > 0:
        probe(n)
    return [y for x in xs if (y := probe(x))]

def main():
    walrus([1, 2])
'''

PY310 = '''
def matcher(v):
    match v:
        case [a, b]:
            return probe(a)
        case {"k": w}:
            return probe(
                w)
        case int() if v > 1:
            return probe()
        case _:
            return probe(v)

def main():
    for v in ([1, 2], {"k": 3}, 5, "s"):
        matcher(v)
'''

PY311 = '''
def groups():
    try:
        raise ExceptionGroup("g", [ValueError(1), TypeError(2)])
    except* ValueError as e:
        probe(e)
    except* TypeError:
        probe()

def main():
    groups()
'''

PY312 = '''
def ident[T](x: T) -> T:
    return probe(x)

class Gen[T]:
    def get(self):
        return probe()

type Alias = list[int]

def main():
    ident(1)
    Gen().get()
    Alias.__value__
'''

SOURCES = [("common", COMMON)]
if V >= (3, 6):
    SOURCES.append(("py36", PY36))
if V >= (3, 8):
    SOURCES.append(("py38", PY38))
if V >= (3, 10):
    SOURCES.append(("py310", PY310))
if V >= (3, 11):
    SOURCES.append(("py311", PY311))
if V >= (3, 12):
    SOURCES.append(("py312", PY312))

# ---------------------------------------------------------------------------------------------

CODE_IDS = {}    # id(code) -> (our id, code)
CODES = []       # (our id, code)
FRAMES = []
SEEN = set()


def collect(co):
    if id(co) in CODE_IDS:
        return
    cid = len(CODES)
    CODE_IDS[id(co)] = (cid, co)
    CODES.append((cid, co))
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            collect(c)


def read_raw(f):
    """The raw value BPF reads for frame f, and offsetof(PyCodeObject, co_code_adaptive)."""
    if V <= (3, 10):
        raw = ctypes.c_int.from_address(id(f) + LASTI_OFF[V]).value
        expect = raw
        if V == (3, 10):
            expect = raw * 2 if raw >= 0 else -1
        if f.f_lasti != expect:
            failures.append("layout: f_lasti raw %d vs attribute %d" % (raw, f.f_lasti))
        return raw & 0xffffffff, 0
    co = f.f_code
    iframe = ctypes.c_void_p.from_address(id(f) + IFRAME_OFF).value
    code_ptr = ctypes.c_void_p.from_address(iframe + ICODE_OFF[V]).value
    if V >= (3, 14) and code_ptr:
        code_ptr &= ~3  # f_executable is a tagged _PyStackRef
    if code_ptr != id(co):
        failures.append("layout: interpreter frame code %#x != %#x" % (code_ptr or 0, id(co)))
    ip = ctypes.c_void_p.from_address(iframe + IINSTR_OFF).value
    raw = ip - id(co)
    adaptive = type(co).__basicsize__  # tp_basicsize == offsetof(PyCodeObject, co_code_adaptive)
    units = (raw - adaptive) // 2
    expect = units * 2 if units >= 0 else -1
    if f.f_lasti != expect:
        failures.append("layout: f_lasti %d vs pointer-derived %d" % (f.f_lasti, expect))
    return raw & 0xffffffff, adaptive


def probe(*args):
    f = sys._getframe(1)
    while f is not None:
        ent = CODE_IDS.get(id(f.f_code))
        if ent is not None:
            raw, adaptive = read_raw(f)
            key = (ent[0], raw, adaptive, f.f_lineno)
            if key not in SEEN:
                SEEN.add(key)
                FRAMES.append(key)
        f = f.f_back
    return 0


def dis_lines(co):
    """{offset: line or -1} from dis / the code object's own iterators (not PyCode_Addr2Line)."""
    res = {}
    if V >= (3, 11):
        for i, pos in enumerate(co.co_positions()):
            ln = pos[0] if pos[0] is not None else -1
            res[2 * i] = ln
            res[2 * i + 1] = ln
    if V >= (3, 10):
        for start, end, ln in co.co_lines():
            for off in range(start, end):
                ln2 = ln if ln is not None else -1
                if res.get(off, ln2) != ln2:
                    failures.append("co_lines vs co_positions %s@%d: %s %s" % (co.co_name, off, ln2, res[off]))
                res[off] = ln2
        return res
    starts = dict(dis.findlinestarts(co))
    code = co.co_code
    i = 0
    cur = None
    while i < len(code):
        if i in starts:
            cur = starts[i]
        if cur is not None:
            res[i] = cur
        if V >= (3, 6):
            i += 2
        else:
            op = ord(code[i])
            i += 3 if op >= dis.HAVE_ARGUMENT else 1
    return res


def dump_code(cid, co, n_offsets, check, name=None):
    lines = [addr2line(co, off) for off in range(n_offsets)]
    if check:
        for off, ln in sorted(dis_lines(co).items()):
            if lines[off] != ln:
                failures.append("dis vs PyCode_Addr2Line %s@%d: %d %d" % (co.co_name, off, ln, lines[off]))
    emit("CODE", cid, co.co_firstlineno, n_offsets, hexlify(table_of(co)), name or co.co_name)
    emit("LINES", *lines)


# ---------------------------------------------------------------------------------------------
# Synthetic tables (decoded by the same C function).

def varint(v):
    res = []
    while v >= 64:
        res.append(64 | (v & 63))
        v >>= 6
    res.append(v)
    return res


def svarint(v):
    return varint(((-v) << 1) | 1 if v < 0 else v << 1)


def synth_table(rng):
    """Random table that CPython decodes deterministically; returns (bytes, offsets to evaluate)."""
    data = []
    span = 0
    n = rng.randint(0, 60)
    if V <= (3, 9):
        # any bytes are fine: the loop is bounded by len // 2 (odd trailing byte ignored)
        for _ in range(2 * n + rng.randint(0, 1)):
            data.append(rng.choice([0, 1, 2, 6, 127, 128, 129, 200, 254, 255, rng.randint(0, 255)]))
        span = sum(data[0::2])
    elif V == (3, 10):
        # pairs (byte delta, signed line delta, -128 = no line); the last byte delta must be non-zero,
        # else CPython reads past the end.  An odd trailing byte pairs with the bytes' NUL terminator.
        for _ in range(n):
            data.append(rng.choice([0, 0, 2, 4, 6, 254, 1, rng.randint(0, 255)]))
            data.append(rng.choice([0, 1, 127, 128, 129, 255, rng.randint(0, 255)]))
        if rng.randint(0, 3) == 0:
            data.append(rng.randint(1, 255))
        elif data:
            data[-2] = data[-2] or 2
        span = sum(data[0::2])
    else:
        for _ in range(n):
            code = rng.randint(0, 15)
            length = rng.randint(0, 7)
            data.append(0x80 | (code << 3) | length)
            span += 2 * (length + 1)
            big = rng.choice([0, 1, -1, 2, 63, 64, -64, 500, -500, 5000, -70000, 1 << 20, rng.randint(-300, 300)])
            if code <= 9:
                data.append(rng.randint(0, 127))
            elif code <= 12:
                data += [rng.randint(0, 127), rng.randint(0, 127)]
            elif code == 13:
                data += svarint(big)
            elif code == 14:
                data += svarint(big) + varint(rng.randint(0, 70)) + varint(rng.randint(0, 200)) + \
                    varint(rng.randint(0, 300))
    return bytes(bytearray(data)), span + EXTRA


def with_table(co, table, first):
    if hasattr(co, "replace"):
        if V >= (3, 10):
            return co.replace(co_linetable=table, co_firstlineno=first)
        return co.replace(co_lnotab=table, co_firstlineno=first)
    args = [co.co_argcount]
    if V >= (3, 0):
        args.append(co.co_kwonlyargcount)
    args += [co.co_nlocals, co.co_stacksize, co.co_flags, co.co_code, co.co_consts, co.co_names,
             co.co_varnames, co.co_filename, co.co_name, first, table, co.co_freevars, co.co_cellvars]
    return types.CodeType(*args)


def main():
    emit("VERSION", V[0], V[1])
    namespaces = []
    for name, src in SOURCES:
        mod = compile(src, "<linetable_%s>" % name, "exec")
        collect(mod)
        ns = {"probe": probe, "__name__": "linetable_" + name}
        exec(mod, ns)
        namespaces.append(ns)
    # Repeat so that 3.11+ specialises (inlined Python calls, cached attribute loads) and the
    # frames are also seen in their quickened state.
    for _ in range(40):
        for ns in namespaces:
            ns["main"]()
    for cid, co in CODES:
        dump_code(cid, co, len(co.co_code) + EXTRA, True)
    rng = random.Random(0x5eed)
    base = CODES[0][1]
    ncodes = len(CODES)
    for _ in range(300):
        table, n_offsets = synth_table(rng)
        first = rng.choice([1, 2, 100, 1000, 20000, 100000, rng.randint(1, 50000)])
        dump_code(ncodes, with_table(base, table, first), min(n_offsets, 2048), False, "<synthetic>")
        ncodes += 1
    for fr in FRAMES:
        emit("FRAME", *fr)
    if len(FRAMES) < 20:
        failures.append("only %d distinct frames sampled" % len(FRAMES))
    for f in failures:
        emit("MISMATCH", f)
    emit("END", ncodes, len(FRAMES))
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()
    if failures:
        sys.exit(1)


main()
