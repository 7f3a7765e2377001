"""CPython 3.14+'s own view of another process's asyncio tasks (asyncio.tools, what `python -m asyncio pstree` prints),
as JSON for tests/tasks.rs to compare `pyperf dump --async` with: [{"id", "name", "frames": [[function, file, line]]
leaf first, "awaited_by": [ids]}]."""
import json
import sys

from asyncio.tools import get_all_awaited_by


def line(f):
    return getattr(f, "lineno", None) or f.location.lineno


out = []
for thread in get_all_awaited_by(int(sys.argv[1])):
    for t in thread.awaited_by:
        out.append(
            {
                "id": hex(t.task_id),
                "name": t.task_name,
                "frames": [[f.funcname, f.filename, line(f)] for c in t.coroutine_stack for f in c.call_stack],
                "awaited_by": sorted({hex(a.task_name) for a in t.awaited_by}),
            }
        )
print(json.dumps(out))
