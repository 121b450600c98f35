#!/usr/bin/env python3
"""Dion's low-rank sync (--distopt-dion-low-rank-sync), checked by running it.

Each rank's Dion update reads its own gradient and averages the factors
P = B Q and R = B^T P over the ranks instead of the gradient; each rank's
momentum keeps its own error. Dion's steps are linear in the momentum and
the gradient, so in exact arithmetic the parameters follow Dion on the
averaged gradient, and the mean of the ranks' momenta follows its
momentum. distopt-run feeds gradients that differ per rank and average to
the same values at any world size (step_harness.py), so one float64
reference (Dion on the averaged gradients, from the paper's equations in
dion_vs_reference.py) stands for every world size.

Tolerance, and why: in floating point the sync sums the ranks' products
where the plain step sums the ranks' gradients first; the two round
differently, and the orthonormalization of P amplifies that by its
condition number, as it does torch's float32 rounding. Each Dion tensor
(the parameter, the momentum's mean in the checkpoint, the right factor)
must be as close to the float64 answer as torch's float32 computation of
the same steps is: within 4 times its error, or 2e-6 of the tensor's
change (dion_vs_reference.py's bound). Tensors of other groups (the AdamW
biases) reduce their gradients as before: bit for bit the plain step's.

Checked, for test/Integration/Inputs/dion.json at 2, 3 and 5 ranks: the
sync alone, with every matrix's factors in one batch (dion-batch-mb), and
under ZeRO-2 (flat and greedy) and ZeRO-3 (the AdamW group sharded, Dion
whole on every rank), at 4 ranks under hybrid sharding; every
rank holds the same parameters; a checkpoint saved by the synced step at 3
ranks resumes under the sync at 2 ranks and under the plain step at 2,
and the plain step's checkpoint resumes under the sync at 5 (the momentum
is saved as the mean of the ranks' copies, which every rank resumes from);
each ends within the bound of the unbroken reference. With dynamic loss
scaling (dion-sync.json) and an inf injected into one rank's own Dion
gradient at steps 2 and 3 (also with 2 micro-batches per step, where the
overflow check reads the mean divided by them), every rank skips those
steps, and the run ends where the plain step's does (within 1e-5,
normwise).

usage: dion_low_rank_sync.py SPEC_DIR -- [--bin DIR] [--mpirun CMD]
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dion_vs_reference as ref  # noqa: E402
from mlir_exec import Tally  # noqa: E402
from step_harness import pattern  # noqa: E402

LR = 0.0625
STEPS = 6
SYNC = "dion-low-rank-sync"
VARIANTS = {
    "sync": SYNC,
    "sync-zero2": SYNC + " zero-stage=2",
    "sync-zero2-greedy": SYNC + " zero-stage=2 zero-strategy=greedy",
    "sync-zero3": SYNC + " zero-stage=3",
    # Every matrix's factors in one all-reduce for P and one for R.
    "sync-batched": SYNC + " dion-batch-mb=25",
}


class Runner:
    def __init__(self, bin_dir, mpirun, tmp):
        self.bin, self.mpirun, self.tmp = bin_dir, shlex.split(mpirun), tmp

    def tool(self, name):
        return os.path.join(self.bin, name) if self.bin else name

    def compile(self, spec, ranks, pipeline, label, **keys):
        """The spec at `ranks` ranks (and these top-level keys) compiled
        under `pipeline`: its .so."""
        with open(spec) as f:
            text = json.load(f)
        text.update(keys, world_size=ranks)
        base = os.path.join(self.tmp, f"{label}-{ranks}")
        with open(base + ".json", "w") as f:
            json.dump(text, f)
        subprocess.run([self.tool("distopt-translate"), "--import-param-spec",
                        base + ".json", "-o", base + ".mlir"], check=True)
        subprocess.run([self.tool("distopt-compile"), base + ".mlir",
                        "--pipeline=" + pipeline, "-o", base + ".so"],
                       check=True)
        return base + ".so"

    def run(self, library, ranks, steps, save, resume=None, extra=()):
        """distopt-run's output; raises on failure."""
        cmd = self.mpirun + ["-np", str(ranks), self.tool("distopt-run"),
                             library, "--steps", str(steps), "--lr", str(LR),
                             "--save", save, "--print-every", "1", *extra]
        if resume:
            cmd += ["--resume", resume]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError((out.stdout + out.stderr)[-3000:])
        return out.stdout

    @staticmethod
    def header(checkpoint):
        """A checkpoint's JSON header (docs/checkpoint.md, format 1) and the
        offset of its data."""
        with open(checkpoint, "rb") as f:
            blob = f.read()
        length = int.from_bytes(blob[16:24], "little")
        data = (24 + length + 63) // 64 * 64
        return json.loads(blob[24:24 + length]), blob[data:]

    def tensors(self, checkpoint):
        """{"role.name": float64 array} of a checkpoint's f32 tensors."""
        header, data = self.header(checkpoint)
        return {f"{t['role']}.{t['name']}": np.frombuffer(
                    data[t["offset"]:t["offset"] + t["bytes"]],
                    np.float32).astype(np.float64)
                for t in header["tensors"] if t["dtype"] == "f32"}


