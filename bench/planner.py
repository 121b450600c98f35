#!/usr/bin/env python3
"""B18: distopt-plan's predictions against measured steps, and its choice
against the best measured configuration.

For each scenario (a model spec, nodes x ranks per node, a link rate on the
emulated cluster, or this machine's shared memory), in the same run:
1. distopt-calibrate --compute --json measures the links (with
   --ranks-per-node, also inside the nodes) and the update rates;
2. distopt-plan --json lists every configuration it considers with its
   predicted step time and model state per rank;
3. every feasible configuration (or a sample of --sample, always with the
   planner's choices) is compiled and run with distopt-run (ZeRO-3 with
   --gather-params: its parameters' all-gather is part of its step, as
   the planner counts it), the median ms per step after the first, the
   faster of two launches;
4. for each memory budget, the planner's choice within it against the
   fastest measured configuration within it.

    /usr/bin/python3 bench/planner.py [--build build] [--scenarios NAME ...]
        [--steps 4] [--sample 20] [--update] [--plot-only] [--replan]
        [--remeasure OPTION]

Results go to bench/results/planner.json (and with --update to B18 in
docs/benchmarks.md, with the scatter plot docs/img/b18-planner.png).
"""
import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchdoc import update_section  # noqa: E402
from common import cluster_available, run_timing  # noqa: E402

MiB = 1 << 20
# name: (spec, nodes, ranks per node, rate or None for shared memory,
#        budgets of model state per rank in MiB)
SCENARIOS = {
    "resnet50-1x4-shm": ("resnet50.json", 1, 4, None, (100, 250)),
    "resnet50-2x2-1gbit": ("resnet50.json", 2, 2, "1gbit", (100, 250)),
    "resnet50-2x2-10gbit": ("resnet50.json", 2, 2, "10gbit", (100, 250)),
    "resnet50-4x1-1gbit": ("resnet50.json", 4, 1, "1gbit", (100, 250)),
    "resnet50-4x1-10gbit": ("resnet50.json", 4, 1, "10gbit", (100, 250)),
    "resnet50-2x2-100mbit": ("resnet50.json", 2, 2, "100mbit", (100, 250)),
    "gpt2-2x2-10gbit": ("gpt2-small.json", 2, 2, "10gbit", (800, 1300)),
    "gpt2-4x1-10gbit": ("gpt2-small.json", 4, 1, "10gbit", (800, 1300)),
    "gpt2-2x2-1gbit": ("gpt2-small.json", 2, 2, "1gbit", (800, 1300)),
}
RESULTS = os.path.join(ROOT, "bench", "results", "planner.json")
# Scenarios measured before greedy ZeRO compiled in reasonable time have
# no greedy rows; their results say so ("greedy": false or missing).
GREEDY_LEFT_OUT = ("Greedy ZeRO (zero-strategy=greedy) is left out of the scenarios {names}: "
                   "when they were measured, a greedy step of ResNet-50's 161 tensors took "
                   "over 10 minutes to compile (one-shot bufferization's analysis of the "
                   "rank's state threaded through a chain of scf.ifs, cubic in the tensors; "
                   "12 s now, docs/lowering.md), so their choices are the planner's among "
                   "the flat configurations (its own order, greedy ones skipped).")
LIBRARIES = os.path.join(tempfile.gettempdir(), "distopt-b18-libraries")


def tool(build, name):
    return os.path.join(build, "bin", name)


def launcher(nodes, per_node, rate):
    """The command prefix that runs a command as nodes x per_node ranks."""
    if rate is None:
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                "-np", str(nodes * per_node)]
    return [os.path.join(ROOT, "scripts", "cluster"), "--nodes", str(nodes),
            "--ranks-per-node", str(per_node), "--rate", rate, "--"]


def run(command, what):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                           f"{done.stderr[-2000:]}")
    return done.stdout


