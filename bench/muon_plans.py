#!/usr/bin/python3
"""B16, Muon's and Dion's plans under ZeRO-2 measured against the cost
model's predictions: each matrix on an owner (zero-matrix-plan=owner),
gathered and updated whole on every rank (gather, Moonshot's; Muon) or in
blocks of rows whose low-rank factors alone move (lowrank; Dion), and the
cost model's per-matrix split (auto with the rates measured here).

Muon on ResNet-18 (CIFAR)'s matrices (bench/muon_owners.py's recipe) at 2
ranks, on shared memory and, where scripts/cluster can run, across 2
emulated nodes of 1 rank linked at 1 Gb/s. The rates: one rank's Muon
update rate is the model's FLOPs (getUpdateFlops(), summed from
--distopt-report's owners) over the unsharded step's median time on 2
ranks (each updating every matrix, as the two share the machine); the link's latency and bandwidth are distopt-calibrate's 2-rank
all-reduce on that link (bench/hybrid.py's reading of its samples).

For each plan: --distopt-report's prediction of the matrices' part of the
step (all on owners, all gathered, the model's split) and distopt-run's
median ms per step after the first (the median of `--launches` launches'
medians, one launch of each plan in turn; p10-p90 over them). The
prediction leaves out the element-wise work and the other groups'
collectives, so the measured times are longer by about the same amount
for every plan: the differences are what to compare. On shared memory,
a peer in torch: DDP's all-reduce, then every rank runs Muon on every
matrix (torch.optim.Muon's update; the arithmetic of Moonshot's plan,
which gathers each matrix everywhere). With --optimizer dion: Dion at rank
1/4 (bench/dion_sync.py's step) and, in torch, DDP's all-reduce and Dion
as dion_simple.py writes it on every matrix.

    bench/muon_plans.py [--build build] [--steps 4] [--launches 3]
                        [--optimizer muon|dion]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from types import SimpleNamespace

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Timing, cluster_available, compile_step,  # noqa: E402
                    ddp_then_matrices, launch, report, run_timing, spawn_gloo)
from hybrid import calibrate  # noqa: E402
from muon_owners import muon_step  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The plans each optimizer's matrices can take, and the one off owners.
PLANS = {"muon": ["owner", "gather", "auto"], "dion": ["owner", "lowrank", "auto"]}
AWAY = {"muon": "gathered", "dion": "in blocks of rows"}


def update_rate(build, step, tmp, steps):
    """One rank's Muon update rate (FLOP/s) while the other computes too:
    the matrices' FLOPs over the unsharded step's median time on 2 ranks
    (each updates every matrix)."""
    text = report(build, step, "zero-stage=2 zero-matrix-plan=owner")
    flops = sum(float(m) for m in re.findall(r"^\s+\d+\s+\d+\s+\d+\s+([\d.]+)$", text, re.M)) * 1e6
    sub = os.path.join(tmp, "rate")
    os.makedirs(sub)
    seconds = run_timing(launch(build, compile_step(build, step, "", sub), 2, steps)).median / 1e3
    return flops, flops / seconds


def torch_worker(rank, init, spec, steps, queue):
    """A peer in torch: DDP's all-reduce, then every rank runs Muon on every
    matrix (torch.optim.Muon's update, test/Integration/muon_vs_reference.py)
    and AdamW on the rest: the arithmetic of gathering everywhere
    (Moonshot's plan) with DDP's communication."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "test", "Integration"))
    from muon_vs_reference import muon_step
    ddp_then_matrices(
        rank, init, spec, steps, queue, torch.zeros_like,
        lambda p, g, buffer: muon_step(p, g, buffer, 0.02, torch.float32,
                                       weight_decay=0.01))


def dion_torch_worker(rank, init, spec, steps, queue):
    from dion_sync import torch_worker as dion_worker
    dion_worker(rank, init, spec, steps, queue)


def prediction(text, away="gathered"):
    """(chosen, all on owners, all off owners) ms and the count off owners
    (gathered, or in blocks of rows) from --distopt-report's model
    section."""
    match = re.search(rf"(\d+) matrices: (\d+) {away}, \d+ on owners, predicted ([\d.]+) us "
                      rf"\(all on owners ([\d.]+) us, all {away} ([\d.]+) us\)", text)
    total, gathered, chosen, owners, everywhere = match.groups()
    return float(chosen) / 1e3, float(owners) / 1e3, float(everywhere) / 1e3, int(gathered), int(total)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--optimizer", choices=sorted(PLANS), default="muon")
    args = parser.parse_args()
    plans, away, name = PLANS[args.optimizer], AWAY[args.optimizer], args.optimizer.title()
    links = [("shared memory", None)]
    if cluster_available():
        links.append(("2 nodes, 1 Gb/s", "1gbit"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.optimizer == "dion":
            from dion_sync import dion_step
            step = dion_step(args.build, "resnet18-cifar.json", 2, tmp)
        else:
            step = muon_step(args.build, "resnet18-cifar.json", 2, tmp)
        flops, rate = update_rate(args.build, step, tmp, args.steps)
        print(f"ResNet-18 (CIFAR), {name}: {flops / 1e9:.1f} GFLOP of updates per step; "
              f"one rank's rate {rate / 1e9:.1f} GFLOP/s\n")
        print(f"| link | latency us | GB/s | plan | matrices {away} | predicted ms "
              "| measured ms per step (p10-p90) |")
        print("|---|---:|---:|---|---:|---:|---:|")
        for label, shaped in links:
            latency, bandwidth = calibrate(SimpleNamespace(build=args.build),
                                           shaped or "unshaped", across=shaped is not None)
            rates = (f"zero-update-gflops={rate / 1e9:.3f} zero-latency-us={latency * 1e6:.3f} "
                     f"zero-bandwidth-gb-per-s={bandwidth / 1e9:.4f}")
            chosen, owners, everywhere, gathered, total = prediction(
                report(args.build, step, f"zero-stage=2 {rates}"), away)
            predicted = {"owner": (owners, 0), plans[1]: (everywhere, total),
                         "auto": (chosen, gathered)}
            libraries = []
            for plan in plans:
                sub = os.path.join(tmp, f"{len(links)}-{plan}-{shaped}")
                os.makedirs(sub)
                options = (f"zero-stage=2 {rates}" if plan == "auto"
                           else f"zero-stage=2 zero-matrix-plan={plan}")
                libraries.append(compile_step(args.build, step, options, sub))
            runs = {plan: [] for plan in plans}
            for _ in range(args.launches):
                for plan, library in zip(plans, libraries):
                    runs[plan].append(run_timing(run_on(args.build, library, shaped, args.steps)))
            if shaped is None:
                spec = json.load(open(step[:-len(".mlir")] + ".json"))
                worker = dion_torch_worker if args.optimizer == "dion" else torch_worker
                timing = spawn_gloo(worker, 2, spec, 1 + args.steps)
                everywhere = f"{total} of {total}" if args.optimizer == "muon" else ""
                print(f"| {label} | | | torch: DDP + every rank every matrix | {everywhere} "
                      f"| | {timing.fmt(0)} |", flush=True)
            for plan in plans:
                timings = runs[plan]
                timing = Timing(statistics.median(t.median for t in timings),
                                min(t.lo for t in timings), max(t.hi for t in timings))
                ms, shared = predicted[plan]
                print(f"| {label} | {latency * 1e6:.0f} | {bandwidth / 1e9:.3f} | {plan} "
                      f"| {shared} of {total} | {ms:.0f} | {timing.fmt(0)} |", flush=True)


def run_on(build, library, shaped, steps):
    """distopt-run on 2 ranks: here, or on 2 emulated nodes whose links
    are shaped to `shaped`."""
    if shaped is None:
        return launch(build, library, 2, steps)
    command = [os.path.join(ROOT, "scripts", "cluster"), "--nodes", "2", "--ranks-per-node", "1",
               "--rate", shaped, "--", os.path.join(build, "bin", "distopt-run"), library,
               "--steps", str(steps), "--progress-seconds", "0"]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


if __name__ == "__main__":
    main()
