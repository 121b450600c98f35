#!/usr/bin/python3
"""B16, Dion's part: Dion's update (distopt.dion_update) on one rank,
against Dion's update in torch as Microsoft's reference implementation
(dion_simple.py) writes it, and against the machine's sgemm.

For the matrices of one GPT-2 small block (out x in, as bench/muon.py) at
rank 1/4 of the smaller dimension, each alone in a step compiled by
distopt-compile and called in process: median ms per step (10th-90th
percentile). torch's side: M += G; P = M Q; P = torch.linalg.qr(P).Q;
R = M^T P; M -= (1 - mu) P R^T; Q = R / (column norms + eps); X -= lr
sqrt(m/n) P Q^T (Householder QR where distopt runs Gram-Schmidt twice).
The bound is the four products' 4 x 2 r m n flops at the rate OpenBLAS's
sgemm reaches on those shapes, measured in the same run; the
orthonormalization's 2 x 2 r^2 m more are reported beside it. One thread
everywhere.

    bench/dion.py [--build build] [--steps 7]
"""
import argparse
import math
import os
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "Integration"))
from common import percentile  # noqa: E402
from compiled_step import CompiledStep  # noqa: E402
from muon import SHAPES, fmt, timed  # noqa: E402


def step_text(rows, cols, rank):
    t = f"tensor<{rows}x{cols}xf32>"
    q = f"tensor<{rank}x{cols}xf32>"
    return (f"func.func @step(%p: {t}, %g: {t}, %m: {t}, %q: {q}, %lr: f64, %t: i64)"
            f" -> ({t}, {t}, {q}) {{\n"
            f"  %r, %s, %f = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t)"
            f" {{rank = {rank} : i64}} : {t} [{t}, {q}], f64\n"
            f"  return %r, %s, %f : {t}, {t}, {q}\n}}\n")


def torch_dion(x, g, m, q, lr, mu=0.95, weight_decay=0.01, eps=1e-8):
    """Microsoft's dion_simple update, Q as n x r."""
    m.add_(g)
    p = torch.linalg.qr(m @ q).Q
    r = m.T @ p
    m.addmm_(p, r.T, alpha=-(1 - mu))
    q.copy_(r / (r.norm(dim=0, keepdim=True) + eps))
    x.mul_(1 - weight_decay * lr)
    x.addmm_(p, q.T, alpha=-lr * math.sqrt(x.size(0) / x.size(1)))


def sgemm_rate(rows, cols, rank, steps):
    """GFLOP/s of torch.mm (OpenBLAS) on Dion's four products' shapes."""
    b = torch.randn(rows, cols)
    q = torch.randn(cols, rank)
    p = torch.randn(rows, rank)
    best = 0.0
    for f in (lambda: b @ q, lambda: b.T @ p, lambda: p @ q.T):
        f()
        t = percentile(timed(lambda _: f(), steps), 0.5)
        best = max(best, 2 * rows * cols * rank / t / 1e9)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    compile_tool = os.path.join(args.build, "bin", "distopt-compile")
    runtime = os.path.join(args.build, "runtime", "lib", "libdistopt_rt.so")
    rng = np.random.default_rng(16)
    print("| matrix | shape | rank | distopt ms | torch ms | torch / distopt "
          "| distopt GFLOP/s (products) | sgemm GFLOP/s | distopt / sgemm |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, rows, cols in SHAPES:
            rank = math.ceil(min(rows, cols) / 4)
            step = CompiledStep.compile(compile_tool, runtime,
                                        step_text(rows, cols, rank), tmp,
                                        name=name.replace(".", "_"))
            p = rng.standard_normal((rows, cols)).astype(np.float32)
            g = rng.standard_normal((rows, cols)).astype(np.float32)
            m = np.zeros_like(p)
            q = np.zeros((rank, cols), np.float32)
            ours = timed(lambda k: step([p, g, m, q, 0.02, k + 1]), args.steps)
            tp, tg, tm = torch.tensor(p), torch.tensor(g), torch.zeros(rows, cols)
            tq = torch.randn(cols, rank)
            theirs = timed(lambda k: torch_dion(tp, tg, tm, tq, 0.02), args.steps)
            flops = 4 * 2 * rank * rows * cols
            rate = flops / percentile(ours, 0.5) / 1e9
            bound = sgemm_rate(rows, cols, rank, args.steps)
            print(f"| {name} | {rows}x{cols} | {rank} | {fmt(ours)} | {fmt(theirs)} "
                  f"| {percentile(theirs, 0.5) / percentile(ours, 0.5):.2f} | {rate:.0f} "
                  f"| {bound:.0f} | {rate / bound:.2f} |", flush=True)


if __name__ == "__main__":
    main()
