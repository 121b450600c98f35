#!/usr/bin/python3
"""What LLVM's CPU tuning costs B1's update: each list row of B1 (ResNet-50's
and GPT-2 small's parameter lists, AdamW, Adam, SGD with momentum, f32, 1
rank, 1 thread) compiled several ways (--variant NAME=distopt-compile
options; by default for this machine's CPU: every loop at the width
LLVM's tuning picks, the element-wise loops at 256 bits (distopt-compile's
default, --elementwise-vector-bits), and the whole object at 256 bits
with +prefer-256-bit) and run with distopt-run one variant after another, in
--rounds rounds whose order alternates (forward, reversed, ...) so that
a drift of the machine does not favour the variant run first.

Prints, per round and row, each variant's median ms per step and its ratio
to the in-place memory bound measured at the start of the round (B1's
bound); then, per optimizer and variant, the geometric mean over rows and
rounds of its time over the first variant's, and how many of those pairs
were faster or slower by more than 2%. Nothing is written to the docs: the
figures are quoted in docs/benchmarks.md (B1's prose).

    /usr/bin/python3 bench/cpu_tuning.py [--build build] [--rounds 5] [--steps 12]
        [--variant name=--cpu=native --variant ...]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import run_timing  # noqa: E402
from optimizer_step import OPTIMIZERS, ROOT, bandwidths_gbps, import_step  # noqa: E402

DEFAULT_VARIANTS = ["target-width=--cpu=native --elementwise-vector-bits=0",
                    "elementwise-256=--cpu=native",
                    "prefer-256-bit=--cpu=native --cpu-features=+prefer-256-bit "
                    "--elementwise-vector-bits=0"]
SPECS = [("ResNet-50", "resnet50.json"), ("GPT-2 small", "gpt2-small.json")]


def compile_rows(build, variants, tmp):
    """{(list, optimizer): (elements, bytes per parameter, {variant: library})}."""
    rows = {}
    for label, file in SPECS:
        with open(os.path.join(ROOT, "examples", "specs", file)) as f:
            shapes = [p["shape"] for p in json.load(f)["parameters"]]
        numel = sum(math.prod(shape) for shape in shapes)
        for name, optimizer, _, bytes_per_param in OPTIMIZERS:
            stem = os.path.join(tmp, f"{file}-{name}".replace(" ", "_"))
            step = import_step(build, stem, optimizer, shapes)
            libraries = {}
            for index, (variant, options) in enumerate(variants):
                libraries[variant] = f"{stem}-{index}.so"
                subprocess.run([os.path.join(build, "bin", "distopt-compile"), step,
                                *options.split(), "-o", libraries[variant]], check=True)
            rows[(label, name)] = (numel, bytes_per_param, libraries)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--variant", action="append",
                    help="NAME=distopt-compile options; the first is the baseline")
    args = ap.parse_args()
    torch.set_num_threads(1)
    variants = [v.split("=", 1) for v in (args.variant or DEFAULT_VARIANTS)]
    times = {}  # (round, list, optimizer) -> {variant: ms}
    with tempfile.TemporaryDirectory() as tmp:
        rows = compile_rows(args.build, variants, tmp)
        for round_ in range(args.rounds):
            _, in_place = bandwidths_gbps(64 << 20, 10)
            order = variants if round_ % 2 == 0 else variants[::-1]
            for (label, name), (numel, bytes_per_param, libraries) in rows.items():
                bound = bytes_per_param * numel / (in_place * 1e9) * 1e3
                for variant, _ in order:
                    out = subprocess.run([os.path.join(args.build, "bin", "distopt-run"),
                                          libraries[variant], "--steps", str(args.steps),
                                          "--threads", "1"],
                                         check=True, capture_output=True, text=True).stdout
                    ms = run_timing(out)
                    times.setdefault((round_, label, name), {})[variant] = ms.median
                    print(f"round {round_}, {label}, {name}, {variant}: {ms.fmt(1)} ms, "
                          f"{bound / ms.median:.2f} of the in-place bound", flush=True)
    baseline = variants[0][0]
    print(f"\ntime against {baseline}: geometric mean over rows and rounds "
          "(pairs faster / slower by more than 2%)")
    for variant, _ in variants[1:]:
        for name, *_ in OPTIMIZERS:
            ratios = [t[variant] / t[baseline] for (_, _, opt), t in times.items() if opt == name]
            mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"  {variant}, {name}: {mean:.3f}x ({sum(r < 0.98 for r in ratios)} / "
                  f"{sum(r > 1.02 for r in ratios)} of {len(ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
