"""The Python bindings when things go wrong, and checkpoints across world
sizes (test/Integration/python-faults.test). Usage:

  python_faults.py BUILD_PYTHON_DIR WORK_DIR kill
      the last rank is killed (SIGKILL) before the fourth step; every
      survivor's step() raises DistoptError (status peer_died or timeout)
      naming itself, within the timeout, and the interpreter goes on
  python_faults.py BUILD_PYTHON_DIR WORK_DIR save
      3 steps of a ZeRO-2 AdamW step, then a checkpoint and the parameters
      and state it holds (gathered) as .npy files
  python_faults.py BUILD_PYTHON_DIR WORK_DIR resume
      at another world size: loads the checkpoint and checks that every
      parameter and state tensor is the one saved, bit for bit, and that
      training goes on from step 4
"""

import os
import signal
import sys
import time

import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
WORK, MODE = sys.argv[2], sys.argv[3]

import distopt  # noqa: E402
from distopt.torch import DistributedOptimizer  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(9, 40), torch.nn.ReLU(),
                               torch.nn.Linear(40, 3))


def optimizer(m, **kw):
    return DistributedOptimizer(m.named_parameters(),
                                {"type": "adamw", "lr": 0.01},
                                pipeline="zero-stage=2", comm=comm,
                                cache=os.path.join(WORK, "cache"), **kw)


def train(m, opt, steps):
    for _ in range(steps):
        g = torch.Generator().manual_seed(opt.session.steps_done * 10 + rank)
        x = torch.randn(8, 9, generator=g)
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad()


if MODE == "kill":
    m = model()
    opt = optimizer(m, timeout=20)
    train(m, opt, 3)
    comm.Barrier()
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    started = time.monotonic()
    try:
        train(m, opt, 1)
        print(f"rank {rank}: FAILED: the step went on without a peer")
    except distopt.DistoptError as e:
        seconds = time.monotonic() - started
        ok = (e.status in ("peer_died", "timeout") and
              f"rank {rank} of {size}" in str(e) and seconds < 25)
        print(f"rank {rank}: {'raised' if ok else 'FAILED'} {e.status} "
              f"after {seconds:.1f} s: {e}", flush=True)
    # The interpreter is alive; MPI_Finalize would wait for the dead rank.
    print(f"rank {rank}: still running", flush=True)
    # mpirun ends the job when the first survivor exits without
    # MPI_Finalize: each waits (30 s at most) until every survivor has
    # reported, through files, as MPI cannot be used with a dead rank.
    open(os.path.join(WORK, f"reported.{rank}"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(
            os.path.exists(os.path.join(WORK, f"reported.{r}"))
            for r in range(size - 1)) < size - 1:
        time.sleep(0.05)
    os._exit(0)

names = None
if MODE == "save":
    m = model()
    opt = optimizer(m)
    train(m, opt, 3)
    opt.save_checkpoint(os.path.join(WORK, "run.ckpt"))
    saved = {f"param.{t.name}": opt.session.read(t.name, t.role)
             for t in opt.compiled.tensors if t.role == "param"}
    saved.update({f"state.{t.name}": opt.session.read(t.name, t.role)
                  for t in opt.compiled.tensors if t.role == "state"})
    if rank == 0:
        np.savez(os.path.join(WORK, "saved.npz"), **saved)
    print(f"rank {rank}: saved at step {opt.session.steps_done}", flush=True)
elif MODE == "resume":
    m = model()
    opt = optimizer(m)
    world = opt.load_checkpoint(os.path.join(WORK, "run.ckpt"))
    saved = np.load(os.path.join(WORK, "saved.npz"))
    bad = [key for key in saved.files
           if not np.array_equal(saved[key], opt.session.read(
               key.split(".", 1)[1], key.split(".", 1)[0]))]
    # The model's own parameters are the views the checkpoint filled.
    bad += [n for n, p in m.named_parameters()
            if not np.array_equal(saved[f"param.{n}"], p.detach().numpy())]
    before = [p.detach().clone() for p in m.parameters()]
    train(m, opt, 2)
    moved = all(not torch.equal(a, p) for a, p in zip(before, m.parameters()))
    print(f"rank {rank}: resumed at {size} ranks from {world}, step "
          f"{opt.session.steps_done}, {len(saved.files)} tensors, "
          f"{len(bad)} differ {bad[:3]}, trained on: {moved}", flush=True)
