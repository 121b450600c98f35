"""The composed training step (loss scaling, clipping, AdamW) under ZeRO
against the unsharded step and against torch (test/Integration/
composed-vs-torch.test). Run under mpirun; every rank runs every check.
Usage: composed_vs_torch.py BUILD_PYTHON_DIR CACHE_DIR
           [compare | compare-small-scale | save | resume]

The spec (docs/param-spec.md) asks for dynamic loss scaling (growth every 3
clean steps), clip_grad_norm_ (max_norm small enough to clip on every
step) and gradient accumulation over 4 micro-batches (Session.accumulate()
after each of a step's first 3) over three parameters: 33x17, 17 and a 0-d one, in two parameter
groups (no weight decay and half the learning rate for the bias and the
0-d one, as torch param_groups with lr = 0.5 x the base rate), under a
linear warmup and cosine decay (torch's LambdaLR with the lambda of
docs/param-spec.md, stepped every iteration, skipped ones included). Each rank's
micro-batch gradient is its own draw times the current loss scale; at
steps 4, 9 and 21 (of 30) one micro-batch of one rank holds an inf, a NaN,
an inf.

- ZeRO stages 1, 2 and 3 (flat), and 1 and 2 (greedy: whole tensors
  per rank; at 3 ranks each owns one, at 4 one rank owns none), against
  the unsharded step on the same ranks:
  parameters and optimizer state bit for bit, the same gradient norm, loss
  scale, skipped steps and step count. (Each tensor's norm is combined
  from the ranks' chunks in double before it is rounded, as unsharded.)
- The unsharded step against torch 1.13 on one process with each rank's
  micro-batches summed (as .grad accumulates under DDP's no_sync), then
  averaged over the ranks and divided by 4: torch's GradScaler rule written out (its CUDA kernels are not
  available on CPU: skip the step on a non-finite gradient, back off, grow
  every growth_interval clean steps; unscale by the f32 reciprocal),
  torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW. Skipped steps and
  the scale trajectory identical; parameters within 2e-6 of each tensor's
  magnitude (f32 rounding of another summation order of the ranks'
  gradients and of the norm, carried through 30 AdamW steps).
- `compare-small-scale`: the same, with the loss scale below 1 all along
  (where the sharded steps' overflow check cannot be read off the norm's
  sums: see MODE below).
- `save` (at one world size) runs ZeRO-2 for 30 steps, saving a checkpoint
  after step 6, and keeps the final parameters; `resume` (at another)
  loads it into its own ZeRO-2 step and runs steps 7 to 30: the same
  parameters bit for bit, the same scales and rates (the loss scale, its
  tracker and the schedule's count are in the checkpoint). Every rank
  feeds the same gradient here, so that their average is the same at any
  world size.
"""

import math
import sys

import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
CACHE = sys.argv[2]

import distopt  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = checks = 0

SHAPES = {"w": (33, 17), "b": (17,), "s": ()}
STEPS = 30
K = 4  # micro-batches per step
# step -> (value, micro-batch) put in rank step % size's gradient: the
# first, a middle and the last micro-batch (the one the step adds itself)
POISON = {4: (math.inf, 0), 9: (math.nan, 3), 21: (math.inf, 1)}
SCALING = {"type": "dynamic", "init_scale": 1024.0, "growth_factor": 2.0,
           "backoff_factor": 0.5, "growth_interval": 3}
MAX_NORM = 0.05
ADAMW = {"lr": 0.01, "betas": (0.9, 0.99), "weight_decay": 0.1}
NO_DECAY = {"weight_decay": 0.0, "lr_scale": 0.5}  # for "b" and "s"
SCHEDULE = {"type": "warmup_cosine", "warmup_steps": 3, "total_steps": 25,
            "min_lr": 0.001}


def schedule_lambda(s):
    """docs/param-spec.md's warmup_cosine, term for term."""
    w, t = SCHEDULE["warmup_steps"], SCHEDULE["total_steps"]
    r = SCHEDULE["min_lr"] / ADAMW["lr"]
    if s < w:
        return s / max(1.0, w)
    p = min(1.0, (s - w) / max(1, t - w))
    return r + (1.0 - r) * (0.5 * (1.0 + math.cos(math.pi * p)))


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


def initial(name):
    g = torch.Generator().manual_seed(7 + len(name))
    return torch.randn(SHAPES[name], generator=g)


