"""Views of a session's buffers that outlive it (test/Integration/
session-views.test). Usage:

  session_views.py BUILD_PYTHON_DIR STEP.so

100 times: a session (one process) hands out numpy and torch views of a
parameter, its gradient (in a bucket or not) and a whole argument, and is
closed -- by close(), by leaving `with`, or by close() after the last
name of it is dropped (a view keeps its session alive) -- and the views are
written and read after. Then a new session is made (whose buffers would
take the freed memory) and the old views written again. What was written
must read back, the new session's buffers must stay zero (nothing written
through an old view lands in them), and nothing may crash. Before views
kept their memory, writing after close() corrupted the heap and aborted
Python in about half the runs, and reads returned freed memory.
"""

import gc
import sys
import weakref

import numpy as np

sys.path.insert(0, sys.argv[1])
STEP = sys.argv[2]

import distopt  # noqa: E402

step = distopt.Step(STEP)
param = next(t for t in step.tensors if t.role == "param" and t.numel > 1)
failures = []


def views(session):
    return [session.tensor(param.name), session.tensor(param.name,
                                                       like="torch"),
            session.tensor(param.name, role="grad"),
            session.arg(param.arg)]


for i in range(100):
    how = ("close", "with", "drop")[i % 3]
    if how == "with":
        with distopt.Session(step, backend="single") as session:
            held = views(session)
    else:
        session = distopt.Session(step, backend="single")
        held = views(session)
        if how == "close":
            session.close()
        else:  # only the views hold it now; closed through a weak name
            alive = weakref.ref(session)
            del session
            gc.collect()
            alive().close()
    value = float(i + 1)
    for v in held:
        v[...] = value
    fresh = distopt.Session(step, backend="single")
    # Allocations of the same sizes, which would reuse freed memory.
    junk = [np.ones(param.numel, np.float32) for _ in range(8)]
    for v in held:
        v[...] = value + 0.5
    for k, v in enumerate(held):
        if not (np.asarray(v) == value + 0.5).all():
            failures.append(f"iteration {i} ({how}): view {k} reads "
                            f"{np.asarray(v).ravel()[:3]}, not {value + 0.5}")
    for t in step.tensors:
        if t.whole and fresh.read(t.name, role=t.role).any():
            failures.append(f"iteration {i} ({how}): the new session's "
                            f"{t.role} '{t.name}' was written through an "
                            "old view")
    fresh.close()
    del held, junk

print(f"session_views: 100 sessions closed under live views, "
      f"{len(failures)} failures")
for f in failures[:10]:
    print("  " + f)
