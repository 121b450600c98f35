#!/usr/bin/env python3
"""distopt.muon_update, compiled by distopt-compile and called in process,
against torch.optim.Muon's update (PyTorch 2.9; written here from its
equations, as Debian's torch 1.13 has no Muon): momentum by lerp, Nesterov,
Newton-Schulz orthogonalization of the matrix (transposed when tall),
decoupled weight decay, the rate adjusted by the shape. Wide, tall, square
and 4-D (conv: its first dimension's rows) parameters, 12 steps with a rate
that changes every step, each option.

Tolerance, and why: the reference runs the same equations in float64 (the
exact answer to compare with) and in float32 as torch does. Matrix products
are sums whose order is the library's (OpenBLAS's blocking in torch, rows
in distopt's loops), so f32 results differ in their last bits, and 5
iterations of a cubic map carry that on. The compiled step must be as
close to the float64 answer as torch's own float32 is: within 4 times
torch's f32 error or 2e-6 of the parameters' change, whichever is larger
(the parameters and the momentum buffer). Iterations in bf16 are held to
the same rule against torch's bf16 products (f32 accumulation, one
rounding), and must be bf16's: their parameters at least 10 times further
from the float64 answer than float32 iterations are.

usage: muon_vs_reference.py DISTOPT_COMPILE RUNTIME_LIB
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

STEPS = 12
SHAPES = [(48, 80), (80, 48), (64, 64), (16, 8, 3, 3)]
COEFFICIENTS = (3.4445, -4.775, 2.0315)

# (label, distopt attributes, options of the reference)
CONFIGS = [
    ("defaults", "", {}),
    ("match_rms_adamw, weight_decay=0.02",
     '{adjust_lr_fn = "match_rms_adamw", weight_decay = 0.02}',
     {"adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.02}),
    ("nesterov=False, momentum=0.3, maximize, ns_steps=3",
     "{nesterov = false, momentum = 0.3, maximize, ns_steps = 3}",
     {"nesterov": False, "momentum": 0.3, "maximize": True, "ns_steps": 3}),
    ("ns_coefficients=(2, -1.5, 0.5), eps=0.5",
     "{ns_coefficients = array<f64: 2.0, -1.5, 0.5>, eps = 0.5}",
     {"ns_coefficients": (2.0, -1.5, 0.5), "eps": 0.5}),
    ("ns_dtype=bf16", "{ns_dtype = bf16}", {"ns_dtype": torch.bfloat16}),
]


def lr_at(k):
    return 0.02 * (1.0 + 0.5 * np.cos(0.7 * k))


def newton_schulz(g, dtype, steps, coefficients, eps):
    """torch.optim.Muon's _zeropower_via_newtonschulz, in `dtype`."""
    a, b, c = coefficients
    x = g.to(dtype)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, update, x, beta=a)
    return x.T if tall else x


def muon_step(p, grad, buf, lr, dtype, momentum=0.95, nesterov=True, weight_decay=0.1,
              eps=1e-7, ns_steps=5, ns_coefficients=COEFFICIENTS, adjust_lr_fn="original",
              maximize=False, ns_dtype=None):
    """One update of torch.optim.Muon (single tensor) on `p`, `buf` in place;
    products in `dtype` (ns_dtype where given and `dtype` is not float64)."""
    g = -grad if maximize else grad
    buf.lerp_(g, 1 - momentum)
    update = g.lerp(buf, momentum) if nesterov else buf
    rows = p.shape[0]
    cols = p.numel() // rows
    ns = ns_dtype if ns_dtype is not None and dtype != torch.float64 else dtype
    x = newton_schulz(update.reshape(rows, cols), ns, ns_steps, ns_coefficients, eps)
    if adjust_lr_fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, cols))
    else:
        ratio = math.sqrt(max(1, rows / cols))
    p.mul_(1 - lr * weight_decay)
    p.add_(x.reshape(p.shape).to(p.dtype), alpha=-lr * ratio)


def step_module(attrs):
    types = ["tensor<" + "x".join(map(str, s)) + "xf32>" for s in SHAPES]
    args = [f"%p{i}: {t}" for i, t in enumerate(types)]
    args += [f"%g{i}: {t}" for i, t in enumerate(types)]
    args += [f"%b{i}: {t}" for i, t in enumerate(types)]
    body = [f"  %r{i}, %s{i} = distopt.muon_update %p{i}, %g{i} state(%b{i}) lr(%lr) step(%t) "
            f"{attrs} : {t}, f64" for i, t in enumerate(types)]
    results = [f"%r{i}" for i in range(len(types))] + [f"%s{i}" for i in range(len(types))]
    out = ", ".join(types + types)
    return (f"func.func @step({', '.join(args)}, %lr: f64, %t: i64) -> ({out}) {{\n"
            + "\n".join(body) + f"\n  return {', '.join(results)} : {out}\n}}\n")


def main():
    distopt_compile, runtime_lib = sys.argv[1:3]
    lowering = os.environ.get("DISTOPT_TEST_LOWERING")
    compile_options = ([f"--lowering={lowering.lstrip('-')}{{runtime-allocator=true}}"]
                       if lowering else [])
    torch.set_num_threads(1)
    rng = np.random.default_rng(41)
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        for index, (label, attrs, options) in enumerate(CONFIGS):
            p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
            grads = [[(rng.standard_normal(s) * 10.0 ** rng.integers(-2, 1)).astype(np.float32)
                      for s in SHAPES] for _ in range(STEPS)]
            want = {}
            for dtype in (torch.float64, torch.float32):
                params = [torch.tensor(p, dtype=dtype) for p in p0]
                bufs = [torch.zeros(s, dtype=dtype) for s in SHAPES]
                for k in range(STEPS):
                    for p, g, b in zip(params, grads[k], bufs):
                        muon_step(p, torch.tensor(g, dtype=dtype), b, lr_at(k + 1), dtype,
                                  **options)
                want[dtype] = [t.numpy() for t in params + bufs]
            # What float32 iterations would give, where they are not asked for.
            plain = None
            if "ns_dtype" in options:
                params = [torch.tensor(p) for p in p0]
                bufs = [torch.zeros(s) for s in SHAPES]
                f32_options = {k: v for k, v in options.items() if k != "ns_dtype"}
                for k in range(STEPS):
                    for p, g, b in zip(params, grads[k], bufs):
                        muon_step(p, torch.tensor(g), b, lr_at(k + 1), torch.float32,
                                  **f32_options)
                plain = [t.numpy() for t in params]

            step = CompiledStep.compile(distopt_compile, runtime_lib, step_module(attrs), tmp,
                                        name=f"muon{index}", options=compile_options)
            current = [p.copy() for p in p0] + [np.zeros(s, np.float32) for s in SHAPES]
            n = len(SHAPES)
            for k in range(STEPS):
                out = step(current[:n] + [g.copy() for g in grads[k]] + current[n:]
                           + [lr_at(k + 1), k + 1])
                current = [o.copy() for o in out]
            names = [f"param{s}" for s in SHAPES] + [f"momentum_buffer{s}" for s in SHAPES]
            exact, torch32 = want[torch.float64], want[torch.float32]
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
                if plain is not None and i < n:
                    f32 = float(np.max(np.abs(plain[i].astype(np.float64) - exact[i])))
                    if ours < 10 * f32:
                        bad.append(f"{name} (error {ours:.3g}: not bf16's, f32 gives {f32:.3g})")
            tally.check(not bad, f"Muon({label}): within the bound over {STEPS} steps "
                        f"(worst error / bound {worst:.2f})"
                        + (f"; differs: {', '.join(bad)}" if bad else ""))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
