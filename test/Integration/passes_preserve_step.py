#!/usr/bin/env python3
"""Every transformation preserves the step, checked by running it.

For each spec and rank count, imports the step, applies each variant of the
pipeline (division fusion, bucketing, ZeRO-1/2/3 flat, ZeRO-1/2 greedy,
gradients and parameters as bucket views, bf16 reduced in f32 and f64, the
whole pipeline with asynchronous collectives), compiles it with
distopt-compile, runs 3 steps with distopt-run under mpirun (step_harness.py)
and compares the parameters the ranks end with (shards gathered):
  - with the untransformed step's, bit for bit. distopt-run's gradients are
    multiples of 1/64 whose sums are exact in f32 and bf16, so the order in
    which ranks are summed (which bucketing and sharding change) cannot
    matter: any difference is a bug;
  - across ranks, bit for bit (distopt-run compares the replicas);
  - for the f32 SGD spec, with torch.optim.SGD on the averaged gradients,
    bit for bit (the lowering's SGD matches torch exactly).

usage: passes_preserve_step.py SPEC_DIR RANKS... [--only V1,V2...] [--specs S1,S2...]
                               -- [--bin DIR] [--mpirun CMD]
(--only: just these variants; --specs: these specs of SPEC_DIR, default
sgd3.json and mixed.json; --bin: where the distopt tools are, default the
PATH)
"""
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import step_harness  # noqa: E402

FUSE = "--distopt-fuse-div-into-allreduce"
VARIANTS = {
    "fused": [FUSE],
    "bucketed": [FUSE, "--distopt-bucketize=first-bucket-cap-mb=0.0001"],
    "zero1-flat": [FUSE, "--distopt-shard-optimizer=stage=1"],
    "zero2-flat": [FUSE, "--distopt-shard-optimizer=stage=2"],
    "zero3-flat": [FUSE, "--distopt-shard-optimizer=stage=3"],
    # Whole matrices (Muon) gathered on every rank; and split by the cost
    # model, whose rates here gather the cheaper matrices and leave the
    # others to owners.
    "zero1-gather": [FUSE, "--distopt-shard-optimizer=stage=1 matrix-plan=gather"],
    "zero2-gather": [FUSE, "--distopt-shard-optimizer=stage=2 matrix-plan=gather"],
    "zero3-gather": [FUSE, "--distopt-shard-optimizer=stage=3 matrix-plan=gather"],
    "zero2-modelled": [FUSE, "--distopt-shard-optimizer=stage=2 update-gflops=0.1 "
                       "latency-us=1000 bandwidth-gb-per-s=1"],
    "zero1-greedy": [FUSE, "--distopt-shard-optimizer=stage=1 strategy=greedy"],
    "zero2-greedy": [FUSE, "--distopt-shard-optimizer=stage=2 strategy=greedy"],
    # min-work-ratio=0: asynchronous even where these tiny steps have too
    # little work in between for the cost rule.
    "overlapped": [FUSE, "--distopt-bucketize=first-bucket-cap-mb=0.0001",
                   "--distopt-overlap-collectives=min-work-ratio=0"],
    "overlapped-views": [FUSE, "--distopt-bucketize=first-bucket-cap-mb=0.0001",
                         "--distopt-grad-as-bucket-view",
                         "--distopt-overlap-collectives=min-work-ratio=0"],
    "zero2-flat-views-overlapped": [FUSE, "--distopt-shard-optimizer=stage=2",
                                    "--distopt-grad-as-bucket-view",
                                    "--distopt-overlap-collectives=min-work-ratio=0"],
    "bucket-views": [FUSE, "--distopt-bucketize=first-bucket-cap-mb=0.0001",
                     "--distopt-grad-as-bucket-view"],
    "zero2-flat-views": [FUSE, "--distopt-shard-optimizer=stage=2",
                         "--distopt-grad-as-bucket-view"],
    "zero1-flat-param-views": [FUSE, "--distopt-shard-optimizer=stage=1",
                               "--distopt-param-as-bucket-view"],
    "zero2-flat-both-views": [FUSE, "--distopt-shard-optimizer=stage=2",
                              "--distopt-grad-as-bucket-view",
                              "--distopt-param-as-bucket-view"],
    "widened-zero2-flat": [FUSE, "--distopt-widen-reductions",
                           "--distopt-shard-optimizer=stage=2"],
    "pipeline": ["--distopt-pipeline"],
    "pipeline-zero1": ["--distopt-pipeline=zero-stage=1"],
    "pipeline-zero2": ["--distopt-pipeline=zero-stage=2"],
    "pipeline-zero3": ["--distopt-pipeline=zero-stage=3"],
    "pipeline-views": ["--distopt-pipeline=grad-as-bucket-view"],
    "pipeline-hybrid-zero2": ["--distopt-pipeline=zero-stage=2 hybrid-shard-size=2"],
    "pipeline-hybrid-zero3": ["--distopt-pipeline=zero-stage=3 hybrid-shard-size=2"],
    "pipeline-zero1-views": ["--distopt-pipeline=zero-stage=1 grad-as-bucket-view "
                             "param-as-bucket-view"],
    "pipeline-widened-zero1": ["--distopt-pipeline=reduce-dtype=f32 zero-stage=1"],
    # Reduced in f64, every ZeRO stage and strategy.
    "f64-zero1-flat": [FUSE, "--distopt-widen-reductions=dtype=f64",
                       "--distopt-shard-optimizer=stage=1"],
    "f64-zero2-flat": [FUSE, "--distopt-widen-reductions=dtype=f64",
                       "--distopt-shard-optimizer=stage=2"],
    "f64-zero3-flat": [FUSE, "--distopt-widen-reductions=dtype=f64",
                       "--distopt-shard-optimizer=stage=3"],
    "f64-zero1-greedy": [FUSE, "--distopt-widen-reductions=dtype=f64",
                         "--distopt-shard-optimizer=stage=1 strategy=greedy"],
    "f64-zero2-greedy": [FUSE, "--distopt-widen-reductions=dtype=f64",
                         "--distopt-shard-optimizer=stage=2 strategy=greedy"],
    "pipeline-f64-zero2": ["--distopt-pipeline=reduce-dtype=f64 zero-stage=2"],
}
# Run only where --only names them: the plans of whole-matrix updates
# (the default specs have none) and hybrid sharding (its world sizes).
NAMED_ONLY = {"zero1-gather", "zero2-gather", "zero3-gather", "zero2-modelled",
              "pipeline-hybrid-zero2", "pipeline-hybrid-zero3"}


