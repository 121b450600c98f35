#!/usr/bin/env python3
"""Every optimizer update, with every option it has, compiled by
distopt-compile (O3, this machine's CPU) and called in process, against
torch.optim (PyTorch 1.13, single-tensor code: foreach=False) from the same
values: a 64x67 parameter (4288 elements: N-D, and not a multiple of any
vector width), a 0-d one and a 1-element one, for 12 steps with a learning
rate that changes every step (a double, as torch keeps it).

Tolerance: none. The lowering computes torch's float32 (or float64)
operations in torch's order, with torch's roundings (add(alpha=) and
addcmul as fused multiply-adds, addcdiv as (v*y)/z; docs/lowering.md), and
the scalars torch computes in Python (bias corrections, step sizes) in
double, so every parameter and state element must be bit-identical.

usage: optimizers_vs_torch.py DISTOPT_COMPILE RUNTIME_LIB
       optimizers_vs_torch.py --runner DISTOPT_OPT MLIR_RUNNER LIB_DIR
The second form lowers with distopt-opt $DISTOPT_TEST_LOWERING (the GPU
split emulated on the CPU: test/GPU/split-on-host.test) and runs the steps
with mlir-runner, from constants.
"""
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compiled_step import CompiledStep  # noqa: E402
from mlir_exec import PRINT_DECL, Tally, dense, print_bits, run  # noqa: E402

STEPS = 12
SHAPES = [(64, 67), (), (1,)]


def lr_at(k):
    """A rate that changes every step, not representable in float32."""
    return 0.01 * (1.0 + 0.5 * np.cos(0.7 * k)) / 3.0


