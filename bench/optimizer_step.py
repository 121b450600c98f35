#!/usr/bin/python3
"""B1: the fused optimizer update against torch.optim and memory bandwidth.

One flat f32 parameter of --numel elements (64M by default), ResNet-50's
list of 161 parameter tensors (25.6M elements, conv weights such as
512x512x3x3) and GPT-2 small's list of 148 (124M), world size 1, with
AdamW, Adam and SGD with momentum: the step is compiled with
distopt-compile for this machine's CPU and run with distopt-run (median ms
per step after the first, with the 10th and 90th percentile); torch 1.13's
optimizer (foreach, the fastest CPU implementation it has) runs on the
same shapes in this process, and two bandwidths of the machine are
measured in the same run with torch: triad (a = b + s*c, STREAM's byte
count of 12 B per f32 element) and the in-place stream an update really is
(a += s*c, also 12 B). The first table runs everything on one thread
(distopt-run --threads 1); the second on 2 threads on both sides, against
the bandwidths measured at 2 threads.

The speed limit of an update is bandwidth / bytes per parameter (AdamW and
Adam read p, g, m, v and write p, m, v: 28 B; SGD with momentum 20 B).
Ratios above 1 against the triad bound are expected: triad writes a
separate array, which costs a hidden read (write-allocate) that STREAM does
not count, while an update writes in place; the in-place bound is the
tight one. Each row counts the gather and scatter instructions in the
compiled step's object (element-wise work should have none).

On a CPU with AVX-512 the tensor lists are compiled a second time for
x86-64-v3 (AVX2 and FMA, no AVX-512) and run on the same machine: the code
a CPU without AVX-512 gets, on this machine's memory.

Prints markdown; --update writes it into docs/benchmarks.md between the B1
markers and plots docs/img/b1-optimizer.png. Needs Debian's python3-torch
(run with /usr/bin/python3).

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
from common import Timing, best_gbps, run_timing  # noqa: E402
OPTIMIZERS = [
    # name, spec optimizer, torch constructor, bytes per parameter
    ("AdamW", {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01},
     lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01, foreach=True), 28),
    ("Adam", {"type": "adam", "lr": 1e-3},
     lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True), 28),
    ("SGD momentum", {"type": "sgd", "lr": 0.1, "momentum": 0.9},
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True), 20),
]


def bandwidths_gbps(numel, repeat):
    """Best of `repeat`: triad (a = b + s*c) and in place (a += s*c)."""
    a = torch.zeros(numel)
    b = torch.rand(numel)
    c = torch.rand(numel)
    return (best_gbps(lambda: torch.add(b, c, alpha=3.0, out=a), 12 * numel, repeat),
            best_gbps(lambda: a.add_(c, alpha=1e-3), 12 * numel, repeat))


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


def cpu_features():
    """The host CPU's name and the vector features that decide its code."""
    name, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"]
    return name, [f for f in wanted if f in flags]


def gathers(library):
    """Gather and scatter instructions in a compiled step."""
    out = subprocess.run(["/usr/lib/llvm-22/bin/llvm-objdump", "-d", library],
                         check=True, capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if "gather" in line or "scatter" in line)


def import_step(build, stem, optimizer, shapes):
    """The 1-rank step updating f32 tensors of `shapes` with `optimizer`:
    its spec written to stem.json, imported to stem.mlir (returned)."""
    with open(stem + ".json", "w") as f:
        json.dump({"model": "bench", "world_size": 1, "optimizer": optimizer,
                   "parameters": [{"name": f"w{i}", "shape": shape, "dtype": "f32"}
                                  for i, shape in enumerate(shapes)]}, f)
    subprocess.run([os.path.join(build, "bin", "distopt-translate"),
                    "--import-param-spec", stem + ".json", "-o", stem + ".mlir"], check=True)
    return stem + ".mlir"


