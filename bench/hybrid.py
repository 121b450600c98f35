#!/usr/bin/env python3
"""B12: hybrid sharding and the hierarchical all-reduce across emulated
nodes. ResNet-18's gradients (11.2M f32 parameters, SGD with momentum) on 4
ranks as 2 nodes of 2 (scripts/cluster: a network namespace per node,
shared memory inside a node, TCP between nodes over a link shaped with tc):
plain ZeRO-2 against hybrid ZeRO-2 (hybrid-shard-size=2), and the flat
all-reduce of DDP against the hierarchical one (hierarchical-node-size=2).

For each: ms per step, and the bytes that cross between the nodes per step,
as the report predicts them (a group across the nodes carries all its
bytes; a ring over the whole world, laid out node by node, crosses between
nodes on `nodes` of its W links) and as measured (each node's bytes sent
on its link, from a run of 1 + --steps steps less a run of 1 step, over
--steps). Then the link model: distopt-calibrate's measurements of the 2-rank
all-reduce across the shaped link (one rank per node) and inside a node
(shared memory), as t = latency + bytes / bandwidth, extrapolated to 8 nodes x 8 ranks
for GPT-2 small's bf16 gradients, with the model's assumptions in the
table's notes. --update writes the result into docs/benchmarks.md (B12).

    /usr/bin/python3 bench/hybrid.py [--build build] [--rates 1gbit,unshaped] [--steps 4] [--update]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import update_section  # noqa: E402
from common import report, run_timing  # noqa: E402

NODES, PER_NODE = 2, 2
WORLD = NODES * PER_NODE
CONFIGS = [
    ("plain ZeRO-2", "zero-stage=2"),
    ("hybrid ZeRO-2 (2x2)", f"zero-stage=2 hybrid-shard-size={PER_NODE}"),
    ("DDP, flat all-reduce", ""),
    ("DDP, hierarchical all-reduce", f"hierarchical-node-size={PER_NODE} hierarchical-min-bytes=0"),
]


def cluster(args, rate, command, exec_mode=False):
    """Runs `command` on the emulated cluster; (stdout, bytes every node
    sent to the others)."""
    cmd = [os.path.join(ROOT, "scripts", "cluster"), "--nodes", str(NODES),
           "--ranks-per-node", str(PER_NODE)]
    if rate != "unshaped":
        cmd += ["--rate", rate]
    if exec_mode:
        cmd.append("--exec")
    done = subprocess.run(cmd + ["--"] + command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    sent = sum(int(n) for n in re.findall(r"node \d+ sent (\d+) bytes", done.stderr))
    return done.stdout, sent


def predicted_crossing(report_text):
    """Bytes across the nodes per step from --distopt-report's bytes sent
    per rank by process group (or the world's total, with one group)."""
    groups = re.findall(r"^\s+(@\S+) \((\d+) ranks[^)]*\)\s+\d+\s+\d+\s+(\d+)$", report_text, re.M)
    if not groups:
        total = re.search(r"^\s+total\s+\d+\s+\d+\s+(\d+)", report_text, re.M)
        groups = [("@world", str(WORLD), total.group(1))]
    crossing = 0
    for name, size, sent in groups:
        if name in ("@hybrid_replicate", "@inter_node"):
            crossing += int(sent) * WORLD
        elif int(size) == WORLD:
            crossing += int(sent) * NODES  # a ring: `nodes` of its W links cross
    return crossing


def calibrate(args, rate, across):
    """The 2-rank all-reduce across the link, or inside a node, measured by
    distopt-calibrate: (latency s, bandwidth bytes/s). Its least-squares
    fit is dominated by the small sizes on a shaped TCP link, so these are
    read from its samples: the latency is the smallest size's time, the
    bandwidth the median of bytes / time from 1 MiB to 32 MiB."""
    tool = [os.path.join(args.build, "bin", "distopt-calibrate"), "--json", "--min-kb", "1",
            "--max-mb", "32", "--seconds-per-size", "0.2"]
    if across:
        cmd = [os.path.join(ROOT, "scripts", "cluster"), "--nodes", "2", "--ranks-per-node", "1"]
        if rate != "unshaped":
            cmd += ["--rate", rate]
        out = subprocess.run(cmd + ["--"] + tool, capture_output=True, text=True, check=True).stdout
    else:
        out = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"] + tool,
                             capture_output=True, text=True, check=True).stdout
    samples = json.loads(out.strip().splitlines()[-1])["samples"]
    latency = min(samples, key=lambda s: s["bytes"])["us"] * 1e-6
    rates = sorted(s["bytes"] / (s["us"] * 1e-6) for s in samples if s["bytes"] >= 1 << 20)
    return latency, rates[len(rates) // 2]


def link_bytes_per_s(rate):
    """tc's rate ("1gbit", "500mbit") in bytes per second; None unshaped."""
    match = re.fullmatch(r"([\d.]+)([kmg])bit", rate)
    if not match:
        return None
    return float(match.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)] / 8


