#!/usr/bin/env python3
"""B13: a PyTorch training step with distopt's compiled step as its optimizer
(distopt.torch.DistributedOptimizer) against DDP (gloo) + torch.optim, the
same model, forward and backward, at 1 and 2 ranks, in one run.

Models: examples/torch/train.py's ResNet-18 on the upscaled digits (11.2M
f32 parameters, 32x32 images, 16 per rank) and its character GPT (0.1M
parameters in 26 tensors, 64 tokens x 16 sequences per rank); AdamW.

Per step, medians over the timed steps after two warm-up steps:
- whole step: forward + backward + optimizer step + zero_grad;
- optimizer side: the whole step less the forward + backward of the same
  model alone in the same iteration, for both: DDP's hooks, and
  distopt's (its split step), run the all-reduces inside backward;
  AdamW(foreach=True), torch's fastest CPU update.
The three run interleaved, step by step, so that they see the same machine.
torch runs 1 intra-op thread per rank; distopt's step its default, the
rank's share of the cores (2 threads at 1 rank, 1 at 2 ranks).
Bounds: the whole step cannot be faster than its forward + backward; the
optimizer side is held to memory: the ring all-reduce's 2(N-1)/N x 4 bytes
per parameter sent, each copied at least once, and AdamW's 28 bytes per
parameter, at the copy and in-place bandwidths memory gives each rank
(common.memory_bound, measured in the same run).

    /usr/bin/python3 bench/torch_training.py [--steps 8] [--update]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import update_section  # noqa: E402
from common import (ADAM_BYTES_PER_PARAM, b13_model, ddp_beside,  # noqa: E402
                    end_ddp, memory_bound)

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
          "none"]


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def worker(model_name, steps, out):
    """Runs under mpirun: every measurement, rank 0 writes them as JSON."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    factory, batch, loss_fn, recipe = b13_model(model_name, comm)
    from distopt.torch import DistributedOptimizer  # train.py's path

    distopt_model = factory()
    opt = DistributedOptimizer(distopt_model.named_parameters(), recipe,
                               comm=comm, model=model_name)
    init, plain, reference, torch_opt = ddp_beside(factory, recipe, comm)

    # The three interleaved, step by step, so that they see the same
    # machine: distopt's whole step, the plain forward + backward, DDP's
    # whole step.
    result = {"distopt": ([], []), "forward_backward": [], "torch": ([], [])}
    for step in range(steps + 2):
        xb, yb = batch(step, rank, size)
        comm.Barrier()
        start = time.perf_counter()
        loss_fn(distopt_model, xb, yb).backward()
        opt.step()
        opt.zero_grad()
        whole = time.perf_counter() - start
        comm.Barrier()
        fb = timed(lambda: loss_fn(plain, xb, yb).backward())
        plain.zero_grad()
        comm.Barrier()
        start = time.perf_counter()
        loss_fn(reference, xb, yb).backward()
        torch_opt.step()
        torch_opt.zero_grad()
        torch_whole = time.perf_counter() - start
        if step >= 2:
            result["distopt"][0].append(whole)
            result["distopt"][1].append(whole - fb)
            result["forward_backward"].append(fb)
            result["torch"][0].append(torch_whole)
            # DDP's all-reduces run inside backward: its optimizer side is
            # the step less the plain forward + backward.
            result["torch"][1].append(torch_whole - fb)
    model = distopt_model
    result["parameters"] = sum(p.numel() for p in model.parameters())
    result["tensors"] = len(list(model.parameters()))
    end_ddp(init, comm)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)


def fmt(samples):
    ordered = sorted(samples)
    lo, hi = ordered[0], ordered[-1]
    if len(ordered) >= 10:
        lo = ordered[len(ordered) // 10]
        hi = ordered[(len(ordered) * 9) // 10]
    return f"{1e3 * statistics.median(samples):.1f} ({1e3 * lo:.1f}-{1e3 * hi:.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.steps, args.worker[1])
        return 0

    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"),
               DISTOPT_CACHE_DIR=tempfile.mkdtemp(prefix="distopt-b13-"))
    rows = []
    bounds = {ranks: memory_bound(ranks) for ranks in (1, 2)}
    for model in ("resnet18", "gpt"):
        for ranks in (1, 2):
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run(MPIRUN + ["-np", str(ranks), sys.executable,
                                         os.path.abspath(__file__),
                                         "--steps", str(args.steps),
                                         "--worker", model, out.name],
                               check=True, env=env)
                r = json.load(open(out.name))
            d_whole, d_side = r["distopt"]
            t_whole, t_side = r["torch"]
            side_ratio = statistics.median(t_side) / statistics.median(d_side)
            whole_ratio = statistics.median(t_whole) / statistics.median(
                d_whole)
            verdict = ("met" if side_ratio >= 3 and whole_ratio > 1 else
                       "not met")
            p = r["parameters"]
            least = bounds[ranks].ms(copied=2 * (ranks - 1) / ranks * 4 * p,
                                     in_place=ADAM_BYTES_PER_PARAM * p)
            whole_bound = (statistics.median(r["forward_backward"]) /
                           statistics.median(d_whole))
            rows.append(
                f"| {model} ({r['parameters'] / 1e6:.2f}M in {r['tensors']} "
                f"tensors) | {ranks} | {fmt(r['forward_backward'])} | "
                f"{fmt(t_whole)} | {fmt(d_whole)} | {whole_ratio:.2f} | "
                f"{whole_bound:.2f} | "
                f"{fmt(t_side)} | {fmt(d_side)} | {side_ratio:.2f} | "
                f"{least:.2f} | {least / (statistics.median(d_side) * 1e3):.2f} | "
                f"{verdict} |")
            print(rows[-1], flush=True)
    table = "\n".join([
        f"AdamW; torch 1 intra-op thread per rank, distopt the rank's share of the "
        f"cores (2 threads at 1 rank, 1 at 2); {args.steps} timed steps; milliseconds: "
        "median (p10-p90). Optimizer side: the whole step less the plain "
        "forward + backward (the all-reduces run in backward in both). "
        "Bounds: the "
        "forward + backward (whole step); memory (optimizer side): "
        + "; ".join(f"{n} rank{'s' if n > 1 else ''}: {b.describe()}"
                    for n, b in bounds.items()) + ".",
        "",
        "| model | ranks | forward + backward | whole step: DDP + torch.optim "
        "| whole step: distopt | ratio | bound / whole step (distopt) "
        "| optimizer side: DDP + torch.optim | "
        "optimizer side: distopt | ratio | memory bound, optimizer side "
        "| bound / side (distopt) | target (≥ 3x side, > 1x whole) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows])
    print(table)
    if args.update:
        update_section("B13", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
