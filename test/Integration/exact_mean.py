"""The mean of a compiled step at 3 ranks is the f64 mean, rounded once
(test/Integration/exact-mean.test). Under mpirun -np 3:

  exact_mean.py BUILD_PYTHON_DIR WORK_DIR

A spec with a bf16, an f16 and an f32 parameter (SGD, lr 1) is compiled
through distopt.compile as it is imported (a sum, then a division by 3 in
each gradient's type) and through distopt-pipeline (the division folded
into the reduction: avg; with reduce-dtype=f32; under ZeRO-2). Each rank
writes its own gradients, the parameters start at zero, and after one step
each parameter is minus the mean gradient. The gradients are multiples of a
power of two small enough that every partial sum of the ring is exact in
their type, so the sum over the ranks is exact and the mean the step
returns must be the f64 mean of the three ranks' gradients rounded once to
the gradient's type, in every element. (Before, the f16 average on 3 ranks
was split as premul_sum(1/2) with nothing after it: a mean 50% too large.)

Rank 0 prints "PASS: PIPELINE: DTYPE ..." or "FAIL: ..." per step and
parameter, then "N passed, M failed".
"""

import os
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
WORK = sys.argv[2]

import distopt  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N = 1000

SPEC = {"model": "exact-mean", "world_size": 3,
        "optimizer": {"type": "sgd", "lr": 1.0},
        "parameters": [{"name": "b", "shape": [N], "dtype": "bf16"},
                       {"name": "h", "shape": [N], "dtype": "f16"},
                       {"name": "f", "shape": [N], "dtype": "f32"}]}

# Gradients: integers times a power of two, |sum of 3| within the type's
# integer range (bf16 256, f16 2048, f32 2^24), so every partial sum is exact.
LIMITS = {"b": (40, 2.0 ** -3), "h": (600, 2.0 ** -4), "f": (2 ** 22, 2.0 ** -10)}


def bf16_bits(values):
    """float64 values rounded once to bf16 (nearest even), as uint16 bits:
    to f32 first is exact enough (53 >= 2 * 24 + 2 and 24 >= 2 * 8 + 2: no
    double rounding)."""
    bits = np.asarray(values, np.float64).astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def gradients():
    """Every rank's gradients (the same draw on every rank)."""
    rng = np.random.default_rng(7)
    return {name: rng.integers(-limit, limit + 1, size=(size, N)) * scale
            for name, (limit, scale) in LIMITS.items()}


def expected_bits(name, mean):
    """0 - mean (+0 for a zero mean, as the update computes it) rounded once
    to the parameter's type, as the step stores it."""
    value = 0.0 - mean
    if name == "b":
        return bf16_bits(value)
    if name == "h":
        return value.astype(np.float16).view(np.uint16)
    return value.astype(np.float32).view(np.uint32)


def stored_bits(name, array):
    if name == "b":
        return array  # uint16 bits already
    return array.view(np.uint16 if name == "h" else np.uint32)


def run(pipeline, grads):
    step = distopt.Step(distopt.compile(
        SPEC, pipeline=pipeline, comm=comm, cache=os.path.join(WORK, "cache")))
    with distopt.Session(step, comm=comm, lr=1.0) as session:
        for name in LIMITS:
            info = step.tensor(name)
            session.write(name, np.zeros(N), role="param")
            mine = grads[name][rank]
            session.write(name, bf16_bits(mine) if info.dtype == "bf16"
                          else mine, role="grad")
        session.run()
        return {name: session.read(name) for name in LIMITS}


def main():
    grads = gradients()
    passed = failed = 0
    for pipeline in ("", "backend=nccl", "backend=mpi", "reduce-dtype=f32",
                     "zero-stage=2"):
        params = run(pipeline, grads)
        if rank != 0:
            continue
        for name in LIMITS:
            mean = grads[name].astype(np.float64).mean(axis=0)
            want = expected_bits(name, mean)
            got = stored_bits(name, params[name])
            off = int(np.count_nonzero(got != want))
            if name == "b":
                values = -bf16_values(got)
            else:
                values = -params[name].astype(np.float64)
            worst = float(np.max(np.abs(values - mean) / np.abs(mean).clip(1e-30)))
            ok = off == 0
            passed += ok
            failed += not ok
            where = pipeline or "as imported"
            print(f"{'PASS' if ok else 'FAIL'}: {where}: {name}: the f64 mean "
                  f"rounded once in every element ({off} of {N} differ, largest "
                  f"relative error {worst:.3g})")
            for i in np.nonzero(got != want)[0][:3]:
                print(f"#   element {i}: gradients {grads[name][:, i]}, mean "
                      f"{mean[i]!r}, expected bits {int(want[i]):#x}, got "
                      f"{int(got[i]):#x}")
    if rank == 0:
        print(f"{passed} passed, {failed} failed")
    comm.Barrier()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