def distopt_timing(build, tmp, optimizer, shapes, steps, cpu="native", threads=1):
    ir = import_step(build, os.path.join(tmp, "step"), optimizer, shapes)
    lib = os.path.join(tmp, "step.so")
    subprocess.run([os.path.join(build, "bin", "distopt-compile"), ir, f"--cpu={cpu}",
                    "-o", lib], check=True)
    out = subprocess.run([os.path.join(build, "bin", "distopt-run"), lib,
                          "--steps", str(steps), "--threads", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    return run_timing(out), gathers(lib)


def two_threads(args, cases, one_thread):
    """The table at 2 threads (distopt-run --threads 2, torch with 2
    intra-op threads), against the in-place bound both threads reach; its
    markdown lines."""
    torch.set_num_threads(2)
    triad, in_place = bandwidths_gbps(args.numel, 10)
    lines = ["", f"2 threads in one process (distopt-run --threads 2; torch.set_num_threads(2)). "
             f"Memory bounds measured at 2 threads in this run: triad {triad:.1f} GB/s, "
             f"in place {in_place:.1f} GB/s.", "",
             "| parameters | optimizer | distopt 2 threads ms (p10-p90) | 1 thread / 2 threads "
             "| torch foreach 2 threads ms (p10-p90) | torch / distopt "
             "| memory bound, in place (ms) | bound / distopt | target: issue 24 (≥0.85) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for case, shapes, _ in cases:
            numel = sum(math.prod(shape) for shape in shapes)
            for name, spec, make, bytes_per_param in OPTIMIZERS:
                ours, _ = distopt_timing(args.build, tmp, spec, shapes, args.steps, threads=2)
                theirs = torch_timing(make, shapes, args.steps)
                tight = bytes_per_param * numel / (in_place * 1e9) * 1e3
                of_tight = tight / ours.median
                lines.append(f"| {case} | {name} | {ours.fmt(1)} "
                             f"| {one_thread[(case, name)].median / ours.median:.2f} "
                             f"| {theirs.fmt(1)} | {theirs.median / ours.median:.2f} "
                             f"| {tight:.1f} | {of_tight:.2f} "
                             f"| {'met' if of_tight >= 0.85 else 'MISSED'} |")
                print(lines[-1], flush=True)
    torch.set_num_threads(1)
    return lines


def plot(results, path):
    """Per row: the share of the in-place memory bound that distopt (native
    code, and without AVX-512 where measured) and torch reach."""
    fig, (ax,) = plots.figure(1, 12, "B1: the optimizer update, 1 thread", height=4.5)
    rows = range(len(results))
    ax.bar([i - 0.25 for i in rows], [r["bound"] / r["ours"].median for r in results], 0.25,
           label="distopt (host CPU)")
    ax.bar([i for i in rows], [r["bound"] / r["avx2"].median if r["avx2"] else 0 for r in results],
           0.25, label="distopt (x86-64-v3: no AVX-512)")
    ax.bar([i + 0.25 for i in rows], [r["bound"] / r["torch"].median for r in results], 0.25,
           label="torch foreach")
    ax.axhline(0.85, color="gray", linestyle="--", linewidth=1, label="target 0.85 (issue 24)")
    ax.set_xticks(list(rows), [r["label"] for r in results], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("in-place memory bound / median time")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
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

    cpu, features = cpu_features()
    has_avx512 = "avx512f" in features
    triad, in_place = bandwidths_gbps(args.numel, 10)

    def spec_case(label, file):
        params = json.load(open(os.path.join(ROOT, "examples", "specs", file)))["parameters"]
        numel = sum(math.prod(p["shape"]) for p in params)
        return (f"{label} list, {len(params)} tensors, {numel} elements",
                [p["shape"] for p in params], True)

    cases = [(f"flat, {args.numel} elements", [[args.numel]], False),
             spec_case("ResNet-50", "resnet50.json"),
             spec_case("GPT-2 small", "gpt2-small.json")]
    lines = [f"f32 parameters, 1 thread. CPU: {cpu}; vector features: "
             f"{', '.join(features)}{'' if has_avx512 else ' (no AVX-512)'}. "
             f"Memory bounds measured in this run: triad {triad:.1f} GB/s, "
             f"in place {in_place:.1f} GB/s.", "",
             "| parameters | optimizer | distopt ms (p10-p90) | gathers + scatters | "
             "torch foreach ms (p10-p90) | torch / distopt | "
             "memory bound, triad (ms) | bound / distopt | "
             "memory bound, in place (ms) | bound / distopt | "
             "targets: issue 4 (≥3× torch, ≥0.8 of triad), issue 24 (≥0.85 of in place) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, shapes, is_list in cases:
            numel = sum(math.prod(shape) for shape in shapes)
            for name, spec, make, bytes_per_param in OPTIMIZERS:
                ours, found = distopt_timing(args.build, tmp, spec, shapes, args.steps)
                # The code a CPU without AVX-512 gets, where this one has it.
                avx2 = None
                if is_list and has_avx512:
                    avx2 = distopt_timing(args.build, tmp, spec, shapes, args.steps,
                                          cpu="x86-64-v3")
                theirs = torch_timing(make, shapes, args.steps)
                bound = bytes_per_param * numel / (triad * 1e9) * 1e3
                tight = bytes_per_param * numel / (in_place * 1e9) * 1e3
                speedup, of_bound = theirs.median / ours.median, bound / ours.median
                of_tight = tight / ours.median
                issue4 = "met" if speedup >= 3 and of_bound >= 0.8 else "MISSED"
                issue24 = ("met" if of_tight >= 0.85 else "MISSED") if is_list else "n/a"
                lines.append(f"| {case} | {name} | {ours.fmt(1)} | {found} | {theirs.fmt(1)} | "
                             f"{speedup:.2f} | {bound:.1f} | {of_bound:.2f} | "
                             f"{tight:.1f} | {of_tight:.2f} | "
                             f"issue 4: {issue4}; issue 24: {issue24} |")
                if avx2:
                    (t2, found2) = avx2
                    lines.append(f"| {case}, compiled for x86-64-v3 (no AVX-512) | {name} | "
                                 f"{t2.fmt(1)} | {found2} | | | {bound:.1f} | "
                                 f"{bound / t2.median:.2f} | {tight:.1f} | "
                                 f"{tight / t2.median:.2f} | issue 24: "
                                 f"{'met' if tight / t2.median >= 0.85 else 'MISSED'} |")
                results.append({"label": f"{name}, {case.split(',')[0]}", "ours": ours,
                                "case": case, "name": name,
                                "avx2": avx2[0] if avx2 else None, "torch": theirs,
                                "bound": tight})
    lines += two_threads(args, cases, {(r["case"], r["name"]): r["ours"] for r in results})
    text = "\n".join(lines) + "\n"
    print(text)
    if args.update:
        plot(results, os.path.join(ROOT, "docs", "img", "b1-optimizer.png"))
        update_section("B1", text + "\n![optimizer update](img/b1-optimizer.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
