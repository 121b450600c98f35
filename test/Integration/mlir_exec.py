"""Shared by the integration tests: build MLIR constants, lower a module with
distopt-lower-to-cpu, run its @main with mlir-runner, and read back the
tensors it printed with printMemrefI32 (bit patterns: exact)."""
import os
import re
import subprocess
import tempfile

import numpy as np


def mlir_float(v):
    """A float literal MLIR parses (it needs a '.' before any exponent)."""
    return f"{float(v):.17e}"


def dense(values, dtype="f32"):
    """A dense attribute for a float array (printed exactly)."""
    array = np.asarray(values, dtype=np.float64)

    def literal(v):
        if np.isfinite(v):
            return repr(float(v))
        # MLIR spells infinities and NaNs as bit patterns.
        if dtype == "f32":
            return hex(int(np.array(v, dtype=np.float32).view(np.uint32)))
        if dtype == "bf16":
            return hex(int(np.array(v, dtype=np.float32).view(np.uint32)) >> 16)
        return hex(int(np.array(v, dtype=np.float16).view(np.uint16)))

    def nest(a):
        if a.ndim == 0:
            return literal(a)
        if a.ndim == 1:
            return "[" + ", ".join(literal(v) for v in a) + "]"
        return "[" + ", ".join(nest(sub) for sub in a) + "]"

    shape = "".join(f"{d}x" for d in array.shape)
    return f"dense<{nest(array)}> : tensor<{shape}{dtype}>"


def bf16(values):
    """float32 values rounded to the nearest bf16 (ties to even), as float32."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32)


def print_bits(name, value, shape, dtype="f32"):
    """MLIR lines printing `value` (a tensor of `shape`) as i32 bit patterns,
    widening bf16/f16 to f32 (exactly) first."""
    t = "x".join(map(str, shape))
    lines = []
    if dtype != "f32":
        lines.append(f"  %{name}_w = arith.extf {value} : tensor<{t}x{dtype}> to tensor<{t}xf32>")
        value = f"%{name}_w"
    lines += [f"  %{name}_b = arith.bitcast {value} : tensor<{t}xf32> to tensor<{t}xi32>",
              f"  %{name}_m = bufferization.to_buffer %{name}_b : tensor<{t}xi32> to memref<{t}xi32>",
              f"  %{name}_u = memref.cast %{name}_m : memref<{t}xi32> to memref<*xi32>",
              # func.call, not call: also valid inside scf regions.
              f"  func.call @printMemrefI32(%{name}_u) : (memref<*xi32>) -> ()"]
    return lines


PRINT_DECL = "func.func private @printMemrefI32(memref<*xi32>)"


# The lowering the integration tests run; test/Integration/gpu-split-on-host.test
# runs them again through the GPU lowering's split, emulated on the CPU.
LOWERING = os.environ.get("DISTOPT_TEST_LOWERING", "--distopt-lower-to-cpu")


def run(opt, runner, libdir, text, shapes, pipeline=None,
        extra_libs=(), launcher=()):
    """Lowers and runs `text` (`extra_libs`: e.g. the runtime, for steps with
    collectives; `launcher`: e.g. mpirun -np N, with the ranks' output in
    print order of one rank); returns the printed tensors as float32 arrays
    of the given `shapes`, in print order."""
    pipeline = pipeline or LOWERING
    lowering = subprocess.run([opt, pipeline], input=text, capture_output=True, text=True)
    if lowering.returncode != 0:
        raise RuntimeError(f"{opt} {pipeline} failed:\n{lowering.stderr}\non:\n{text}")
    libs = [f"{libdir}/libmlir_runner_utils.so", f"{libdir}/libmlir_c_runner_utils.so",
            *extra_libs]
    # A file, not stdin: under mpirun only rank 0 would read stdin.
    with tempfile.NamedTemporaryFile("w", suffix=".mlir") as lowered:
        lowered.write(lowering.stdout)
        lowered.flush()
        out = subprocess.run(
            [*launcher, runner, lowered.name, "-e", "main", "-entry-point-result=void",
             "-shared-libs=" + ",".join(libs)],
            check=True, capture_output=True, text=True).stdout
    tensors = []
    for block, shape in zip(out.split("Unranked Memref")[1:], shapes):
        data = block[block.index("data =") + 6:]
        n = int(np.prod(shape))
        ints = [int(x) for x in re.findall(r"-?\d+", data)][:n]
        tensors.append(np.array(ints, dtype=np.int32).view(np.float32).reshape(shape))
    return tensors


def ulp(x):
    x = np.abs(np.asarray(x, dtype=np.float32))
    return np.spacing(np.maximum(x, np.float32(1e-30)))


class Tally:
    """Counts checks, printing `PASS: text` or `FAIL: text` for each, and
    `N passed, M failed` at the end (what the .test files FileCheck)."""

    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, text):
        print(f"{'PASS' if ok else 'FAIL'}: {text}")
        self.passed += bool(ok)
        self.failed += not ok

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
