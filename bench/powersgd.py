#!/usr/bin/env python3
"""B6: PowerSGD on ResNet-18 (CIFAR) and ResNet-50 gradient shapes, 2 ranks:
the compression ratio, and the time to average the gradients compressed at
approximation ranks 1, 2 and 4 against the uncompressed average, with torch
DDP's uncompressed average (gloo) in the same run.

distopt: a step that only averages the f32 gradients, compiled with
`powersgd-rank=R` (PyTorch's eligibility rule, error feedback, warm start;
the rest bucketed) or without compression, run with distopt-run; median ms
per step after the first. Ratio: --distopt-report's compression; the
collectives a step issues are the report's too. At rank 1 also with the
factors batched (`powersgd-batch-mb`): in batches of 25 MiB of gradients
(the hook's DDP bucket) and all in one; their hook column is the hook at
rank 1 (which batches its one bucket's factors too).

torch 1.13: DDP over gloo around a module of the same parameter shapes, and
DDP with PyTorch's powerSGD_hook at the same ranks (same rule, error
feedback, warm start; timed after its two uncompressed iterations, in one
bucket: see torch_worker); each time is (forward + backward under DDP) -
(forward + backward of the same module alone), as in B7.
Spreads (p10-p90): distopt's 10th and 90th percentile step; torch's less
the median forward + backward. The bound of each row is memory: the bytes
each rank sends (--distopt-report), each copied at least once, and for
PowerSGD the compressed gradients streamed three times (read by both
products, written once decompressed), at the copy and in-place bandwidths
memory gives each rank (common.memory_bound, measured in the same run).
Then PowerSGD's arithmetic against OpenBLAS on the same shapes
(powersgd_kernels.py) and, where scripts/cluster can run, the link
bandwidth at which compression starts paying off (powersgd_link.py).
--update writes the tables into docs/benchmarks.md (B6) and plots
docs/img/b6-powersgd.png.

    /usr/bin/python3 bench/powersgd.py [--build build] [--steps 16] [--update]
"""
import argparse
import json
import math
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plots  # noqa: E402
from benchdoc import update_section  # noqa: E402
from powersgd_kernels import arithmetic  # noqa: E402
from powersgd_link import link_tables  # noqa: E402
from common import (backward_step_timing, bytes_sent_per_step, collectives_per_step,  # noqa: E402
                    cluster_available, compile_and_run, memory_bound, reduce_only_step,
                    report, shaped_module,
                    spawn_gloo)

WORLD = 2
RANKS = (1, 2, 4)
# Rank-1 variants with the factors batched: label -> powersgd-batch-mb.
BATCHES = {"1, 25 MiB batches": 25, "1, one batch": 1e6}


def torch_worker(rank, init_file, spec, steps, queue):
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD)
    compute = backward_step_timing(dist, torch, shaped_module(torch, spec), steps + 1).median
    ddp = backward_step_timing(dist, torch, torch.nn.parallel.DistributedDataParallel(
        shaped_module(torch, spec), bucket_cap_mb=25, gradient_as_bucket_view=True), steps + 1)
    # The hook over gloo needs a single bucket: with several, the ranks issue
    # the buckets' P and Q all-reduces in different orders (they are chained
    # through futures completed on gloo's threads) and gloo aborts on
    # messages of different sizes. DDP's first bucket has its own cap.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
    hook = {}
    for r in RANKS:
        module = torch.nn.parallel.DistributedDataParallel(
            shaped_module(torch, spec), bucket_cap_mb=1 << 20, gradient_as_bucket_view=True)
        module.register_comm_hook(powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=r, start_powerSGD_iter=2,
            min_compression_rate=2, use_error_feedback=True, warm_start=True),
            powerSGD_hook.powerSGD_hook)
        for _ in range(2):  # the hook's uncompressed iterations
            module().backward()
        hook[r] = backward_step_timing(dist, torch, module, steps + 1).minus(compute)
    if rank == 0:
        queue.put((ddp.minus(compute), hook))
    dist.barrier()
    dist.destroy_process_group()


def bound_ms(bound, report_text, grad_bytes):
    """The memory bound (ms) of a step with --distopt-report `report_text`
    averaging `grad_bytes` of gradients: what it sends, and what PowerSGD
    streams of the gradients it compresses (those not all-reduced)."""
    compressed = 0
    if "powersgd_all_reduce" in report_text:
        plain = re.search(r"^\s+all_reduce\s+\d+\s+(\d+)", report_text, re.M)
        compressed = grad_bytes - (int(plain.group(1)) if plain else 0)
    return bound.ms(copied=bytes_sent_per_step(report_text), in_place=3 * compressed)