def ring_time(ranks, nbytes, latency, bandwidth, share=1):
    """A ring reduce-scatter or all-gather of `nbytes` on `ranks` ranks:
    ranks - 1 hops, each sending nbytes/ranks, the link shared by `share`
    rings. The 2-rank all-reduce the fit measured is 2 such hops of
    nbytes/2 each, so a hop costs latency/2 and its bytes / bandwidth."""
    return (ranks - 1) * (latency / 2 + share * nbytes / ranks / bandwidth)


def extrapolate(inter, intra, rails, nodes=8, per_node=8, grad_bytes=124439808 * 2):
    """ZeRO-2's gradient reduce-scatter and parameter all-gather for GPT-2
    small on nodes x per_node ranks (ms), flat and hybrid. `rails`: a link
    per rank rather than one per node."""
    world = nodes * per_node
    flat = 2 * ring_time(world, grad_bytes, *inter)
    # Hybrid: inside the node, then the node's per_node chunk rings across
    # the nodes (sharing the node's one link, or each on its own), then
    # back inside.
    chunk = grad_bytes / per_node
    hybrid = (2 * ring_time(per_node, grad_bytes, *intra)
              + 2 * ring_time(nodes, chunk, *inter, share=1 if rails else per_node))
    return flat * 1e3, hybrid * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rates", default="1gbit,unshaped")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    spec = json.load(open(os.path.join(ROOT, "examples", "specs", "resnet18-cifar.json")))
    spec["world_size"] = WORLD
    step = os.path.join(tmp, "step.mlir")
    with open(os.path.join(tmp, "spec.json"), "w") as f:
        json.dump(spec, f)
    subprocess.run([os.path.join(args.build, "bin", "distopt-translate"), "--import-param-spec",
                    os.path.join(tmp, "spec.json"), "-o", step], check=True)
    run = os.path.join(args.build, "bin", "distopt-run")
    rows = []
    for name, options in CONFIGS:
        library = os.path.join(tmp, f"{len(rows)}.so")
        subprocess.run([os.path.join(args.build, "bin", "distopt-compile"), step,
                        f"--pipeline={options}", "-o", library], check=True)
        predicted = predicted_crossing(report(args.build, step, options))
        for rate in args.rates.split(","):
            out, sent = cluster(args, rate, [run, library, "--steps", str(1 + args.steps),
                                             "--progress-seconds", "0"])
            _, base = cluster(args, rate, [run, library, "--steps", "1", "--progress-seconds", "0"])
            measured = (sent - base) / args.steps
            rows.append((name, rate, run_timing(out), predicted, measured))
            print(rows[-1], flush=True)
    fits = {}
    for rate in args.rates.split(","):
        fits[rate] = calibrate(args, rate, True)
    intra = calibrate(args, None, False)

    lines = [f"ResNet-18 (CIFAR), 11.2M f32 parameters, SGD with momentum, {NODES} emulated "
             f"nodes x {PER_NODE} ranks; {args.steps} steps after the first.", "",
             "| step | link | ms per step (p10-p90) | across nodes per step, report | measured "
             "| measured / report | link bound ms | bound / time |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, rate, timing, predicted, measured in rows:
        # Each node's link carries its share of the crossing bytes.
        speed = link_bytes_per_s(rate)
        bound = f"{measured / NODES / speed * 1e3:.0f}" if speed else "-"
        ratio = f"{measured / NODES / speed * 1e3 / timing.median:.2f}" if speed else "-"
        lines.append(f"| {name} | {rate} | {timing.fmt(1)} | {predicted / 1e6:.1f} MB | "
                     f"{measured / 1e6:.1f} MB | {measured / predicted:.2f} | {bound} | {ratio} |")
    lines += ["", "Link model (distopt-calibrate's 2-rank all-reduce: its smallest size's time, "
              "the median bytes / time from 1 to 32 MiB):", "",
              "| link | latency us | bandwidth GB/s | GPT-2 small ZeRO-2 on 8 nodes x 8, flat ms | hybrid ms | flat / hybrid |",
              "|---|---:|---:|---:|---:|---:|"]
    lines.append(f"| inside a node (shared memory) | {intra[0] * 1e6:.0f} | {intra[1] / 1e9:.3f} | | | |")
    for rate, fit in fits.items():
        for rails in (False, True):
            flat, hybrid = extrapolate(fit, intra, rails)
            links = "a link per rank" if rails else "one link per node"
            lines.append(f"| across nodes, {rate}, {links} | {fit[0] * 1e6:.0f} | {fit[1] / 1e9:.3f} | "
                         f"{flat:.0f} | {hybrid:.0f} | {flat / hybrid:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.update:
        update_section("B12", text)


if __name__ == "__main__":
    main()