def true_gradient(name, step, micro, r):
    """Rank r's unscaled gradient of micro-batch `micro` at `step`: multiples
    of 2^-10 below 2^6, whose sums over micro-batches and ranks are exact in
    f32, so that the order in which a reduction adds them cannot matter
    (times a power-of-two loss scale, still exact)."""
    g = torch.Generator().manual_seed(1000 * step + 100 * micro + 10 * r + len(name))
    x = torch.randn(SHAPES[name], generator=g) * (1 + r)
    return torch.round(x.clamp(-60, 60) * 1024) / 1024


def poisoned(step, micro, r):
    return step in POISON and r == step % size and micro == POISON[step][1]


MODE = sys.argv[3] if len(sys.argv) > 3 else "compare"
# The same comparisons with a loss scale below 1 all along (2^-8 at first,
# 2^-4 at the end): there 1/scale > 1 could overflow a finite gradient as
# it is unscaled, so the sharded steps' overflow check reads the gradients
# in a pass of its own rather than from the norm's sums.
if MODE == "compare-small-scale":
    SCALING["init_scale"] = 2.0 ** -8
SAME_GRADIENTS = MODE in ("save", "resume")


def run_distopt(pipeline, first=0, save=None, load=None):
    spec = {"model": "composed", "world_size": size,
            "optimizer": {"type": "adamw", **ADAMW},
            "clip_grad_norm": {"max_norm": MAX_NORM},
            "loss_scaling": SCALING,
            "param_groups": [{"params": ["b", "s*"], **NO_DECAY}],
            "lr_schedule": SCHEDULE,
            "grad_accumulation": K,
            "parameters": [{"name": n, "shape": list(s), "dtype": "f32"}
                           for n, s in SHAPES.items()]}
    session = distopt.Session(distopt.Step(distopt.compile(
        spec, pipeline=pipeline, comm=comm, cache=CACHE)), comm=comm)
    for name in SHAPES:
        session.write(name, initial(name))
    scale = SCALING["init_scale"]
    if load:
        session.load(load)
        # The scale the saved run multiplied its gradients by next.
        scale = float(np.load(f"{load}.scale.npy"))
    trace = []
    for step in range(first, STEPS):
        if save and step == first + 6:
            session.save(save)
            if rank == 0:
                np.save(f"{save}.scale.npy", np.array(scale))
        for micro in range(K):
            bad = poisoned(step, micro, rank) if not SAME_GRADIENTS else \
                step in POISON and micro == POISON[step][1] and rank == 0
            for name in SHAPES:
                g = true_gradient(name, step, micro,
                                  0 if SAME_GRADIENTS else rank) * scale
                if bad and name == "w":
                    g.view(-1)[5] = POISON[step][0]
                session.write(name, g, "grad")
            if micro < K - 1:
                session.accumulate()
        out = session.run()
        trace.append((bool(out["skipped"]), out["loss_scale"],
                      out["grad_norm"], session.steps_done,
                      out["scheduled_lr"]))
        scale = out["loss_scale"]
    params = {n: session.read(n) for n in SHAPES}
    state = {f"{n}.{k}": session.read(f"{n}.{k}", "state")
             for n in SHAPES for k in ("exp_avg", "exp_avg_sq")}
    session.close()
    return params, state, trace


def run_torch():
    params = [torch.nn.Parameter(initial(n)) for n in SHAPES]
    opt = torch.optim.AdamW(
        [{"params": params[:1]},
         {"params": params[1:], "weight_decay": NO_DECAY["weight_decay"],
          "lr": ADAMW["lr"] * NO_DECAY["lr_scale"]}], **ADAMW)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, schedule_lambda)
    scale, tracker = torch.tensor(SCALING["init_scale"]), 0
    trace = []
    for step in range(STEPS):
        for p, name in zip(params, SHAPES):
            ranks = []
            for r in range(size):
                total = torch.zeros(SHAPES[name])
                for micro in range(K):
                    g = true_gradient(name, step, micro, r) * scale
                    if poisoned(step, micro, r) and name == "w":
                        g.view(-1)[5] = POISON[step][0]
                    total += g
                ranks.append(total)
            p.grad = sum(ranks) / size / K
        found_inf = any(not torch.isfinite(p.grad).all() for p in params)
        norm = math.nan
        if not found_inf:
            inv = scale.double().reciprocal().float()
            for p in params:
                p.grad.mul_(inv)
            norm = torch.nn.utils.clip_grad_norm_(params, MAX_NORM).item()
            opt.step()
            tracker += 1
            if tracker == SCALING["growth_interval"]:
                scale = scale * SCALING["growth_factor"]
                tracker = 0
        else:
            scale = scale * SCALING["backoff_factor"]
            tracker = 0
        trace.append((found_inf, scale.item(), norm,
                      len(opt.state[params[0]]) and
                      int(opt.state[params[0]]["step"]),
                      opt.param_groups[0]["lr"]))
        scheduler.step()
    return {n: p.detach() for n, p in zip(SHAPES, params)}, trace


