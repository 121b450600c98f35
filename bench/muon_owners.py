#!/usr/bin/python3
"""B16, ZeRO's owner plan for Muon: each matrix orthogonalized whole on one
rank, the owners balanced by the update's FLOPs (the default) or by its
elements (zero-owner-balance=elements, ZeroRedundancyOptimizer's rule).

Muon on the matrices of a model spec (examples/specs; conv weights as
matrices of their output channels' rows; vectors, and GPT-2's embeddings,
in an AdamW group), compiled at --pipeline="zero-stage=2" (flat: the AdamW
group in chunks, the matrices on owners).

Predicted: --distopt-report's FLOPs per owner (getUpdateFlops(): Muon's
Newton-Schulz products, 5 x (4 m^2 n + 2 m^3) for an m x n matrix, m <= n)
at 2 to 16 ranks, as the most loaded rank's share against an even split.

Measured: distopt-run at 2 ranks (one per core of this machine) on
ResNet-50's matrices (by elements, one owner gets 1.21x an even share),
median ms per step after the first: without ZeRO (every rank
orthogonalizes every matrix: the arithmetic of the plan that gathers each
matrix everywhere, without its all-gathers) and with owners by elements
and by FLOPs: the median of 5 launches' medians (one launch of each in
turn), the lowest 10th and highest 90th percentile. One thread per rank
(OpenBLAS's products too).

--rates instead measures one thread's Muon update rate (GFLOP/s, the
formula above over the median of 5 steps, compiled and called in process
as bench/muon.py does) on ResNet-50's shapes of m from 64 to 512: the
figures docs/benchmarks.md fits the rate curve to.

    bench/muon_owners.py [--build build] [--steps 8] [--launches 5] [--rates]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Timing, compile_step, launch, report, run_timing  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("ResNet-18 (CIFAR)", "resnet18-cifar.json"),
          ("ResNet-50", "resnet50.json"),
          ("GPT-2 small", "gpt2-small.json")]
WORLDS = [2, 4, 8, 16]


def muon_step(build, spec_name, world, tmp):
    """The spec with Muon (and AdamW for the embeddings), imported."""
    spec = json.load(open(os.path.join(ROOT, "examples", "specs", spec_name)))
    spec["world_size"] = world
    spec["optimizer"] = {"type": "muon", "lr": 0.02, "weight_decay": 0.01}
    spec.pop("param_groups", None)
    spec.pop("main_params", None)
    for p in spec["parameters"]:
        p["dtype"] = "f32"
    embeddings = [p["name"] for p in spec["parameters"] if p["name"].endswith(("wte.weight", "wpe.weight"))]
    if embeddings:
        spec["param_groups"] = [{"params": embeddings, "type": "adamw", "lr_scale": 0.1}]
    path = os.path.join(tmp, f"{spec_name}.{world}")
    json.dump(spec, open(path + ".json", "w"))
    subprocess.run([os.path.join(build, "bin", "distopt-translate"), "--import-param-spec",
                    path + ".json", "-o", path + ".mlir"], check=True)
    return path + ".mlir"


def rates(build):
    """One thread's Muon update rate on each shape (rows x cols)."""
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "test", "Integration"))
    from common import percentile
    from compiled_step import CompiledStep
    from muon import step_text, timed
    rng = np.random.default_rng(1)
    runtime = os.path.join(build, "runtime", "lib", "libdistopt_rt.so")
    print("| shape | m | ms | GFLOP/s |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for rows, cols in [(64, 576), (256, 64), (128, 1152), (256, 2304),
                           (2048, 512), (512, 4608)]:
            step = CompiledStep.compile(os.path.join(build, "bin", "distopt-compile"), runtime,
                                        step_text(rows, cols), tmp, name=f"m{rows}x{cols}")
            p = rng.standard_normal((rows, cols)).astype(np.float32)
            g = rng.standard_normal((rows, cols)).astype(np.float32)
            b = np.zeros_like(p)
            seconds = percentile(timed(lambda k: step([p, g, b, 0.02, k + 1]), 5), 0.5)
            m, n = min(rows, cols), max(rows, cols)
            flops = 5 * (4 * m * m * n + 2 * m ** 3) + 10 * m * n
            print(f"| {rows}x{cols} | {m} | {seconds * 1e3:.2f} | {flops / seconds / 1e9:.1f} |",
                  flush=True)


def most_loaded(build, step, balance):
    text = report(build, step, f"zero-stage=2 zero-owner-balance={balance}")
    match = re.search(r"most loaded rank: ([\d.]+)x", text)
    return float(match.group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--rates", action="store_true")
    args = parser.parse_args()
    if args.rates:
        return rates(args.build)
    with tempfile.TemporaryDirectory() as tmp:
        print("| model | ranks | most loaded / mean, by elements | by FLOPs |")
        print("|---|---:|---:|---:|")
        for label, spec in MODELS:
            for world in WORLDS:
                step = muon_step(args.build, spec, world, tmp)
                print(f"| {label} | {world} | {most_loaded(args.build, step, 'elements'):.2f} "
                      f"| {most_loaded(args.build, step, 'flops'):.2f} |", flush=True)
        print()
        step = muon_step(args.build, "resnet50.json", 2, tmp)
        rows = [("no ZeRO (every rank every matrix)", "zero-stage=0"),
                ("owners by elements", "zero-stage=2 zero-owner-balance=elements"),
                ("owners by FLOPs", "zero-stage=2 zero-owner-balance=flops")]
        print("| ResNet-50, Muon, 2 ranks | ms per step (p10-p90) |")
        print("|---|---:|")
        # The launches interleaved (one of each variant in turn), so that
        # a slow spell of the machine falls on all of them alike.
        libraries = []
        for _, options in rows:
            sub = os.path.join(tmp, str(len(libraries)))
            os.makedirs(sub)
            libraries.append(compile_step(args.build, step, options, sub))
        runs = [[] for _ in rows]
        for _ in range(args.launches):
            for k, library in enumerate(libraries):
                runs[k].append(run_timing(launch(args.build, library, 2, args.steps)))
        for (label, _), timings in zip(rows, runs):
            timing = Timing(statistics.median(t.median for t in timings),
                            min(t.lo for t in timings), max(t.hi for t in timings))
            print(f"| {label} | {timing.fmt(1)} |", flush=True)


if __name__ == "__main__":
    main()
