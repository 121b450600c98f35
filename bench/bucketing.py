#!/usr/bin/env python3
"""B3: gradient bucketing on GPT-2 small's gradients, per-tensor against
bucketed all-reduces, and a sweep of the bucket cap.

A step that only averages gradients (one `distopt.all_reduce avg` per
tensor of examples/specs/gpt2-small.json, f32) is compiled with
distopt-compile under several pipelines and run with distopt-run on 2 ranks;
median ms per step after the first (12 steps; for the latency-bound case,
whose sub-millisecond steps vary between launches, 200 steps and the median
of three launches). Two cases: all 148 tensors (124M
elements, bandwidth-bound) and the 98 vectors alone (biases and layer norms,
0.2M elements: latency-bound). Per-tensor is `bucketize=false`; bucketed is
DDP's default (first bucket 1 MB, then 25 MB) and caps from 0.25 to 100 MB,
then with `grad-as-bucket-view` (DDP's gradient_as_bucket_view: the
gradients are written into their buckets, so nothing is packed or unpacked).
The spread is the 10th and 90th percentile of the steps (the widest of
the launches). The bound of each row is memory: the bytes each rank sends
(--distopt-report), each copied at least once at the copy bandwidth
memory gives each rank (common.memory_bound, measured in the same run).
--update writes the table into docs/benchmarks.md (B3) and plots
docs/img/b3-bucketing.png.

    /usr/bin/python3 bench/bucketing.py [--build build] [--steps 12]
        [--latency-steps 200] [--update]
"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plots  # noqa: E402
from benchdoc import update_section  # noqa: E402
from common import (bytes_sent_per_step, collectives_per_step, compile_and_run,  # noqa: E402
                    memory_bound, reduce_only_step, report)

RANKS = 2
VARIANTS = [
    ("per-tensor", "bucketize=false overlap=false"),
    ("bucketed, DDP caps (1 MB first, 25 MB)", "overlap=false"),
    ("bucketed, cap 0.25 MB", "overlap=false bucket-cap-mb=0.25 first-bucket-cap-mb=0.25"),
    ("bucketed, cap 5 MB", "overlap=false bucket-cap-mb=5 first-bucket-cap-mb=5"),
    ("bucketed, cap 100 MB", "overlap=false bucket-cap-mb=100 first-bucket-cap-mb=100"),
    ("bucketed, DDP caps, gradients as bucket views", "overlap=false grad-as-bucket-view"),
    ("bucketed, cap 100 MB, gradients as bucket views",
     "overlap=false bucket-cap-mb=100 first-bucket-cap-mb=100 grad-as-bucket-view"),
]


def plot(results, path):
    """One panel per case: each pipeline's median step with its range."""
    fig, axes = plots.figure(len(results), 11, f"B3: all-reduce of GPT-2 small's gradients, "
                             f"{RANKS} ranks")
    for ax, (case, rows) in zip(axes, results.items()):
        plots.ranged_bars(ax, range(len(rows)), [t for _, t in rows], horizontal=True)
        # The pipelines are the same in every panel: named once, on the left.
        ax.set_yticks(range(len(rows)), [name if ax is axes[0] else "" for name, _ in rows])
        ax.invert_yaxis()
        ax.set_xlabel("ms per step: median, p10-p90")
        ax.set_title(case)
        ax.grid(True, axis="x", alpha=0.3)
    plots.save(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--latency-steps", type=int, default=200,
                    help="steps for the latency-bound case (each well under 1 ms)")
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    spec = json.load(open(os.path.join(ROOT, "examples", "specs", "gpt2-small.json")))
    # (case, gradients, steps, launches): the latency-bound case's medians
    # vary between launches of the same step, so it takes the median of three.
    cases = [("all 148 tensors (124M elements)", spec["parameters"], args.steps, 1),
             ("the 98 vectors (0.2M elements)", [p for p in spec["parameters"] if len(p["shape"]) == 1],
              args.latency_steps, 3)]
    bound = memory_bound(RANKS)
    lines = [f"{RANKS} ranks, f32 gradients of GPT-2 small, `all_reduce avg` only; "
             f"{bound.describe()}.", "",
             "| gradients | pipeline | collectives | ms per step (p10-p90) | per-tensor / this "
             "| memory bound ms | bound / this |",
             "|---|---|---:|---:|---:|---:|---:|"]
    results = {}  # case -> [(pipeline, Timing)]
    with tempfile.TemporaryDirectory() as tmp:
        for case, params, steps, launches in cases:
            step = os.path.join(tmp, "reduce.mlir")
            with open(step, "w") as f:
                f.write(reduce_only_step(params, RANKS))
            baseline = None
            for name, options in VARIANTS:
                ms = compile_and_run(args.build, step, options, RANKS, steps, tmp, launches)
                baseline = baseline or ms
                results.setdefault(case, []).append((name, ms))
                text = report(args.build, step, options)
                least = bound.ms(copied=bytes_sent_per_step(text))
                lines.append(f"| {case} | {name} | {collectives_per_step(text)} | {ms.fmt(3)} "
                             f"| {baseline.median / ms.median:.2f} | {least:.3f} "
                             f"| {least / ms.median:.2f} |")
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.update:
        plot(results, os.path.join(ROOT, "docs", "img", "b3-bucketing.png"))
        update_section("B3", text + "\n![bucketing](img/b3-bucketing.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
