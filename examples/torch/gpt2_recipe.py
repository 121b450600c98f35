#!/usr/bin/env python3
"""Trains the character GPT of train.py with GPT-2's recipe through
distopt.torch, beside the same loop on DDP + torch.optim + autocast:

    mpirun -np 2 python3 examples/torch/gpt2_recipe.py --steps 300 --plot gpt2.png

The recipe (GPT-2 / nanoGPT): AdamW (betas 0.9, 0.95) in two groups, weight
decay 0.1 on the matrices and embeddings and none on biases and norms;
linear warmup then cosine decay to a tenth of the rate (a torch LambdaLR);
clipping at 1.0; bf16 compute with fp32 main parameters; dynamic loss
scaling; 4 micro-batches per step.

distopt: bf16 parameters, the step keeping fp32 main parameters
(main_params), its compiled loss scaling under distopt.torch.GradScaler,
grad_accumulation=4 with the first three micro-batches under
opt.no_sync() (accumulated in f32), opt.clip_grad_norm_(1.0).

The reference: fp32 parameters under DDP (gloo), the forward pass under
torch.autocast("cpu", bfloat16), GradScaler's rule applied by hand (torch
1.13's GradScaler disables itself without CUDA), the loss divided by 4 and
the first three micro-batches under DDP's no_sync, torch's clip_grad_norm_
after unscaling, torch.optim.AdamW.

The two differ in where bf16 rounds (distopt's parameters and gradients are
bf16, the reference's autocast rounds the matmuls' inputs): the runs are
compared by their losses, which must end within --tolerance (relative, mean
of the last 10 steps), and --plot draws both curves.
"""

import argparse
import contextlib
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import CharGPT, ddp_group, text  # noqa: E402 (puts build/python on the path)

from distopt.torch import DistributedOptimizer, GradScaler  # noqa: E402
from mpi4py import MPI  # noqa: E402

MICRO_BATCHES = 4
RECIPE = {"type": "adamw", "lr": 3e-3, "betas": [0.9, 0.95],
          "weight_decay": 0.1}


