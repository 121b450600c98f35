#!/usr/bin/env python3
"""Compiles a step and runs it on N ranks; prints its parameters' bits.

Compiles STEP.mlir (a module holding `func.func @step`, as distopt-translate
writes it, possibly transformed: sharded, bucketed...) with distopt-compile,
lowered by --distopt-lower-to-cpu or, where $DISTOPT_TEST_LOWERING names a
test pipeline (a distopt-opt flag such as --distopt-test-lower-to-gpu-on-host),
by that. Runs it for STEPS steps at lr 0.125 with distopt-run under mpirun:
distopt-run builds the arguments from the step's interface (docs/step-abi.md:
parameters from a fixed pattern, gradients that differ per rank and average
to the same pattern at any world size, zero state), checks that replicas
agree and prints every parameter, shards gathered, as bit patterns.

Prints "param NAME: b0 b1 ..." per parameter, then "replicas agree" when
distopt-run compared replicated parameters and found them equal.

usage: step_harness.py STEP.mlir RANKS [--bin DIR] [--mpirun CMD] [--steps K]
"""
import argparse
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np

LR = 0.125


def pattern(name, n):
    """distopt-run's initial value of parameter `name` (tools/distopt-run/
    Buffers.cpp): small, different per tensor, exact in bf16."""
    seed = sum(ord(c) for c in name)
    i = np.arange(n)
    return (((i * 7 + seed) % 13) - 6).astype(np.float32) / 8.0


def gradient(name, n, step, rank, ranks):
    """distopt-run's gradient of `name` at step `step` (0-based) on `rank`:
    the pattern times 1 + (rank - (N-1)/2) / 4, so that every sum over the
    ranks is exact and the average is the pattern."""
    factor = np.float32(1 + (rank - (ranks - 1) / 2) / 4)
    return pattern(name + "g" + str(step), n) * factor


def tool(bin_dir, name):
    return os.path.join(bin_dir, name) if bin_dir else name


def run(step_path, ranks, bin_dir="", mpirun="mpirun", steps=3):
    """Returns ({name: [bits]}, replicas_agree); raises RuntimeError."""
    lowering = os.environ.get("DISTOPT_TEST_LOWERING")
    with tempfile.TemporaryDirectory() as tmp:
        library = os.path.join(tmp, "step.so")
        compile_cmd = [tool(bin_dir, "distopt-compile"), step_path, "-o", library]
        if lowering:
            compile_cmd.append("--lowering=" + lowering.lstrip("-") +
                               "{runtime-allocator=true}")
        compiled = subprocess.run(compile_cmd, capture_output=True, text=True)
        if compiled.returncode:
            raise RuntimeError(compiled.stderr[-3000:])
        out = subprocess.run(shlex.split(mpirun) + [
            "-np", str(ranks), tool(bin_dir, "distopt-run"), library,
            "--steps", str(steps), "--lr", str(LR), "--print-param-bits"],
            capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError((out.stdout + out.stderr)[-3000:])
    params = {}
    for line in out.stdout.splitlines():
        if line.startswith("param "):
            head, bits = line.split(":", 1)
            params[head.split()[1]] = [int(b) for b in bits.split()]
    return params, "replicas agree" in out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step")
    ap.add_argument("ranks", type=int)
    ap.add_argument("--bin", default="", help="where distopt-compile and "
                    "distopt-run are (default: the PATH)")
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe --bind-to none")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    try:
        params, agree = run(args.step, args.ranks, args.bin, args.mpirun, args.steps)
    except RuntimeError as e:
        sys.stderr.write(str(e))
        return 1
    for name, bits in params.items():
        print(f"param {name}: {' '.join(map(str, bits))}")
    if agree:
        print("replicas agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
