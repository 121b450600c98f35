#!/usr/bin/env python3
"""distopt.dion_update, compiled by distopt-compile and called in process,
against Dion's update written here from the paper's equations (Ahn et al.,
"Dion: Distributed Orthonormalized Updates", 2025, Algorithm 1, as
Microsoft's dion_simple.py runs it: a wide matrix is not transposed):

    B = M + G;  P = orthonormalize(B Q);  R = B^T P
    M = B - (1 - mu) P R^T;  Q = R / (column norms + epsilon)
    X = X (1 - lr wd) - lr sqrt(m / n) P Q^T

with the op's starting factor (a hash of the element's index and the seed)
and its orthonormalization (modified Gram-Schmidt run twice, each column
over its norm plus epsilon; torch.linalg.qr with a positive diagonal gives
the same matrix up to rounding and that epsilon). Wide, tall, square and 4-D (conv: its first
dimension's rows) parameters, 10 steps with a rate that changes every step,
full rank, a fixed rank and a fraction of the smaller dimension.

Tolerance, and why: the reference runs in float64 (the exact answer) and
in float32 as torch would. Matrix products are sums whose order is the
library's, so float32 results differ in their last bits, and the
orthonormalization of B Q amplifies that by its condition number (large
at full rank). The compiled step must be as close to the float64 answer as
torch's own float32 is: within 4 times torch's float32 error or 2e-6 of
the parameters' change, whichever is larger (parameters, momentum and
right factor).

usage: dion_vs_reference.py DISTOPT_COMPILE RUNTIME_LIB
With DISTOPT_TEST_LOWERING set (a test lowering of distopt-opt, as
--distopt-test-lower-to-gpu-on-host), the steps are compiled with it.
"""
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compiled_step import CompiledStep  # noqa: E402
from mlir_exec import Tally  # noqa: E402

STEPS = 10
SHAPES = [(48, 80), (80, 48), (64, 64), (16, 8, 3, 3)]

# (label, distopt attributes, options of the reference)
CONFIGS = [
    ("defaults (full rank)", "", {}),
    ("rank=8, mu=0.9, weight_decay=0.1",
     "{rank = 8 : i64, mu = 0.9, weight_decay = 0.1}",
     {"rank": 8, "mu": 0.9, "weight_decay": 0.1}),
    ("rank_fraction=0.25, maximize, seed=7, epsilon=1e-3",
     "{rank_fraction = 0.25, maximize, seed = 7 : i64, epsilon = 1.0e-3}",
     {"rank_fraction": 0.25, "maximize": True, "seed": 7, "epsilon": 1e-3}),
]


def lr_at(k):
    return 0.02 * (1.0 + 0.5 * np.cos(0.7 * k))


def dion_rank(rows, cols, rank=None, rank_fraction=1.0):
    smaller = min(rows, cols)
    r = rank if rank is not None else math.ceil(rank_fraction * smaller)
    return max(1, min(r, smaller))


def starting_factor(rank, cols, seed):
    """Q^T at step 1, as the op draws it (r x n)."""
    mask = np.uint64(0xFFFFFFFF)
    index = (np.arange(rank, dtype=np.uint64)[:, None] * np.uint64(cols)
             + np.arange(cols, dtype=np.uint64)[None, :])
    x = (index + np.uint64((seed * 0x9E3779B9) & 0xFFFFFFFF)) & mask
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & mask
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & mask
    x ^= x >> np.uint64(16)
    return ((x >> np.uint64(8)).astype(np.float64) / 2.0 ** 24) * 2.0 - 1.0


def orthonormalize(p, eps):
    """Modified Gram-Schmidt over the columns, left to right."""
    q = p.clone()
    for i in range(q.shape[1]):
        q[:, i] = q[:, i] / (q[:, i].norm() + eps)
        if i + 1 < q.shape[1]:
            q[:, i + 1:] -= torch.outer(q[:, i], q[:, i] @ q[:, i + 1:])
    return q


def dion_step(x, grad, m, qt, lr, mu=0.95, weight_decay=0.01, epsilon=1e-8,
              maximize=False, **_):
    """One Dion update of the matrix view of `x`; `x`, `m`, `qt` in place."""
    rows = x.shape[0]
    cols = x.numel() // rows
    g = grad.reshape(rows, cols)
    b = m.reshape(rows, cols) - g if maximize else m.reshape(rows, cols) + g
    p = orthonormalize(orthonormalize(b @ qt.T, epsilon), epsilon)
    r = b.T @ p
    m.copy_((b - (1 - mu) * (p @ r.T)).reshape(m.shape))
    norms = r.norm(dim=0)
    q = torch.where(norms == 0, qt.T, r / (norms + epsilon))
    qt.copy_(q.T)
    x.mul_(1 - lr * weight_decay)
    x.add_((p @ q.T).reshape(x.shape), alpha=-lr * math.sqrt(rows / cols))


def tensor_type(shape):
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


def factor_shapes(options):
    return [(dion_rank(s[0], math.prod(s[1:]), options.get("rank"),
                       options.get("rank_fraction", 1.0)), math.prod(s[1:]))
            for s in SHAPES]


