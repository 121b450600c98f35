"""Muon and Dion through distopt.torch.DistributedOptimizer
(test/Integration/torch-orthogonalized.test), against their equations in
one process on the whole batch. Run under mpirun; every rank runs every
check. Usage: torch_orthogonalized.py BUILD_PYTHON_DIR CACHE_DIR

A small network (two linear layers and a conv layer: matrices, a 4-D
weight and vectors) takes 6 steps of a batch split evenly across the
ranks (so the mean of the ranks' gradients is the whole batch's). Its
matrices are updated by Muon (muon_vs_reference.py's equations) or Dion
(dion_vs_reference.py's), its vectors by torch.optim.AdamW: the recipe
names only Muon or Dion, and DistributedOptimizer gives what is not a
matrix an AdamW group at the recipe's rate (docs/host-library.md), or the
vectors' group is given, of type adamw with a rate and a key of the
program's own. Plain and under ZeRO-2's greedy layout (each matrix whole
on its owner). The
parameters must agree within 1e-5 of each tensor's magnitude: f32
rounding of different summation orders (the batch split across ranks,
BLAS against torch's products), which the orthogonalization carries on.
(Dion's rank stays below the rank of a 12-sample gradient: beyond it,
columns of P = B Q are rounding noise made unit by the orthonormalization,
R's columns for them are noise too, and column normalization makes them a
full-size term of the update, which two float32 runs draw differently:
percents apart. dion-vs-reference.test bounds the full-rank step by
torch's own float32 error instead.)
Then what the compiled step cannot change after construction is refused
by name (Muon's ns_steps, Dion's rank), a LambdaLR schedule drives both
groups' rates, and recipes the spec reader refuses raise its message.
"""

import math
import os
import sys

import torch

sys.path.insert(0, sys.argv[1])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
CACHE = sys.argv[2]

from distopt.errors import DistoptError  # noqa: E402
from distopt.torch import DistributedOptimizer  # noqa: E402
from dion_vs_reference import dion_rank, dion_step, starting_factor  # noqa: E402
from mpi4py import MPI  # noqa: E402
from muon_vs_reference import muon_step  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = 0
checks = 0
STEPS = 6
BATCH = 12  # divisible by 1, 2, 3 and 4 ranks


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 6, 3, padding=1)
        self.fc1 = torch.nn.Linear(6 * 4 * 4, 40)
        self.fc2 = torch.nn.Linear(40, 5)

    def forward(self, x):
        x = torch.tanh(self.conv(x)).flatten(1)
        return self.fc2(torch.tanh(self.fc1(x)))


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 2, 4, 4, generator=g), \
        torch.randn(BATCH, 5, generator=g)


def loss_of(net, x, y):
    return ((net(x) - y) ** 2).mean()


def rate(step):
    return 1.0 / (1 + 0.5 * step)


def reference(kind, options, lr, vector_lr=None):
    """The whole batch in one process: Muon or Dion on the matrices, AdamW
    on the vectors (at `vector_lr`, else `lr`), at the rate the schedule
    gives."""
    net = Net()
    vectors = [p for p in net.parameters() if p.dim() < 2]
    vector_lr = vector_lr or lr
    adamw = torch.optim.AdamW(vectors, lr=vector_lr)
    state = {}
    for p in net.parameters():
        if p.dim() >= 2:
            rows, cols = p.shape[0], p.numel() // p.shape[0]
            r = dion_rank(rows, cols, options.get("rank"),
                          options.get("rank_fraction", 1.0))
            state[p] = (torch.zeros_like(p),
                        torch.tensor(starting_factor(r, cols, 0),
                                     dtype=torch.float32))
    for step in range(STEPS):
        net.zero_grad()
        loss_of(net, *batch(step)).backward()
        with torch.no_grad():
            for p in net.parameters():
                if p.dim() < 2:
                    continue
                m, q = state[p]
                if kind == "muon":
                    muon_step(p, p.grad, m, lr * rate(step), torch.float32,
                              **options)
                else:
                    dion_step(p, p.grad, m, q, lr * rate(step), **options)
        for group in adamw.param_groups:
            group["lr"] = vector_lr * rate(step)
        adamw.step()
    return net


