"""Gradient accumulation (test/Integration/accumulation-vs-torch.test): a
spec with grad_accumulation 4 (AdamW; bf16 parameters of 33x17, 17 and 0-d
with fp32 main parameters, and the same in f32) run through the Python
bindings under mpirun for 30 steps: Session.accumulate() after each of a
step's first 3 micro-batches, run() with the 4th.

- accumulate() zeroes the gradient buffers it consumed;
- ZeRO-1 and ZeRO-2 equal the unsharded step bit for bit;
- against torch 1.13 on one process: each rank's micro-batch gradients
  summed in f32 in order (as .grad accumulates under DDP's no_sync, fp32
  for bf16 gradients as NeMo's main_grad), averaged over the ranks and
  divided by 4, then torch.optim.AdamW on fp32 main parameters: within
  2e-6 of each tensor's magnitude (the f32 sums are exact here, multiples
  of 2^-10; the order of the ranks' average and f32 rounding of the update
  differ).

Usage: accumulation_vs_torch.py BUILD_PYTHON_DIR CACHE_DIR
"""

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
K = 4
STEPS = 30
ADAMW = {"lr": 0.01, "betas": (0.9, 0.99), "weight_decay": 0.1}


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


def initial(name):
    g = torch.Generator().manual_seed(3 + len(name))
    return torch.randn(SHAPES[name], generator=g)


def micro_gradient(name, step, micro, r, dtype):
    """Rank r's gradient of micro-batch `micro`: multiples of 2^-10, exact in
    bf16 (8 significant bits) and in their f32 sums."""
    g = torch.Generator().manual_seed(10000 * step + 100 * micro + 10 * r + len(name))
    x = torch.round(torch.randn(SHAPES[name], generator=g) * 8) / 64
    return x.to(dtype)


def run_distopt(dtype, pipeline):
    spec = {"model": "accumulation", "world_size": size,
            "main_params": dtype == "bf16",
            "optimizer": {"type": "adamw", **ADAMW},
            "grad_accumulation": K,
            "parameters": [{"name": n, "shape": list(s), "dtype": dtype}
                           for n, s in SHAPES.items()]}
    step_lib = distopt.Step(distopt.compile(spec, pipeline=pipeline, comm=comm,
                                            cache=CACHE))
    check(step_lib.grad_accumulation == K, "the step says how many micro-batches")
    session = distopt.Session(step_lib, comm=comm)
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    for name in SHAPES:
        session.write(name, initial(name).to(torch_dtype))
        if dtype == "bf16":
            session.write(name, initial(name).to(torch_dtype).float(), "main_param")
    for step in range(STEPS):
        for micro in range(K):
            for name in SHAPES:
                session.write(name, micro_gradient(name, step, micro, rank, torch_dtype),
                              "grad")
            if micro < K - 1:
                session.accumulate()
                if step == 0 and micro == 0:
                    check(all(not np.any(session.read(n, "grad")) for n in SHAPES),
                          "accumulate() zeroes the gradients it consumed")
        session.run()
    role = "main_param" if dtype == "bf16" else "param"
    out = {n: np.array(session.read(n, role)) for n in SHAPES}
    session.close()
    return out


def run_torch(dtype):
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    params = [torch.nn.Parameter(initial(n).to(torch_dtype).float()) for n in SHAPES]
    opt = torch.optim.AdamW(params, **ADAMW)
    for step in range(STEPS):
        for p, name in zip(params, SHAPES):
            ranks = []
            for r in range(size):
                total = torch.zeros(SHAPES[name])
                for micro in range(K):
                    total += micro_gradient(name, step, micro, r, torch_dtype).float()
                ranks.append(total)
            p.grad = sum(ranks) / size / K
        opt.step()
    return {n: p.detach() for n, p in zip(SHAPES, params)}


for dtype in ("f32", "bf16"):
    plain = run_distopt(dtype, "")
    for pipeline in ("zero-stage=1", "zero-stage=2",
                     "zero-stage=2 zero-strategy=greedy"):
        sharded = run_distopt(dtype, pipeline)
        check(all(np.array_equal(sharded[n], plain[n]) for n in SHAPES),
              f"{dtype} {pipeline}: bit for bit as unsharded")
    ref = run_torch(dtype)
    worst = max(float((torch.from_numpy(plain[n]) - ref[n]).abs().max()
                      / ref[n].abs().max()) for n in SHAPES)
    check(worst < 2e-6, f"{dtype}: within 2e-6 of torch: {worst:.1e}")
print(f"accumulation_vs_torch: rank {rank}: {size} ranks, {checks} checks, "
      f"{failures} failed", flush=True)
sys.exit(1 if failures else 0)
