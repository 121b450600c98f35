"""Upstream shard programs, converted with --convert-shard-to-distopt, lowered
for CPUs and run on 4 ranks (and 6, for 2x3 and 3x2 grids) under mpirun:
every rank's result must equal what the shard dialect defines, computed here
with NumPy from the global data. Collectives over some of a grid's axes run
on process groups split from the world.

Each case is a function in the shard dialect (the matmul one as upstream's
--shard-partition leaves it). A generated @main takes this rank's slice of
stacked per-rank inputs, calls it, and all-gathers the ranks' results to rank
0, which prints them. Inputs are small integers, so every sum is exact and
results are compared bit for bit.

usage: shard_to_distopt.py OPT RUNNER MLIR_LIB_DIR RUNTIME_LIB MPIRUN
"""
import os
import shlex
import subprocess
import sys

import numpy as np

import mlir_exec

RANKS = 4


def tensor_type(shape, dtype="f32"):
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def main_func(grid, axes, inputs, result_shape, result_dtype="f32", ranks=RANKS):
    """@main: this rank's slice of each stacked input, @f, then the results
    gathered to rank 0 and printed. `inputs`: (per-rank arrays, dtype)."""
    axes_text = ", ".join(map(str, axes))
    lines = ["func.func @main() {",
             f"  %rank = shard.process_linear_index on @{grid} : index",
             "  %zero = arith.constant 0 : index"]
    args, arg_types = [], []
    for i, (per_rank, dtype) in enumerate(inputs):
        stacked = np.stack(per_rank)
        shape = stacked.shape[1:]
        zeros = ", ".join(["0"] * len(shape))
        ones = ", ".join(["1"] * (len(shape) + 1))
        sizes = ", ".join(map(str, shape))
        lines += [
            f"  %all{i} = arith.constant {mlir_exec.dense(stacked, dtype)}",
            f"  %s{i} = tensor.extract_slice %all{i}[%rank, {zeros}] [1, {sizes}] [{ones}]"
            f" : {tensor_type(stacked.shape, dtype)} to {tensor_type(shape, dtype)}"]
        args.append(f"%s{i}")
        arg_types.append(tensor_type(shape, dtype))
    rtype = tensor_type(result_shape, result_dtype)
    one = [1, *result_shape]
    gathered = [ranks, *result_shape]
    groups = "[[0, 1]" + "".join(f", [{d + 2}]" for d in range(len(result_shape) - 1)) + "]"
    lines += [
        f"  %r = func.call @f({', '.join(args)}) : ({', '.join(arg_types)}) -> {rtype}",
        f"  %r1 = tensor.expand_shape %r {groups} output_shape {one}"
        f" : {rtype} into {tensor_type(one, result_dtype)}",
        f"  %all = shard.all_gather %r1 on @{grid} grid_axes = [{axes_text}] gather_axis = 0"
        f" : {tensor_type(one, result_dtype)} -> {tensor_type(gathered, result_dtype)}",
        "  %is0 = arith.cmpi eq, %rank, %zero : index",
        "  scf.if %is0 {",
        *["  " + line for line in mlir_exec.print_bits("out", "%all", gathered, result_dtype)],
        "  }",
        "  return",
        "}",
        mlir_exec.PRINT_DECL]
    return "\n".join(lines)


def ints(rng, shape, rank):
    return (rng.integers(-8, 9, size=shape) + 16 * rank).astype(np.float32)


