#!/usr/bin/env python3
"""B8: compile time of the distopt pipeline against the number of tensors.

For synthetic specs of 100, 1k and 10k tensors (scripts/gen-specs.py), times
`distopt-opt --distopt-pipeline=...` (the import is timed apart), repeats
each run, and reports the median, the spread (min-max), the time per tensor
(flat when growth is linear) and the per-pass breakdown at 10k tensors from
-mlir-timing. Prints markdown; --update writes it into docs/benchmarks.md
between the B8 markers.

    bench/compile_time.py [--build build] [--repeat 5] [--update]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import update_section  # noqa: E402
PIPELINES = [
    ("data parallel", "distopt-pipeline"),
    ("ZeRO-2 + PowerSGD", "distopt-pipeline{zero-stage=2 powersgd-rank=4}"),
]
SIZES = [100, 1000, 10000]


def run(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    opt = os.path.join(args.build, "bin", "distopt-opt")
    translate = os.path.join(args.build, "bin", "distopt-translate")

    lines = ["| pipeline | tensors | import (s) | pipeline median (s) | spread (s) | µs per tensor | target |",
             "|---|---:|---:|---:|---:|---:|---|"]
    breakdown = ""
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            spec = os.path.join(tmp, f"s{n}.json")
            ir = os.path.join(tmp, f"s{n}.mlir")
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-specs.py"),
                            "--synthetic", str(n), "-o", spec], check=True)
            t_import = statistics.median(
                run([translate, "--import-param-spec", spec, "-o", ir])
                for _ in range(args.repeat))
            for name, pipeline in PIPELINES:
                times = [run([opt, ir, f"--pass-pipeline=builtin.module({pipeline})",
                              "-o", os.devnull]) for _ in range(args.repeat)]
                med = statistics.median(times)
                target = {1000: "< 0.3 s", 10000: "< 3 s"}.get(n, "")
                if target:
                    limit = 0.3 if n == 1000 else 3.0
                    target += " " + ("met" if med < limit else "MISSED")
                lines.append(f"| {name} | {n} | {t_import:.3f} | {med:.3f} | "
                             f"{min(times):.3f}-{max(times):.3f} | {med / n * 1e6:.1f} | {target} |")
            if n == SIZES[-1]:
                out = subprocess.run(
                    [opt, ir, f"--pass-pipeline=builtin.module({PIPELINES[1][1]})",
                     "-mlir-timing", "-o", os.devnull],
                    check=True, capture_output=True, text=True).stderr
                rows = [l for l in out.splitlines()
                        if re.search(r"\d+\.\d+", l) and "Total" not in l[:20]]
                breakdown = "\n".join(rows)
    text = ("\n".join(lines) + "\n\nPer-pass breakdown, ZeRO-2 + PowerSGD on 10k tensors "
            "(`-mlir-timing`, wall time):\n\n```\n" + breakdown + "\n```\n")
    print(text)
    if args.update:
        update_section("B8", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
