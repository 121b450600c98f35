"""f64 -> bf16 in compiled code rounds once, to nearest even, and loads.

LLVM calls __truncdfbf2 for this conversion, which Debian 12's libgcc lacks;
--distopt-expand-bf16-truncations (in the CPU lowering) rounds to f32 to odd
and then to bf16 instead. A step truncates a tensor of f64 values to bf16;
it is lowered, run with mlir-runner, and each result is compared with the
correctly rounded value, computed exactly with fractions: ordinary values
over the whole exponent range, subnormals, overflow, signed zeros,
infinities, and values just above and below half way between two bf16
numbers, where rounding to f32 first would round twice and go wrong.

usage: f64_to_bf16.py OPT RUNNER MLIR_LIB_DIR
"""
import math
import struct
import sys
from fractions import Fraction

import numpy as np

import mlir_exec

BF16_MAX = Fraction(255, 128) * 2 ** 127  # largest finite bf16


def bf16_of(x):
    """x rounded to the nearest bf16 (ties to even), as a float, exactly."""
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    exponent = math.frexp(abs(x))[1]  # |x| = m * 2^exponent, m in [1/2, 1)
    quantum = Fraction(2) ** max(exponent - 8, -133)  # 8 bits; subnormals
    scaled = Fraction(abs(x)) / quantum
    rounded = math.floor(scaled)
    if scaled - rounded > Fraction(1, 2) or (scaled - rounded == Fraction(1, 2) and rounded % 2):
        rounded += 1
    value = rounded * quantum
    # Past the largest finite bf16 by half an ulp or more: infinity.
    if value > BF16_MAX:
        return math.copysign(math.inf, x)
    return math.copysign(float(value), x)


def cases(rng):
    values = [0.0, -0.0, math.inf, -math.inf, 1.0, -2.5, 1e-300, -1e-300,
              1e39, -1e39, float(BF16_MAX), 3.3961e38, 3.3962e38,
              2.0 ** -133, 2.0 ** -134, 2.0 ** -134 * 1.0000001, 2.0 ** -127 * 1.5]
    values += list(rng.standard_normal(200) * np.exp2(rng.uniform(-130, 127, 200)))
    # Half way between two bf16 numbers, and a hair to either side: exact
    # ties go to even; above, rounding to f32 first would land on the tie.
    for _ in range(60):
        base = bf16_of(float(rng.uniform(-4, 4)) * 2.0 ** int(rng.integers(-120, 120)))
        if base == 0:
            continue
        half = math.ldexp(1.0, math.frexp(abs(base))[1] - 9)
        for nudge in (0.0, 2.0 ** -40, -(2.0 ** -40)):
            values.append(base + math.copysign(half * (1 + nudge), base))
    return values


def program(values):
    n = len(values)
    hexes = ", ".join("0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0] for v in values)
    return "\n".join([
        mlir_exec.PRINT_DECL,
        "func.func @main() {",
        f"  %x = arith.constant dense<[{hexes}]> : tensor<{n}xf64>",
        f"  %b = arith.truncf %x : tensor<{n}xf64> to tensor<{n}xbf16>",
        *mlir_exec.print_bits("b", "%b", [n], dtype="bf16"),
        "  return",
        "}"]) + "\n"


def main():
    opt, runner, libdir = sys.argv[1:4]
    rng = np.random.default_rng(5)
    values = cases(rng)
    (got,) = mlir_exec.run(opt, runner, libdir, program(values), [[len(values)]])
    tally = mlir_exec.Tally()
    wrong = [(x, float(g), bf16_of(x)) for x, g in zip(values, got)
             if struct.pack("<d", float(g)) != struct.pack("<d", bf16_of(x))]
    for x, g, want in wrong[:5]:
        print(f"# {x!r}: got {g!r}, want {want!r}")
    tally.check(not wrong, f"{len(values)} values, every one rounded once to nearest even "
                f"({len(wrong)} wrong)")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
