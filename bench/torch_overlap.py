#!/usr/bin/env python3
"""B13 on a network: a PyTorch training step whose gradient reductions run
during backward (distopt.torch.DistributedOptimizer's split step, as DDP's
reducer) against the same step with every reduction inside opt.step()
(split-step=false) and against DDP (gloo) + torch.optim.AdamW, on the
emulated cluster (scripts/cluster: 2 nodes of 1 or 2 ranks, links shaped to
1 and 10 Gb/s), in one run.

Models: examples/torch/train.py's ResNet-18 on the upscaled digits (11.2M
f32 parameters, 45 MB of gradients, 16 images per rank) and its character
GPT (0.1M parameters, 64 tokens x 16 sequences per rank); AdamW.

Per step, medians over the timed steps after two warm-up steps, the four
interleaved step by step so that they see the same machine and link:
- forward + backward of the model alone (no communication);
- whole step (forward, backward, opt.step(), zero_grad) of DDP + torch.optim,
  of distopt with its reductions during backward, and of distopt with its
  reductions in opt.step();
- exposed communication: whole step less forward + backward less the
  update (distopt: opt.step() of the overlapped run, which is the update
  alone; DDP: torch's AdamW step), what the reductions add to the step.
Target (issue 38): distopt's whole step at or below DDP's at every link
speed. torch runs 1 intra-op thread per rank; the machine's 2 cores are
shared by all ranks of both nodes.

    /usr/bin/python3 bench/torch_overlap.py [--steps 6] [--update]
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
from common import (b13_model, cluster_available, ddp_beside,  # noqa: E402
                    end_ddp)


def worker(model_name, steps, out):
    """Runs on the cluster's ranks: every measurement; rank 0 writes them."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")  # the node's link
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    factory, batch, loss_fn, recipe = b13_model(model_name, comm)
    from distopt.torch import DistributedOptimizer  # train.py's path

    overlapped, serial = factory(), factory()
    opts = {"overlap": DistributedOptimizer(
                overlapped.named_parameters(), recipe, comm=comm,
                model=model_name, threads=1),
            "serial": DistributedOptimizer(
                serial.named_parameters(), recipe, comm=comm,
                pipeline="split-step=false", model=model_name, threads=1)}
    # A file rendezvous on the shared file system, as on a real cluster.
    init, plain, reference, torch_opt = ddp_beside(factory, recipe, comm)

    def timed(fn):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    result = {k: [] for k in ("forward_backward", "ddp", "ddp_update",
                              "overlap", "overlap_update", "serial")}
    for step in range(steps + 2):
        xb, yb = batch(step, rank, size)
        times = {}
        times["forward_backward"] = timed(
            lambda: loss_fn(plain, xb, yb).backward())
        plain.zero_grad()
        for name, model, opt in (("overlap", overlapped, opts["overlap"]),
                                 ("serial", serial, opts["serial"]),
                                 ("ddp", reference, torch_opt)):
            update = []

            def whole():
                loss_fn(model, xb, yb).backward()
                start = time.perf_counter()
                opt.step()
                update.append(time.perf_counter() - start)
                opt.zero_grad()
            times[name] = timed(whole)
            times[name + "_update"] = update[0]
        if step >= 2:
            for key in result:
                result[key].append(times[key])
    result["parameters"] = sum(p.numel() for p in plain.parameters())
    end_ddp(init, comm)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)


def ms(samples):
    return 1e3 * statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.steps, args.worker[1])
        return 0
    cluster = os.path.join(ROOT, "scripts", "cluster")
    if not cluster_available():
        print("torch_overlap: scripts/cluster cannot make namespaces here "
              "(root and a kernel with veth and bridges are needed)")
        return 1
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"),
               DISTOPT_CACHE_DIR=tempfile.mkdtemp(prefix="distopt-b13-"),
               OPENBLAS_NUM_THREADS="1")
    rows = []
    for model in ("resnet18", "gpt"):
        for rate in ("1gbit", "10gbit"):
            for per_node in (1, 2):
                with tempfile.NamedTemporaryFile(suffix=".json",
                                                 dir="/tmp") as out:
                    subprocess.run(
                        [cluster, "--nodes", "2", "--ranks-per-node",
                         str(per_node), "--rate", rate, "--",
                         sys.executable, os.path.abspath(__file__),
                         "--steps", str(args.steps), "--worker", model,
                         out.name], check=True, env=env,
                        stdout=subprocess.DEVNULL)
                    r = json.load(open(out.name))
                fb = ms(r["forward_backward"])
                ddp, overlap, serial = (ms(r[k]) for k in
                                        ("ddp", "overlap", "serial"))
                exposed = {k: ms(r[k]) - fb - ms(r[k + "_update"])
                           for k in ("ddp", "overlap")}
                exposed["serial"] = serial - fb - ms(r["overlap_update"])
                rows.append(
                    f"| {model} ({r['parameters'] / 1e6:.2f}M) | "
                    f"{rate.replace('gbit', ' Gb/s')} | 2 x {per_node} | "
                    f"{fb:.0f} | {ddp:.0f} | {overlap:.0f} | {serial:.0f} | "
                    f"{ddp / overlap:.2f} | {serial / overlap:.2f} | "
                    f"{exposed['ddp']:.0f} | {exposed['overlap']:.0f} | "
                    f"{exposed['serial']:.0f} | "
                    f"{'met' if overlap <= ddp else 'not met'} |")
                print(rows[-1], flush=True)
    table = "\n".join([
        f"AdamW; 2 nodes of 1 or 2 ranks on this machine's 2 cores, links "
        f"shaped with tc; torch 1 intra-op thread per rank, distopt's step 1 "
        f"thread; {args.steps} timed steps; milliseconds, medians. Exposed "
        "communication: whole step less forward + backward less the update.",
        "",
        "| model | link | nodes x ranks | forward + backward | whole step: "
        "DDP + torch.optim | whole step: distopt, reductions in backward | "
        "whole step: distopt, reductions in opt.step() | DDP / distopt | "
        "in opt.step() / in backward | exposed: DDP | exposed: distopt in "
        "backward | exposed: distopt in opt.step() | target (distopt ≤ "
        "DDP) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows])
    print(table)
    if args.update:
        update_section("B13-cluster", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