if SAME_GRADIENTS:
    checkpoint = f"{CACHE}/composed.ckpt"
    if MODE == "save":
        params, _, trace = run_distopt("zero-stage=2", save=checkpoint)
        if rank == 0:
            np.savez(f"{CACHE}/composed-final.npz", **params)
            np.save(f"{CACHE}/composed-trace.npy", np.array(
                [[t[0], t[1], t[3], t[4]] for t in trace[6:]]))
    else:
        params, _, trace = run_distopt("zero-stage=2", first=6, load=checkpoint)
        saved = np.load(f"{CACHE}/composed-final.npz")
        same = all(np.array_equal(params[n], saved[n]) for n in SHAPES)
        check(same, "resumed parameters bit for bit")
        expected = np.load(f"{CACHE}/composed-trace.npy")
        got = np.array([[t[0], t[1], t[3], t[4]] for t in trace])
        check(np.array_equal(got, expected),
              f"skips, scales, step counts and rates: {got} vs {expected}")
    print(f"composed_vs_torch {MODE}: rank {rank}: {size} ranks, {checks} "
          f"checks, {failures} failed", flush=True)
    sys.exit(1 if failures else 0)

plain_params, plain_state, plain_trace = run_distopt("")
for pipeline in ("zero-stage=1", "zero-stage=2", "zero-stage=3",
                 "zero-stage=1 zero-strategy=greedy",
                 "zero-stage=2 zero-strategy=greedy"):
    params, state, trace = run_distopt(pipeline)
    same = all(np.array_equal(params[n], plain_params[n]) for n in SHAPES)
    same_state = all(np.array_equal(state[k], plain_state[k]) for k in state)
    check(same and same_state, f"{pipeline}: parameters and state bit for "
          "bit as unsharded")
    skipped = [t[0] for t in trace]
    check(trace == plain_trace or [t[:2] + t[3:] for t in trace] ==
          [t[:2] + t[3:] for t in plain_trace] and all(
              s or t[2] == p[2] for s, t, p in zip(skipped, trace,
                                                  plain_trace)),
          f"{pipeline}: the same norms, scales, skips and step counts: "
          f"{trace} vs {plain_trace}")

ref_params, ref_trace = run_torch()
check([t[0] for t in plain_trace] == [t[0] for t in ref_trace],
      f"skipped steps: {[t[0] for t in plain_trace]} vs torch "
      f"{[t[0] for t in ref_trace]}")
check([t[1] for t in plain_trace] == [t[1] for t in ref_trace],
      f"loss scales: {[t[1] for t in plain_trace]} vs torch "
      f"{[t[1] for t in ref_trace]}")
check([t[3] for t in plain_trace] == [t[3] for t in ref_trace],
      f"step counts: {[t[3] for t in plain_trace]} vs torch "
      f"{[t[3] for t in ref_trace]}")
check([t[4] for t in plain_trace] == [t[4] for t in ref_trace],
      f"learning rates as LambdaLR's: {[t[4] for t in plain_trace]} vs "
      f"{[t[4] for t in ref_trace]}")
norms = [(a[2], b[2]) for a, b in zip(plain_trace, ref_trace) if not a[0]]
check(all(abs(a - b) <= 1e-6 * b for a, b in norms),
      f"gradient norms as clip_grad_norm_'s: {norms}")
clipped = sum(1 for _, b in norms if b > MAX_NORM)
check(clipped >= 3, f"clipping took effect on {clipped} steps")
worst = max(float((torch.from_numpy(plain_params[n]) - ref_params[n]).abs()
                  .max() / ref_params[n].abs().max()) for n in SHAPES)
check(worst < 2e-6, f"parameters within 2e-6 of torch's: {worst:.2e}")
print(f"composed_vs_torch: rank {rank}: {size} ranks, {checks} checks, "
      f"{failures} failed; skipped "
      f"{[i for i, t in enumerate(plain_trace) if t[0]]}, final scale "
      f"{plain_trace[-1][1]:g}, largest difference from torch {worst:.1e}",
      flush=True)
sys.exit(1 if failures else 0)
