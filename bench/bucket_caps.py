#!/usr/bin/env python3
"""B10: bucket caps chosen for the hardware. distopt-calibrate measures the
all-reduce latency and bandwidth of this machine's 2 ranks; the pipeline's
bucket-latency-us and bucket-bandwidth-gb-per-s then choose the caps
(--distopt-bucketize's link model, docs/bucketing.md). In the same run, the
same steps with DDP's fixed caps (the peer's default: 1 MB first, then
25 MB), a sweep of fixed caps, and no buckets.

Three cases, two with gradients as bucket views (nothing copied into
buckets):
- GPT-2 small's reduce + AdamW update (f32, as B7), with overlap (the
  pipeline's default): each bucket's all-reduce runs while earlier buckets'
  parameters are updated. The model's setting. Again with the gradients
  copied into their buckets (the pipeline's default, without
  grad-as-bucket-view), where a cap also decides how much is copied: a
  tensor as large as the cap stays out of buckets.
- The average of GPT-2's 98 vectors alone (as B3's latency-bound case),
  without overlap: nothing hides a latency, so fewer buckets always win and
  the model's cap is not the best; the row shows what that costs.

Median ms per step after the first, the median of 3 launches (12 steps for
GPT-2, 200 for the vectors), launches alternating between the variants; the
spread is the lowest 10th and highest 90th percentile of the launches.
The bound of each row is memory: the bytes each rank sends
(--distopt-report), each copied at least once, and AdamW's 28 bytes per
parameter where the step updates, at the copy and in-place bandwidths
memory gives each rank (common.memory_bound, measured in the same run).
--update writes the table into docs/benchmarks.md (B10).

    /usr/bin/python3 bench/bucket_caps.py [--build build] [--update]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import update_section  # noqa: E402
from common import (ADAM_BYTES_PER_PARAM, Timing, bytes_sent_per_step,  # noqa: E402
                    collectives_per_step, compile_step, gpt2_f32_spec, launch, memory_bound,
                    reduce_only_step, report, run_timing)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS, LAUNCHES = 2, 3


def calibrate(build):
    """distopt-calibrate's fit on RANKS ranks (its JSON object)."""
    out = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                          "-np", str(RANKS), os.path.join(build, "bin", "distopt-calibrate"),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def variants(link, overlap, views=True, caps=(0.25, 1, 5, 100)):
    fixed = lambda mb: f"bucket-cap-mb={mb} first-bucket-cap-mb={mb}"  # noqa: E731
    base = " ".join(["grad-as-bucket-view"] * views + ["overlap=false"] * (not overlap))
    return [("no buckets", " ".join(["bucketize=false"] + ["overlap=false"] * (not overlap))),
            ("DDP caps (1 MB first, 25 MB)", base),
            ("calibrated", f"{base} bucket-latency-us={link['latency_us']:.4g} "
                           f"bucket-bandwidth-gb-per-s={link['bandwidth_gb_per_s']:.4g}"),
            *[(f"cap {mb} MB", f"{base} {fixed(mb)}") for mb in caps]]


def measure(build, step, cases, steps, tmp):
    """{name: (options, Timing, collectives, bytes sent)} for each (name, options)."""
    libraries = {}
    for i, (name, options) in enumerate(cases):
        where = os.path.join(tmp, str(i))
        os.makedirs(where, exist_ok=True)
        libraries[name] = compile_step(build, step, options, where)
    runs = {name: [] for name, _ in cases}
    # Alternating, so that a slow stretch of the machine hits every variant.
    for _ in range(LAUNCHES):
        for name, _ in cases:
            runs[name].append(run_timing(launch(build, libraries[name], RANKS, steps)))
    result = {}
    for name, options in cases:
        text = report(build, step, options)
        result[name] = (options, Timing(statistics.median(r.median for r in runs[name]),
                                        min(r.lo for r in runs[name]),
                                        max(r.hi for r in runs[name])),
                        collectives_per_step(text), bytes_sent_per_step(text))
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--update", action="store_true")
    args = parser.parse_args()
    link = calibrate(args.build)
    spec = gpt2_f32_spec(RANKS)
    vectors = [p for p in spec["parameters"] if len(p["shape"]) == 1]
    params = sum(math.prod(p["shape"]) for p in spec["parameters"])
    bound = memory_bound(RANKS)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        json.dump(spec, open(spec_path, "w"))
        update_step = os.path.join(tmp, "update.mlir")
        subprocess.run([os.path.join(args.build, "bin", "distopt-translate"),
                        "--import-param-spec", spec_path, "-o", update_step], check=True)
        reduce_step = os.path.join(tmp, "vectors.mlir")
        with open(reduce_step, "w") as f:
            f.write(reduce_only_step(vectors, RANKS))
        update_bytes = ADAM_BYTES_PER_PARAM * params
        for case, step, cases, steps, updated in [
                ("GPT-2 reduce + AdamW, overlap", update_step, variants(link, True), 12,
                 update_bytes),
                ("GPT-2 reduce + AdamW, overlap, gradients copied into buckets", update_step,
                 variants(link, True, views=False, caps=(100,)), 12, update_bytes),
                ("98 vectors, average only, no overlap", reduce_step, variants(link, False),
                 200, 0)]:
            result = measure(args.build, step, cases, steps, tmp)
            best = min(t.median for _, t, _, _ in result.values())
            ddp = result["DDP caps (1 MB first, 25 MB)"][1].median
            for name, (options, timing, collectives, sent) in result.items():
                least = bound.ms(copied=sent, in_place=updated)
                rows.append(f"| {case} | {name} | {collectives} | {timing.fmt(3)} | "
                            f"{ddp / timing.median:.2f} | {best / timing.median:.2f} "
                            f"| {least:.3f} | {least / timing.median:.2f} |")
                print(rows[-1], flush=True)
    text = "\n".join([
        f"{RANKS} ranks. distopt-calibrate: latency {link['latency_us']:.3g} us, bandwidth "
        f"{link['bandwidth_gb_per_s']:.3g} GB/s (worst fit error "
        f"{100 * link['worst_relative_error']:.0f}%); `{link['bucketize_options']}`. "
        f"Bound: {bound.describe()}.", "",
        "| step | bucket caps | collectives | ms per step (p10-p90) | DDP caps / this "
        "| best / this | memory bound ms | bound / this |",
        "|---|---|---:|---:|---:|---:|---:|---:|", *rows]) + "\n"
    print(text)
    if args.update:
        update_section("B10", text)


if __name__ == "__main__":
    main()