def cases(opt, matmul_input):
    rng = np.random.default_rng(7)

    # Upstream's partitioning of a matmul split along its contraction dim.
    a = rng.integers(-4, 5, size=(8, 16)).astype(np.float32)
    b = rng.integers(-4, 5, size=(16, 8)).astype(np.float32)
    partitioned = subprocess.run(
        [opt, matmul_input,
         "--pass-pipeline=builtin.module(func.func(sharding-propagation,shard-partition))"],
        check=True, capture_output=True, text=True).stdout
    body = partitioned.strip()
    assert body.startswith("module {") and body.endswith("}")
    body = body[len("module {"):-1].replace("@matmul", "@f")
    text = body + main_func("grid", [0], [([a[:, 4 * r:4 * r + 4] for r in range(RANKS)], "f32"),
                                          ([b[4 * r:4 * r + 4] for r in range(RANKS)], "f32")], [8, 8])
    yield "matmul split along k (upstream partition): all_reduce sum", text, [a @ b] * RANKS, [8, 8]

    # A 2-D program: a tensor-parallel MLP layer (Z = X W1 W2, W1 split by
    # columns and W2 by rows over axis 1) and a data-parallel gradient
    # (G = X^T (X W1), the batch split over axis 0), as upstream's
    # propagation and partitioning leave it: collectives over one axis each.
    # Against the unpartitioned program: rank (d, t) holds Z's rows of d and
    # G's columns of t.
    x = rng.integers(-4, 5, size=(8, 16)).astype(np.float32)
    w1 = rng.integers(-4, 5, size=(16, 8)).astype(np.float32)
    w2 = rng.integers(-4, 5, size=(8, 16)).astype(np.float32)
    partitioned = subprocess.run(
        [opt, os.path.join(os.path.dirname(matmul_input), "shard-mlp-2d.mlir"),
         "--pass-pipeline=builtin.module(func.func(sharding-propagation,shard-partition))"],
        check=True, capture_output=True, text=True).stdout.strip()
    body = partitioned[len("module {"):-1]
    slices = [([x[4 * (r // 2):4 * (r // 2) + 4] for r in range(RANKS)], "f32"),
              ([w1[:, 4 * (r % 2):4 * (r % 2) + 4] for r in range(RANKS)], "f32"),
              ([w2[4 * (r % 2):4 * (r % 2) + 4] for r in range(RANKS)], "f32")]
    sig = "(%x: tensor<4x16xf32>, %w1: tensor<16x4xf32>, %w2: tensor<4x16xf32>)"
    call = ("  %z, %g = func.call @mlp(%x, %w1, %w2) : (tensor<4x16xf32>, tensor<16x4xf32>,"
            " tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<16x4xf32>)\n")
    z, g = x @ w1 @ w2, x.T @ (x @ w1)
    yield ("2x2 data x tensor parallel MLP (upstream partition): the layer's output",
           body + f"func.func @f{sig} -> tensor<4x16xf32> {{\n{call}  return %z : tensor<4x16xf32>\n}}\n"
           + main_func("grid", [0, 1], slices, [4, 16]),
           [z[4 * (r // 2):4 * (r // 2) + 4] for r in range(RANKS)], [4, 16])
    yield ("2x2 data x tensor parallel MLP (upstream partition): the data-parallel gradient",
           body + f"func.func @f{sig} -> tensor<16x4xf32> {{\n{call}  return %g : tensor<16x4xf32>\n}}\n"
           + main_func("grid", [0, 1], slices, [16, 4]),
           [g[:, 4 * (r % 2):4 * (r % 2) + 4] for r in range(RANKS)], [16, 4])

    x = [ints(rng, (4, 8), r) for r in range(RANKS)]
    grid2 = "shard.grid @grid(shape = 2x2)\n"
    f = ("func.func @f(%x: tensor<4x8xf32>) -> tensor<4x32xf32> {\n"
         "  %y = shard.all_gather %x on @grid grid_axes = [0, 1] gather_axis = 1"
         " : tensor<4x8xf32> -> tensor<4x32xf32>\n"
         "  return %y : tensor<4x32xf32>\n}\n")
    yield ("2x2 grid: all_gather along axis 1", grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [4, 32]),
           [np.concatenate(x, axis=1)] * RANKS, [4, 32])

    y = [ints(rng, (2, 8), r) * 4 for r in range(RANKS)]
    f = ("func.func @f(%x: tensor<2x8xf32>) -> tensor<2x2xf32> {\n"
         "  %y = shard.reduce_scatter %x on @grid grid_axes = [0] reduction = average scatter_axis = 1"
         " : tensor<2x8xf32> -> tensor<2x2xf32>\n"
         "  return %y : tensor<2x2xf32>\n}\n")
    mean = sum(y) / np.float32(RANKS)
    yield ("1-D grid: reduce_scatter average along axis 1",
           "shard.grid @grid(shape = 4)\n" + f + main_func("grid", [0], [(y, "f32")], [2, 2]),
           [mean[:, 2 * r:2 * r + 2] for r in range(RANKS)], [2, 2])

    f = ("func.func @f(%x: tensor<4x8xf32>) -> tensor<4x2xf32> {\n"
         "  %y = shard.all_slice %x on @grid grid_axes = [0, 1] slice_axis = 1"
         " : tensor<4x8xf32> -> tensor<4x2xf32>\n"
         "  return %y : tensor<4x2xf32>\n}\n")
    yield ("2x2 grid: all_slice along axis 1", grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [4, 2]),
           [x[r][:, 2 * r:2 * r + 2] for r in range(RANKS)], [4, 2])

    f = ("func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {\n"
         "  %y = shard.broadcast %x on @grid grid_axes = [1, 0] root = [1, 0]"
         " : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"
         "  return %y : tensor<4x8xf32>\n}\n")
    yield ("2x2 grid: broadcast from root [1, 0] over axes [1, 0] (rank 1)",
           grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [4, 8]), [x[1]] * RANKS, [4, 8])

    h = [rng.integers(-8, 9, size=(6,)).astype(np.float16) for r in range(RANKS)]
    f = ("func.func @f(%x: tensor<6xf16>) -> tensor<6xf32> {\n"
         "  %y = shard.all_reduce %x on @grid grid_axes = [1, 0] reduction = max"
         " : tensor<6xf16> -> tensor<6xf32>\n"
         "  return %y : tensor<6xf32>\n}\n")
    yield ("2x2 grid: all_reduce max, f16 accumulated in f32",
           grid2 + f + main_func("grid", [0, 1], [(h, "f16")], [6]),
           [np.max(np.stack(h), axis=0).astype(np.float32)] * RANKS, [6])

    f = ("func.func @f(%x: tensor<1xf32>) -> tensor<3xf32> {\n"
         "  %i:2 = shard.process_multi_index on @grid : index, index\n"
         "  %l = shard.process_linear_index on @grid : index\n"
         "  %t = tensor.from_elements %i#0, %i#1, %l : tensor<3xindex>\n"
         "  %y = arith.index_cast %t : tensor<3xindex> to tensor<3xi32>\n"
         "  %z = arith.sitofp %y : tensor<3xi32> to tensor<3xf32>\n"
         "  return %z : tensor<3xf32>\n}\n")
    dummy = [np.zeros((1,), np.float32)] * RANKS
    yield ("2x2 grid: process_multi_index and process_linear_index",
           grid2 + f + main_func("grid", [0, 1], [(dummy, "f32")], [3]),
           [np.array([r // 2, r % 2, r], np.float32) for r in range(RANKS)], [3])


def sub_grid_cases(rng):
    """Collectives over some of a grid's axes (process groups), at 4 and 6
    ranks. Yields (name, text, per-rank expected, shape, ranks)."""
    x = [ints(rng, (4, 6), r) for r in range(4)]
    grid2 = "shard.grid @grid(shape = 2x2)\n"

    def rows_of(r, cols):  # the ranks of r's row (same axis-0 index)
        return [r // cols * cols + j for j in range(cols)]

    def cols_of(r, rows, cols):  # the ranks of r's column
        return [i * cols + r % cols for i in range(rows)]

    def body(sig, *lines):
        return f"func.func @f{sig} {{\n" + "".join(f"  {l}\n" for l in lines) + "}\n"

    f = body("(%x: tensor<4x6xf32>) -> tensor<4x6xf32>",
             "%y = shard.all_reduce %x on @grid grid_axes = [1] : tensor<4x6xf32> -> tensor<4x6xf32>",
             "return %y : tensor<4x6xf32>")
    yield ("2x2 grid: all_reduce sum over axis 1 (rows)",
           grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [4, 6]),
           [sum(x[q] for q in rows_of(r, 2)) for r in range(4)], [4, 6], 4)

    f = body("(%x: tensor<4x6xf32>) -> tensor<4x12xf32>",
             "%y = shard.all_gather %x on @grid grid_axes = [0] gather_axis = 1 : tensor<4x6xf32> -> tensor<4x12xf32>",
             "return %y : tensor<4x12xf32>")
    yield ("2x2 grid: all_gather over axis 0 (columns) along tensor axis 1",
           grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [4, 12]),
           [np.concatenate([x[q] for q in cols_of(r, 2, 2)], axis=1) for r in range(4)], [4, 12], 4)

    f = body("(%x: tensor<4x6xf32>) -> tensor<4x6xf32>",
             "%y = shard.broadcast %x on @grid grid_axes = [0] root = [1] : (tensor<4x6xf32>) -> tensor<4x6xf32>",
             "return %y : tensor<4x6xf32>")
    yield ("2x2 grid: broadcast over axis 0 from root [1]",
           grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [4, 6]),
           [x[2 + r % 2] for r in range(4)], [4, 6], 4)

    f = body("(%x: tensor<4x6xf32>) -> tensor<4x3xf32>",
             "%y = shard.all_slice %x on @grid grid_axes = [0] slice_axis = 1 : tensor<4x6xf32> -> tensor<4x3xf32>",
             "return %y : tensor<4x3xf32>")
    yield ("2x2 grid: all_slice over axis 0 along tensor axis 1",
           grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [4, 3]),
           [x[r][:, 3 * (r // 2):3 * (r // 2) + 3] for r in range(4)], [4, 3], 4)

    f = body("(%x: tensor<4x6xf32>) -> tensor<16x6xf32>",
             "%y = shard.all_gather %x on @grid grid_axes = [1, 0] gather_axis = 0 : tensor<4x6xf32> -> tensor<16x6xf32>",
             "return %y : tensor<16x6xf32>")
    yield ("2x2 grid: all_gather over axes [1, 0] (ranks in column-major order)",
           grid2 + f + main_func("grid", [0, 1], [(x, "f32")], [16, 6]),
           [np.concatenate([x[0], x[2], x[1], x[3]])] * 4, [16, 6], 4)

    # 6 ranks: both axes of 2x3 and 3x2 grids, one collective after another.
    x6 = [ints(rng, (6, 4), r) for r in range(6)]
    f = body("(%x: tensor<6x4xf32>) -> tensor<12x4xf32>",
             "%s = shard.all_reduce %x on @grid grid_axes = [1] : tensor<6x4xf32> -> tensor<6x4xf32>",
             "%y = shard.all_gather %s on @grid grid_axes = [0] gather_axis = 0 : tensor<6x4xf32> -> tensor<12x4xf32>",
             "return %y : tensor<12x4xf32>")
    row_sums = [sum(x6[q] for q in rows_of(r, 3)) for r in range(6)]
    yield ("2x3 grid: all_reduce over axis 1, then all_gather over axis 0",
           "shard.grid @grid(shape = 2x3)\n" + f
           + main_func("grid", [0, 1], [(x6, "f32")], [12, 4], ranks=6),
           [np.concatenate([row_sums[0], row_sums[3]])] * 6, [12, 4], 6)

    f = body("(%x: tensor<6x4xf32>) -> tensor<4x4xf32>",
             "%s = shard.reduce_scatter %x on @grid grid_axes = [0] scatter_axis = 0 : tensor<6x4xf32> -> tensor<2x4xf32>",
             "%y = shard.all_gather %s on @grid grid_axes = [1] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>",
             "return %y : tensor<4x4xf32>")
    col_sums = [sum(x6[q] for q in cols_of(j, 3, 2)) for j in range(2)]
    yield ("3x2 grid: reduce_scatter over axis 0, then all_gather over axis 1",
           "shard.grid @grid(shape = 3x2)\n" + f
           + main_func("grid", [0, 1], [(x6, "f32")], [4, 4], ranks=6),
           [np.concatenate([col_sums[0][2 * (r // 2):2 * (r // 2) + 2],
                            col_sums[1][2 * (r // 2):2 * (r // 2) + 2]]) for r in range(6)],
           [4, 4], 6)


def main():
    opt, runner, libdir, rtlib, mpirun, matmul_input = sys.argv[1:]
    tally = mlir_exec.Tally()
    all_cases = [(*case, RANKS) for case in cases(opt, matmul_input)]
    all_cases += list(sub_grid_cases(np.random.default_rng(11)))
    for name, text, expected, shape, ranks in all_cases:
        launcher = [*shlex.split(mpirun), "-np", str(ranks)]
        converted = subprocess.run(
            [opt, "--pass-pipeline=builtin.module(convert-shard-to-distopt,canonicalize)"],
            input=text, capture_output=True, text=True)
        if converted.returncode != 0:
            raise RuntimeError(f"conversion failed:\n{converted.stderr}\non:\n{text}")
        if "shard." in converted.stdout:
            raise RuntimeError(f"shard ops left after conversion:\n{converted.stdout}")
        (got,) = mlir_exec.run(opt, runner, libdir, converted.stdout, [[ranks, *shape]],
                               extra_libs=[rtlib], launcher=launcher)
        want = np.stack(expected).astype(np.float32)
        ok = got.tobytes() == want.tobytes()
        detail = "" if ok else f"\n  got  {got.ravel()[:8]}\n  want {want.ravel()[:8]}"
        tally.check(ok, f"{name}: every rank bit-identical to the definition{detail}")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
