"""distopt.torch.DistributedOptimizer and the Python bindings against torch.optim
(test/Integration/torch-optimizer.test). Run under mpirun; every rank runs
every check. Usage: torch_optimizer.py BUILD_PYTHON_DIR CACHE_DIR

- torch.optim's state_dict into DistributedOptimizer and back: after a
  hand-over at step 5, both continue to step 10 on the same gradients and
  end within f32 rounding of each other (AdamW, SGD with momentum; plain and
  ZeRO-2 and ZeRO-3, where state_dict gathers the shards and the model's
  parameters are gathered after every step);
- an LR schedule (LambdaLR) drives the compiled step's rate;
- save_checkpoint / load_checkpoint continue bit for bit;
- bf16 parameters' fp32 main copies start from the parameters the program
  wrote (Session API, every layout);
- errors: a binding of the wrong dtype or shape names the argument, a
  float64 parameter is refused by name, a
  spec the importer rejects raises CompileError with its message.
"""

import gc
import sys
import weakref

import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
CACHE = sys.argv[2]

import distopt  # noqa: E402
from distopt.torch import DistributedOptimizer  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(7, 33), torch.nn.Tanh(),
                               torch.nn.Linear(33, 5))


def gradients(step, module):
    """Deterministic per-rank gradients; the average over ranks is what a
    torch.optim optimizer on one process sees."""
    out = []
    for i, p in enumerate(module.parameters()):
        g = torch.Generator().manual_seed(100 * step + 10 * i)
        base = torch.randn(p.shape, generator=g)
        out.append([base * (1 + r) / 3 for r in range(size)])
    return out


def feed(opt_params, step, module, mine):
    for p, per_rank in zip(opt_params, gradients(step, module)):
        if mine:
            p.grad.copy_(per_rank[rank])
        else:
            p.grad = sum(per_rank) / size


def relative(a, b):
    return max((x - y).abs().max().item() / max(y.abs().max().item(), 1e-12)
               for x, y in zip(a, b))


def hand_over(recipe, pipeline):
    """distopt for 5 steps, state_dict to torch.optim, both 5 more; and the
    other way round."""
    torch_cls = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[
        recipe["type"]]
    kwargs = {k: v for k, v in recipe.items() if k != "type"}

    ours_model = model()
    ours = DistributedOptimizer(ours_model.named_parameters(), recipe,
                                pipeline=pipeline, comm=comm, cache=CACHE)
    for step in range(5):
        feed(list(ours_model.parameters()), step, ours_model, True)
        ours.step()
    theirs_model = model()
    theirs_model.load_state_dict(ours_model.state_dict())
    theirs = torch_cls(theirs_model.parameters(), **kwargs)
    theirs.load_state_dict(ours.state_dict())
    for step in range(5, 10):
        feed(list(ours_model.parameters()), step, ours_model, True)
        ours.step()
        feed(list(theirs_model.parameters()), step, theirs_model, False)
        theirs.step()
    # 2e-6: f32 rounding of a different summation order over 10 steps.
    diff = relative(list(ours_model.parameters()),
                    list(theirs_model.parameters()))
    check(diff < 2e-6, f"{recipe['type']} {pipeline}: distopt -> torch.optim "
          f"hand-over differs by {diff:.2e}")

    # torch.optim -> distopt.
    theirs_model = model()
    theirs = torch_cls(theirs_model.parameters(), **kwargs)
    for step in range(5):
        feed(list(theirs_model.parameters()), step, theirs_model, False)
        theirs.step()
    ours_model = model()
    ours_model.load_state_dict(theirs_model.state_dict())
    ours = DistributedOptimizer(ours_model.named_parameters(), recipe,
                                pipeline=pipeline, comm=comm, cache=CACHE)
    ours.load_state_dict(theirs.state_dict())
    check(ours.session.steps_done == 5 or recipe["type"] == "sgd",
          f"steps done after loading: {ours.session.steps_done}")
    for step in range(5, 10):
        feed(list(ours_model.parameters()), step, ours_model, True)
        ours.step()
        feed(list(theirs_model.parameters()), step, theirs_model, False)
        theirs.step()
    diff = relative(list(ours_model.parameters()),
                    list(theirs_model.parameters()))
    check(diff < 2e-6, f"{recipe['type']} {pipeline}: torch.optim -> distopt "
          f"hand-over differs by {diff:.2e}")
    sd = ours.state_dict()
    check(set(sd["state"][0]) == set(theirs.state_dict()["state"][0]),
          f"state keys {sorted(sd['state'][0])}")


