#!/usr/bin/python3
"""B6's link: at which link bandwidth PowerSGD starts paying off.

ResNet-50's gradients averaged by 2 ranks on 2 emulated nodes
(scripts/cluster: a network namespace per node, TCP between them over a
link shaped with tc) at 1, 10 and 25 Gb/s: the uncompressed average against
PowerSGD at ranks 1 and 4, median ms per step (distopt-run), and the
shaped links at which compression was faster.

Next to it, distopt-calibrate's link model: each step costs its local work
plus, per collective, latency + bytes sent / bandwidth (the report's count
and bytes sent per rank; the 2-rank all-reduce calibrated across the shaped
link). The local work's difference (compressing costs passes over the
gradients) is the difference of the two steps on one node (shared memory)
less their modelled communication there; the latency is the median of the
three links' calibrations. Compression pays while the link is slower than
    bandwidth* = (bytes uncompressed - bytes compressed)
                 / (local work difference - collectives difference * latency).
Without netem the links have no added latency; the model's latency is what
distopt-calibrate measured.

    /usr/bin/python3 bench/powersgd_link.py [--build build] [--steps 4]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (cluster_available, compile_step, reduce_only_step,  # noqa: E402
                    report, run_timing)
from hybrid import calibrate, link_bytes_per_s  # noqa: E402

RATES = ("1gbit", "10gbit", "25gbit")
VARIANTS = {"none": "overlap=false", "1": "overlap=false powersgd-rank=1",
            "4": "overlap=false powersgd-rank=4"}


def on_link(build, library, rate, steps):
    """The step on 2 nodes x 1 rank over a link shaped at `rate`; or on one
    node (shared memory) when rate is None. A Timing."""
    run = [os.path.join(build, "bin", "distopt-run"), library, "--steps", str(1 + steps),
           "--progress-seconds", "0"]
    if rate:
        cmd = [os.path.join(ROOT, "scripts", "cluster"), "--nodes", "2", "--ranks-per-node", "1",
               "--rate", rate, "--"] + run
    else:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", "2"] + run
    return run_timing(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def traffic(report_text):
    """(collectives, bytes sent per rank) per step, from --distopt-report."""
    match = re.search(r"^\s+total\s+(\d+)\s+\d+\s+(\d+)", report_text, re.M)
    return int(match.group(1)), int(match.group(2))


def link_tables(build, steps=4, model="resnet50"):
    """The markdown lines of the two tables: measured, and the model."""
    spec = json.load(open(os.path.join(ROOT, "examples", "specs", f"{model}.json")))
    with tempfile.TemporaryDirectory() as tmp:
        step = os.path.join(tmp, "reduce.mlir")
        with open(step, "w") as f:
            f.write(reduce_only_step(spec["parameters"], 2))
        measured, shared, counts = {}, {}, {}
        for key, options in VARIANTS.items():
            library = compile_step(build, step, options, tmp)
            counts[key] = traffic(report(build, step, options))
            shared[key] = on_link(build, library, None, steps)
            for rate in RATES:
                measured[key, rate] = on_link(build, library, rate, steps)
                print(key, rate, measured[key, rate], flush=True)
        links = {rate: calibrate(argparse.Namespace(build=build), rate, True) for rate in RATES}
        intra = calibrate(argparse.Namespace(build=build), None, False)

    lines = ["", f"{model} gradients averaged by 2 ranks on 2 emulated nodes (scripts/cluster, "
             "TCP over a link shaped with tc htb, no added latency); median ms per step "
             f"({steps} after the first), uncompressed / compressed in brackets:", "",
             "| link | distopt-calibrate latency us, GB/s | uncompressed ms | PowerSGD rank 1 ms "
             "| PowerSGD rank 4 ms | link bound, uncompressed ms | bound / uncompressed |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for rate in RATES:
        plain = measured["none", rate]
        cells = [f"{measured[k, rate].fmt(1)} ({plain.median / measured[k, rate].median:.2f})"
                 for k in ("1", "4")]
        speed = link_bytes_per_s(rate)
        # A 2-rank ring all-reduce sends each rank's bytes once over its link.
        bound = counts["none"][1] / speed * 1e3
        latency, bandwidth = links[rate]
        lines.append(f"| {rate[:-4]} Gb/s | {latency * 1e6:.0f}, {bandwidth / 1e9:.2f} "
                     f"| {plain.fmt(1)} | {cells[0]} | {cells[1]} | {bound:.1f} "
                     f"| {bound / plain.median:.2f} |")
    lines += ["", "Where compression starts paying, by the link model (latency and bandwidth "
              "from distopt-calibrate across each shaped link; local work from the shared-memory "
              "runs) and as measured:", "",
              "| PowerSGD rank | collectives | bytes sent per rank | local work more than "
              "uncompressed, ms | model: pays below GB/s (Gb/s) | measured: pays at |",
              "|---:|---:|---:|---:|---:|---|"]
    k_u, s_u = counts["none"]
    for key in ("1", "4"):
        k_c, s_c = counts[key]
        # Local work: shared-memory time less the modelled shared-memory
        # communication, compressed less uncompressed.
        extra = ((shared[key].median - shared["none"].median) * 1e-3
                 - ((k_c - k_u) * intra[0] + (s_c - s_u) / intra[1]))
        # The links' latency: the median of the three calibrations.
        latency = statistics.median(links[rate][0] for rate in RATES)
        denominator = extra + (k_c - k_u) * latency
        model = (s_u - s_c) / denominator if denominator > 0 else float("inf")
        pays = [rate[:-4] + " Gb/s" for rate in RATES
                if measured[key, rate].median < measured["none", rate].median]
        shown = "always" if model == float("inf") else f"{model / 1e9:.2f} ({model * 8 / 1e9:.1f})"
        lines.append(f"| {key} | {k_c} | {s_c / 1e6:.2f} MB | {extra * 1e3:.1f} | {shown} "
                     f"| {', '.join(pays) if pays else 'none of them'} |")
    lines.append(f"\nUncompressed: {k_u} collectives, {s_u / 1e6:.1f} MB sent per rank. "
                 f"Inside a node (shared memory): latency {intra[0] * 1e6:.0f} us, "
                 f"{intra[1] / 1e9:.2f} GB/s.")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    if not cluster_available():
        sys.exit("powersgd_link: scripts/cluster --check fails here (root, iproute2, veth)")
    print("\n".join(link_tables(args.build, args.steps)))


if __name__ == "__main__":
    main()
