#!/usr/bin/python3
"""B16, first part: Muon's update (distopt.muon_update) on one rank,
against torch.optim.Muon's update and the machine's sgemm.

For the matrices of one GPT-2 small block (torch's Linear weights, out x
in: attn.c_attn 2304x768, attn.c_proj 768x768, mlp.c_fc 3072x768,
mlp.c_proj 768x3072), each alone in a step compiled by distopt-compile
(O3, this CPU) and called in process: median ms per step (10th-90th
percentile). torch runs the same update written from torch.optim.Muon's
code (test/Integration/muon_vs_reference.py: torch 1.13 has no Muon), on
the same thread count. The bound is arithmetic: the Newton-Schulz
iterations' products (5 x (2 r^2 c + r^3) multiply-adds for an r x c
matrix, r <= c) at the rate OpenBLAS's sgemm reaches on the same shapes
(torch.mm, the best of its X X^T, A A and B X products), measured in the
same run. Everything on one thread (OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS 1: distopt's products run on one OpenBLAS thread).

    bench/muon.py [--build build] [--steps 7]
"""
import argparse
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
from muon_vs_reference import muon_step  # noqa: E402

SHAPES = [("attn.c_attn", 2304, 768), ("attn.c_proj", 768, 768),
          ("mlp.c_fc", 3072, 768), ("mlp.c_proj", 768, 3072)]


def step_text(rows, cols):
    t = f"tensor<{rows}x{cols}xf32>"
    return (f"func.func @step(%p: {t}, %g: {t}, %b: {t}, %lr: f64, %t: i64) -> ({t}, {t}) {{\n"
            f"  %r, %s = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) : {t}, f64\n"
            f"  return %r, %s : {t}, {t}\n}}\n")


def timed(run, steps):
    run(0)
    samples = []
    for k in range(steps):
        start = time.perf_counter()
        run(k + 1)
        samples.append(time.perf_counter() - start)
    return samples


def sgemm_rate(rows, cols, steps):
    """GFLOP/s of torch.mm (OpenBLAS) on the iterations' three products."""
    r, c = min(rows, cols), max(rows, cols)
    x = torch.randn(r, c)
    a = torch.randn(r, r)
    best = 0.0
    for f, flops in ((lambda: x @ x.T, 2 * r * r * c), (lambda: a @ a, 2 * r ** 3),
                     (lambda: a @ x, 2 * r * r * c)):
        f()
        t = percentile(timed(lambda _: f(), steps), 0.5)
        best = max(best, flops / t / 1e9)
    return best


def fmt(samples):
    ms = [s * 1e3 for s in samples]
    return f"{percentile(ms, 0.5):.1f} ({percentile(ms, 0.1):.1f}-{percentile(ms, 0.9):.1f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    compile_tool = os.path.join(args.build, "bin", "distopt-compile")
    runtime = os.path.join(args.build, "runtime", "lib", "libdistopt_rt.so")
    rng = np.random.default_rng(16)
    print("| matrix | shape | distopt ms | torch ms | torch / distopt | distopt GFLOP/s "
          "| sgemm GFLOP/s | distopt / sgemm |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, rows, cols in SHAPES:
            step = CompiledStep.compile(compile_tool, runtime, step_text(rows, cols), tmp,
                                        name=name.replace(".", "_"))
            p = rng.standard_normal((rows, cols)).astype(np.float32)
            g = rng.standard_normal((rows, cols)).astype(np.float32)
            b = np.zeros_like(p)
            ours = timed(lambda k: step([p, g, b, 0.02, k + 1]), args.steps)
            tp, tg, tb = torch.tensor(p), torch.tensor(g), torch.zeros(rows, cols)
            theirs = timed(lambda k: muon_step(tp, tg, tb, 0.02, torch.float32), args.steps)
            r, c = min(rows, cols), max(rows, cols)
            flops = 5 * 2 * (2 * r * r * c + r ** 3)
            rate = flops / percentile(ours, 0.5) / 1e9
            bound = sgemm_rate(rows, cols, args.steps)
            print(f"| {name} | {rows}x{cols} | {fmt(ours)} | {fmt(theirs)} "
                  f"| {percentile(theirs, 0.5) / percentile(ours, 0.5):.2f} | {rate:.0f} "
                  f"| {bound:.0f} | {rate / bound:.2f} |")


if __name__ == "__main__":
    main()
