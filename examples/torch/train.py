#!/usr/bin/env python3
"""Trains a PyTorch model on real data with distopt's compiled step in place
of DDP + torch.optim, and optionally DDP + torch.optim beside it in lockstep:

    mpirun -np 2 python3 examples/torch/train.py --model cnn --compare
    mpirun -np 2 python3 examples/torch/train.py --model gpt --pipeline zero-stage=2

Models and data (all offline):
  cnn       a small CNN on scikit-learn's handwritten digits (load_digits:
            1,797 8x8 images; 1,500 to train, the rest to test)
  resnet18  torchvision's ResNet-18 (random initialisation) on the same
            digits, upscaled to 32x32 and repeated to 3 channels
  gpt       a character-level GPT (2 blocks, causal self-attention) on the
            GNU GPL v3 text every Debian system ships
            (/usr/share/common-licenses/GPL-3)

Each rank takes its share of every global batch, as DDP's sampler does.
With --compare, a second copy of the model starts from the same weights and
trains on the same batches under torch.nn.parallel.DistributedDataParallel
(gloo) and the torch.optim optimizer of the same recipe; the script prints
both losses and, at the end, the largest parameter difference between the
two, and fails if it exceeds --tolerance. BatchNorm statistics stay per rank
in both (DDP with broadcast_buffers=False), so the runs are comparable.
"""

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Usable from the source tree: the package lies in build/python.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "build", "python"))

import distopt  # noqa: E402
from distopt.torch import DistributedOptimizer  # noqa: E402
from mpi4py import MPI  # noqa: E402


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                 nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab, block=64, dim=64, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.triu(
            torch.full((block, block), float("-inf")), diagonal=1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def digits(upscale):
    from sklearn.datasets import load_digits
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    if upscale:
        x = F.interpolate(x, size=32, mode="bilinear", align_corners=False)
        x = x.repeat(1, 3, 1, 1)
    x = (x - x.mean()) / x.std()
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def text(block):
    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:
        corpus = f.read()
    chars = sorted(set(corpus))
    ids = torch.tensor([chars.index(c) for c in corpus], dtype=torch.long)
    split = int(len(ids) * 0.9)
    return ids[:split], ids[split:], len(chars), block


def dtype_of(model):
    return next(model.parameters()).dtype


def build(args):
    """(model factory, batch function, eval function, recipe)."""
    if args.model in ("cnn", "resnet18"):
        (xtr, ytr), (xte, yte) = digits(args.model == "resnet18")
        if args.model == "cnn":
            factory = DigitsCNN
        else:
            import torchvision
            factory = lambda: torchvision.models.resnet18(num_classes=10)  # noqa

        def batch(step, rank, size):
            g = torch.Generator().manual_seed(1000 + step)
            idx = torch.randperm(len(xtr), generator=g)[:args.batch]
            mine = idx.view(size, -1)[rank]
            return xtr[mine], ytr[mine]

        def loss_fn(model, xb, yb):
            return F.cross_entropy(model(xb.to(dtype_of(model))).float(), yb)

        def evaluate(model):
            model.eval()
            with torch.no_grad():
                acc = (model(xte.to(dtype_of(model))).argmax(1) ==
                       yte).float().mean().item()
            model.train()
            return f"test accuracy {acc:.3f}"
        recipe = {"type": "adamw", "lr": args.lr or 2e-3,
                  "weight_decay": 0.01}
        return factory, batch, loss_fn, evaluate, recipe

    train_ids, val_ids, vocab, block = text(64)
    factory = lambda: CharGPT(vocab, block)  # noqa: E731

    def batch(step, rank, size):
        g = torch.Generator().manual_seed(1000 + step)
        starts = torch.randint(0, len(train_ids) - block - 1, (args.batch,),
                               generator=g).view(size, -1)[rank]
        x = torch.stack([train_ids[s:s + block] for s in starts])
        y = torch.stack([train_ids[s + 1:s + block + 1] for s in starts])
        return x, y

    def loss_fn(model, xb, yb):
        logits = model(xb).float()
        return F.cross_entropy(logits.flatten(0, 1), yb.flatten())

    def evaluate(model):
        model.eval()
        with torch.no_grad():
            starts = range(0, len(val_ids) - block - 1, block)
            x = torch.stack([val_ids[s:s + block] for s in starts])
            y = torch.stack([val_ids[s + 1:s + block + 1] for s in starts])
            loss = loss_fn(model, x, y).item()
        model.train()
        return f"validation loss {loss:.3f} (perplexity {math.exp(loss):.1f})"
    recipe = {"type": "adamw", "lr": args.lr or 3e-3, "betas": [0.9, 0.95],
              "weight_decay": 0.1}
    return factory, batch, loss_fn, evaluate, recipe


def torch_optimizer(params, recipe):
    kind = recipe["type"]
    kwargs = {k: v for k, v in recipe.items() if k != "type"}
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    classes = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam,
               "adamw": torch.optim.AdamW, "rmsprop": torch.optim.RMSprop,
               "adagrad": torch.optim.Adagrad}
    return classes[kind](params, **kwargs)


