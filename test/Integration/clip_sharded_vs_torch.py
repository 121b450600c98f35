"""Clipping under ZeRO sharding equals clipping the whole gradients on one rank.

Three gradients are cut into N disjoint flat shards; rank r holds shard r of
each and runs `distopt.clip_grad_norm ... on @world` under mpirun, which
combines the ranks' partial sums (or maxima) before taking the root. The
norm every rank computes and the clipped shards, gathered, are compared with
torch.nn.utils.clip_grad_norm_ on the whole gradients (PyTorch 1.13), at 2
and 4 ranks, norm types 2, inf and 1.5, clipping taking effect or not.

Tolerance: 8 ulp of each value. The partial sums add in another order than
torch's per-tensor norms (each rank sums its shards, then the ranks' sums
are added), so p = 1.5 rounds differently: observed at most 3 ulp (p = 2
is bit-exact here: both accumulate in double).
The maximum (p = inf) is exact.

usage: clip_sharded_vs_torch.py OPT RUNNER MLIR_LIB_DIR RUNTIME_LIB MPIRUN
"""
import shlex
import sys

import numpy as np
import torch

import mlir_exec

SHAPES = [(8, 5), (12,), (4, 2, 3)]
TOLERANCE_ULP = 8


def program(ranks, grads, max_norm, norm_type):
    """@main: this rank's shards, clipped over the group; the norm and the
    clipped shards gathered to rank 0 and printed."""
    attr = "0x7FF0000000000000 : f64" if np.isinf(norm_type) else mlir_exec.mlir_float(norm_type)
    lines = [f"distopt.process_group @world size {ranks}", mlir_exec.PRINT_DECL,
             "func.func @main() {",
             "  %rank = distopt.rank @world : index",
             "  %zero = arith.constant 0 : index"]
    shards, types = [], []
    for i, g in enumerate(grads):
        n = g.size // ranks
        stacked = g.reshape(ranks, n)
        lines += [f"  %all{i} = arith.constant {mlir_exec.dense(stacked)}",
                  f"  %g{i} = tensor.extract_slice %all{i}[%rank, 0] [1, {n}] [1, 1]"
                  f" : tensor<{ranks}x{n}xf32> to tensor<{n}xf32>"]
        shards.append(f"%g{i}")
        types.append(f"tensor<{n}xf32>")
    outs = [f"%c{i}" for i in range(len(grads))]
    lines.append(f"  {', '.join(outs)}, %n = distopt.clip_grad_norm {', '.join(shards)} "
                 f"max_norm {mlir_exec.mlir_float(max_norm)} on @world {{norm_type = {attr}}}"
                 f" : {', '.join(types)} -> f32")
    lines.append("  %nt = tensor.from_elements %n : tensor<1xf32>")
    gathered = [("%nt", 1)] + [(o, g.size // ranks) for o, g in zip(outs, grads)]
    printed = []
    for k, (value, n) in enumerate(gathered):
        lines.append(f"  %a{k} = distopt.all_gather {value} on @world"
                     f" : tensor<{n}xf32> -> tensor<{ranks * n}xf32>")
        printed.append([ranks * n])
    lines += ["  %first = arith.cmpi eq, %rank, %zero : index", "  scf.if %first {"]
    for k, shape in enumerate(printed):
        lines += ["  " + line for line in mlir_exec.print_bits(f"p{k}", f"%a{k}", shape)]
    lines += ["  }", "  return", "}"]
    return "\n".join(lines) + "\n", printed


def main():
    opt, runner, libdir, rtlib, mpirun = sys.argv[1:6]
    rng = np.random.default_rng(11)
    tally = mlir_exec.Tally()
    for ranks in (2, 4):
        launcher = [*shlex.split(mpirun), "-np", str(ranks)]
        for norm_type in (2.0, float("inf"), 1.5):
            for max_norm in (1.0, 1e6):
                grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
                text, shapes = program(ranks, grads, max_norm, norm_type)
                got = mlir_exec.run(opt, runner, libdir, text, shapes,
                                    extra_libs=[rtlib], launcher=launcher)
                params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
                for p, g in zip(params, grads):
                    p.grad = torch.tensor(g)
                total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
                # Every rank's norm; the clipped gradients, reassembled from
                # the shards in rank order.
                want = [np.full(ranks, total.item(), np.float32)]
                want += [p.grad.numpy().reshape(-1) for p in params]
                worst = max(float((np.abs(a.astype(np.float64) - b) / mlir_exec.ulp(b)).max())
                            for a, b in zip(got, want))
                ok = all(np.all(np.abs(a - b) <= TOLERANCE_ULP * mlir_exec.ulp(b))
                         for a, b in zip(got, want))
                clipped = "clipping" if max_norm < 1e3 else "no clipping"
                tally.check(ok, f"{ranks} ranks, norm_type={norm_type}, {clipped}: "
                      f"norm on every rank and clipped shards within {worst:.0f} ulp of torch on the whole gradients")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
