#!/usr/bin/env python3
"""Every optimizer option of a parameter spec reaches the compiled step and
the run: for each optimizer and each of its keys (torch.optim's names),
the spec is imported, compiled and run for 4 steps on 2 ranks twice, with
a base value and with another value that must change the update; the
parameters' hashes (distopt-run --print-params) must differ. An option the
importer or a lowering dropped would leave them identical (Adagrad's
initial_accumulator_value once did). The base values are chosen so that the
option matters: dampening with momentum, nesterov without dampening,
amsgrad with a second moment that can shrink (beta2 = 0.5).

Correctness of the values themselves is optimizers_vs_torch.py's job.

usage: spec_options.py TMPDIR -- --translate T --compile C --run R --mpirun M
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

PARAMS = [{"name": "w", "shape": [64, 67], "dtype": "f32"},
          {"name": "b", "shape": [67], "dtype": "f32"},
          {"name": "s", "shape": [], "dtype": "f32"}]

# (optimizer, base options, key, another value)
CASES = [
    ("sgd", {"momentum": 0.9, "dampening": 0.1}, "lr", 0.02),
    ("sgd", {"momentum": 0.9, "dampening": 0.1}, "momentum", 0.5),
    ("sgd", {"momentum": 0.9, "dampening": 0.1}, "dampening", 0.3),
    ("sgd", {"momentum": 0.9, "dampening": 0.1}, "weight_decay", 0.05),
    ("sgd", {"momentum": 0.9}, "nesterov", True),
    ("sgd", {"momentum": 0.9, "dampening": 0.1}, "maximize", True),
    ("adam", {}, "lr", 0.02),
    ("adam", {}, "betas", [0.8, 0.999]),
    ("adam", {}, "betas", [0.9, 0.99]),
    ("adam", {}, "eps", 1e-2),
    ("adam", {}, "weight_decay", 0.05),
    ("adam", {"betas": [0.9, 0.5]}, "amsgrad", True),
    ("adam", {}, "maximize", True),
    ("adamw", {}, "lr", 0.02),
    ("adamw", {}, "betas", [0.8, 0.999]),
    ("adamw", {}, "betas", [0.9, 0.99]),
    ("adamw", {}, "eps", 1e-2),
    ("adamw", {}, "weight_decay", 0.5),
    ("adamw", {"betas": [0.9, 0.5]}, "amsgrad", True),
    ("adamw", {}, "maximize", True),
    ("rmsprop", {}, "lr", 0.02),
    ("rmsprop", {}, "alpha", 0.9),
    ("rmsprop", {}, "eps", 1e-2),
    ("rmsprop", {}, "weight_decay", 0.05),
    ("rmsprop", {}, "momentum", 0.9),
    ("rmsprop", {}, "centered", True),
    ("rmsprop", {}, "maximize", True),
    ("adagrad", {}, "lr", 0.02),
    ("adagrad", {}, "lr_decay", 0.5),
    ("adagrad", {}, "eps", 1e-2),
    ("adagrad", {}, "weight_decay", 0.05),
    ("adagrad", {}, "initial_accumulator_value", 0.3),
    ("adagrad", {}, "maximize", True),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tmp")
    parser.add_argument("--translate", required=True)
    parser.add_argument("--compile", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--mpirun", required=True)
    args = parser.parse_args()

    cache = {}

    def hashes(label, optimizer):
        # Cases that share a base run it once.
        key = json.dumps(optimizer, sort_keys=True)
        if key not in cache:
            cache[key] = run(label, optimizer)
        return cache[key]

    def run(label, optimizer):
        spec = {"world_size": 2, "optimizer": optimizer, "parameters": PARAMS}
        base = os.path.join(args.tmp, label)
        with open(base + ".json", "w") as f:
            json.dump(spec, f)
        subprocess.run([args.translate, "--import-param-spec", base + ".json", "-o", base + ".mlir"],
                       check=True)
        subprocess.run([args.compile, base + ".mlir", "-o", base + ".so"], check=True)
        out = subprocess.run(shlex.split(args.mpirun) + ["-np", "2", args.run, base + ".so",
                                                         "--steps", "4", "--print-params"],
                             capture_output=True, text=True, check=True).stdout
        return sorted(line for line in out.splitlines() if line.startswith("param "))

    def check(i, case):
        name, base, key, value = case
        before = hashes(f"{i}-base", dict(base, type=name))
        after = hashes(f"{i}-changed", dict(base, type=name, **{key: value}))
        if len(before) != len(PARAMS):
            return f"FAIL: {name} {key}: expected {len(PARAMS)} parameter hashes, got {before}"
        if before == after:
            return f"FAIL: {name} {key}={json.dumps(value)}: the parameters did not change"
        return None

    cases = CASES
    if os.environ.get("SPEC_OPTIONS_SELF_TEST"):
        # A change that cannot matter must be reported (the test can fail).
        cases = [("adagrad", {}, "initial_accumulator_value", 0.0)]
    results = [check(i, c) for i, c in enumerate(cases)]
    failures = [r for r in results if r]
    for r in failures:
        print(r)
    print(f"{len(cases) - len(failures)} of {len(cases)} options reach the run")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