# (torch class, distopt op, torch kwargs, distopt attributes, state keys, dtype)
CONFIGS = [
    ("SGD", "sgd_update", {}, "", [], "f32"),
    ("SGD", "sgd_update", {"momentum": 0.9}, "{momentum = 0.9}", ["momentum_buffer"], "f32"),
    ("SGD", "sgd_update", {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
     "{momentum = 0.9, dampening = 0.1, weight_decay = 0.01}", ["momentum_buffer"], "f32"),
    ("SGD", "sgd_update", {"momentum": 0.8, "nesterov": True, "maximize": True},
     "{momentum = 0.8, nesterov, maximize}", ["momentum_buffer"], "f32"),
    ("SGD", "sgd_update", {"momentum": 0.9, "weight_decay": 0.05},
     "{momentum = 0.9, weight_decay = 0.05}", ["momentum_buffer"], "f64"),
    ("Adam", "adam_update", {}, "", ["exp_avg", "exp_avg_sq"], "f32"),
    ("Adam", "adam_update", {"betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1, "amsgrad": True},
     "{beta1 = 0.8, beta2 = 0.95, eps = 1.0e-6, weight_decay = 0.1, amsgrad}",
     ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"], "f32"),
    ("Adam", "adam_update", {"maximize": True, "eps": 1e-3}, "{maximize, eps = 1.0e-3}",
     ["exp_avg", "exp_avg_sq"], "f32"),
    ("Adam", "adam_update", {"weight_decay": 0.02, "amsgrad": True}, "{weight_decay = 0.02, amsgrad}",
     ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"], "f64"),
    ("AdamW", "adamw_update", {}, "", ["exp_avg", "exp_avg_sq"], "f32"),
    ("AdamW", "adamw_update", {"weight_decay": 0.1, "amsgrad": True, "maximize": True},
     "{weight_decay = 0.1, amsgrad, maximize}", ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"], "f32"),
    ("AdamW", "adamw_update", {"betas": (0.5, 0.9), "eps": 1e-4, "weight_decay": 0.0},
     "{beta1 = 0.5, beta2 = 0.9, eps = 1.0e-4, weight_decay = 0.0}", ["exp_avg", "exp_avg_sq"], "f32"),
    ("RMSprop", "rmsprop_update", {}, "", ["square_avg"], "f32"),
    ("RMSprop", "rmsprop_update", {"alpha": 0.9, "eps": 1e-4, "maximize": True},
     "{alpha = 0.9, eps = 1.0e-4, maximize}", ["square_avg"], "f32"),
    ("RMSprop", "rmsprop_update", {"centered": True}, "{centered}", ["square_avg", "grad_avg"], "f32"),
    ("RMSprop", "rmsprop_update", {"momentum": 0.5}, "{momentum = 0.5}",
     ["square_avg", "momentum_buffer"], "f32"),
    ("RMSprop", "rmsprop_update", {"alpha": 0.9, "momentum": 0.5, "centered": True, "weight_decay": 0.01},
     "{alpha = 0.9, momentum = 0.5, centered, weight_decay = 0.01}",
     ["square_avg", "momentum_buffer", "grad_avg"], "f32"),
    ("RMSprop", "rmsprop_update", {"momentum": 0.3, "centered": True}, "{momentum = 0.3, centered}",
     ["square_avg", "momentum_buffer", "grad_avg"], "f64"),
    ("Adagrad", "adagrad_update", {}, "", ["sum"], "f32"),
    ("Adagrad", "adagrad_update", {"lr_decay": 0.01, "weight_decay": 0.05},
     "{lr_decay = 0.01, weight_decay = 0.05}", ["sum"], "f32"),
    ("Adagrad", "adagrad_update", {"initial_accumulator_value": 0.3, "eps": 1e-6, "maximize": True},
     "{initial_accumulator_value = 0.3, eps = 1.0e-6, maximize}", ["sum"], "f32"),
    ("Adagrad", "adagrad_update", {"initial_accumulator_value": 0.1, "lr_decay": 0.2},
     "{initial_accumulator_value = 0.1, lr_decay = 0.2}", ["sum"], "f64"),
]


def tensor_type(shape, dtype):
    return f"tensor<{'x'.join(map(str, shape)) + 'x' if shape else ''}{dtype}>"


def step_module(op, attrs, nstate, dtype):
    """@step(params..., grads..., state per param..., lr: f64, t: i64)
    -> (params..., state...)."""
    types = [tensor_type(s, dtype) for s in SHAPES]
    n = len(SHAPES)
    args = [f"%p{i}: {t}" for i, t in enumerate(types)]
    args += [f"%g{i}: {t}" for i, t in enumerate(types)]
    args += [f"%s{i}_{j}: {t}" for i, t in enumerate(types) for j in range(nstate)]
    body, outs, out_types = [], [], []
    for i, t in enumerate(types):
        names = [f"%r{i}_{j}" for j in range(1 + nstate)]
        state = f" state({', '.join(f'%s{i}_{j}' for j in range(nstate))})" if nstate else ""
        body.append(f"  {', '.join(names)} = distopt.{op} %p{i}, %g{i}{state} lr(%lr) step(%t) "
                    f"{attrs} : {t}, f64")
        outs.append(names)
    results = [o[0] for o in outs] + [x for o in outs for x in o[1:]]
    out_types = types + [t for t in types for _ in range(nstate)]
    return (f"func.func @step({', '.join(args)}, %lr: f64, %t: i64) -> ({', '.join(out_types)}) {{\n"
            + "\n".join(body) + f"\n  return {', '.join(results)} : {', '.join(out_types)}\n}}\n")


def run_with_runner(tools, text, p0, grads, nstate, dtype):
    """The steps through mlir-runner: @main calls @step on constants and
    prints every result's bits."""
    opt, runner, libdir = tools
    if dtype != "f32":
        return None
    types = [tensor_type(s, dtype) for s in SHAPES]
    lines = [PRINT_DECL, "func.func @main() {"]
    current = []
    for i, p in enumerate(p0):
        lines.append(f"  %p{i} = arith.constant {dense(p.reshape(SHAPES[i]))}")
        current.append(f"%p{i}")
    for i, t in enumerate(types):
        lines.append(f"  %z{i} = arith.constant dense<0.0> : {t}")
        current += [f"%z{i}"] * nstate
    n = len(SHAPES)
    for k, gs in enumerate(grads):
        gnames = []
        for i, g in enumerate(gs):
            lines.append(f"  %g{k}_{i} = arith.constant {dense(g.reshape(SHAPES[i]))}")
            gnames.append(f"%g{k}_{i}")
        lines.append(f"  %lr{k} = arith.constant {lr_at(k + 1)!r} : f64")
        lines.append(f"  %t{k} = arith.constant {k + 1} : i64")
        all_types = types + types + [t for t in types for _ in range(nstate)]
        out_types = types + [t for t in types for _ in range(nstate)]
        lines.append(f"  %o{k}:{len(out_types)} = func.call @step({', '.join(current[:n] + gnames + current[n:])}, "
                     f"%lr{k}, %t{k}) : ({', '.join(all_types)}, f64, i64) -> ({', '.join(out_types)})")
        current = [f"%o{k}#{j}" for j in range(len(out_types))]
    shapes = SHAPES + [s for s in SHAPES for _ in range(nstate)]
    flat = []
    for j, (value, s) in enumerate(zip(current, shapes)):
        count = int(np.prod(s)) if s else 1
        t = tensor_type(s, dtype)
        # Printed as 1-D tensors of their elements.
        if len(s) != 1:
            dims = ", ".join(map(str, range(len(s))))
            reshape = (f"tensor.collapse_shape {value} [[{dims}]] : {t} into tensor<{count}xf32>" if s
                       else f"tensor.expand_shape {value} [] output_shape [1] : {t} into tensor<1xf32>")
            lines.append(f"  %flat{j} = {reshape}")
            value = f"%flat{j}"
        lines += print_bits(f"out{j}", value, (count,))
        flat.append((count,))
    lines += ["  return", "}"]
    got = run(opt, runner, libdir, text + "\n".join(lines) + "\n", flat)
    return [g.reshape(s) for g, s in zip(got, shapes)]


def main():
    runner_tools = None
    if sys.argv[1] == "--runner":
        runner_tools = sys.argv[2:5]
    else:
        distopt_compile, runtime_lib = sys.argv[1:3]
    torch.set_num_threads(1)
    rng = np.random.default_rng(2026)
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        for index, (cls, op, kwargs, attrs, keys, dtype) in enumerate(CONFIGS):
            np_type = np.float32 if dtype == "f32" else np.float64
            p0 = [rng.standard_normal(s).astype(np_type) for s in SHAPES]
            # Small and large gradients, and exact zeros: every branch of the
            # arithmetic (and parameters near zero, where an ulp is small).
            grads = []
            for k in range(STEPS):
                gs = []
                for s in SHAPES:
                    g = np.asarray(rng.standard_normal(s) * (10.0 ** rng.integers(-3, 2, size=s)))
                    g[np.asarray(rng.random(s) < 0.05)] = 0.0
                    gs.append(np.asarray(g, dtype=np_type))
                grads.append(gs)
            params = [torch.nn.Parameter(torch.tensor(p)) for p in p0]
            optim = getattr(torch.optim, cls)(params, lr=lr_at(1), foreach=False, **kwargs)
            for k in range(STEPS):
                for group in optim.param_groups:
                    group["lr"] = lr_at(k + 1)
                for p, g in zip(params, grads[k]):
                    p.grad = torch.tensor(g)
                optim.step()
            want = [p.detach().numpy() for p in params]
            want += [optim.state[p][key].numpy() for p in params for key in keys]

            text = step_module(op, attrs, len(keys), dtype)
            if runner_tools:
                current = run_with_runner(runner_tools, text, p0, grads, len(keys), dtype)
                if current is None:
                    continue  # the runner path prints f32 only
            else:
                step = CompiledStep.compile(distopt_compile, runtime_lib, text, tmp,
                                            name=f"step{index}")
                current = [p.copy() for p in p0]
                # State starts at zero (Adagrad's sum at its initial value, and
                # SGD's momentum at the first gradient, both inside the update).
                current += [np.zeros(s, np_type) for s in SHAPES for _ in keys]
                n = len(SHAPES)
                for k in range(STEPS):
                    out = step(current[:n] + [g.copy() for g in grads[k]]
                               + current[n:] + [lr_at(k + 1), k + 1])
                    current = [o.copy() for o in out]
            names = [f"param{s}" for s in SHAPES] + [f"{key}{s}" for s in SHAPES for key in keys]
            bad = [name for name, a, b in zip(names, current, want)
                   if a.shape != b.shape or a.tobytes() != b.tobytes()]
            label = f"{cls}({', '.join(f'{k}={v}' for k, v in kwargs.items())}) {dtype}"
            tally.check(not bad, f"{label}: bit-identical over {STEPS} steps"
                        + (f"; differs: {', '.join(bad)}" if bad else ""))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
