"""A split step's entry points against the whole step
(test/Integration/split-step.test). Run under mpirun; usage: split_step.py
BUILD_PYTHON_DIR CACHE_DIR.

Two sessions of one step compiled with split-step take the same
parameters and gradients for 3 steps: one runs the whole step, the other
starts every reduce entry on its communication thread and then runs the
update. Parameters and state must agree bit for bit (the same collectives
on the same data), plain and under ZeRO-1/2/3, hierarchical all-reduces,
and bf16 parameters with fp32 main parameters reduced in f32. The entry
points are checked as the interface lists them, and misuse is refused by
name.
"""

import sys

import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
CACHE = sys.argv[2]

import distopt  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
checks = failures = 0


def check(cond, what):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


SHAPES = {"w": [37, 29], "b": [37], "v": [300, 31], "e": [3, 5, 7]}


def spec(dtype="f32"):
    return {"model": "split", "world_size": size, "main_params": True,
            "optimizer": {"type": "adamw", "lr": 0.01, "weight_decay": 0.1},
            "parameters": [{"name": n, "shape": s, "dtype": dtype}
                           for n, s in SHAPES.items()]}


def compare(pipeline, dtype="f32"):
    options = (pipeline + " grad-as-bucket-view split-step "
               "bucket-cap-mb=0.04 first-bucket-cap-mb=0.01")
    step = distopt.Step(distopt.compile(spec(dtype), pipeline=options,
                                        comm=comm, cache=CACHE))
    what = f"'{pipeline}' {dtype}"
    reduces = [e for e in step.entries if e.kind == "reduce"]
    update = [e for e in step.entries if e.kind == "update"]
    check(len(update) == 1 and update[0].index == len(step.entries) - 1 and
          reduces and all(step.args[a].role == "grad"
                          for e in reduces for a in e.reduces),
          f"{what}: entries {step.entries}")
    whole, split = (distopt.Session(step, comm=comm) for _ in range(2))
    torch.manual_seed(0)
    for n, s in SHAPES.items():
        p = torch.randn(s)
        for session in (whole, split):
            session.write(n, p)
    for t in range(3):
        for i, (n, s) in enumerate(SHAPES.items()):
            g = torch.randn(s, generator=torch.Generator().manual_seed(
                100 * t + 10 * i + rank))
            for session in (whole, split):
                session.write(n, g, "grad")
        whole.run()
        for e in reduces:
            split.start_entry(e.index)
        split.wait()
        split.run_entry(update[0].index)
    check(split.steps_done == whole.steps_done == 3, f"{what}: steps done")
    for t in step.tensors:
        if t.role in ("param", "main_param", "state"):
            check(np.array_equal(whole.read(t.name, t.role),
                                 split.read(t.name, t.role)),
                  f"{what}: {t.role} {t.name} differs from the whole step's")
    return step, split


def misuse(step, session):
    update = step.entries[-1].index
    for call, k, words in ((session.start_entry, update, "is the update"),
                           (session.run_entry, 99, "no entry point #99"),
                           (session.start_entry, -1, "no entry point #-1")):
        try:
            call(k)
            check(False, f"{call.__name__}({k}) was accepted")
        except distopt.DistoptError as e:
            check(words in str(e), f"{call.__name__}({k}): {e}")
    plain = distopt.Step(distopt.compile(spec(), comm=comm, cache=CACHE))
    check(plain.entries == [], "a step compiled whole has no entries")
    try:
        distopt.Session(plain, comm=comm).run_entry(0)
        check(False, "run_entry on a whole step was accepted")
    except distopt.DistoptError as e:
        check("compile it with split-step" in str(e), str(e))


for pipeline in ("", "zero-stage=1", "zero-stage=2", "zero-stage=3"):
    compare(pipeline)
if size % 2 == 0:
    compare(f"hierarchical-node-size=2 hierarchical-min-bytes=0")
compare("zero-stage=2 reduce-dtype=f32", "bf16")
misuse(*compare("overlap=false"))
print(f"split_step: rank {rank}: {checks} checks, {failures} failed",
      flush=True)
sys.exit(1 if failures else 0)
