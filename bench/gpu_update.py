#!/usr/bin/env python3
"""B17: distopt's optimizer update on a GPU against torch's fused and foreach
optimizers and the device's copy bandwidth, measured in one run.

Runs on the lent GPU machine (`scripts/gpu-check bench`), which has PyTorch
with CUDA but no LLVM: the steps were compiled here by `scripts/gpu-check
prepare` (f32 AdamW and SGD with momentum over GPT-2 small's 148 tensors and
over one flat 64M tensor, at world size 1, so no collective runs) and are
timed by distopt-run, whose time per step is the step's call through the
host library until its stream is idle (gradients are uploaded before it).
torch's steps are timed the same way: wall clock from the call to
torch.cuda.synchronize(), median over the timed steps.

The bound: AdamW reads the parameter, gradient and two moments and writes
three (28 bytes per f32 parameter); SGD with momentum reads three and writes
two (20 bytes); at the device-to-device copy bandwidth measured here
(read + write bytes over time, torch's copy_ of 1 GiB).
"""
import argparse
import json
import math
import re
import statistics
import subprocess
import time

import torch

BYTES_PER_PARAM = {"adamw": 28, "sgd": 20}


def copy_bandwidth(iters=20):
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / iters
    return 2 * a.numel() * 4 / seconds


def torch_step_ms(spec, impl, steps):
    torch.manual_seed(0)
    params = [torch.randn(p["shape"], device="cuda") for p in spec["parameters"]]
    for p in params:
        p.grad = torch.randn_like(p)
    o = spec["optimizer"]
    flag = {impl: True}
    if o["type"] == "adamw":
        opt = torch.optim.AdamW(params, lr=o["lr"], betas=tuple(o["betas"]),
                                weight_decay=o["weight_decay"], **flag)
    else:
        opt = torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"],
                              weight_decay=o["weight_decay"], **flag)
    for _ in range(3):
        opt.step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    del opt, params
    torch.cuda.empty_cache()
    return times


def distopt_step(run, library, steps):
    out = subprocess.run([run, library, "--steps", str(steps)], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"([\d.]+) ms per step \(median, after the first; p10 ([\d.]+), "
                  r"p90 ([\d.]+)\)", out)
    launches = re.search(r"(\d+) kernel launches", out)
    return (float(m.group(1)), float(m.group(2)), float(m.group(3)),
            int(launches.group(1)) if launches else 0)


def spread(times):
    s = sorted(times)
    pick = lambda f: s[max(math.ceil(f * len(s)), 1) - 1]
    return statistics.median(s), pick(0.1), pick(0.9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, help="distopt-run(-portable)")
    ap.add_argument("--steps", required=True, help="folder of NAME.cuda.so")
    ap.add_argument("--specs", required=True, help="folder of NAME.json")
    ap.add_argument("--iters", type=int, default=12)
    args = ap.parse_args()

    bandwidth = copy_bandwidth()
    name = torch.cuda.get_device_name()
    print(f"{name}; torch {torch.__version__}; device copy {bandwidth / 1e9:.0f} GB/s "
          f"(read + write); median of {args.iters} steps after warm-up\n")
    print("| parameters | optimizer | implementation | ms per step (p10-p90) | "
          "bound ms | bound / this | torch fused / this | kernel launches |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for case in ("gpt2-adamw", "flat-adamw", "gpt2-sgd", "flat-sgd"):
        spec = json.load(open(f"{args.specs}/{case}.json"))
        kind = spec["optimizer"]["type"]
        n = sum(math.prod(p["shape"]) for p in spec["parameters"])
        what = (f"GPT-2 small, {len(spec['parameters'])} tensors" if case.startswith("gpt2")
                else "one flat tensor") + f", {n / 1e6:.1f}M f32"
        bound = BYTES_PER_PARAM[kind] * n / bandwidth * 1e3
        rows = {}
        for impl in ("fused", "foreach"):
            rows[f"torch {impl}"] = (*spread(torch_step_ms(spec, impl, args.iters)), None)
        rows["distopt"] = distopt_step(args.run, f"{args.steps}/{case}.cuda.so", args.iters + 1)
        fused = rows["torch fused"][0]
        for impl, (ms, p10, p90, launches) in rows.items():
            print(f"| {what} | {kind} | {impl} | {ms:.3f} ({p10:.3f}-{p90:.3f}) | "
                  f"{bound:.3f} | {bound / ms:.2f} | {fused / ms:.2f} | "
                  f"{launches if launches is not None else '-'} |", flush=True)


if __name__ == "__main__":
    main()