def step_for_world(build, spec, world, tmp):
    """The spec imported for `world` ranks: the step's MLIR path."""
    with open(os.path.join(ROOT, "examples", "specs", spec)) as f:
        data = json.load(f)
    data["world_size"] = world
    path = os.path.join(tmp, f"{spec}.{world}.json")
    with open(path, "w") as f:
        json.dump(data, f)
    mlir = path + ".mlir"
    run([tool(build, "distopt-translate"), "--import-param-spec", path, "-o", mlir],
        "distopt-translate")
    return path, mlir


def compiled(build, mlir, pipeline):
    """distopt-compile's library of `mlir` with `pipeline`, kept in
    LIBRARIES across scenarios (the same world size compiles the same step;
    a large model's takes a minute)."""
    key = hashlib.sha256()
    for part in (open(mlir, "rb").read(), pipeline.encode()):
        key.update(hashlib.sha256(part).digest())
    library = os.path.join(LIBRARIES, key.hexdigest()[:24] + ".so")
    if not os.path.exists(library):
        os.makedirs(LIBRARIES, exist_ok=True)
        run([tool(build, "distopt-compile"), mlir, f"--pipeline={pipeline}",
             "-o", library + ".tmp.so"], "distopt-compile")
        os.replace(library + ".tmp.so", library)
    return library


def measure(build, prefix, mlir, options, steps, tmp):
    """Compiles `options` and runs it (ZeRO-3, which the planner compiles
    with its gather entries, with them); the median ms per step after the
    first."""
    stage3 = "zero-stage=3" in options.split()
    library = compiled(build, mlir, options)
    # The faster of two launches: one disturbed by other work on this
    # machine does not make the row.
    times = []
    for _ in range(2):
        out = run(prefix + [tool(build, "distopt-run"), library, "--steps", str(steps),
                            "--progress-seconds", "0", "--threads", "1"]
                  + (["--gather-params"] if stage3 else []), "distopt-run")
        times.append(run_timing(out).median)
    return min(times)


def plan(build, spec_path, calib, nodes, per_node, budgets, greedy):
    """distopt-plan's feasible configurations in its order (fastest
    predicted first; without `greedy`, greedy ZeRO left out:
    GREEDY_LEFT_OUT), and its choice within each budget: the fastest
    predicted that fits, what distopt-plan --memory-per-rank prints."""
    out = run([tool(build, "distopt-plan"), spec_path, "--calibration", calib,
               "--nodes", str(nodes), "--ranks-per-node", str(per_node),
               "--keep", "backend=mpi", "--json"], "distopt-plan")
    feasible = [c for c in json.loads(out)["candidates"]
                if c["status"] in ("chosen", "feasible")
                and (greedy or "zero-strategy=greedy" not in c["options"].split())]
    chosen = {}
    for budget in budgets:
        fits = [c for c in feasible if c["memory_bytes"] <= budget * MiB]
        chosen[budget] = fits[0]["options"] if fits else None
    return feasible, chosen


def replan(build, name, result, tmp):
    """The predictions and choices of the current planner for the rows
    measured before, from the calibration measured with them."""
    spec, nodes, per_node, _, budgets = SCENARIOS[name]
    calib = os.path.join(tmp, "calibration.json")
    with open(calib, "w") as f:
        json.dump(result["calibration"], f)
    spec_path, _ = step_for_world(build, spec, nodes * per_node, tmp)
    feasible, chosen = plan(build, spec_path, calib, nodes, per_node, budgets,
                            result.get("greedy", False))
    by_options = {frozenset(c["options"].split()): c for c in feasible}
    for row in result["rows"]:
        c = by_options.get(frozenset(row["options"].split()))
        if c:
            row["predicted_ms"] = c["predicted_ms"]
    measured = {frozenset(row["options"].split()): row["options"] for row in result["rows"]}
    result["budgets"] = {str(b): measured.get(frozenset(chosen[b].split()), chosen[b])
                         if chosen[b] else None for b in budgets}
    missing = [c["options"] for c in feasible if frozenset(c["options"].split()) not in measured]
    if missing:
        print(f"{name}: not measured: {missing}")