def step_module(attrs, factors):
    types = [tensor_type(s) for s in SHAPES]
    qtypes = [tensor_type(s) for s in factors]
    args = [f"%p{i}: {t}" for i, t in enumerate(types)]
    args += [f"%g{i}: {t}" for i, t in enumerate(types)]
    args += [f"%m{i}: {t}" for i, t in enumerate(types)]
    args += [f"%q{i}: {t}" for i, t in enumerate(qtypes)]
    body = [f"  %r{i}, %s{i}, %f{i} = distopt.dion_update %p{i}, %g{i} state(%m{i}, %q{i}) "
            f"lr(%lr) step(%t) {attrs} : {t} [{t}, {q}], f64"
            for i, (t, q) in enumerate(zip(types, qtypes))]
    n = len(types)
    results = ([f"%r{i}" for i in range(n)] + [f"%s{i}" for i in range(n)]
               + [f"%f{i}" for i in range(n)])
    out = ", ".join(types + types + qtypes)
    return (f"func.func @step({', '.join(args)}, %lr: f64, %t: i64) -> ({out}) {{\n"
            + "\n".join(body) + f"\n  return {', '.join(results)} : {out}\n}}\n")


def reference(p0, grads, factors, options, dtype):
    params = [torch.tensor(p, dtype=dtype) for p in p0]
    moms = [torch.zeros(s, dtype=dtype) for s in SHAPES]
    qts = [torch.tensor(starting_factor(*f, options.get("seed", 0)), dtype=dtype)
           for f in factors]
    for k in range(STEPS):
        for x, g, m, qt in zip(params, grads[k], moms, qts):
            dion_step(x, torch.tensor(g, dtype=dtype), m, qt, lr_at(k + 1), **options)
    return [t.numpy() for t in params + moms + qts]


def main():
    distopt_compile, runtime_lib = sys.argv[1:3]
    lowering = os.environ.get("DISTOPT_TEST_LOWERING")
    compile_options = ([f"--lowering={lowering.lstrip('-')}{{runtime-allocator=true}}"]
                       if lowering else [])
    torch.set_num_threads(1)
    rng = np.random.default_rng(43)
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        for index, (label, attrs, options) in enumerate(CONFIGS):
            factors = factor_shapes(options)
            p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
            grads = [[(rng.standard_normal(s) * 10.0 ** rng.integers(-2, 1)).astype(np.float32)
                      for s in SHAPES] for _ in range(STEPS)]
            exact = reference(p0, grads, factors, options, torch.float64)
            torch32 = reference(p0, grads, factors, options, torch.float32)

            step = CompiledStep.compile(distopt_compile, runtime_lib,
                                        step_module(attrs, factors), tmp, name=f"dion{index}",
                                        options=compile_options)
            n = len(SHAPES)
            current = ([p.copy() for p in p0] + [np.zeros(s, np.float32) for s in SHAPES]
                       + [np.zeros(f, np.float32) for f in factors])
            for k in range(STEPS):
                out = step(current[:n] + [g.copy() for g in grads[k]] + current[n:]
                           + [lr_at(k + 1), k + 1])
                current = [o.copy() for o in out]
            names = ([f"param{s}" for s in SHAPES] + [f"momentum{s}" for s in SHAPES]
                     + [f"right_factor{f}" for f in factors])
            worst, bad = 0.0, []
            for i, (name, got) in enumerate(zip(names, current)):
                start = p0[i] if i < n else np.zeros_like(got)
                change = float(np.max(np.abs(exact[i] - start)))
                ours = float(np.max(np.abs(got.astype(np.float64) - exact[i])))
                theirs = float(np.max(np.abs(torch32[i].astype(np.float64) - exact[i])))
                bound = max(4 * theirs, 2e-6 * change)
                worst = max(worst, ours / bound)
                if not np.all(np.isfinite(got)) or ours > bound:
                    bad.append(f"{name} (error {ours:.3g}, torch's {theirs:.3g})")
            tally.check(not bad, f"Dion({label}): within the bound over {STEPS} steps "
                        f"(worst error / bound {worst:.2f})"
                        + (f"; differs: {', '.join(bad)}" if bad else ""))
        # A zero gradient with epsilon 0: zero rows of P stay zero (not
        # 0 / 0), the factor keeps its rows, the parameter only decays.
        factors = factor_shapes({})
        step = CompiledStep.compile(distopt_compile, runtime_lib,
                                    step_module("{epsilon = 0.0}", factors), tmp,
                                    name="dion_zero", options=compile_options)
        p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        n = len(SHAPES)
        out = step([p.copy() for p in p0]
                   + [np.zeros(s, np.float32) for s in SHAPES] * 2
                   + [np.zeros(f, np.float32) for f in factors] + [0.02, 1])
        decayed = all(np.array_equal(o, (p * np.float32(1 - 0.02 * 0.01)))
                      for o, p in zip(out[:n], p0))
        tally.check(all(np.all(np.isfinite(o)) for o in out) and decayed,
                    "Dion(epsilon=0) on a zero gradient: finite, the "
                    "parameters decayed only")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