def ours(kind, options, lr, pipeline, vector_lr=None):
    net = Net()
    params = list(net.named_parameters())
    if vector_lr:  # the vectors' group given, with a key of the program's
        params = [{"params": [(n, p) for n, p in params if p.dim() >= 2]},
                  {"params": [(n, p) for n, p in params if p.dim() < 2],
                   "type": "adamw", "lr": vector_lr, "name": "vectors"}]
    opt = DistributedOptimizer(params,
                               dict(options, type=kind, lr=lr),
                               pipeline=pipeline, comm=comm, cache=CACHE,
                               model=f"{kind}-net")
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    for step in range(STEPS):
        x, y = batch(step)
        share = BATCH // size
        opt.zero_grad()
        loss_of(net, x[rank * share:(rank + 1) * share],
                y[rank * share:(rank + 1) * share]).backward()
        opt.step()
        schedule.step()
    return net, opt


def compare(kind, options, lr, pipeline, vector_lr=None):
    want = reference(kind, options, lr, vector_lr)
    got, opt = ours(kind, options, lr, pipeline, vector_lr)
    label = (f"{kind} {options} [{pipeline or 'plain'}]"
             f"{' vectors at ' + str(vector_lr) if vector_lr else ''} "
             f"at {size} ranks")
    check([g.get("type", kind) for g in opt.param_groups] == [kind, "adamw"],
          f"{label}: the vectors in an AdamW group of their own")
    worst = 0.0
    for (name, a), b in zip(got.named_parameters(), want.parameters()):
        error = (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)
        worst = max(worst, error)
        check(error < 1e-5, f"{label}: {name} differs by {error:.3g} of "
                            "its magnitude")
    if rank == 0:
        print(f"{label}: worst relative difference {worst:.2g}", flush=True)
    return opt


def refused(opt, key, value):
    group = opt.param_groups[0]
    old = group[key]
    group[key] = value
    try:
        opt.step()
        check(False, f"changing {key} after construction was not refused")
    except DistoptError as e:
        check(f"'{key}'" in str(e), f"the error names {key}: {e}")
    group[key] = old


