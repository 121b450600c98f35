#!/usr/bin/env python3
"""distopt.topk_all_reduce, lowered and executed on 1, 2 and 3 ranks,
against a NumPy model of its definition (docs/dialect.md): A = G + E per
rank; its k = max(1, ceil(density * n)) entries of largest |A| (ties: lower
index first); their sparse sum (or average) over the ranks, dense; E' = A
with the sent entries zeroed. The gradients are drawn from a small set of
values, so many magnitudes tie and the tie rule decides.

Exact: the model adds the same f32 values in the same order (rank by rank,
index order within a rank), so every bit must match.

usage: topk_vs_reference.py DISTOPT_OPT MLIR_RUNNER LIB_DIR RUNTIME_LIB MPIRUN...
"""
import math
import os
import shlex
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlir_exec import PRINT_DECL, Tally, dense, print_bits, run  # noqa: E402

N_ELEMENTS = 37


def data(ranks, seed):
    rng = np.random.default_rng(seed)
    choices = np.array([-2.0, -1.5, -0.75, -0.5, 0.0, 0.5, 0.75, 1.5, 2.0, 3.25])
    g = rng.choice(choices, size=(ranks, N_ELEMENTS)).astype(np.float32)
    e = (rng.choice(choices, size=(ranks, N_ELEMENTS)) / 8).astype(np.float32)
    return g, e


def reference(g, e, density, kind):
    ranks, n = g.shape
    k = min(n, max(1, math.ceil(density * n)))
    result = np.zeros(n, dtype=np.float32)
    errors = []
    for r in range(ranks):
        a = (g[r] + e[r]).astype(np.float32)
        chosen = sorted(np.argsort(-np.abs(a), kind="stable")[:k])
        for i in chosen:
            result[i] = np.float32(result[i] + a[i])
        err = a.copy()
        err[chosen] = 0
        errors.append(err)
    if kind == "avg":
        result = (result / np.float32(ranks)).astype(np.float32)
    return result, errors[0]


def ours(args, g, e, density, kind):
    opt, runner, libdir, rtlib, mpirun = args
    ranks, n = g.shape
    t = f"tensor<{n}xf32>"
    lines = [f"distopt.process_group @world size {ranks}", PRINT_DECL, "func.func @main() {",
             f"  %gs = arith.constant {dense(g)}",
             f"  %es = arith.constant {dense(e)}",
             "  %r = distopt.rank @world : index",
             f"  %g2 = tensor.extract_slice %gs[%r, 0] [1, {n}] [1, 1] : tensor<{ranks}x{n}xf32> to tensor<1x{n}xf32>",
             f"  %e2 = tensor.extract_slice %es[%r, 0] [1, {n}] [1, 1] : tensor<{ranks}x{n}xf32> to tensor<1x{n}xf32>",
             f"  %g = tensor.collapse_shape %g2 [[0, 1]] : tensor<1x{n}xf32> into {t}",
             f"  %e = tensor.collapse_shape %e2 [[0, 1]] : tensor<1x{n}xf32> into {t}",
             f"  %sum, %err = distopt.topk_all_reduce {kind} %g, %e on @world density {density!r} : {t}",
             "  %c0 = arith.constant 0 : index",
             "  %first = arith.cmpi eq, %r, %c0 : index",
             "  scf.if %first {"]
    lines += ["  " + line
              for line in print_bits("sum", "%sum", (n,)) + print_bits("err", "%err", (n,))]
    lines += ["  }", "  return", "}"]
    return run(opt, runner, libdir, "\n".join(lines) + "\n", [(n,), (n,)],
               extra_libs=[rtlib], launcher=[*shlex.split(mpirun), "-np", str(ranks)])


def main():
    args = sys.argv[1:6]
    tally = Tally()
    for ranks in (1, 2, 3):
        for density, kind in ((0.2, "sum"), (0.05, "avg"), (0.5, "avg"), (1.0, "sum")):
            g, e = data(ranks, seed=ranks * 10 + int(density * 100))
            want = reference(g, e, density, kind)
            got = ours(args, g, e, density, kind)
            ok = all(np.array_equal(a.view(np.int32), b.view(np.int32))
                     for a, b in zip(got, want))
            k = max(1, math.ceil(density * N_ELEMENTS))
            tally.check(ok, f"{ranks} ranks, {kind}, k = {k} of {N_ELEMENTS}: "
                  f"result and error {'bit-identical' if ok else 'DIFFER'}")
            if not ok:
                print("  got", got, "\n  want", want)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