def groups(model):
    """GPT-2's: decay on tensors of 2 or more dimensions (matrices,
    embeddings), none on biases and norms."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay}, {"params": plain, "weight_decay": 0.0}]


def warmup_cosine(warmup, total):
    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


class HandScaler:
    """torch's GradScaler rule (init 2^16, x2 after 2000 clean steps, x0.5
    on an inf or NaN), by hand."""

    def __init__(self):
        self.scale, self.tracker = torch.tensor(65536.0), 0

    def unscale_(self, params):
        inverse = self.scale.double().reciprocal().float()
        self.found_inf = False
        for p in params:
            self.found_inf |= not bool(torch.isfinite(p.grad).all())
            p.grad.mul_(inverse)

    def update(self):
        if self.found_inf:
            self.scale, self.tracker = self.scale * 0.5, 0
        else:
            self.tracker += 1
            if self.tracker == 2000:
                self.scale, self.tracker = self.scale * 2.0, 0


def plot(path, curves, size, steps):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(1, len(curves[0]) + 1)
    ax.plot(x, curves[1], color="0.6", linewidth=3,
            label="DDP + AdamW, autocast bf16, GradScaler rule")
    ax.plot(x, curves[0], color="tab:blue", linewidth=1.0,
            label="distopt: bf16 + fp32 main params, GradScaler")
    ax.set_xlabel("step (4 micro-batches each)")
    ax.set_ylabel("training loss (mean over ranks)")
    ax.set_yscale("log")
    ax.set_title(f"character GPT, GPT-2 recipe, {size} ranks, {steps} steps")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32,
                        help="global micro-batch (divided among the ranks)")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--pipeline", default="",
                        help="distopt-pipeline options, e.g. zero-stage=2")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--print-every", type=int, default=50)
    parser.add_argument("--plot", metavar="PNG")
    args = parser.parse_args()
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.batch % size:
        parser.error(f"--batch {args.batch} is not a multiple of {size} "
                     "ranks")
    train_ids, val_ids, vocab, block = text(64)

    def micro_batch(step, micro):
        g = torch.Generator().manual_seed(1000 + MICRO_BATCHES * step + micro)
        starts = torch.randint(0, len(train_ids) - block - 1, (args.batch,),
                               generator=g).view(size, -1)[rank]
        x = torch.stack([train_ids[s:s + block] for s in starts])
        y = torch.stack([train_ids[s + 1:s + block + 1] for s in starts])
        return x, y

    def loss_of(model, x, y):
        return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())

    torch.manual_seed(0)
    reference = CharGPT(vocab, block)
    model = CharGPT(vocab, block)
    model.load_state_dict(reference.state_dict())
    model = model.to(torch.bfloat16)

    opt = DistributedOptimizer(groups(model), RECIPE, pipeline=args.pipeline,
                               comm=comm, model="gpt2-recipe",
                               main_params=True, loss_scaling=True,
                               grad_accumulation=MICRO_BATCHES)
    scaler = GradScaler(opt)
    schedule = warmup_cosine(args.warmup, args.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)

    rendezvous = ddp_group(comm)
    ddp = torch.nn.parallel.DistributedDataParallel(reference)
    ref_opt = torch.optim.AdamW(groups(reference), lr=RECIPE["lr"],
                                betas=tuple(RECIPE["betas"]),
                                weight_decay=RECIPE["weight_decay"])
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, schedule)
    hand = HandScaler()

    curves, skipped, started = ([], []), 0, time.perf_counter()
    for step in range(args.steps):
        ours = theirs = 0.0
        for micro in range(MICRO_BATCHES):
            x, y = micro_batch(step, micro)
            last = micro == MICRO_BATCHES - 1
            with (contextlib.nullcontext() if last else opt.no_sync()):
                loss = loss_of(model, x, y)
                scaler.scale(loss).backward()  # the step averages the 4
            ours += loss.item() / MICRO_BATCHES
            with (contextlib.nullcontext() if last else ddp.no_sync()):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    ref_loss = loss_of(ddp, x, y)
                (ref_loss / MICRO_BATCHES * hand.scale).backward()
            theirs += ref_loss.item() / MICRO_BATCHES
        opt.clip_grad_norm_(1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        skipped += opt.skipped

        hand.unscale_(reference.parameters())
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        if not hand.found_inf:
            ref_opt.step()
        hand.update()
        ref_opt.zero_grad(set_to_none=True)
        ref_sched.step()

        curves[0].append(comm.allreduce(ours) / size)
        curves[1].append(comm.allreduce(theirs) / size)
        if rank == 0 and args.print_every and \
                (step + 1) % args.print_every == 0:
            print(f"step {step + 1:4d}  loss {curves[0][-1]:.4f}  (DDP + "
                  f"autocast: {curves[1][-1]:.4f})  lr "
                  f"{opt.param_groups[0]['lr']:.2e}  scale "
                  f"{scaler.get_scale():g}", flush=True)

    tail = min(10, args.steps)
    mean = [sum(c[-tail:]) / tail for c in curves]
    gap = abs(mean[0] - mean[1]) / mean[1]
    if rank == 0:
        print(f"gpt2 recipe, {size} ranks, {args.steps} steps in "
              f"{time.perf_counter() - started:.0f} s: mean loss of the last "
              f"{tail} steps {mean[0]:.4f} against DDP + autocast's "
              f"{mean[1]:.4f}, {100 * gap:.1f}% apart (tolerance "
              f"{100 * args.tolerance:g}%); {skipped} steps skipped for "
              f"an overflow", flush=True)
        if args.plot:
            plot(args.plot, curves, size, args.steps)
    torch.distributed.destroy_process_group()
    comm.Barrier()  # every rank has closed the rendezvous file
    if rank == 0 and os.path.exists(rendezvous):
        os.unlink(rendezvous)
    return 0 if gap <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