def remeasure(build, name, result, option, steps):
    """Runs the rows of `result` whose options include `option` again, in
    place (the date in the row's "remeasured")."""
    spec, nodes, per_node, rate, _ = SCENARIOS[name]
    prefix = launcher(nodes, per_node, rate)
    with tempfile.TemporaryDirectory() as tmp:
        _, mlir = step_for_world(build, spec, nodes * per_node, tmp)
        for row in result["rows"]:
            if option not in row["options"].split():
                continue
            before = row["measured_ms"]
            row["measured_ms"] = measure(build, prefix, mlir, row["options"], steps, tmp)
            row["remeasured"] = subprocess.run(["date", "-u", "+%F"], capture_output=True,
                                               text=True).stdout.strip()
            print(f"  {name}: {row['measured_ms']:9.1f} ms measured (before: {before:.1f}): "
                  f"{row['options']}", flush=True)
            with open(RESULTS) as f:  # saved after each row
                saved = json.load(f)
            saved[name] = result
            with open(RESULTS, "w") as f:
                json.dump(saved, f, indent=1)


def calibrate(build, name, path):
    """distopt-calibrate's links and rates for scenario `name`, into `path`."""
    _, nodes, per_node, rate, _ = SCENARIOS[name]
    measured_on = ["--ranks-per-node", str(per_node)] if nodes > 1 and per_node > 1 else []
    out = run(launcher(nodes, per_node, rate) +
              [tool(build, "distopt-calibrate"), "--compute", "--json",
               "--max-mb", "16", "--pool-mb", "64"] + measured_on, "distopt-calibrate")
    with open(path, "w") as f:
        f.write(out.strip().splitlines()[-1])


def scenario(build, name, steps, sample, tmp):
    spec, nodes, per_node, rate, budgets = SCENARIOS[name]
    world = nodes * per_node
    prefix = launcher(nodes, per_node, rate)
    calib = os.path.join(tmp, f"{name}.calib.json")
    calibrate(build, name, calib)
    spec_path, mlir = step_for_world(build, spec, world, tmp)
    feasible, chosen = plan(build, spec_path, calib, nodes, per_node, budgets, True)
    keep = {c for c in chosen.values() if c} | {feasible[0]["options"]}
    if len(feasible) > sample:
        rest = [c for c in feasible if c["options"] not in keep]
        random.Random(42).shuffle(rest)
        picked = {c["options"] for c in rest[:sample - len(keep)]} | keep
        feasible = [c for c in feasible if c["options"] in picked]
    rows = []
    for c in feasible:
        ms = measure(build, prefix, mlir, c["options"], steps, tmp)
        rows.append({"options": c["options"], "predicted_ms": c["predicted_ms"],
                     "measured_ms": ms, "memory_bytes": c["memory_bytes"]})
        print(f"  {name}: {ms:9.1f} ms measured, {c['predicted_ms']:9.1f} predicted: "
              f"{c['options']}", flush=True)
    with open(calib) as f:
        calibration = json.load(f)
    return {"spec": spec, "nodes": nodes, "ranks_per_node": per_node, "rate": rate or "shm",
            "calibration": calibration, "rows": rows,
            "budgets": {str(b): chosen[b] for b in budgets}, "greedy": True}


