#!/usr/bin/env python3
"""B7: the end of a data-parallel step on GPT-2 small's gradients (124M f32
parameters; 2 ranks of 1 thread, then 1 rank of 2 threads): averaging the
gradients across ranks and the AdamW update, distopt against torch DDP
(gloo) + torch.optim.AdamW, in one run.

distopt: examples/specs/gpt2-small.json made f32 (no main parameters),
imported, compiled with distopt-compile (the default pipeline; with
grad-as-bucket-view, the setting torch's DDP runs with here; without
bucketing) and run with distopt-run; median ms per step after the first.

torch 1.13: DistributedDataParallel over gloo (25 MB buckets,
gradient_as_bucket_view, DDP's fastest setting) around a module holding
parameters of the same shapes, and AdamW(foreach=True), the same
hyperparameters. The backward pass is what triggers DDP's all-reduces, so
torch's reduce + update time is taken as (forward + backward + step under
DDP) - (forward + backward of the same module without DDP), medians over
the iterations after the first; the forward is a sum of the parameters and
the backward writes their gradients, two memory passes distopt's step does
not need because it is handed the gradients. Spreads (p10-p90): distopt's
10th and 90th percentile step; torch's less the median forward + backward.
The bound of each row is memory: the bytes each rank sends
(--distopt-report), each copied at least once, and AdamW's 28 bytes per
parameter, at the copy and in-place bandwidths memory gives each rank
(common.memory_bound, measured in the same run).
--update writes the tables into docs/benchmarks.md (B7) and plots
docs/img/b7-end-to-end.png.

    /usr/bin/python3 bench/end_to_end.py [--build build] [--steps 6] [--update]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plots  # noqa: E402
from benchdoc import update_section  # noqa: E402
from common import (ADAM_BYTES_PER_PARAM, backward_step_timing, bytes_sent_per_step,  # noqa: E402
                    compile_and_run, gpt2_f32_spec, memory_bound, report, shaped_module,
                    spawn_gloo)

# (ranks, threads per rank): 2 ranks of 1 thread, the table of issue 6;
# 1 rank of 2 threads against torch with 2 intra-op threads (issue 24).
LAYOUTS = [(2, 1), (1, 2)]
PIPELINES = [("default pipeline (buckets)", "overlap=false"),
             ("buckets, gradients as bucket views", "overlap=false grad-as-bucket-view"),
             ("no bucketing", "bucketize=false overlap=false")]


def torch_worker(rank, init_file, spec, steps, threads, queue):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=spec["world_size"])
    opt_spec = spec["optimizer"]
    compute = backward_step_timing(dist, torch, shaped_module(torch, spec), steps)
    ddp = torch.nn.parallel.DistributedDataParallel(shaped_module(torch, spec), bucket_cap_mb=25,
                                                    gradient_as_bucket_view=True)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=opt_spec["lr"],
                                  betas=tuple(opt_spec["betas"]),
                                  weight_decay=opt_spec["weight_decay"], foreach=True)
    total = backward_step_timing(dist, torch, ddp, steps, optimizer)
    if rank == 0:
        queue.put((total, compute))
    dist.barrier()
    dist.destroy_process_group()


def distopt_time(build, spec_path, options, steps, threads, tmp):
    """The step's Timing, and the bytes each rank sends per step."""
    with open(spec_path) as f:
        ranks = json.load(f)["world_size"]
    step = os.path.join(tmp, "step.mlir")
    subprocess.run([os.path.join(build, "bin", "distopt-translate"), "--import-param-spec",
                    spec_path, "-o", step], check=True)
    return (compile_and_run(build, step, options, ranks, steps, tmp, threads=threads),
            bytes_sent_per_step(report(build, step, options)))


def measure(args, ranks, threads):
    """One layout's table (markdown lines) and its timings for the plot."""
    spec = gpt2_f32_spec(ranks)
    params = sum(math.prod(p["shape"]) for p in spec["parameters"])
    bound = memory_bound(ranks, threads_per_rank=threads)
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = os.path.join(tmp, "gpt2-f32.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        # At one rank every pipeline compiles to the same step (the
        # all-reduce and its buckets fold away): one row.
        pipelines = PIPELINES if ranks > 1 else [
            ("any pipeline (one rank: the updates alone)", "overlap=false")]
        ours = {name: distopt_time(args.build, spec_path, options, args.steps, threads, tmp)
                for name, options in pipelines}
    total, compute = spawn_gloo(torch_worker, ranks, spec, args.steps, threads)
    torch_ms = total.minus(compute.median)
    layout = (f"{ranks} ranks, 1 thread per rank" if threads == 1 else
              f"{ranks} rank, {threads} threads (distopt-run --threads {threads}; "
              f"torch.set_num_threads({threads}))")
    lines = [f"GPT-2 small, 124M f32 parameters, AdamW, {layout}; "
             "milliseconds: median (p10-p90).", "",
             f"torch DDP (gloo) + AdamW: forward + backward + step {total.fmt(0)} ms, of which "
             f"forward + backward alone {compute.fmt(0)} ms: reduce + update {torch_ms.fmt(0)} ms. "
             f"Bound: {bound.describe()}.",
             "",
             "| distopt pipeline | ms per step (p10-p90) | memory bound ms | bound / distopt "
             "| torch / distopt | targets: issue 6 (≥ 3x torch)"
             f"{'' if threads == 1 else ', issue 24 (≥ 0.85 of the bound)'} |",
             "|---|---:|---:|---:|---:|---|"]
    for name, (ms, sent) in ours.items():
        ratio = torch_ms.median / ms.median
        least = bound.ms(copied=sent, in_place=ADAM_BYTES_PER_PARAM * params)
        # Rounded down, so that a ratio shown as 0.85 meets a 0.85 target.
        of_bound = math.floor(least / ms.median * 100) / 100
        targets = f"issue 6: {'met' if ratio >= 3 else 'missed'}"
        if threads > 1:
            targets += f"; issue 24: {'met' if of_bound >= 0.85 else 'missed'}"
        lines.append(f"| {name} | {ms.fmt(0)} | {least:.0f} | {of_bound:.2f} | {ratio:.2f} "
                     f"| {targets} |")
    return lines, (layout, ours, torch_ms)


def plot(layouts, path):
    fig, axes = plots.figure(len(layouts), 8 * len(layouts),
                             "B7: reduce + AdamW on GPT-2 small's gradients")
    for ax, (layout, ours, torch_ms) in zip(axes, layouts):
        names = ["torch DDP (gloo) + AdamW"] + [f"distopt: {name}" for name in ours]
        plots.ranged_bars(ax, range(len(names)), [torch_ms] + [ms for ms, _ in ours.values()],
                          horizontal=True)
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        ax.set_title(layout.split(" (")[0])
        ax.set_xlabel("ms per step: median, p10-p90")
        ax.grid(True, axis="x", alpha=0.3)
    plots.save(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    lines, measured = [], []
    for ranks, threads in LAYOUTS:
        table, timings = measure(args, ranks, threads)
        lines += (["", ""] if lines else []) + table
        measured.append(timings)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.update:
        plot(measured, os.path.join(ROOT, "docs", "img", "b7-end-to-end.png"))
        update_section("B7", text + "\n![reduce + update](img/b7-end-to-end.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
