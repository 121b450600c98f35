#!/usr/bin/env python3
"""Mixed precision and clipping, lowered and executed, against references.

- clip_grad_norm against torch.nn.utils.clip_grad_norm_ (PyTorch 1.13) for
  norm types 2, inf and 1.5, with and without clipping taking effect: the
  total norm and every clipped gradient within 4 ulp for norms 2 and inf
  (both accumulate each tensor's norm in double and round it to float before
  the norm of norms; observed bit-exact) and 8 ulp for other p (powers and
  root taken in other precisions; observed 5).
- unscale (fp16 gradients), all_finite and loss_scale_update against
  GradScaler's algorithm written out below: PyTorch 1.13 has no CPU kernels
  for _amp_foreach_non_finite_check_and_unscale_ or _amp_update_scale_, so
  the reference is the algorithm those CUDA kernels implement. Exact.

usage: amp_clip_vs_torch.py DISTOPT_OPT MLIR_RUNNER LIB_DIR
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlir_exec import PRINT_DECL, dense, mlir_float, print_bits, run, ulp  # noqa: E402

SHAPES = [(3, 5), (7,), (2, 2, 3)]


def ttype(shape, dtype="f32"):
    return "tensor<" + "x".join(map(str, shape)) + f"x{dtype}>"


def clip_case(opt, runner, libdir, grads, max_norm, norm_type):
    attr = "0x7FF0000000000000 : f64" if np.isinf(norm_type) else mlir_float(norm_type)
    lines = [PRINT_DECL, "func.func @main() {"]
    names = []
    for i, g in enumerate(grads):
        lines.append(f"  %g{i} = arith.constant {dense(g)}")
        names.append(f"%g{i}")
    types = ", ".join(ttype(g.shape) for g in grads)
    outs = [f"%c{i}" for i in range(len(grads))]
    lines.append(f"  {', '.join(outs)}, %n = distopt.clip_grad_norm {', '.join(names)} "
                 f"max_norm {mlir_float(max_norm)} {{norm_type = {attr}}} : {types} -> f32")
    lines.append("  %nt = tensor.from_elements %n : tensor<1xf32>")
    lines += print_bits("norm", "%nt", (1,))
    for i, g in enumerate(grads):
        lines += print_bits(f"out{i}", outs[i], g.shape)
    lines += ["  return", "}"]
    got = run(opt, runner, libdir, "\n".join(lines) + "\n",
              [(1,)] + [g.shape for g in grads])
    params = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g)
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    want = [np.array([total.item()], dtype=np.float32)] + [p.grad.numpy() for p in params]
    worst = max(float((np.abs(a.astype(np.float64) - b) / ulp(b)).max())
                for a, b in zip(got, want))
    # p = 2 and inf: the same operations (observed: bit-exact). Other p: the
    # powers and the root are taken in different precisions (observed 5 ulp).
    bound = 4 if norm_type in (2.0, float("inf")) else 8
    ok = all(np.all(np.abs(a - b) <= bound * ulp(b)) for a, b in zip(got, want))
    return ok, worst


def unscale_case(opt, runner, libdir, grad16, scale):
    t = ttype(grad16.shape, "f16")
    lines = [PRINT_DECL, "func.func @main() {",
             f"  %g = arith.constant {dense(grad16, 'f16')}",
             f"  %s = arith.constant {mlir_float(scale)} : f32",
             f"  %u = distopt.unscale %g by %s : {t}, f32"]
    lines += print_bits("u", "%u", grad16.shape, "f16")
    lines += ["  return", "}"]
    got = run(opt, runner, libdir, "\n".join(lines) + "\n", [grad16.shape])[0]
    inverse = np.float32(1.0) / np.float32(scale)
    want = (grad16.astype(np.float32) * inverse).astype(np.float16).astype(np.float32)
    return np.array_equal(got, want)


def finite_case(opt, runner, libdir, tensors):
    lines = [PRINT_DECL, "func.func @main() {"]
    for i, a in enumerate(tensors):
        lines.append(f"  %x{i} = arith.constant {dense(a)}")
    types = ", ".join(ttype(a.shape) for a in tensors)
    lines.append(f"  %ok = distopt.all_finite {', '.join(f'%x{i}' for i in range(len(tensors)))} : {types}")
    lines += ["  %one = arith.constant 1.0 : f32", "  %zero = arith.constant 0.0 : f32",
              "  %f = arith.select %ok, %one, %zero : f32",
              "  %ft = tensor.from_elements %f : tensor<1xf32>"]
    lines += print_bits("ok", "%ft", (1,))
    lines += ["  return", "}"]
    got = run(opt, runner, libdir, "\n".join(lines) + "\n", [(1,)])[0][0]
    want = all(np.all(np.isfinite(a)) for a in tensors)
    return bool(got) == want


def grad_scaler_update(scale, tracker, finite, growth, backoff, interval):
    """GradScaler.update (the algorithm of torch's _amp_update_scale_)."""
    if not finite:
        return np.float32(scale * np.float32(backoff)), 0
    successful = tracker + 1
    if successful == interval:
        grown = np.float32(scale) * np.float32(growth)
        return (grown if np.isfinite(grown) else np.float32(scale)), 0
    return np.float32(scale), successful


def scale_case(opt, runner, libdir, scale, tracker, finite, growth, backoff, interval):
    lines = [PRINT_DECL, "func.func @main() {",
             f"  %s = arith.constant {mlir_float(scale)} : f32",
             f"  %n = arith.constant {tracker} : i64",
             f"  %ok = arith.constant {'true' if finite else 'false'}",
             f"  %s1, %n1 = distopt.loss_scale_update %s, %n, %ok {{growth_factor = {mlir_float(growth)}, "
             f"backoff_factor = {mlir_float(backoff)}, growth_interval = {interval}}} : f32, i64",
             "  %nf = arith.sitofp %n1 : i64 to f32",
             "  %r = tensor.from_elements %s1, %nf : tensor<2xf32>"]
    lines += print_bits("r", "%r", (2,))
    lines += ["  return", "}"]
    got = run(opt, runner, libdir, "\n".join(lines) + "\n", [(2,)])[0]
    want_scale, want_tracker = grad_scaler_update(np.float32(scale), tracker, finite,
                                                  growth, backoff, interval)
    return got[0] == np.float32(want_scale) and got[1] == want_tracker


def main():
    opt, runner, libdir = sys.argv[1:4]
    rng = np.random.default_rng(7)
    results = []
    for norm_type in (2.0, float("inf"), 1.5):
        for max_norm in (1.0, 1e4):
            grads = [(rng.standard_normal(s) * 3).astype(np.float32) for s in SHAPES]
            ok, worst = clip_case(opt, runner, libdir, grads, max_norm, norm_type)
            results.append((ok, f"clip_grad_norm(norm_type={norm_type}, max_norm={max_norm}): "
                                f"max {worst:.1f} ulp vs torch"))
    grad16 = (rng.standard_normal((4, 6)) * 1000).astype(np.float16)
    for scale in (1024.0, 3.0, 65536.0):
        results.append((unscale_case(opt, runner, libdir, grad16, scale),
                         f"unscale(scale={scale}) equals g * (1/scale) in f32, rounded to f16"))
    clean = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    results.append((finite_case(opt, runner, libdir, clean), "all_finite: finite inputs"))
    for bad in (np.inf, -np.inf, np.nan):
        dirty = [c.copy() for c in clean]
        dirty[2].flat[5] = bad
        results.append((finite_case(opt, runner, libdir, dirty), f"all_finite: one {bad}"))
    np.seterr(over="ignore")  # the growth that overflows is one of the cases
    for case in [(65536.0, 1, True, 2.0, 0.5, 2), (65536.0, 0, True, 2.0, 0.5, 2),
                 (65536.0, 5, False, 2.0, 0.5, 2000), (3.0e38, 1, True, 2.0, 0.5, 2),
                 (1.0, 1999, True, 4.0, 0.25, 2000)]:
        results.append((scale_case(opt, runner, libdir, *case),
                        f"loss_scale_update{case} equals GradScaler's update"))
    failures = 0
    for ok, text in results:
        print(f"{'PASS' if ok else 'FAIL'}: {text}")
        failures += not ok
    print(f"{len(results) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
