"""Ranks that call different collective operations of one session, from
Python (test/Runtime/collective-mismatch.test). Usage:

  collective_mismatch.py BUILD_PYTHON_DIR STEP.so save|read

Rank 1 saves a checkpoint (save) or reads a tensor held as ZeRO shards
(read) while every other rank runs a step. Each rank's call must raise
DistoptError with status "mismatch" within seconds (the timeout is 30 s),
its message naming this rank and both operations; no parameter may change,
and the next run() must raise (the session is broken).
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, sys.argv[1])
STEP, OTHER = sys.argv[2], sys.argv[3]

import distopt  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

step = distopt.Step(STEP)
session = distopt.Session(step, comm=comm, timeout=30)
for t in step.tensors:
    if t.role == "param":
        session.write(t.name, np.linspace(-1, 1, t.numel, dtype=np.float32)
                      .reshape(t.shape))
    if t.role == "grad":
        session.write(t.name, np.full(t.shape, 0.25 + rank, np.float32),
                      role="grad")
session.run()
before = {t.name: session.read(t.name) for t in step.tensors
          if t.role == "param" and t.whole}
sharded = next(t for t in step.tensors if not t.whole)

comm.Barrier()
started = time.monotonic()
what = "run" if rank != 1 else OTHER
try:
    if rank != 1:
        session.run()
    elif OTHER == "save":
        session.save(os.path.join(os.path.dirname(STEP), "mismatch.ckpt"))
    else:
        session.read(sharded.name, role=sharded.role)
    print(f"rank {rank}: FAILED: {what} returned")
except distopt.DistoptError as e:
    seconds = time.monotonic() - started
    other = ("of a checkpoint save" if OTHER == "save"
             else "of reading a tensor")
    ok = (e.status == "mismatch" and f"rank {rank} of {size}" in str(e) and
          "of a step" in str(e) and other in str(e) and seconds < 10)
    print(f"rank {rank}: {what} {'raised' if ok else 'FAILED'} {e.status}"
          f"{'' if seconds < 10 else f' after {seconds:.1f} s'}: {e}")
changed = [name for name, value in before.items()
           if not np.array_equal(value, session.read(name))]
print(f"rank {rank}: parameters changed: {changed}")
try:
    session.run()
    print(f"rank {rank}: FAILED: a broken session ran")
except distopt.DistoptError as e:
    print(f"rank {rank}: then run() raised {e.status}")
session.close()