def ddp_group(comm):
    """torch.distributed over gloo, rendezvous through a file rank 0 names."""
    import torch.distributed as dist
    path = comm.bcast(tempfile.mktemp(prefix="distopt-ddp-")
                      if comm.Get_rank() == 0 else None, root=0)
    dist.init_process_group("gloo", init_method=f"file://{path}",
                            rank=comm.Get_rank(), world_size=comm.Get_size())
    return path


def plot(args, curves, size):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = range(1, len(curves[0]) + 1)
    ax.plot(steps, curves[1], color="0.6", linewidth=4,
            label="DDP (gloo) + torch.optim.AdamW")
    ax.plot(steps, curves[0], color="tab:blue", linewidth=1.2,
            label=f"distopt DistributedOptimizer ({args.pipeline or 'default'})")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over ranks)")
    ax.set_yscale("log")
    ax.set_title(f"{args.model}, {size} ranks: the two curves overlap")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["cnn", "resnet18", "gpt"],
                        default="cnn")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=0,
                        help="digits: train this many passes over the 1,500 "
                             "training images instead of --steps, printing "
                             "loss and accuracy after each")
    parser.add_argument("--batch", type=int, default=64,
                        help="global batch (divided among the ranks)")
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--pipeline", default="",
                        help="distopt-pipeline options, e.g. zero-stage=2, "
                             "or 'auto': the planner chooses them")
    parser.add_argument("--calibration", default=None,
                        help="--pipeline auto: distopt-calibrate --compute "
                             "--json's output (default: measured now)")
    parser.add_argument("--memory-per-rank", default=None,
                        help="--pipeline auto: model state one rank may "
                             "hold, e.g. 50KiB or 8GiB")
    parser.add_argument("--compare", action="store_true",
                        help="train DDP + torch.optim beside it and compare")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="--compare: the largest parameter difference "
                             "allowed, relative to the parameter's largest "
                             "magnitude")
    parser.add_argument("--print-every", type=int, default=50)
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 parameters and gradients, with fp32 main "
                             "parameters in the step (NeMo style); --compare "
                             "then trains the fp32 model with DDP, as the "
                             "precision baseline")
    parser.add_argument("--progress", action="store_true",
                        help="--epochs: draw a progress bar (mpirun makes "
                             "every rank's output look like a terminal, so "
                             "the caller says whether there is one)")
    parser.add_argument("--plot", metavar="PNG",
                        help="--compare: plot both loss curves (matplotlib)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads per rank")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.batch % size:
        parser.error(f"--batch {args.batch} is not a multiple of {size} ranks")
    factory, batch, loss_fn, evaluate, recipe = build(args)
    per_epoch = 0
    if args.epochs:
        if args.model == "gpt":
            parser.error("--epochs is for the digits models")
        per_epoch = 1500 // args.batch
        args.steps = args.epochs * per_epoch
        args.print_every = 0

    torch.manual_seed(0)
    model = factory()
    reference = None
    if args.compare:
        reference = factory()
        reference.load_state_dict(model.state_dict())
    if args.bf16:
        model = model.to(torch.bfloat16)
    started = time.perf_counter()
    plan = None
    if args.pipeline.split()[:1] == ["auto"]:
        plan = {"calibration": args.calibration,
                "memory_per_rank": args.memory_per_rank}
    opt = DistributedOptimizer(model.named_parameters(), recipe,
                               pipeline=args.pipeline, comm=comm,
                               model=args.model, main_params=args.bf16,
                               plan=plan)
    compile_seconds = time.perf_counter() - started
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"{args.model}: {nparams} parameters in "
              f"{len(list(model.parameters()))} tensors, {size} ranks, "
              f"AdamW; step compiled with pipeline "
              f"'{opt.pipeline or 'default'}' in {compile_seconds:.1f} s "
              f"({os.path.basename(opt.library)})", flush=True)

    if args.compare:
        from torch.nn.parallel import DistributedDataParallel
        rendezvous = ddp_group(comm)
        ddp = DistributedDataParallel(reference, broadcast_buffers=False)
        ref_opt = torch_optimizer(reference.parameters(), recipe)

    step_seconds = 0.0
    epoch_loss = epoch_ref_loss = 0.0
    curves = ([], [])
    for step in range(args.steps):
        xb, yb = batch(step, rank, size)
        loss = loss_fn(model, xb, yb)
        loss.backward()
        t0 = time.perf_counter()
        opt.step()
        step_seconds += time.perf_counter() - t0
        opt.zero_grad()
        losses = comm.allreduce(loss.item()) / size
        line = f"step {step + 1:4d}  loss {losses:.4f}"
        if args.compare:
            ref_loss = loss_fn(ddp, xb, yb)
            ref_loss.backward()
            ref_opt.step()
            ref_opt.zero_grad()
            ref_losses = comm.allreduce(ref_loss.item()) / size
            line += f"  (DDP + torch.optim: {ref_losses:.4f})"
            curves[0].append(losses)
            curves[1].append(ref_losses)
        if rank == 0 and args.print_every and (step + 1) % args.print_every == 0:
            print(line, flush=True)
        if per_epoch:
            epoch_loss += losses / per_epoch
            epoch_ref_loss += ref_losses / per_epoch if args.compare else 0
            done = step % per_epoch + 1
            if rank == 0 and args.progress:
                bar = "#" * (30 * done // per_epoch)
                print(f"\repoch {step // per_epoch + 1}/{args.epochs} "
                      f"[{bar:<30}] {done}/{per_epoch}", end="", flush=True)
            if done == per_epoch:
                line = (f"epoch {step // per_epoch + 1}/{args.epochs}  "
                        f"loss {epoch_loss:.4f}  {evaluate(model)}")
                if args.compare:
                    line += (f"  | DDP + torch.optim: loss "
                             f"{epoch_ref_loss:.4f}  {evaluate(reference)}")
                if rank == 0:
                    print(("\r" if args.progress else "") + line, flush=True)
                epoch_loss = epoch_ref_loss = 0.0

    if rank == 0:
        print(f"{evaluate(model)}; optimizer step {1e3 * step_seconds / args.steps:.2f} ms "
              "per step on average (all-reduce and update)", flush=True)
    status = 0
    if args.compare:
        worst, worst_name = 0.0, ""
        for (name, p), q in zip(model.named_parameters(),
                                reference.parameters()):
            scale = max(q.detach().abs().max().item(), 1e-6)
            diff = (p.detach().float() - q.detach()).abs().max().item() / scale
            if diff > worst:
                worst, worst_name = diff, name
        worst = comm.allreduce(worst, op=MPI.MAX)
        if rank == 0:
            print(f"DDP + torch.optim: {evaluate(reference)}; largest "
                  f"parameter difference {worst:.2e} of the parameter's "
                  f"magnitude ({worst_name}), tolerance {args.tolerance:.0e}",
                  flush=True)
        if args.bf16:
            # bf16 rounding, not the reduction order, sets the difference:
            # the runs are compared by their losses over the last 10 steps.
            ours = sum(curves[0][-10:]) / len(curves[0][-10:])
            theirs = sum(curves[1][-10:]) / len(curves[1][-10:])
            gap = abs(ours - theirs) / theirs
            if rank == 0:
                print(f"bf16 with fp32 main parameters against fp32: mean "
                      f"loss of the last 10 steps {ours:.4f} against "
                      f"{theirs:.4f}, {100 * gap:.1f}% apart (at most 10%)",
                      flush=True)
            if gap > 0.1:
                status = 1
        elif worst > args.tolerance:
            status = 1
        if args.plot and rank == 0:
            plot(args, curves, size)
        import torch.distributed as dist
        dist.destroy_process_group()
        if rank == 0 and os.path.exists(rendezvous):
            os.unlink(rendezvous)
    return status


if __name__ == "__main__":
    sys.exit(main())