def run_harness(step_text, ranks, harness, tmp):
    path = os.path.join(tmp, "step.mlir")
    with open(path, "w") as f:
        f.write(step_text)
    return step_harness.run(path, ranks, **harness)


def torch_sgd_reference(spec, ranks, steps=3):
    """torch.optim.SGD on the gradients distopt-run feeds, averaged."""
    params = {}
    for p in spec["parameters"]:
        n = int(np.prod(p["shape"]))
        params[p["name"]] = torch.nn.Parameter(
            torch.tensor(step_harness.pattern(p["name"], n)))
    opt = spec["optimizer"]
    sgd = torch.optim.SGD(list(params.values()), lr=step_harness.LR, foreach=False,
                          momentum=opt.get("momentum", 0),
                          weight_decay=opt.get("weight_decay", 0))
    for k in range(steps):
        for name, param in params.items():
            grads = [step_harness.gradient(name, param.numel(), k, r, ranks)
                     for r in range(ranks)]
            total = grads[0].copy()
            for g in grads[1:]:
                total = total + g
            param.grad = torch.tensor(total / np.float32(ranks))
        sgd.step()
    return {name: p.detach().numpy().view(np.int32).tolist()
            for name, p in params.items()}


def main():
    split = sys.argv.index("--")
    ours = sys.argv[2:split]
    only = None
    if "--only" in ours:
        at = ours.index("--only")
        only = set(ours[at + 1].split(","))
        unknown = only - set(VARIANTS)
        if unknown:
            raise SystemExit(f"unknown variants: {sorted(unknown)}")
        del ours[at:at + 2]
    specs = ["sgd3.json", "mixed.json"]
    if "--specs" in ours:
        at = ours.index("--specs")
        specs = ours[at + 1].split(",")
        del ours[at:at + 2]
    spec_dir, ranks_list = sys.argv[1], [int(r) for r in ours]
    rest = sys.argv[split + 1:]
    harness = {"bin_dir": rest[rest.index("--bin") + 1] if "--bin" in rest else "",
               "mpirun": rest[rest.index("--mpirun") + 1] if "--mpirun" in rest
               else "mpirun --allow-run-as-root --oversubscribe"}
    opt = step_harness.tool(harness["bin_dir"], "distopt-opt")
    translate = step_harness.tool(harness["bin_dir"], "distopt-translate")
    import json
    import tempfile
    failures = checks = 0
    for spec_name in specs:
        spec_path = os.path.join(spec_dir, spec_name)
        spec = json.load(open(spec_path))
        for ranks in ranks_list:
            spec["world_size"] = ranks
            with tempfile.TemporaryDirectory() as tmp:
                sized = os.path.join(tmp, "spec.json")
                json.dump(spec, open(sized, "w"))
                base_text = subprocess.run([translate, "--import-param-spec", sized],
                                           check=True, capture_output=True, text=True).stdout
                base, agree = run_harness(base_text, ranks, harness, tmp)
                checks += 1
                if not agree:
                    failures += 1
                print(f"{'PASS' if agree else 'FAIL'}: {spec_name} {ranks} ranks: replicas agree")
                if spec_name == "sgd3.json":
                    checks += 1
                    ok = torch_sgd_reference(spec, ranks) == base
                    failures += not ok
                    print(f"{'PASS' if ok else 'FAIL'}: {spec_name} {ranks} ranks: equals torch.optim.SGD bit for bit")
                for variant, flags in VARIANTS.items():
                    if (variant not in only) if only else variant in NAMED_ONLY:
                        continue
                    checks += 1
                    text = subprocess.run([opt] + flags, input=base_text, check=True,
                                          capture_output=True, text=True).stdout
                    try:
                        got, _ = run_harness(text, ranks, harness, tmp)
                        ok = got == base
                        detail = "" if ok else f" ({list(got.items())[0][1][:3]} vs {list(base.items())[0][1][:3]})"
                    except RuntimeError as e:
                        ok, detail = False, "\n" + str(e)
                    failures += not ok
                    print(f"{'PASS' if ok else 'FAIL'}: {spec_name} {ranks} ranks: {variant} == untransformed{detail}")
    print(f"{checks - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
