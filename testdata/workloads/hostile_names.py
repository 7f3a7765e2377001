"""Functions whose names (and one file name) hold what must never reach a terminal as it is: an OSC that sets the
terminal's title, a clear-screen sequence, a C1 CSI, a right-to-left override, a newline followed by a fake table
row; and wide characters (CJK, emoji) that take two columns each. The main thread calls each in turn, for argv[1]
seconds. The names are given with code.replace (no `def` can spell them)."""
import sys
import time
import types


def spin():
    x = 0
    for i in range(20000):
        x = (x + i * 7) & 0xFFFF
    return x


NAMES = [
    "title\x1b]0;PWNED\x07",
    "clear\x1b[2J\x1b[H",
    "csi\u009b31mred",
    "bidi\u202eevil",
    "fake\n  99.9    99.9        999        999   100  FAKEROW (x.py:1)",
    "wide_" + "計算" * 60,
    "emoji_\U0001f525\U0001f525",
]
# A file name that would set the title too.
FILE = "/tmp/file\x1b]0;FILEPWNED\x07.py"


def make(name, filename):
    code = spin.__code__.replace(co_name=name, co_filename=filename)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    return types.FunctionType(code, globals(), name)


FUNCS = [make(n, spin.__code__.co_filename) for n in NAMES] + [make("in_hostile_file", FILE)]


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    end = time.time() + seconds
    while time.time() < end:
        for f in FUNCS:
            f()


if __name__ == "__main__":
    # Quietly on Ctrl-C (`top` stops its command so): a traceback would print the hostile file name itself, as the
    # program's own output, which pyperf passes on as it is.
    try:
        main()
    except KeyboardInterrupt:
        pass
