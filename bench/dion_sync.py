#!/usr/bin/python3
"""B16, Dion's low-rank sync: Dion's matrices all-reduced whole, against
each rank averaging Dion's two low-rank factors instead
(dion-low-rank-sync), two all-reduces per matrix or per 25 MiB batch of
matrices (dion-batch-mb), with a peer in torch.

Dion at rank 1/4 of each matrix's smaller dimension on ResNet-18 (CIFAR)'s
matrices (AdamW on the vectors), at 2 ranks, on shared memory and, where
scripts/cluster can run, across 2 emulated nodes of 1 rank linked at
1 Gb/s and at 100 Mb/s. For each: the bytes each rank sends per step
(--distopt-report's total) and distopt-run's median ms per step after the
first (the median of `--launches` launches' medians, the two pipelines
launched in turn; p10-p90 over them). On shared memory, a peer in torch:
DDP's all-reduce of every gradient (one flat gloo buffer), then every rank
runs Dion on every matrix as Microsoft's dion_simple.py writes it
(bench/dion.py's torch_dion) and AdamW on the rest: the plain plan's
arithmetic with DDP's communication.

    bench/dion_sync.py [--build build] [--steps 4] [--launches 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Timing, bytes_sent_per_step, cluster_available,  # noqa: E402
                    compile_step, ddp_then_matrices, report, run_timing,
                    spawn_gloo)
from muon_plans import run_on  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINES = {"gradients all-reduced": "", "dion-low-rank-sync": "dion-low-rank-sync",
             "dion-low-rank-sync dion-batch-mb=25":
                 "dion-low-rank-sync dion-batch-mb=25"}


def dion_step(build, spec_name, world, tmp):
    """The spec with Dion at rank 1/4 (and AdamW for what is not a matrix),
    imported."""
    spec = json.load(open(os.path.join(ROOT, "examples", "specs", spec_name)))
    spec["world_size"] = world
    spec["optimizer"] = {"type": "dion", "lr": 0.02, "rank_fraction": 0.25}
    spec.pop("param_groups", None)
    spec.pop("main_params", None)
    for p in spec["parameters"]:
        p["dtype"] = "f32"
    path = os.path.join(tmp, f"{spec_name}.{world}")
    json.dump(spec, open(path + ".json", "w"))
    subprocess.run([os.path.join(build, "bin", "distopt-translate"), "--import-param-spec",
                    path + ".json", "-o", path + ".mlir"], check=True)
    return path + ".mlir"


def torch_worker(rank, init, spec, steps, queue):
    """DDP's all-reduce, then Dion (dion_simple's update) on every matrix of
    every rank and AdamW on the rest."""
    import torch
    from dion import torch_dion

    def start(p):
        rows, cols = p.shape[0], p.numel() // p.shape[0]
        return torch.zeros(rows, cols), torch.randn(cols, max(1, -(-min(rows, cols) // 4)))

    def update(p, g, state):
        m, q = state
        torch_dion(p.view(m.shape), g.reshape(m.shape), m, q, 0.02)

    ddp_then_matrices(rank, init, spec, steps, queue, start, update)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--launches", type=int, default=3)
    args = parser.parse_args()
    links = [("shared memory", None)]
    if cluster_available():
        links += [("2 nodes, 1 Gb/s", "1gbit"), ("2 nodes, 100 Mb/s", "100mbit")]
    with tempfile.TemporaryDirectory() as tmp:
        step = dion_step(args.build, "resnet18-cifar.json", 2, tmp)
        sent = {label: bytes_sent_per_step(report(args.build, step, options))
                for label, options in PIPELINES.items()}
        libraries = {}
        for label, options in PIPELINES.items():
            sub = os.path.join(tmp, label.replace(" ", "-"))
            os.makedirs(sub)
            libraries[label] = compile_step(args.build, step, options, sub)
        print("ResNet-18 (CIFAR), Dion at rank 1/4, AdamW on the vectors, 2 ranks\n")
        print("| link | pipeline | MB sent per rank and step | measured ms per step (p10-p90) |")
        print("|---|---|---:|---:|")
        for link, shaped in links:
            runs = {label: [] for label in PIPELINES}
            for _ in range(args.launches):
                for label, library in libraries.items():
                    runs[label].append(run_timing(run_on(args.build, library, shaped, args.steps)))
            if shaped is None:
                spec = json.load(open(step[:-len(".mlir")] + ".json"))
                timing = spawn_gloo(torch_worker, 2, spec, 1 + args.steps)
                print(f"| {link} | torch: DDP + Dion (dion_simple) on every rank | "
                      f"{sent['gradients all-reduced'] / 1e6:.2f} | {timing.fmt(0)} |", flush=True)
            for label, timings in runs.items():
                timing = Timing(statistics.median(t.median for t in timings),
                                min(t.lo for t in timings), max(t.hi for t in timings))
                print(f"| {link} | {label} | {sent[label] / 1e6:.2f} | {timing.fmt(0)} |",
                      flush=True)


if __name__ == "__main__":
    main()