def schedule():
    recipe = {"type": "adamw", "lr": 0.01, "weight_decay": 0.1}
    ours_model, theirs_model = model(), model()
    ours = DistributedOptimizer(ours_model.named_parameters(), recipe,
                                comm=comm, cache=CACHE)
    theirs = torch.optim.AdamW(theirs_model.parameters(), lr=0.01,
                               weight_decay=0.1)
    decay = lambda step: 1.0 / (1 + step)  # noqa: E731
    ours_sched = torch.optim.lr_scheduler.LambdaLR(ours, decay)
    theirs_sched = torch.optim.lr_scheduler.LambdaLR(theirs, decay)
    for step in range(6):
        feed(list(ours_model.parameters()), step, ours_model, True)
        ours.step()
        ours_sched.step()
        feed(list(theirs_model.parameters()), step, theirs_model, False)
        theirs.step()
        theirs_sched.step()
    diff = relative(list(ours_model.parameters()),
                    list(theirs_model.parameters()))
    check(diff < 2e-6, f"LambdaLR: differs by {diff:.2e}")
    # The sixth step ran at the sixth rate.
    check(abs(ours.session.lr - 0.01 / 6) < 1e-12,
          f"the step's rate follows the schedule: {ours.session.lr}")


def checkpoint(tmp):
    recipe = {"type": "adamw", "lr": 0.01}
    runs = []
    for resume in (False, True):
        m = model()
        opt = DistributedOptimizer(m.named_parameters(), recipe,
                                   pipeline="zero-stage=2", comm=comm,
                                   cache=CACHE)
        first = 0
        if resume:
            check(opt.load_checkpoint(tmp) == size, "saved world size")
            first = 3
        for step in range(first, 6):
            feed(list(m.parameters()), step, m, True)
            opt.step()
            if step == 2 and not resume:
                opt.save_checkpoint(tmp)
        runs.append([p.detach().clone() for p in m.parameters()])
    check(all(torch.equal(a, b) for a, b in zip(*runs)),
          "resuming from save_checkpoint is bit for bit")


def errors():
    step = distopt.Step(distopt.compile(
        {"model": "e", "world_size": size, "optimizer": {"type": "sgd",
                                                         "lr": 0.1},
         "parameters": [{"name": "w", "shape": [3, 2], "dtype": "f32"}]},
        comm=comm, cache=CACHE))
    session = distopt.Session(step, comm=comm)
    for bad, words in ((np.zeros((3, 2), np.float64), "float64"),
                       (np.zeros((2, 3), np.float32), "[2, 3]"),
                       (np.zeros((3, 4), np.float32)[:, :2], "contiguous")):
        try:
            session.bind("w", bad)
            check(False, f"binding {words} was accepted")
        except distopt.DistoptError as e:
            check("param 'w'" in str(e) and (words in str(e) or
                                             words == "float64"),
                  f"binding error: {e}")
    mine = np.ones((3, 2), np.float32)
    session.bind("w", mine)
    session.tensor("w", "grad")[:] = 1.0
    session.run()
    check(np.allclose(mine, 0.9), f"the bound array is updated: {mine}")
    session.close()

    m = model()
    ints = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    try:
        DistributedOptimizer([("counts", ints)], {"type": "sgd", "lr": 0.1},
                             comm=comm, cache=CACHE)
        check(False, "a float64 parameter was accepted")
    except distopt.DistoptError as e:
        check("'counts'" in str(e), f"float64 parameter: {e}")
    try:
        DistributedOptimizer(m.named_parameters(),
                             {"type": "adamw", "lr": 1e-3, "momentom": 0.9},
                             comm=comm, cache=CACHE)
        check(False, "a misspelt key was accepted")
    except ValueError as e:
        check("momentom" in str(e), f"misspelt key: {e}")


def lifetimes(tmp):
    """Views keep their session alive; a step closed under an open session
    stays usable by it; bf16 reads as torch; a load that fails on one rank
    changes no rank's buffers."""
    spec = {"model": "l", "world_size": size,
            "optimizer": {"type": "sgd", "lr": 0.5},
            "parameters": [{"name": "w", "shape": [4, 3], "dtype": "f32"},
                           {"name": "h", "shape": [5], "dtype": "bf16"}]}
    step = distopt.Step(distopt.compile(spec, comm=comm, cache=CACHE))
    session = distopt.Session(step, comm=comm)
    alive = weakref.ref(session)
    view = session.tensor("w", "grad", like="torch")
    del session
    gc.collect()
    check(alive() is not None, "a view keeps its session alive")
    session = alive()
    step.close()  # the open session keeps the step
    session.write("w", np.full((4, 3), 2.0, np.float32))
    session.write("h", np.arange(5, dtype=np.float32) / 4)
    view.fill_(1.0)
    session.tensor("h", "grad")[:] = 0
    session.run()
    check(np.array_equal(session.read("w"), np.full((4, 3), 1.5, np.float32)),
          f"a step closed under its session still runs: {session.read('w')}")
    h = session.read("h", like="torch")
    check(h.dtype == torch.bfloat16 and
          torch.equal(h.float(), torch.arange(5.0) / 4),
          f"bf16 read as a torch tensor: {h}")
    good = comm.bcast(f"{tmp}/good.ckpt" if rank == 0 else None)
    session.save(good)
    session.run()  # now the buffers differ from the checkpoint
    before = session.read("w")
    try:
        session.load(good if rank < size - 1 else f"{tmp}/missing.ckpt")
        check(False, "a load that failed on one rank succeeded")
    except distopt.DistoptError as e:
        check("missing.ckpt" in str(e) or "another rank" in str(e),
              f"the failed load names the cause: {e}")
    check(np.array_equal(session.read("w"), before),
          "a failed load changes no buffer on any rank")
    session.close()
    del view, session, h
    gc.collect()
    check(alive() is None, "the session is freed with its last view")


