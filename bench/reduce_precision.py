#!/usr/bin/env python3
"""B9: what reducing bf16 gradients in f32 costs. GPT-2 small with bf16
parameters and f32 main parameters (AdamW, 2 ranks), compiled with the
gradients reduced in bf16 (the default) and in f32 (pipeline option
reduce-dtype=f32, --distopt-widen-reductions), with no ZeRO and at ZeRO-2,
all in one run: ms per step (the median of 3 launches of distopt-run, 12
steps each; the spread is the lowest 10th and highest 90th percentile),
bytes each rank sends per step (--distopt-report), and the peak of memory in
use (distopt-run --print-memory). The bound of each row is memory: the
bytes each rank sends, each copied at least once, and the update's 28 bytes
per parameter it updates (bf16 gradient read and bf16 parameter written,
f32 main parameter and state read and written; all parameters without ZeRO,
1/N at ZeRO-2), at the copy and in-place bandwidths memory gives each rank
(common.memory_bound, measured in the same run). What f32 buys, the error, is a test
(test/Integration/reduce-precision.test), not a benchmark.
--update writes the table into docs/benchmarks.md (B9).

    /usr/bin/python3 bench/reduce_precision.py [--build build] [--update]
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import update_section  # noqa: E402
from common import (ADAM_BYTES_PER_PARAM, Timing, bytes_sent_per_step, compile_step,  # noqa: E402
                    launch, memory_bound, report, run_timing)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS, STEPS, LAUNCHES = 2, 12, 3
MIB = 1 << 20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--update", action="store_true")
    args = parser.parse_args()
    spec = json.load(open(os.path.join(ROOT, "examples", "specs", "gpt2-small.json")))
    spec["world_size"] = RANKS
    params = sum(math.prod(p["shape"]) for p in spec["parameters"])
    variants = [(stage, dtype) for stage in (0, 2) for dtype in ("bf16", "f32")]
    rows, times = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        json.dump(spec, open(spec_path, "w"))
        step = os.path.join(tmp, "step.mlir")
        with open(step, "w") as f:
            f.write(subprocess.run(
                [os.path.join(args.build, "bin", "distopt-translate"), "--import-param-spec",
                 spec_path], check=True, capture_output=True, text=True).stdout)
        libraries = {}
        for stage, dtype in variants:
            options = f"zero-stage={stage}" + (" reduce-dtype=f32" if dtype == "f32" else "")
            where = os.path.join(tmp, f"{stage}-{dtype}")
            os.mkdir(where)
            libraries[stage, dtype] = (options, compile_step(args.build, step, options, where))
        runs = {v: [] for v in variants}
        peaks = {}
        # Launches alternate between the variants, so that a slow stretch of
        # the machine does not land on one of them.
        for _ in range(LAUNCHES):
            for v in variants:
                out = launch(args.build, libraries[v][1], RANKS, STEPS, "--print-memory")
                runs[v].append(run_timing(out))
                peaks[v] = int(re.search(r"peak in use (\d+)", out).group(1))
        for v in variants:
            times[v] = Timing(statistics.median(r.median for r in runs[v]),
                              min(r.lo for r in runs[v]), max(r.hi for r in runs[v]))
        bound = memory_bound(RANKS)
        for stage, dtype in variants:
            options = libraries[stage, dtype][0]
            sent = bytes_sent_per_step(report(args.build, step, options))
            ratio = times[stage, dtype].median / times[stage, "bf16"].median
            least = bound.ms(copied=sent,
                             in_place=ADAM_BYTES_PER_PARAM * params / (RANKS if stage else 1))
            rows.append(f"| {'ZeRO-2' if stage else 'no ZeRO'} | {dtype} | `{options}` | "
                        f"{times[stage, dtype].fmt(0)} | {ratio:.2f} | {least:.0f} "
                        f"| {least / times[stage, dtype].median:.2f} | {sent / MIB:.0f} | "
                        f"{peaks[stage, dtype] / MIB:.0f} |")
    text = "\n".join([
        f"GPT-2 small, bf16 parameters with f32 main parameters, AdamW, {RANKS} ranks; "
        f"median of {LAUNCHES} launches of {STEPS} steps; bound: {bound.describe()}.", "",
        "| ZeRO | gradients reduced in | pipeline | ms per step (p10-p90) | time / bf16's "
        "| memory bound ms | bound / this "
        "| MiB sent per rank and step | peak in use MiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|", *rows]) + "\n"
    print(text)
    if args.update:
        update_section("B9", text)


if __name__ == "__main__":
    main()
