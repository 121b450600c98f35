"""Steps that take their hyperparameters at run time (a spec's
runtime_hyperparameters) against torch.optim whose param_groups a program
changes part way (test/Integration/runtime-hyperparameters.test). Run under
mpirun; usage: runtime_hyperparameters.py BUILD_PYTHON_DIR CACHE_DIR.

Every optimizer, in two groups with different rates and decays, plain and
under ZeRO (flat and greedy): 6 steps, the rates, decays, betas, momentum,
eps and alpha of both groups changed before step 3. The gradients of the
ranks are the same tensor times 1..N, so their mean is exact at 1 and 2
ranks: parameters and state must equal torch's bit for bit. Then a
checkpoint restores the hyperparameters a program had set, and bad values
are refused by name. Last, a compiled-in rate that becomes infinite (the
step's rate times a group's lr_scale, a growing schedule) fails the step by
the group's name and changes nothing.
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
checks = failures = 0


def check(cond, what):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


RECIPES = {
    "sgd": {"lr": 0.05, "momentum": 0.9, "dampening": 0.1,
            "weight_decay": 0.01},
    "adam": {"lr": 0.01, "betas": [0.9, 0.95], "weight_decay": 0.01},
    "adamw": {"lr": 0.01, "betas": [0.9, 0.95], "weight_decay": 0.1},
    "rmsprop": {"lr": 0.01, "alpha": 0.9, "momentum": 0.5,
                "weight_decay": 0.01},
    "adagrad": {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.01},
}
TORCH = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam,
         "adamw": torch.optim.AdamW, "rmsprop": torch.optim.RMSprop,
         "adagrad": torch.optim.Adagrad}
SHAPES = {"w": [37, 29], "b": [37], "v": [3, 5, 7]}


def change(group, i):
    """What a program or a scheduler does between steps."""
    group["lr"] *= 0.5
    group["weight_decay"] = 0.05 * (i + 1)
    if "betas" in group:
        group["betas"] = (0.8, 0.99)
    if group.get("momentum"):
        group["momentum"] = 0.7
    if "dampening" in group:
        group["dampening"] = 0.2
    if "eps" in group:
        group["eps"] = 1e-6
    if "alpha" in group:
        group["alpha"] = 0.95
    if "lr_decay" in group:
        group["lr_decay"] = 0.02


def push(session, groups):
    """torch's param_groups into the session's hyperparameters."""
    known = session.hyperparameters
    for i, group in enumerate(groups):
        for key, value in group.items():
            if key == "betas":
                session.set_hyperparameter(f"group{i}.beta1", value[0])
                session.set_hyperparameter(f"group{i}.beta2", value[1])
            elif f"group{i}.{key}" in known:
                session.set_hyperparameter(f"group{i}.{key}", value)


def run(kind, pipeline):
    recipe = RECIPES[kind]
    spec = {"model": "hyper", "world_size": size,
            "runtime_hyperparameters": True,
            "optimizer": {"type": kind, **recipe},
            "parameters": [{"name": n, "shape": s, "dtype": "f32"}
                           for n, s in SHAPES.items()],
            "param_groups": [{"params": ["w", "v"]},
                             {"params": ["b"], "weight_decay": 0.0,
                              "lr": 2 * recipe["lr"]}]}
    step = distopt.Step(distopt.compile(spec, pipeline=pipeline, cache=CACHE,
                                        comm=comm))
    session = distopt.Session(step, comm=comm)
    what = f"{kind} '{pipeline}'"
    torch.manual_seed(0)
    params = {n: torch.randn(s) for n, s in SHAPES.items()}
    for n, p in params.items():
        session.write(n, p)
    reference = {n: p.clone().requires_grad_() for n, p in params.items()}
    kwargs = {k: tuple(v) if k == "betas" else v for k, v in recipe.items()}
    opt = TORCH[kind]([{"params": [reference["w"], reference["v"]]},
                       {"params": [reference["b"]], "weight_decay": 0.0,
                        "lr": 2 * recipe["lr"]}], **kwargs)
    for t in range(6):
        for i, (n, p) in enumerate(reference.items()):
            g = torch.randn(p.shape, generator=torch.Generator().manual_seed(
                100 * t + i))
            p.grad = g * (1 + size) / 2  # the mean of g * (1 + r)
            session.write(n, g * (1 + rank), "grad")
        if t == 2:
            for i, group in enumerate(opt.param_groups):
                change(group, i)
        push(session, opt.param_groups)
        opt.step()
        session.run()
    for n, p in reference.items():
        check(np.array_equal(session.read(n), p.detach().numpy()),
              f"{what}: parameter {n} differs from torch's")
        for key, value in opt.state[p].items():
            if torch.is_tensor(value) and value.dim() > 0:
                check(np.array_equal(session.read(f"{n}.{key}", "state"),
                                     value.numpy()),
                      f"{what}: state {n}.{key} differs from torch's")
    return session


def checkpoint(session):
    path = f"{CACHE}/hyper.ckpt"
    session.set_hyperparameter("group1.lr", 0.125)
    session.set_hyperparameter("group0.weight_decay", 0.25)
    saved = session.hyperparameters
    session.save(path)
    session.set_hyperparameter("group1.lr", 1.0)
    session.lr = 3.0  # every group's rate
    check(session.hyperparameters["group0.lr"] == 3.0,
          "Session.lr sets every group's rate")
    session.load(path)
    check(session.hyperparameters == saved,
          f"load restores the hyperparameters: {session.hyperparameters}")
    for name, value, message in [
            ("group0.lr", -1.0, "must be finite and non-negative"),
            ("group0.beta1", float("nan"), "must be finite"),
            ("group0.eps", float("inf"), "must be finite")]:
        try:
            session.set_hyperparameter(name, value)
            check(False, f"{name} = {value} was accepted")
        except distopt.DistoptError as e:
            check(f"hyperparameter '{name}' {message}" in str(e), str(e))
    try:
        session.set_hyperparameter("group7.lr", 0.1)
        check(False, "an unknown hyperparameter was accepted")
    except KeyError as e:
        check("no runtime hyperparameter 'group7.lr'" in str(e), str(e))


def rate_guard(pipeline):
    """An effective rate that reaches infinity (a rate times lr_scale, a
    growing schedule) fails the step by name before it changes anything;
    the session stays usable."""
    spec = {"model": "guard", "world_size": size,
            "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
            "lr_schedule": {"type": "step", "step_size": 1, "gamma": 1e200},
            "parameters": [{"name": n, "shape": s, "dtype": "f32"}
                           for n, s in SHAPES.items()],
            "param_groups": [{"params": ["b"], "lr_scale": 1e10}]}
    step = distopt.Step(distopt.compile(spec, pipeline=pipeline, cache=CACHE,
                                        comm=comm))
    session = distopt.Session(step, comm=comm)
    what = f"rate guard '{pipeline}'"
    torch.manual_seed(1)
    for n, s in SHAPES.items():
        session.write(n, torch.randn(s))

    def attempt(message):
        before = {n: session.read(n).copy() for n in SHAPES}
        momenta = {n: session.read(f"{n}.momentum_buffer", "state").copy()
                   for n in SHAPES}
        steps = session.steps_done
        try:
            session.run()
            check(False, f"{what}: a rate of {message} ran")
        except distopt.DistoptError as e:
            check(f"learning rate for {message}" in str(e), str(e))
        for n in SHAPES:
            check(np.array_equal(session.read(n), before[n]),
                  f"{what}: a refused step changed {n}")
            check(np.array_equal(session.read(f"{n}.momentum_buffer",
                                              "state"), momenta[n]),
                  f"{what}: a refused step changed {n}'s momentum")
        check(session.steps_done == steps, f"{what}: a refused step counted")

    for n, s in SHAPES.items():
        session.write(n, torch.ones(s), "grad")
    session.lr = 1e300  # times lr_scale 1e10: infinity, for group 1 only
    attempt("param_groups[0]'s parameters is inf")
    session.lr = 1e-3  # the session is usable again: step 0, factor 1
    session.run()
    check(np.isfinite(session.read("b")).all(), f"{what}: step after refusal")
    session.run()  # step 1: factor 1e200, the rate 1e187, finite
    attempt("the optimizer's parameters is inf")  # step 2: factor 1e400


for kind in RECIPES:
    run(kind, "")
for kind in ("sgd", "adamw"):
    run(kind, "zero-stage=2")
    run(kind, "zero-stage=1 zero-strategy=greedy")
checkpoint(run("adam", "zero-stage=3"))
rate_guard("")
rate_guard("zero-stage=2")
print(f"runtime_hyperparameters: rank {rank}: {checks} checks, "
      f"{failures} failed", flush=True)
sys.exit(1 if failures else 0)
