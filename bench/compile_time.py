#!/usr/bin/env python3
"""B8: compile time of the distopt pipeline against the number of tensors.

For synthetic specs of 100, 1k and 10k tensors (scripts/gen-specs.py), times
`distopt-opt --distopt-pipeline=...` (the import is timed apart), repeats
each run, and reports the median, the spread (p10-p90: with 5 runs, the
fastest and slowest), the time per tensor
(flat when growth is linear) and the per-pass breakdown at 10k tensors from
-mlir-timing. The bound of each row: parsing the input IR (the Parser
line of -mlir-timing, distopt-opt with no pass), which any pipeline pays
before its first pass. Prints markdown; --update writes it into docs/benchmarks.md
between the B8 markers and plots docs/img/b8-compile-time.png.

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
import plots  # noqa: E402
from benchdoc import update_section  # noqa: E402
from common import Timing  # noqa: E402

PIPELINES = [
    ("data parallel", "distopt-pipeline"),
    ("ZeRO-2 + PowerSGD", "distopt-pipeline{zero-stage=2 powersgd-rank=4}"),
]
SIZES = [100, 1000, 10000]


def run(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def parse_time(opt, ir):
    """Seconds distopt-opt spends parsing `ir` (-mlir-timing's Parser)."""
    out = subprocess.run([opt, ir, "-mlir-timing", "-o", os.devnull], check=True,
                         capture_output=True, text=True).stderr
    return float(re.search(r"^\s*([\d.]+) \(\s*[\d.]+%\)\s+Parser$", out, re.M).group(1))


def plot(curves, path):
    fig, (ax,) = plots.figure(1, 6.4, "B8: distopt-opt pipeline time")
    for name, timings in curves.items():
        line, = ax.loglog(SIZES, [t.median for t in timings], "o-", label=name)
        ax.fill_between(SIZES, [t.lo for t in timings], [t.hi for t in timings],
                        color=line.get_color(), alpha=0.15, linewidth=0)
    ax.loglog(SIZES, [3.0 * n / SIZES[-1] for n in SIZES], "k:",
              label="linear through the 10k target (3 s)")
    ax.set_xlabel("tensors")
    ax.set_ylabel("seconds: median, p10-p90")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    plots.save(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    opt = os.path.join(args.build, "bin", "distopt-opt")
    translate = os.path.join(args.build, "bin", "distopt-translate")

    lines = ["| pipeline | tensors | import (s) | pipeline median (s) | spread p10-p90 (s) "
             "| µs per tensor | bound: parsing (s) | bound / pipeline | target |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    breakdown = ""
    curves = {}  # pipeline -> [Timing per size]
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            spec = os.path.join(tmp, f"s{n}.json")
            ir = os.path.join(tmp, f"s{n}.mlir")
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-specs.py"),
                            "--synthetic", str(n), "-o", spec], check=True)
            t_import = statistics.median(
                run([translate, "--import-param-spec", spec, "-o", ir])
                for _ in range(args.repeat))
            t_read = statistics.median(parse_time(opt, ir) for _ in range(args.repeat))
            for name, pipeline in PIPELINES:
                times = Timing.of([run([opt, ir, f"--pass-pipeline=builtin.module({pipeline})",
                                        "-o", os.devnull]) for _ in range(args.repeat)])
                curves.setdefault(name, []).append(times)
                med = times.median
                target = {1000: "< 0.3 s", 10000: "< 3 s"}.get(n, "")
                if target:
                    limit = 0.3 if n == 1000 else 3.0
                    target += " " + ("met" if med < limit else "MISSED")
                lines.append(f"| {name} | {n} | {t_import:.3f} | {med:.3f} | "
                             f"{times.lo:.3f}-{times.hi:.3f} | {med / n * 1e6:.1f} "
                             f"| {t_read:.3f} | {t_read / med:.2f} | {target} |")
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
        plot(curves, os.path.join(ROOT, "docs", "img", "b8-compile-time.png"))
        update_section("B8", text + "\n![compile time](img/b8-compile-time.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
