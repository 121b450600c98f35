"""--distopt-hierarchical-all-reduce, run: a world all_reduce of an N-D
tensor (105 elements: padding to the node size matters), made hierarchical
for nodes of S ranks, lowered for CPUs and run under mpirun, against the same
step left flat and against NumPy. Inputs are small integers, so every sum is
exact whatever its order: the two forms must agree bit for bit (and avg,
divided once in f32, too).

usage: hierarchical_all_reduce.py OPT RUNNER MLIR_LIB_DIR RUNTIME_LIB MPIRUN
"""
import shlex
import subprocess
import sys

import numpy as np

import mlir_exec

SHAPE = (3, 5, 7)


def step(world, reduction, inputs):
    """A module whose @main reduces this rank's slice of `inputs` over the
    world and all-gathers the ranks' results to rank 0, which prints them."""
    n = int(np.prod(SHAPE))
    t = "x".join(map(str, SHAPE))
    stacked = np.stack(inputs)
    return "\n".join([
        f"distopt.process_group @world size {world}",
        f"func.func @f(%x: tensor<{t}xf32>) -> tensor<{t}xf32> {{",
        f"  %y = distopt.all_reduce {reduction} %x on @world : tensor<{t}xf32>",
        f"  return %y : tensor<{t}xf32>",
        "}",
        "func.func @main() {",
        "  %r = distopt.rank @world : index",
        "  %zero = arith.constant 0 : index",
        f"  %all = arith.constant {mlir_exec.dense(stacked)}",
        f"  %x = tensor.extract_slice %all[%r, 0, 0, 0] [1, {', '.join(map(str, SHAPE))}] [1, 1, 1, 1]"
        f" : tensor<{world}x{t}xf32> to tensor<{t}xf32>",
        f"  %y = func.call @f(%x) : (tensor<{t}xf32>) -> tensor<{t}xf32>",
        f"  %flat = tensor.collapse_shape %y [[0, 1, 2]] : tensor<{t}xf32> into tensor<{n}xf32>",
        f"  %g = distopt.all_gather %flat on @world : tensor<{n}xf32> -> tensor<{world * n}xf32>",
        "  %is0 = arith.cmpi eq, %r, %zero : index",
        "  scf.if %is0 {",
        *["  " + line for line in mlir_exec.print_bits("out", "%g", [world * n])],
        "  }",
        "  return",
        "}",
        mlir_exec.PRINT_DECL])


def expected(reduction, inputs, world):
    stack = np.stack(inputs).astype(np.float32)
    if reduction == "sum":
        return stack.sum(axis=0)
    if reduction == "avg":
        return stack.sum(axis=0) / np.float32(world)
    if reduction == "max":
        return stack.max(axis=0)
    if reduction.startswith("premul_sum"):
        return (stack * np.float32(0.5)).sum(axis=0)
    raise ValueError(reduction)


def main():
    opt, runner, libdir, rtlib, mpirun = sys.argv[1:]
    tally = mlir_exec.Tally()
    rng = np.random.default_rng(5)
    cases = [(4, 2, "sum"), (4, 2, "avg"), (4, 2, "max"), (4, 2, "premul_sum(5.000000e-01)"),
             (6, 2, "sum"), (6, 3, "avg")]
    for world, node, reduction in cases:
        inputs = [rng.integers(-50, 51, size=SHAPE).astype(np.float32) for _ in range(world)]
        text = step(world, reduction, inputs)
        split = subprocess.run(
            [opt, f"--distopt-hierarchical-all-reduce=node-size={node} min-bytes=0"],
            input=text, capture_output=True, text=True, check=True).stdout
        rewritten = ("reduce_scatter" in split and "@intra_node" in split
                     and "@inter_node" in split)
        launcher = [*shlex.split(mpirun), "-np", str(world)]
        n = int(np.prod(SHAPE))
        (flat,) = mlir_exec.run(opt, runner, libdir, text, [[world, n]],
                                extra_libs=[rtlib], launcher=launcher)
        (tree,) = mlir_exec.run(opt, runner, libdir, split, [[world, n]],
                                extra_libs=[rtlib], launcher=launcher)
        want = np.stack([expected(reduction, inputs, world).ravel()] * world)
        ok = (rewritten and tree.tobytes() == flat.tobytes()
              and tree.tobytes() == want.tobytes())
        detail = "" if ok else (f"\n  rewritten {rewritten}\n  tree {tree.ravel()[:6]}"
                                f"\n  flat {flat.ravel()[:6]}\n  want {want.ravel()[:6]}")
        tally.check(ok, f"{world} ranks, nodes of {node}: all_reduce {reduction.split('(')[0]}"
                        f" hierarchical = flat = NumPy on every rank{detail}")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
