"""The planner from Python (test/Integration/torch-plan.test): run under
mpirun; usage: torch_plan.py BUILD_PYTHON_DIR CACHE_DIR.

- distopt.calibrate(comm) measures the links (inside nodes too, where
  there are several ranks per node) and the rates, the same dict on every
  rank, in the format distopt-plan reads;
- distopt.plan() chooses within the memory budget, and
  distopt.compile(pipeline="auto") compiles that choice;
- DistributedOptimizer(model, pipeline="auto", plan=...) under a budget
  only ZeRO-3 meets runs it with units, and trains as torch.optim.AdamW
  does on the same gradients (every rank sees the same batch, so the
  average is each rank's own gradient: bit for bit at 1 and 2 ranks,
  within 1e-6 of each tensor's magnitude at 3, where a mean of three
  equal values may round);
- bad settings are refused by name.
"""

import json
import sys

import torch

sys.path.insert(0, sys.argv[1])
CACHE = sys.argv[2]

import distopt  # noqa: E402
from distopt import CompileError  # noqa: E402
from distopt.torch import DistributedOptimizer  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = checks = 0
RECIPE = {"type": "adamw", "lr": 0.01, "weight_decay": 0.1}


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


def raises(kind, needle, fn):
    try:
        fn()
    except kind as e:
        check(needle in str(e), f"{kind.__name__} says '{needle}': {e}")
        return
    check(False, f"no {kind.__name__} ('{needle}')")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 3))


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 12, generator=g), torch.randint(0, 3, (16,), generator=g)


# The links and rates, measured now.
per_node = size // 2 if size % 2 == 0 and size >= 4 else None
calibration = distopt.calibrate(comm, ranks_per_node=per_node, max_mb=4,
                                seconds_per_size=0.02)
same = comm.allgather(json.dumps(calibration, sort_keys=True))
check(len(set(same)) == 1, "every rank gets the same calibration")
check(calibration["world_size"] == size, "calibration's world_size")
for key in ("latency_us", "bandwidth_gb_per_s", "memory_gb_per_s", "matmul_gflops"):
    check(calibration[key] > 0 or (key == "latency_us" and size == 1),
          f"calibration's {key} is positive: {calibration[key]}")
check(("intra_node" in calibration) == (per_node is not None),
      "the link inside nodes is measured where there are nodes of several ranks")

# AdamW in f32 holds 16 bytes per parameter whole, ZeRO-3's 16 / N, ZeRO-2
# 4 + 12 / N: a budget of 1.1 times ZeRO-3's leaves nothing else, and 6 KiB
# nothing at all (ZeRO-3 at 3 ranks needs 27 KiB).
spec = {"model": "mlp", "world_size": size, "optimizer": dict(RECIPE),
        "parameters": [{"name": n, "shape": list(p.shape), "dtype": "f32"}
                       for n, p in model().named_parameters()]}
parameters = sum(p.numel() for p in model().parameters())
budget = int(1.1 * 16 * parameters / size)
if size > 1:
    plan = distopt.plan(spec, calibration, memory_per_rank=budget, keep="backend=mpi")
    chosen = [c for c in plan["candidates"] if c["status"] == "chosen"]
    check(len(chosen) == 1 and chosen[0]["options"] == plan["chosen"],
          "one chosen configuration")
    check(chosen and chosen[0]["memory_bytes"] <= budget, "the choice fits the budget")
    check("zero-stage=3" in plan["chosen"].split(), f"ZeRO-3 chosen: {plan['chosen']}")
    none = distopt.plan(spec, calibration, memory_per_rank=6 * 1024)
    check("chosen" not in none, "nothing fits 6 KiB")
    library = distopt.compile(spec, pipeline="auto backend=mpi", calibration=calibration,
                              memory_per_rank=budget, cache=CACHE, comm=comm)
    step = distopt.Step(library)
    check(any(v.shard_of for v in step.args), "the auto-compiled step is sharded")
    raises(CompileError, "no configuration holds its model state within",
           lambda: distopt.compile(spec, pipeline="auto", calibration=calibration,
                                   memory_per_rank=1024, cache=CACHE))

# Units chosen by the planner, against torch.optim.AdamW.
ours = model()
reference = model()
opt = DistributedOptimizer(ours, dict(RECIPE), pipeline="auto", cache=CACHE,
                           plan={"calibration": calibration, "memory_per_rank": budget})
if size > 1:
    check("zero-stage=3" in opt.pipeline.split(), f"ZeRO-3 chosen: {opt.pipeline}")
    check(opt._units, "ZeRO-3 given the model runs with units")
theirs = torch.optim.AdamW(reference.parameters(), **{k: v for k, v in RECIPE.items()
                                                      if k != "type"})
loss_fn = torch.nn.CrossEntropyLoss()
for step in range(5):
    x, y = batch(step)
    loss_fn(ours(x), y).backward()
    opt.step()
    opt.zero_grad()
    loss_fn(reference(x), y).backward()
    theirs.step()
    theirs.zero_grad()
state = ours.state_dict()  # (gathered: collective)
worst = max(((state[n] - p.detach()).abs().max() / p.detach().abs().max()).item()
            for n, p in reference.named_parameters())
check(worst <= (0 if size <= 2 else 1e-6),
      f"parameters after 5 steps within {'0' if size <= 2 else '1e-6'}: {worst:.2e}")

# Refusals.
raises(ValueError, "plan takes calibration, memory_per_rank, nodes and allow_lossy",
       lambda: DistributedOptimizer(model(), dict(RECIPE), pipeline="auto",
                                    plan={"budget": 1}))
if size > 1:
    raises(ValueError, f"must divide the world of {size} ranks",
           lambda: DistributedOptimizer(model(), dict(RECIPE), pipeline="auto",
                                        plan={"nodes": size + 1}))
raises(ValueError, "plan is for pipeline='auto'",
       lambda: DistributedOptimizer(model(), dict(RECIPE), pipeline="zero-stage=1",
                                    plan={"nodes": 1}))
raises(ValueError, "are for pipeline='auto'",
       lambda: distopt.compile(spec, pipeline="zero-stage=1", memory_per_rank=budget,
                               cache=CACHE))
raises(CompileError, "pipeline='auto' needs measured links",
       lambda: distopt.compile(spec, pipeline="auto", cache=CACHE))

print(f"torch_plan: rank {rank}: {checks} checks, {failures} failed", flush=True)
sys.exit(1 if failures else 0)
