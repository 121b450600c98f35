#!/usr/bin/env python3
"""The character GPT of train.py trained with AdamW, Muon and Dion through
distopt.torch.DistributedOptimizer, on the same batches (the same token
budget), under mpirun. Muon and Dion update the blocks' matrices; the
embeddings, the output head and every vector go to an AdamW group (the
usual choice; docs/host-library.md), whose recipe is the AdamW run's.

  mpirun -np 4 python3 examples/torch/orthogonalized.py --steps 300 \\
      --pipeline "zero-stage=2 zero-strategy=greedy" --plot docs/img/orthogonalized-char-gpt.png

prints each run's training loss (mean of its last 20 steps), validation
loss and time per step, and plots the three curves.
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import CharGPT, text  # noqa: E402  (also puts build/python first)

from distopt.torch import DistributedOptimizer  # noqa: E402
from mpi4py import MPI  # noqa: E402

ADAMW = {"type": "adamw", "lr": 3e-3, "betas": [0.9, 0.95],
         "weight_decay": 0.1}
RECIPES = {
    "AdamW": ADAMW,
    "Muon": {"type": "muon", "lr": 0.02, "weight_decay": 0.01},
    "Dion (rank 1/4)": {"type": "dion", "lr": 0.02, "weight_decay": 0.01,
                        "rank_fraction": 0.25},
}


def groups(model, recipe):
    """AdamW: every parameter. Muon, Dion: the blocks' matrices, the rest
    in an AdamW group with AdamW's recipe."""
    named = list(model.named_parameters())
    if recipe["type"] == "adamw":
        return named
    matrices = [(n, p) for n, p in named
                if p.dim() >= 2 and n.startswith("blocks.")]
    rest = [(n, p) for n, p in named
            if not (p.dim() >= 2 and n.startswith("blocks."))]
    adamw = {k: v for k, v in ADAMW.items()}
    return [{"params": matrices}, dict(adamw, params=rest)]


def train(label, recipe, args, comm, data):
    rank, size = comm.Get_rank(), comm.Get_size()
    train_ids, val_ids, vocab, block = data
    torch.manual_seed(0)
    model = CharGPT(vocab, block)
    opt = DistributedOptimizer(groups(model, recipe), recipe,
                               pipeline=args.pipeline, comm=comm,
                               model="char-gpt-" + recipe["type"])
    losses, seconds = [], 0.0
    for step in range(args.steps):
        g = torch.Generator().manual_seed(1000 + step)
        starts = torch.randint(0, len(train_ids) - block - 1, (args.batch,),
                               generator=g).view(size, -1)[rank]
        x = torch.stack([train_ids[s:s + block] for s in starts])
        y = torch.stack([train_ids[s + 1:s + block + 1] for s in starts])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        t0 = time.perf_counter()
        opt.step()
        seconds += time.perf_counter() - t0
        opt.zero_grad()
        losses.append(comm.allreduce(loss.item()) / size)
    model.eval()
    with torch.no_grad():
        starts = range(0, len(val_ids) - block - 1, block)
        x = torch.stack([val_ids[s:s + block] for s in starts])
        y = torch.stack([val_ids[s + 1:s + block + 1] for s in starts])
        val = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    return losses, val, 1000 * seconds / args.steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32,
                        help="global batch of 64-character sequences")
    parser.add_argument("--pipeline", default="",
                        help="distopt-pipeline options (under ZeRO, stages "
                             "1 and 2, each matrix is updated on one owner)")
    parser.add_argument("--plot", metavar="PNG")
    args = parser.parse_args()
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    if args.batch % comm.Get_size():
        parser.error(f"--batch {args.batch} is not a multiple of the ranks")
    data = text(64)
    results = {}
    for label, recipe in RECIPES.items():
        results[label] = train(label, recipe, args, comm, data)
        if comm.Get_rank() == 0:
            losses, val, ms = results[label]
            tail = sum(losses[-20:]) / 20
            print(f"{label:16s} training loss {tail:.3f} (last 20 steps), "
                  f"validation loss {val:.3f} (perplexity {math.exp(val):.2f}), "
                  f"{ms:.1f} ms per step()", flush=True)
    if comm.Get_rank() == 0 and args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for label, (losses, val, _) in results.items():
            ax.plot(range(1, len(losses) + 1), losses, linewidth=1.0,
                    label=f"{label} (validation {val:.3f})")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (mean over ranks)")
        ax.set_title(f"character GPT, {comm.Get_size()} ranks, "
                     f"{args.pipeline or 'no sharding'}", fontsize=9)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)


if __name__ == "__main__":
    main()