def plot(results, path):
    """One panel per model: distopt and the torch hook at each PowerSGD
    rank, and both uncompressed; medians with their ranges."""
    fig, axes = plots.figure(len(results), 10, f"B6: PowerSGD, {WORLD} ranks")
    labels = ["none"] + [str(r) for r in RANKS]
    for ax, (model, (plain, ours, ddp, hook)) in zip(axes, results.items()):
        plots.ranged_bars(ax, [i - 0.2 for i in range(len(labels))],
                          [plain] + [ours[r][2] for r in RANKS], "distopt", 0.4)
        plots.ranged_bars(ax, [i + 0.2 for i in range(len(labels))],
                          [ddp] + [hook[r] for r in RANKS], "torch DDP / powerSGD_hook", 0.4)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel("PowerSGD rank")
        ax.set_ylabel("ms to average the gradients: median, p10-p90")
        ax.set_title(model)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
    plots.save(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    bound = memory_bound(WORLD)
    lines = [f"{WORLD} ranks, f32 gradients, averaging only (no optimizer update); "
             f"{bound.describe()}.", "",
             "| model | PowerSGD rank | compression | collectives | distopt ms (p10-p90) "
             "| memory bound ms | bound / distopt "
             "| uncompressed / compressed | torch DDP uncompressed ms (p10-p90) "
             "| DDP uncompressed / distopt compressed | torch powerSGD_hook ms (p10-p90) "
             "| hook / distopt |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    results = {}  # model -> (plain, ours, ddp, hook)
    for model in ("resnet18-cifar", "resnet50"):
        spec = json.load(open(os.path.join(ROOT, "examples", "specs", f"{model}.json")))
        with tempfile.TemporaryDirectory() as tmp:
            step = os.path.join(tmp, "reduce.mlir")
            with open(step, "w") as f:
                f.write(reduce_only_step(spec["parameters"], WORLD))
            grad_bytes = 4 * sum(math.prod(p["shape"]) for p in spec["parameters"])
            plain_text = report(args.build, step, "overlap=false")
            plain_count = collectives_per_step(plain_text)
            plain_bound = bound_ms(bound, plain_text, grad_bytes)
            plain = compile_and_run(args.build, step, "overlap=false", WORLD, args.steps, tmp)
            ours = {}  # rank or batch label -> (ratio, collectives, Timing, bound ms)
            variants = {r: f"overlap=false powersgd-rank={r}" for r in RANKS}
            variants.update({label: f"overlap=false powersgd-rank=1 powersgd-batch-mb={mb:g}"
                             for label, mb in BATCHES.items()})
            for key, options in variants.items():
                text = report(args.build, step, options)
                ratio = float(re.search(r"compression: ([\d.]+)x", text).group(1))
                ours[key] = (ratio, collectives_per_step(text),
                             compile_and_run(args.build, step, options, WORLD, args.steps, tmp),
                             bound_ms(bound, text, grad_bytes))
        ddp, hook = spawn_gloo(torch_worker, WORLD, spec, args.steps)
        results[model] = (plain, ours, ddp, hook)
        lines.append(f"| {model} | none | 1.0x | {plain_count} | {plain.fmt(2)} "
                     f"| {plain_bound:.2f} | {plain_bound / plain.median:.2f} | 1.00 "
                     f"| {ddp.fmt(2)} | {ddp.median / plain.median:.2f} | | |")
        for key, (ratio, count, ms, least) in ours.items():
            hook_ms = hook[key if key in hook else 1]
            lines.append(f"| {model} | {key} | {ratio:.1f}x | {count} | {ms.fmt(2)} "
                         f"| {least:.2f} | {least / ms.median:.2f} "
                         f"| {plain.median / ms.median:.2f} | {ddp.fmt(2)} "
                         f"| {ddp.median / ms.median:.2f} | {hook_ms.fmt(2)} "
                         f"| {hook_ms.median / ms.median:.2f} |")
        print("\n".join(lines[-1 - len(ours):]), flush=True)
    lines += ["", "PowerSGD's arithmetic on the compressed tensors' shapes "
              "(bench/powersgd_kernels.py: the products P = MQ and Q' = M^T P, "
              "and the orthogonalization of P and Q, against OpenBLAS on one "
              "thread in the same process; GFLOP/s over all the step's tensors):", "",
              "| model | PowerSGD rank | tensors | products GFLOP/s | OpenBLAS sgemm GFLOP/s "
              "| products / sgemm | orthogonalization GFLOP/s | OpenBLAS Gram-Schmidt GFLOP/s "
              "| orthogonalization / OpenBLAS |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model in ("resnet18-cifar", "resnet50"):
        spec_path = os.path.join(ROOT, "examples", "specs", f"{model}.json")
        for rank in RANKS:
            a = arithmetic(args.build, spec_path, rank)
            (p, pb), (o, ob) = a["products"], a["orthogonalization"]
            lines.append(f"| {model} | {rank} | {a['tensors']} | {p:.1f} | {pb:.1f} | {p / pb:.2f} "
                         f"| {o:.1f} | {ob:.1f} | {o / ob:.2f} |")
            print(lines[-1], flush=True)
    if cluster_available():
        lines += link_tables(args.build)
    else:
        lines += ["", "Not measured here: the emulated cluster (scripts/cluster --check fails)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.update:
        plot(results, os.path.join(ROOT, "docs", "img", "b6-powersgd.png"))
        update_section("B6", text + "\n![PowerSGD](img/b6-powersgd.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