def dion_reference(spec, dtype):
    """Dion on the averaged gradients for STEPS steps: {name: array} of
    each Dion parameter, its momentum and its right factor (Q^T)."""
    with open(spec) as f:
        text = json.load(f)
    options = dict(text["optimizer"])
    out = {}
    for p in text["parameters"]:
        shape = tuple(p["shape"])
        if len(shape) < 2:
            continue
        name, n = p["name"], int(np.prod(shape))
        rows, cols = shape[0], n // shape[0]
        rank = ref.dion_rank(rows, cols, options.get("rank"),
                             options.get("rank_fraction", 1.0))
        x = torch.tensor(pattern(name, n).reshape(shape), dtype=dtype)
        m = torch.zeros(shape, dtype=dtype)
        qt = torch.tensor(ref.starting_factor(rank, cols, options.get("seed", 0)),
                          dtype=dtype)
        for step in range(STEPS):
            g = torch.tensor(pattern(f"{name}g{step}", n).reshape(shape),
                             dtype=dtype)
            ref.dion_step(x, g, m, qt, LR, **{k: v for k, v in options.items()
                                               if k in ("mu", "weight_decay",
                                                        "epsilon")})
        out[f"param.{name}"] = x.numpy().ravel()
        out[f"state.{name}.momentum"] = m.numpy().ravel()
        out[f"state.{name}.right_factor"] = qt.numpy().ravel()
    return out


def within_bound(got, exact, torch32, start):
    """Dion's tensors within 4 x torch float32's error (or 2e-6 of their
    change) of the float64 answer: the names that are not."""
    bad = []
    for name, answer in exact.items():
        if name not in got:
            bad.append(f"{name} (missing)")
            continue
        change = float(np.max(np.abs(answer - start.get(name, 0.0))))
        ours = float(np.max(np.abs(got[name] - answer)))
        theirs = float(np.max(np.abs(torch32[name].astype(np.float64) - answer)))
        if not np.all(np.isfinite(got[name])) or ours > max(4 * theirs,
                                                             2e-6 * change):
            bad.append(f"{name} (error {ours:.3g}, torch's {theirs:.3g})")
    return bad


def arguments():
    """SPEC_DIR -- [--bin DIR] [--mpirun CMD], as the .test passes them."""
    ap = argparse.ArgumentParser()
    ap.add_argument("spec_dir")
    ap.add_argument("--bin", default="")
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root "
                    "--oversubscribe --bind-to none")
    torch.set_num_threads(1)
    return ap.parse_args([a for a in sys.argv[1:] if a != "--"])


def checker(spec, runner, tally):
    """ends_right(label, checkpoint, plain=None): a check that the
    checkpoint's Dion tensors are within the bound of the float64 reference
    of `spec` and, given the plain step's checkpoint, the other groups' bit
    for bit its."""
    exact = dion_reference(spec, torch.float64)
    torch32 = dion_reference(spec, torch.float32)
    with open(spec) as f:
        start = {f"param.{p['name']}": pattern(p["name"], int(np.prod(p["shape"])))
                 for p in json.load(f)["parameters"]}

    def ends_right(label, checkpoint, plain=None):
        got = runner.tensors(checkpoint)
        bad = within_bound(got, exact, torch32, start)
        if plain is not None:  # the other groups: bit for bit
            plain = runner.tensors(plain)
            bad += [f"{k} (differs from the plain step)" for k in plain
                    if k not in exact and not np.array_equal(plain[k], got.get(k))]
        tally.check(not bad, label + (f"; differs: {', '.join(bad)}" if bad else ""))
    return ends_right