def zero3_in_place_edit():
    """Under ZeRO-3 the model's parameters are gathered copies: an in-place
    edit between steps (no_grad) reaches the step's shards."""
    m = model()
    opt = DistributedOptimizer(m.named_parameters(), {"type": "sgd",
                                                      "lr": 0.1},
                               pipeline="zero-stage=3", comm=comm,
                               cache=CACHE)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.5)
    edited = [p.detach().clone() for p in m.parameters()]
    for p in m.parameters():
        p.grad = torch.zeros_like(p)  # a parameter never given one is refused
    opt.step()  # zero gradients: the parameters stay where the edit put them
    check(all(torch.equal(p, e) for p, e in zip(m.parameters(), edited)),
          "an in-place edit under ZeRO-3 survives the step")


def load_torch_state():
    """torch.optim.SGD's state dict without momentum (momentum_buffer None)
    loads; hyperparameters compiled into the step must match."""
    m = model()
    reference = torch.optim.SGD(m.parameters(), lr=0.1)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    reference.step()
    state = reference.state_dict()
    opt = DistributedOptimizer(model().named_parameters(),
                               {"type": "sgd", "lr": 0.1}, comm=comm,
                               cache=CACHE)
    opt.load_state_dict(state)
    check(opt.session.steps_done == 1, "SGD's state dict sets the step")
    state["param_groups"][0]["momentum"] = 0.9
    try:
        opt.load_state_dict(state)
        check(False, "a state dict of another momentum was accepted")
    except ValueError as e:
        check("'momentum'" in str(e), f"another momentum: {e}")


def main_params_start():
    """bf16 parameters with fp32 main parameters through the Session API:
    a main parameter the program does not write starts from its parameter
    at the first step, under every layout (it used to start at zero and
    wipe the model)."""
    spec = {"model": "mp", "world_size": size, "main_params": True,
            "optimizer": {"type": "sgd", "lr": 0.5},
            "parameters": [{"name": "w", "shape": [37, 11], "dtype": "bf16"},
                           {"name": "b", "shape": [37], "dtype": "bf16"}]}
    torch.manual_seed(3)
    values = {"w": torch.randn(37, 11).bfloat16(),
              "b": torch.randn(37).bfloat16()}
    for pipeline in ("", "zero-stage=2", "zero-stage=3",
                     "zero-stage=2 zero-strategy=greedy"):
        step = distopt.Step(distopt.compile(spec, pipeline=pipeline,
                                            comm=comm, cache=CACHE))
        session = distopt.Session(step, comm=comm)
        for name, value in values.items():
            if pipeline == "":  # through a view, as a training loop does
                session.tensor(name, like="torch").copy_(value)
            else:
                session.write(name, value)
        session.run()  # zero gradients: nothing moves
        for name, value in values.items():
            check(torch.equal(session.read(name, like="torch"), value),
                  f"'{pipeline}': {name} after a step with zero gradients")
            check(torch.equal(session.read(name, "main_param", like="torch"),
                              value.float()),
                  f"'{pipeline}': main {name} starts from the parameter")
        session.close()


hand_over({"type": "adamw", "lr": 0.01, "betas": (0.9, 0.99),
           "weight_decay": 0.05}, "")
hand_over({"type": "adamw", "lr": 0.01, "weight_decay": 0.05}, "zero-stage=2")
hand_over({"type": "adamw", "lr": 0.01, "weight_decay": 0.05}, "zero-stage=3")
hand_over({"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
          "zero-stage=1")
schedule()
checkpoint(comm.bcast(f"{CACHE}/resume.ckpt" if rank == 0 else None))
errors()
lifetimes(comm.bcast(CACHE if rank == 0 else None))
zero3_in_place_edit()
load_torch_state()
main_params_start()
print(f"torch_optimizer: rank {rank}: {checks} checks, {failures} failed",
      flush=True)
sys.exit(1 if failures else 0)
