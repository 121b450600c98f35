"""Every numeric value of the Python Session API checked
(test/Integration/python-values.test). Usage:

  python_values.py BUILD_PYTHON_DIR STEP.so

STEP: one rank, loss scaling, clipping, grad_accumulation 3, lr 0.01.
NaN, infinite, negative, out-of-range and non-numeric values of timeout,
lr, seed, threads and steps_done raise DistoptError naming the argument
(before, Session(lr=nan) and Session(lr=-0.5) took the compiled rate,
timeout=nan and timeout=-1 became 300 s, steps_done = 2**63 - 1 made the
parameters NaN); accumulate() must be called exactly twice before each
run(); a first step skipped on NaN gradients returns its scalars and the
next run goes on (before, it raised "no step has run yet"); a second
session on the runtime's MPI world after MPI was finalised raises (before,
MPI aborted the process).
"""

import math
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import distopt  # noqa: E402

step = distopt.Step(sys.argv[2])
checks, failures = 0, []


def raises(what, needle, call):
    """`call()` must raise DistoptError whose message holds `needle`."""
    global checks
    checks += 1
    try:
        call()
    except distopt.DistoptError as e:
        if needle not in str(e):
            failures.append(f"{what}: {e} (expected '{needle}')")
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{what}: raised {type(e).__name__}: {e}")
        return
    failures.append(f"{what}: accepted")


def check(what, ok):
    global checks
    checks += 1
    if not ok:
        failures.append(what)


def session(**kw):
    return distopt.Session(step, backend="single", **kw)


for bad in (math.nan, -0.5, math.inf, -math.inf, "fast", [0.1]):
    raises(f"Session(lr={bad!r})", "lr must be", lambda: session(lr=bad))
for bad in (math.nan, -1, 0, math.inf, 2e9, "10"):
    raises(f"Session(timeout={bad!r})", "timeout must be",
           lambda: session(timeout=bad))
for bad in (-1, 2**64, 1.5, "7"):
    raises(f"Session(seed={bad!r})", "seed must be",
           lambda: session(seed=bad))
for bad in (0, -1, 1025, 2**70, 1.5, True):
    raises(f"Session(threads={bad!r})", "threads must be",
           lambda: session(threads=bad))

s = session(lr=0.5, timeout=60, seed=3, threads=1)
for bad in (math.nan, -1, math.inf, "x"):
    raises(f"lr = {bad!r}", "lr must be", lambda: setattr(s, "lr", bad))
check("lr kept", s.lr == 0.5)
for bad in (-1, 2**63 - 1, 2**64, 1.5, "3"):
    raises(f"steps_done = {bad!r}", "steps_done must be",
           lambda: setattr(s, "steps_done", bad))

grads = [t for t in step.tensors if t.role == "grad"]


def fill(value):
    for t in grads:
        s.tensor(t.name, role="grad")[...] = value


def micro_batches(value):
    for k in range(3):
        fill(value)
        if k < 2:
            s.accumulate()


fill(0.25)
raises("run() without accumulate()", "accumulate() was called 0 times",
       s.run)
s.accumulate()
raises("run() after one accumulate()", "accumulate() was called 1 times",
       s.run)
s.accumulate()
raises("a third accumulate()", "called 2 times", s.accumulate)
check("no step ran", s.steps_done == 0)

fill(math.nan)
try:
    first = s.run()
    check(f"the first step skipped: {first}", first["skipped"] == 1.0 and
          s.steps_done == 0)
    micro_batches(0.25)
    second = s.run()
    check(f"the next step ran: {second}",
          second["skipped"] == 0.0 and s.steps_done == 1)
except distopt.DistoptError as e:
    failures.append(f"a first step skipped on NaN gradients: {e}")

s.steps_done = 2**63 - 2
micro_batches(0.25)
s.run()
check("step 2**63 - 1: finite parameters",
      all(np.isfinite(s.read(t.name)).all()
          for t in step.tensors if t.role == "param"))
micro_batches(0.25)
raises("a step after 2**63 - 1", "no step number is left", s.run)
s.close()

# MPI starts once per process: a second session on the runtime's own MPI
# world, after the first (whose communicator finalised MPI) is closed, is an
# error, not an MPI abort of the process.
distopt.Session(step, backend="mpi").close()
raises("a second MPI world", "MPI was finalised",
       lambda: distopt.Session(step, backend="mpi"))

print(f"python_values: {checks} checks, {len(failures)} failed")
for f in failures:
    print("  FAILED " + f)
