"""Averaging bf16 gradients in f32 (--distopt-widen-reductions) rounds once.

A step averages a bf16 gradient over the ranks and hands the average on in
f32, as the gradient of an fp32 main parameter is handed on. It is compiled
as it is and through --distopt-widen-reductions and run under mpirun at 2, 4
and 8 ranks, for a gradient of 2048 elements (recursive doubling) and one
of 40000 (80 KB: the ring). The gradients are bf16 values of magnitude 1/16
to 16, so any sum of 8 of them is exact in f32, and the exact mean (in f64)
is the reference:
  - widened: the exact mean rounded to f32, every element;
  - as it is: at 2 ranks the correctly rounded bf16 of the mean (one
    rounding: the sum, then an exact halving); from 4 ranks on each hop
    rounds a partial sum to bf16, and some elements must be off (that is the
    error the pass removes; this is also what shows the check can fail). The
    largest error is printed, in bf16 ulps of the mean (where the mean is at
    least 1/16: cancellation makes the ulps of a tiny mean meaningless).

usage: reduce_precision.py OPT RUNNER MLIR_LIB_DIR RUNTIME_LIB MPIRUN
"""
import shlex
import subprocess
import sys

import numpy as np

import mlir_exec


def hex_dense(values_bf16, shape):
    """A dense attribute of bf16 values (float32 holding bf16 values), in
    MLIR's hex form: the raw little-endian bytes, fast to parse when large."""
    bits = (np.asarray(values_bf16, np.float32).view(np.uint32) >> 16).astype("<u2")
    t = "x".join(map(str, shape))
    return f'dense<"0x{bits.tobytes().hex().upper()}"> : tensor<{t}xbf16>'


def program(ranks, grads):
    n = grads.shape[1]
    return "\n".join([
        f"distopt.process_group @world size {ranks}", mlir_exec.PRINT_DECL,
        f"func.func @step(%g: tensor<{n}xbf16>) -> tensor<{n}xf32> {{",
        f"  %r = distopt.all_reduce avg %g on @world : tensor<{n}xbf16>",
        f"  %r32 = arith.extf %r : tensor<{n}xbf16> to tensor<{n}xf32>",
        f"  return %r32 : tensor<{n}xf32>",
        "}",
        "func.func @main() {",
        "  %rank = distopt.rank @world : index",
        "  %zero = arith.constant 0 : index",
        f"  %all = arith.constant {hex_dense(grads, grads.shape)}",
        f"  %g = tensor.extract_slice %all[%rank, 0] [1, {n}] [1, 1]"
        f" : tensor<{ranks}x{n}xbf16> to tensor<{n}xbf16>",
        f"  %mean = func.call @step(%g) : (tensor<{n}xbf16>) -> tensor<{n}xf32>",
        "  %first = arith.cmpi eq, %rank, %zero : index",
        "  scf.if %first {",
        *["  " + line for line in mlir_exec.print_bits("mean", "%mean", [n])],
        "  }",
        "  return",
        "}"]) + "\n"


def bf16_ulp(x):
    """The spacing of bf16 numbers at |x| (8 significant bits)."""
    exponent = np.floor(np.log2(np.abs(x)))
    return np.exp2(exponent - 7)


def main():
    opt, runner, libdir, rtlib, mpirun = sys.argv[1:6]
    rng = np.random.default_rng(11)
    tally = mlir_exec.Tally()
    for ranks in (2, 4, 8):
        launcher = [*shlex.split(mpirun), "-np", str(ranks)]
        for n in (2048, 40000):
            magnitude = np.exp2(rng.uniform(-4, 4, size=(ranks, n)))
            sign = rng.choice([-1.0, 1.0], size=(ranks, n))
            grads = mlir_exec.bf16(sign * magnitude)
            exact = grads.astype(np.float64).mean(axis=0)
            text = program(ranks, grads)
            widened = subprocess.run([opt, "--distopt-widen-reductions"], input=text,
                                     check=True, capture_output=True, text=True).stdout
            results = {}
            for name, source in (("as it is", text), ("widened", widened)):
                (results[name],) = mlir_exec.run(opt, runner, libdir, source, [[n]],
                                                 extra_libs=[rtlib], launcher=launcher)
            where = f"{ranks} ranks, {n} elements"
            got = results["widened"]
            tally.check(np.array_equal(got, exact.astype(np.float32)),
                        f"{where}: widened: the exact mean rounded to f32, every element")
            plain = results["as it is"]
            rounded_once = mlir_exec.bf16(exact.astype(np.float32))
            off = int(np.count_nonzero(plain != rounded_once))
            # Where the ranks' values cancel, the mean is tiny and any error
            # huge in its ulps: the figure leaves those out.
            kept = np.abs(exact) >= 1 / 16
            worst = float(np.max(np.abs(plain - exact)[kept] / bf16_ulp(exact[kept])))
            print(f"# {where}: in bf16, {off} of {n} elements not the rounded mean, "
                  f"largest error {worst:.2f} bf16 ulps")
            if ranks == 2:
                tally.check(off == 0, f"{where}: in bf16, the rounded mean (one rounding)")
            else:
                tally.check(off > 0 and worst > 0.5,
                            f"{where}: in bf16, rounded at every hop (off in {off} elements)")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