def summarize(results):
    """The table per scenario and budget, and the error of the predictions."""
    lines = ["| scenario | budget MiB | configs run | planner's choice | measured, ms | best measured, ms | choice / best | median abs. error of predictions |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    worst = 1.0
    errors_all = []
    for name, r in results.items():
        errors = sorted(abs(row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"]
                        for row in r["rows"])
        errors_all += errors
        median_error = errors[len(errors) // 2] if errors else float("nan")
        for budget, choice in r["budgets"].items():
            within = [row for row in r["rows"] if row["memory_bytes"] <= int(budget) * MiB]
            if not within:
                lines.append(f"| {name} | {budget} | 0 | (nothing fits) | | | | |")
                continue
            best = min(within, key=lambda row: row["measured_ms"])
            mine = next((row for row in r["rows"] if row["options"] == choice), None)
            if mine is None:
                lines.append(f"| {name} | {budget} | {len(within)} | {choice} | (not run) | | | |")
                continue
            ratio = mine["measured_ms"] / best["measured_ms"]
            worst = max(worst, ratio)
            short = choice.replace(" backend=mpi", "")
            lines.append(f"| {name} | {budget} | {len(within)} | `{short}` | "
                         f"{mine['measured_ms']:.1f} | {best['measured_ms']:.1f} | "
                         f"{ratio:.2f} | {100 * median_error:.0f}% |")
    errors_all.sort()
    summary = (f"The planner's choice took at most {worst:.2f}x the best measured "
               f"configuration within its budget; over all {len(errors_all)} configurations run, "
               f"the prediction's error was {100 * errors_all[len(errors_all) // 2]:.0f}% at the "
               f"median and {100 * errors_all[int(0.9 * (len(errors_all) - 1))]:.0f}% at the 90th "
               f"percentile." if errors_all else "")
    without = [name for name, r in results.items() if not r.get("greedy")]
    if without:
        summary += " " + GREEDY_LEFT_OUT.format(names=", ".join(without))
    return "\n".join(lines) + "\n\n" + summary + "\n"


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 5))
    values = []
    for name, r in results.items():
        xs = [row["predicted_ms"] for row in r["rows"]]
        ys = [row["measured_ms"] for row in r["rows"]]
        values += xs + ys
        ax.scatter(xs, ys, s=14, label=name)
    low, high = min(values) / 1.3, max(values) * 1.3
    ax.plot([low, high], [low, high], color="gray", linewidth=0.8)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted ms per step (distopt-plan)")
    ax.set_ylabel("measured ms per step (distopt-run)")
    ax.set_title("B18: the planner's cost model against measured steps")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--scenarios", nargs="*", default=list(SCENARIOS))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--plot-only", action="store_true")
    parser.add_argument("--recalibrate", nargs="*", default=[], metavar="NAME",
                        help="with --replan: measure these scenarios' calibrations "
                             "again and add the fits the saved ones lack")
    parser.add_argument("--remeasure", metavar="OPTION",
                        help="run again the saved rows of --scenarios whose options "
                             "include OPTION (e.g. zero-strategy=greedy, after a change "
                             "to the runtime's collectives they use), then --replan")
    parser.add_argument("--replan", action="store_true",
                        help="recompute the predictions and choices of the rows in "
                             "bench/results/planner.json with this build's planner")
    args = parser.parse_args()
    results = {}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            results = json.load(f)
    if args.remeasure:
        for name in args.scenarios:
            if name in results:
                remeasure(args.build, name, results[name], args.remeasure, args.steps)
        args.replan = True
    if args.replan:
        for name in results:
            with tempfile.TemporaryDirectory() as tmp:
                if name in args.recalibrate:
                    # Only what the saved calibration lacks (a newer
                    # distopt-calibrate's fits): the world's fit decided the
                    # bucket caps of the rows measured.
                    path = os.path.join(tmp, "again.json")
                    calibrate(args.build, name, path)
                    saved = results[name]["calibration"]
                    with open(path) as f:
                        for key, value in json.load(f).items():
                            saved.setdefault(key, value)
                replan(args.build, name, results[name], tmp)
        with open(RESULTS, "w") as f:
            json.dump(results, f, indent=1)
    elif not args.plot_only:
        for name in args.scenarios:
            if name not in SCENARIOS:
                sys.exit(f"bench/planner.py: no scenario '{name}' (of {', '.join(SCENARIOS)})")
            if SCENARIOS[name][3] and not cluster_available():
                print(f"{name}: skipped, the emulated cluster is not available here")
                continue
            with tempfile.TemporaryDirectory() as tmp:
                results[name] = scenario(args.build, name, args.steps, args.sample, tmp)
            os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
            with open(RESULTS, "w") as f:
                json.dump(results, f, indent=1)
    text = summarize(results)
    print(text)
    if args.update:
        plot(results, os.path.join(ROOT, "docs", "img", "b18-planner.png"))
        update_section("B18", text)


if __name__ == "__main__":
    main()
