"""Python 3.6 - 3.11 only: a function whose co_name (and 3.11 co_qualname) and co_filename are legacy,
non-compact str objects (data behind a pointer, not after the header), made with the C API through ctypes.
3.12 removed legacy strings. See main.py."""
import ctypes
import sys
try:
    from time import process_time as now  # CPU time: phases get their samples on a busy machine too
except ImportError:  # 2.7
    from time import clock as now
import types

N = 20000
NAME = u"legacy_\u540d\u524d"  # 2-byte kind
FILE = "legacy_ascii_file.py"  # ASCII, but not compact


def legacy_str(text):
    """A ready legacy (non-compact) str: PyUnicode_FromUnicode(NULL, n), filled, then _PyUnicode_Ready."""
    api = ctypes.pythonapi
    new = api.PyUnicode_FromUnicode
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
    s = new(None, len(text))
    as_unicode = api.PyUnicode_AsUnicode
    as_unicode.restype = ctypes.c_void_p
    as_unicode.argtypes = [ctypes.py_object]
    chars = (ctypes.c_wchar * len(text)).from_address(as_unicode(s))
    for i, c in enumerate(text):
        chars[i] = c
    ready = api._PyUnicode_Ready
    ready.argtypes = [ctypes.py_object]
    ready.restype = ctypes.c_int
    if ready(s) != 0 or s != text:
        raise SystemExit("could not make a legacy str")
    state = ctypes.c_uint.from_address(id(s) + 32).value  # PyASCIIObject.state, 3.6 - 3.11
    if (state >> 5) & 1:
        raise SystemExit("the str is compact")
    return s


def legacy_leaf(n):
    t = 0
    for i in range(n): t += i  # @legacy.leaf
    return t


def with_legacy_names(fn):
    c = fn.__code__
    name, filename = legacy_str(NAME), legacy_str(FILE)
    if sys.version_info >= (3, 11):
        c = c.replace(co_name=name, co_qualname=legacy_str(NAME), co_filename=filename)
    elif sys.version_info >= (3, 8):
        c = c.replace(co_name=name, co_filename=filename)
    else:
        c = types.CodeType(c.co_argcount, c.co_kwonlyargcount, c.co_nlocals, c.co_stacksize, c.co_flags,
                           c.co_code, c.co_consts, c.co_names, c.co_varnames, filename, name,
                           c.co_firstlineno, c.co_lnotab, c.co_freevars, c.co_cellvars)
    if ((ctypes.c_uint.from_address(id(c.co_name) + 32).value >> 5) & 1
            or (ctypes.c_uint.from_address(id(c.co_filename) + 32).value >> 5) & 1):
        raise SystemExit("the code object's names are compact")
    return types.FunctionType(c, fn.__globals__)


def phase_legacy(end):
    fn = with_legacy_names(legacy_leaf)
    while now() < end: fn(N)  # @legacy.phase
