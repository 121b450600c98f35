#!/usr/bin/python3
"""B1: the fused optimizer update against torch.optim and memory bandwidth.

One flat f32 parameter of --numel elements (64M by default), and the
list of ResNet-50's 161 parameter tensors (25.6M elements), world size 1:
the step is compiled with distopt-compile and run with distopt-run (median
ms per step after the first, with the 10th and 90th percentile); torch
1.13's optimizer (foreach, the fastest
CPU implementation it has) runs on the same sizes in this process, and two
bandwidths of the machine are measured in the same run with torch: triad
(a = b + s*c, STREAM's byte count of 12 B per f32 element) and the in-place
stream an update really is (a += s*c, also 12 B). Everything runs on one
thread: the compiled step is single-threaded.

The speed limit of an update is bandwidth / bytes per parameter (AdamW reads
p, g, m, v and writes p, m, v: 28 B; SGD with momentum 20 B). Ratios above
1 against the triad bound are expected: triad writes a separate array, which
costs a hidden read (write-allocate) that STREAM does not count, while an
update writes in place; the in-place bound is the tight one.

Prints markdown; --update writes it into docs/benchmarks.md between the B1
markers and plots docs/img/b1-optimizer.png. Needs Debian's python3-torch (run with /usr/bin/python3).

    bench/optimizer_step.py [--build build] [--numel 67108864] [--steps 12] [--update]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plots  # noqa: E402
from benchdoc import update_section  # noqa: E402
from common import Timing, run_timing  # noqa: E402
OPTIMIZERS = [
    # name, spec optimizer, torch constructor, bytes per parameter
    ("AdamW", {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01},
     lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01, foreach=True), 28),
    ("SGD momentum", {"type": "sgd", "lr": 0.1, "momentum": 0.9},
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True), 20),
]


def bandwidths_gbps(numel, repeat):
    """Best of `repeat`: triad (a = b + s*c) and in place (a += s*c)."""
    a = torch.zeros(numel)
    b = torch.rand(numel)
    c = torch.rand(numel)

    def best(kernel):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            kernel()
            times.append(time.perf_counter() - start)
        return 12 * numel / min(times) / 1e9

    return (best(lambda: torch.add(b, c, alpha=3.0, out=a)),
            best(lambda: a.add_(c, alpha=1e-3)))


def torch_timing(make, shapes, steps):
    params = []
    for shape in shapes:
        p = torch.zeros(shape, requires_grad=True)
        p.grad = torch.rand(shape)
        params.append(p)
    opt = make(params)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return Timing.of(times[1:]).scaled(1e3)


def distopt_timing(build, tmp, optimizer, shapes, steps):
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as f:
        json.dump({"model": "bench", "world_size": 1, "optimizer": optimizer,
                   "parameters": [{"name": f"w{i}", "shape": shape, "dtype": "f32"}
                                  for i, shape in enumerate(shapes)]}, f)
    ir = os.path.join(tmp, "step.mlir")
    lib = os.path.join(tmp, "step.so")
    subprocess.run([os.path.join(build, "bin", "distopt-translate"),
                    "--import-param-spec", spec, "-o", ir], check=True)
    subprocess.run([os.path.join(build, "bin", "distopt-compile"), ir, "-o", lib], check=True)
    out = subprocess.run([os.path.join(build, "bin", "distopt-run"), lib,
                          "--steps", str(steps)],
                         check=True, capture_output=True, text=True).stdout
    return run_timing(out)


def plot(results, bounds, path):
    """Per case: distopt and torch (medians, ranges) beside both bounds."""
    fig, (ax,) = plots.figure(1, 9, "B1: the optimizer update, 1 thread")
    rows = range(len(results))
    plots.ranged_bars(ax, [i - 0.3 for i in rows], [r[1] for r in results], "distopt", 0.2)
    plots.ranged_bars(ax, [i - 0.1 for i in rows], [r[2] for r in results], "torch foreach", 0.2)
    ax.bar([i + 0.1 for i in rows], [b[0] for b in bounds], 0.2, label="triad bound")
    ax.bar([i + 0.3 for i in rows], [b[1] for b in bounds], 0.2, label="in-place bound")
    ax.set_xticks(list(rows), [r[0] for r in results], fontsize=8)
    ax.set_ylabel("ms per step: median, p10-p90")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    plots.save(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--numel", type=int, default=64 << 20)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)

    triad, in_place = bandwidths_gbps(args.numel, 10)
    resnet = json.load(open(os.path.join(ROOT, "examples", "specs", "resnet50.json")))
    cases = [(f"flat, {args.numel} elements", [[args.numel]]),
             (f"ResNet-50 list, {len(resnet['parameters'])} tensors, "
              f"{sum(math.prod(p['shape']) for p in resnet['parameters'])} elements",
              [p["shape"] for p in resnet["parameters"]])]
    lines = [f"f32 parameters, 1 thread; triad {triad:.1f} GB/s, "
             f"in place {in_place:.1f} GB/s.", "",
             "| parameters | optimizer | distopt ms (p10-p90) | torch foreach ms (p10-p90) "
             "| torch / distopt | "
             "triad bound ms | bound / distopt | in-place bound ms | bound / distopt | "
             "distopt Mparam/s | target (issues 4, 6) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    results, bounds = [], []  # (label, distopt, torch Timings); (triad, in-place) ms
    with tempfile.TemporaryDirectory() as tmp:
        for case, shapes in cases:
            numel = sum(math.prod(shape) for shape in shapes)
            for name, spec, make, bytes_per_param in OPTIMIZERS:
                ours = distopt_timing(args.build, tmp, spec, shapes, args.steps)
                theirs = torch_timing(make, shapes, args.steps)
                results.append((f"{name}, {case.split(',')[0]}", ours, theirs))
                bound = bytes_per_param * numel / (triad * 1e9) * 1e3
                tight = bytes_per_param * numel / (in_place * 1e9) * 1e3
                bounds.append((bound, tight))
                speedup, of_bound = theirs.median / ours.median, bound / ours.median
                met = speedup >= 3 and of_bound >= 0.8
                target = f"≥3× torch, ≥0.8 of triad bound: {'met' if met else 'MISSED'}"
                lines.append(f"| {case} | {name} | {ours.fmt(1)} | {theirs.fmt(1)} | "
                             f"{speedup:.2f} | {bound:.1f} | {of_bound:.2f} | "
                             f"{tight:.1f} | {tight / ours.median:.2f} "
                             f"| {numel / ours.median / 1e3:.0f} | {target} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.update:
        plot(results, bounds, os.path.join(ROOT, "docs", "img", "b1-optimizer.png"))
        update_section("B1", text + "\n![optimizer update](img/b1-optimizer.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