compare("muon", {}, 0.02, "")
# ZeRO's default flat layout gives the matrices to owners and lays out the
# AdamW group flat; the greedy one gives every tensor to an owner.
opt = compare("muon", {"adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.05},
              0.01, "zero-stage=2")
compare("muon", {}, 0.02, "zero-stage=1 zero-strategy=greedy")
# Stage 3 has no owners: the matrices are laid out flat and every rank
# updates each whole from the gathered chunks (the gather plan).
compare("muon", {"nesterov": False}, 0.02, "zero-stage=3")
refused(opt, "ns_steps", 3)
compare("dion", {"rank_fraction": 0.25}, 0.02, "")
compare("dion", {"rank": 3}, 0.02, "zero-stage=1", vector_lr=0.003)
opt = compare("dion", {"rank": 4, "mu": 0.9}, 0.02,
              "zero-stage=2 zero-strategy=greedy")
refused(opt, "rank", 2)
# Stage 3 (and lowrank asked for at stage 2): each matrix in blocks of
# whole rows, only the factors moving.
compare("dion", {"rank": 3}, 0.02, "zero-stage=3")
compare("dion", {"rank": 2, "mu": 0.9}, 0.02,
        "zero-stage=2 zero-matrix-plan=lowrank")
# Dion's low-rank sync: each rank's own gradient, the factors averaged.
compare("dion", {"rank": 3}, 0.02, "dion-low-rank-sync")
compare("dion", {"rank": 3}, 0.02, "dion-low-rank-sync zero-stage=2")


def groups_and_state():
    """Groups of other types and state dicts: an SGD group beside Muon
    (torch 1.13's SGD needs a rate: the recipe's), a typed group without a
    rate takes the recipe's, a group of vectors only stays where it is with
    its keys, no group keeps the other optimizer's keys, a rank given as
    2.0 is rank 2, and Dion's state_dict (its right factor of its own shape)
    loads into a fresh optimizer that then steps as the first does."""
    net = Net()
    named = list(net.named_parameters())
    matrices = [(n, p) for n, p in named if p.dim() >= 2]
    vectors = [(n, p) for n, p in named if p.dim() < 2]
    opt = DistributedOptimizer(
        [{"params": matrices[:1]}, {"params": matrices[1:], "type": "sgd"},
         {"params": vectors, "weight_decay": 0.0}],
        {"type": "muon", "lr": 0.02}, comm=comm, cache=CACHE, model="typed")
    kinds = [(g.get("type"), g["lr"], g.get("weight_decay")) for g in
             opt.param_groups]
    check(kinds == [(None, 0.02, 0.1), ("sgd", 0.02, 0), ("adamw", 0.02, 0.0)],
          f"the groups' types, rates and decay: {kinds}")
    check("nesterov" not in opt.param_groups[2] and
          "amsgrad" not in opt.param_groups[0],
          "a group keeps its own optimizer's keys only")

    def run(opt, net, steps):
        for step in range(steps):
            x, y = batch(step)
            opt.zero_grad()
            loss_of(net, x, y).backward()
            opt.step()

    first = Net()
    recipe = {"type": "dion", "lr": 0.02, "rank": 3}
    a = DistributedOptimizer(first.named_parameters(), recipe, comm=comm,
                             cache=CACHE, model="dion-state")
    run(a, first, 3)
    a.param_groups[0]["rank"] = 3.0
    a.step()  # the same rank
    second = Net()
    second.load_state_dict(first.state_dict())
    b = DistributedOptimizer(second.named_parameters(), recipe, comm=comm,
                             cache=CACHE, model="dion-state")
    b.load_state_dict(a.state_dict())
    shape = tuple(b.state_dict()["state"][0]["right_factor"].shape)
    check(shape == (3, 2 * 3 * 3), f"the right factor's shape: {shape}")
    run(a, first, 2)
    run(b, second, 2)
    same = all(torch.equal(p, q) for p, q in zip(first.parameters(),
                                                   second.parameters()))
    check(same, "a state_dict loaded into another optimizer steps alike")


def rejected(recipe, words):
    """A recipe the spec reader refuses: ValueError with its message."""
    try:
        DistributedOptimizer(Net().named_parameters(), recipe, comm=comm,
                             cache=CACHE)
        check(False, f"{recipe} was accepted")
    except ValueError as e:
        check(words in str(e), f"{recipe}: the error says '{words}': {e}")


def low_rank_sync_gradients():
    """Under the low-rank sync a Dion matrix's .grad after backward() is this
    rank's own (its reduction is the update's factors'), a vector's is
    averaged as under DDP; the state dict gives the ranks' mean momentum,
    the same on every rank."""
    net = Net()
    opt = DistributedOptimizer(net.named_parameters(), {"type": "dion",
                               "lr": 0.02, "rank": 3}, comm=comm, cache=CACHE,
                               pipeline="dion-low-rank-sync", model="dion-net")
    whole = Net()
    x, y = batch(0)
    share = BATCH // size
    mine = slice(rank * share, (rank + 1) * share)
    opt.zero_grad()
    loss_of(net, x[mine], y[mine]).backward()
    own = Net()
    loss_of(own, x[mine], y[mine]).backward()
    loss_of(whole, x, y).backward()
    check(torch.allclose(net.fc1.weight.grad, own.fc1.weight.grad,
                         rtol=1e-6, atol=1e-7),
          "low-rank sync: a Dion matrix's .grad is this rank's own")
    check(torch.allclose(net.fc1.bias.grad, whole.fc1.bias.grad,
                         rtol=1e-5, atol=1e-7),
          "low-rank sync: a vector's .grad is the ranks' average")
    if size > 1:  # (one rank reduces nothing: torch's clip applies)
        try:
            opt.clip_grad_norm_(1.0)
            check(False, "low-rank sync: opt.clip_grad_norm_ was not refused")
        except DistoptError as e:
            check("dion-low-rank-sync never forms their average" in str(e),
                  f"low-rank sync: opt.clip_grad_norm_ refused: {e}")
    opt.step()
    momentum = opt.state_dict()["state"][2]["momentum"]  # fc1.weight's
    gathered = comm.allgather(momentum)
    check(all(torch.equal(m, momentum) for m in gathered),
          "low-rank sync: the state dict's momentum is the same on every rank")


groups_and_state()
low_rank_sync_gradients()
rejected({"type": "lamb", "lr": 0.1}, "unknown optimizer 'lamb' (expected "
         "adagrad, adam, adamw, dion, muon, rmsprop or sgd)")
rejected({"type": "dion", "lr": 0.1, "rank_fraction": 2.0},
         "'rank_fraction' must be in (0, 1], got 2")
rejected({"type": "muon", "lr": 0.1, "ns_step": 3},
         "unknown key 'ns_step'")

print(f"torch_orthogonalized: rank {rank}: {checks} checks, {failures} failed",
      flush=True)
sys.exit(1 if failures else 0)