def main():
    args = arguments()
    tally = Tally()
    spec = os.path.join(args.spec_dir, "dion.json")
    with tempfile.TemporaryDirectory() as tmp:
        r = Runner(args.bin, args.mpirun, tmp)
        ends_right = checker(spec, r, tally)

        for ranks in (2, 3, 5):
            plain = os.path.join(tmp, f"plain{ranks}.ckpt")
            r.run(r.compile(spec, ranks, "", "plain"), ranks, STEPS, plain)
            ends_right(f"dion.json {ranks} ranks: the plain step within the "
                       "bound of the reference", plain)
            for label, pipeline in VARIANTS.items():
                saved = os.path.join(tmp, f"{label}{ranks}.ckpt")
                out = r.run(r.compile(spec, ranks, pipeline, label), ranks,
                            STEPS, saved)
                tally.check("replicas agree" in out,
                            f"dion.json {ranks} ranks, {label}: replicas agree")
                ends_right(f"dion.json {ranks} ranks, {label}: within the bound "
                           f"of the reference over {STEPS} steps", saved, plain)
        saved = os.path.join(tmp, "hybrid4.ckpt")
        r.run(r.compile(spec, 4, SYNC + " hybrid-shard-size=2 zero-stage=2",
                        "hybrid"), 4, STEPS, saved)
        ends_right("dion.json 4 ranks, sync under hybrid ZeRO-2 (2x2): within "
                   "the bound of the reference", saved)

        # Checkpoints: the momentum saved as the ranks' mean, resumed at
        # another world size, synced or not.
        half = os.path.join(tmp, "half3.ckpt")
        r.run(r.compile(spec, 3, SYNC, "sync"), 3, STEPS // 2, half)
        momenta = [t for t in r.header(half)[0]["tensors"]
                   if t["name"].endswith(".momentum")]
        tally.check(len(momenta) == 3 and not any("rank" in t for t in momenta),
                    "the synced step's checkpoint holds one momentum per "
                    "matrix (the ranks' mean), not a copy per rank")
        for label, ranks, pipeline in (("synced", 2, SYNC), ("plain", 2, "")):
            resumed = os.path.join(tmp, f"resumed-{label}.ckpt")
            r.run(r.compile(spec, ranks, pipeline, f"resume-{label}"), ranks,
                  STEPS - STEPS // 2, resumed, resume=half)
            ends_right(f"saved synced at 3 ranks, resumed {label} at {ranks}: "
                       "within the bound of the unbroken reference", resumed)
        plain_half = os.path.join(tmp, "plainhalf3.ckpt")
        r.run(r.compile(spec, 3, "", "plain"), 3, STEPS // 2, plain_half)
        resumed = os.path.join(tmp, "resumed-5.ckpt")
        r.run(r.compile(spec, 5, SYNC, "sync"), 5, STEPS - STEPS // 2, resumed,
              resume=plain_half)
        ends_right("saved plain at 3 ranks, resumed synced at 5: within the "
                   "bound of the unbroken reference", resumed)

        # Loss scaling: an inf in one rank's own Dion gradient (distopt-run
        # poisons the first gradient, Dion's matrix here) skips the step on
        # every rank, as the overflow check now reads the ranks' own
        # gradients agreed over the world.
        # With gradient accumulation the check reads the mean divided by
        # the micro-batches: that too becomes the rank's own.
        scaled = os.path.join(args.spec_dir, "dion-sync.json")
        inject = ("--inject-inf=2,3",)
        for ranks, micro in ((2, 1), (3, 1), (3, 2)):
            spec_label = "dion-sync.json" + (f" ({micro} micro-batches)" if micro > 1 else "")
            plain = os.path.join(tmp, f"scaled-plain{ranks}.ckpt")
            r.run(r.compile(scaled, ranks, "", "scaled-plain", grad_accumulation=micro),
                  ranks, STEPS, plain, extra=inject)
            for label, pipeline in (("sync", SYNC), ("sync-zero2", SYNC + " zero-stage=2"),
                                    ("sync-batched", SYNC + " dion-batch-mb=25")):
                saved = os.path.join(tmp, f"scaled-{label}{ranks}.ckpt")
                out = r.run(r.compile(scaled, ranks, pipeline, "scaled-" + label,
                                      grad_accumulation=micro),
                            ranks, STEPS, saved, extra=inject)
                skipped = [line.split("skipped ")[1].split(",")[0]
                           for line in out.splitlines() if line.startswith("step ")]
                diff = subprocess.run([r.tool("distopt-checkpoint"), "diff",
                                       "--max-rel-diff", "1e-5", saved, plain],
                                      capture_output=True, text=True)
                tally.check(skipped == ["0", "1", "1", "0", "0", "0"]
                            and "replicas agree" in out and diff.returncode == 0,
                            f"{spec_label} {ranks} ranks, {label}, an inf in a "
                            f"rank's own gradient at steps 2 and 3: skipped "
                            f"{' '.join(skipped)}, ends where the plain step "
                            f"does (within 1e-5)"
                            + ("" if diff.returncode == 0 else ": " + diff.stdout + diff.stderr))
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
