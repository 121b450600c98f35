#!/usr/bin/env python3
"""B15: memory per rank of a PyTorch training step under ZeRO-2 and under
ZeRO-3 with units (FSDP's way), against the formula, at 1, 2 and 4 ranks.

Model: a GPT with GPT-2 small's shapes (124.4M f32 parameters: vocabulary
50257, width 768, 12 blocks of 12 heads, the output layer tied to the token
embedding), 64 tokens x 1 sequence per rank, AdamW. Units: each block, and
the root (the embeddings, the final norm: the tied output layer's weight
is the token embedding's).

Rows: torch's DDP + ZeroRedundancyOptimizer (gloo), distopt's ZeRO-2,
its ZeRO-3 with units, and the same with DISTOPT_RT_CACHE_MB=0 (the
runtime frees what a step allocated at once instead of caching it).
Per rank, resident memory (the kernel's count, VmRSS/VmHWM) above what the
process held before the model existed:
- at rest: after a step (the step's shards and buffers, the model's own
  parameters where it keeps them), and of it what distopt's runtime holds
  for the step (distopt_rt_memory_stats: its cache not counted);
- peak: the most during 3 steps (forward, backward, update), the counter
  reset after a warm-up step; and the time per step.
The formula, bytes per parameter P and units U (N ranks):
- ZeRO-2 at rest: parameters and gradient buckets whole (8P), AdamW's
  state and the reduced gradient's shard (12P/N);
- units at rest: the shards of the parameters, AdamW's state and the
  reduced gradients (16P/N); peak: that, plus the two largest units' (the
  root's and a block's) parameters and gradients whole (8 x (U1 + U2)),
  plus the activations (measured: a plain torch forward and backward of
  the same model, its peak less its parameters and gradients).
Construction is not counted in these rows (the units' GPT is built on the
meta device and initialized one module at a time by the optimizer; the
others build it whole).

Then the limited run, at 4 ranks: each rank may take at most --limit-mb
(1536) MB of private memory above what it held before the model existed
(RLIMIT_DATA, set before the model is built: construction counts), less
than the model's whole training state (16 bytes per parameter: 1.9 GB).
ZeRO-3 with units, built on the meta device, trains 5 steps and is
compared with DDP + torch.optim.AdamW run without a limit from the same
initial parameters (the meta-built GPT's are the CPU-built one's under the
same seed): the losses, and the parameters after the steps, whose gap to
DDP's is set against that of distopt's ZeRO-2 run without the limit (the
summation order's rounding). ZeRO-2 under the limit must fail, with the
runtime's out-of-memory error naming the rank and the buffer.

Last, time per step on the emulated cluster (scripts/cluster: 2 nodes of
2 ranks, TCP between the nodes, each node's link shaped to 1 and 10
Gb/s): the same steps at 4 ranks, their collectives across the link.

    mpirun -np N python3 bench/zero3_memory.py --worker MODE OUT   (one row)
    python3 bench/zero3_memory.py [--update]      (every row, then B15 and
        docs/img/b15-memory.png)
    python3 bench/zero3_memory.py --limit-only    (the limited run only)
    python3 bench/zero3_memory.py --cluster-only  (the cluster rows only)
    python3 bench/zero3_memory.py --plot-only     (the plot, from B15's table)
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cluster_available  # noqa: E402

# Large blocks from mmap, whatever their size: glibc otherwise raises its
# mmap threshold as blocks are freed and keeps later frees on its heap,
# where the kernel's count shows memory no tensor holds (measured: 1.3 GB
# of ZeRO-2's at rest at 2 ranks, the model's first tensors).
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
          "none", "-x", "MALLOC_MMAP_THRESHOLD_=65536"]
MB = 2.0 ** 20
LR = 1e-4  # the limited run's AdamW
SHAPES = {"vocab": 50257, "width": 768, "layers": 12, "heads": 12,
          "context": 64}


def rss():
    """(VmRSS, VmHWM) of this process, bytes."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


def step_bytes():
    """What distopt's runtime holds for the step (its arguments and what a
    step allocated and has not freed), without the blocks it keeps cached
    for the next step."""
    import ctypes
    from distopt._native import lib
    in_use, peak = ctypes.c_uint64(), ctypes.c_uint64()
    lib.distopt_rt_memory_stats(ctypes.byref(in_use), ctypes.byref(peak))
    return in_use.value


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def gpt(device=None):
    """The GPT and its block class; on the meta device (no memory) for a
    DistributedOptimizer to initialize (under seed 0: the same parameters
    as built on the CPU)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads = heads
            self.norm1 = nn.LayerNorm(width, device=device)
            self.qkv = nn.Linear(width, 3 * width, device=device)
            self.proj = nn.Linear(width, width, device=device)
            self.norm2 = nn.LayerNorm(width, device=device)
            self.up = nn.Linear(width, 4 * width, device=device)
            self.down = nn.Linear(4 * width, width, device=device)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
            shape = (b, t, self.heads, c // self.heads)
            q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
            mask = torch.ones(t, t).tril() == 0
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.down(torch.nn.functional.gelu(
                self.up(self.norm2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab, width, layers, heads, context):
            super().__init__()
            self.wte = nn.Embedding(vocab, width, device=device)
            self.wpe = nn.Embedding(context, width, device=device)
            self.blocks = nn.ModuleList(Block(width, heads)
                                        for _ in range(layers))
            self.norm = nn.LayerNorm(width, device=device)
            self.head = nn.Linear(width, vocab, bias=False, device=device)
            self.head.weight = self.wte.weight

        def forward(self, tokens):
            x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    torch.manual_seed(0)
    return GPT(**SHAPES), Block


def worker(mode, out, where="local"):
    if where == "cluster":  # gloo's sockets on the node's shaped link
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    import torch
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    from distopt.torch import DistributedOptimizer
    torch.set_num_threads(1)
    comm.Barrier()
    base, _ = rss()
    if mode.startswith("units"):  # no rank holds it whole
        model, block = gpt(device="meta")
        torch.manual_seed(0)
    else:
        model, block = gpt()
    params = sum(p.numel() for p in model.parameters())
    units = [sum(p.numel() for p in b.parameters()) for b in model.blocks]
    root = params - sum(units)
    recipe = {"type": "adamw", "lr": 1e-4}
    cache = os.path.join(tempfile.gettempdir(), "distopt-b15-cache")
    if mode == "zero2":
        opt = DistributedOptimizer(model.named_parameters(), recipe,
                                   pipeline="zero-stage=2", comm=comm,
                                   cache=cache)
    elif mode.startswith("units"):
        opt = DistributedOptimizer(model, recipe, pipeline="zero-stage=3",
                                   comm=comm, cache=cache,
                                   auto_wrap_policy=block)
    elif mode == "torch-zero":  # DDP + torch's ZeroRedundancyOptimizer
        import torch.distributed as dist
        path = comm.bcast(tempfile.mktemp(prefix="distopt-b15-")
                          if rank == 0 else None)
        dist.init_process_group("gloo", init_method=f"file://{path}",
                                rank=rank, world_size=size)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW,
                                      lr=1e-4)
    else:  # activations: torch alone
        opt = None
    forward = ddp if mode == "torch-zero" else model
    g = torch.Generator().manual_seed(rank)

    def step():
        tokens = torch.randint(0, SHAPES["vocab"], (1, SHAPES["context"]),
                               generator=g)
        logits = forward(tokens)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad()

    step()
    if opt is None:
        for p in model.parameters():
            p.grad = None
    rest, _ = rss()
    live = step_bytes()
    reset_peak()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(3):
        step()
        if opt is None:
            for p in model.parameters():
                p.grad = None
    _, peak = rss()
    seconds = (time.perf_counter() - start) / 3
    rows = comm.gather({"rest": rest - base, "peak": peak - base,
                        "live": live, "seconds": seconds}, root=0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"mode": mode, "ranks": size, "params": params,
                       "root": root, "block": max(units), "rows": rows}, f)


def vm_data():
    """VmData of this process (its private writable memory, what
    RLIMIT_DATA limits), bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024


def limited(mode, out, limit_mb, steps):
    """Trains `steps` steps under a per-rank limit of `limit_mb` MB of
    private memory above what the process held before the model existed
    (RLIMIT_DATA: malloc and anonymous mmap fail past it, as a device
    allocation fails past a GPU's memory), then evaluates the loss on a
    batch after the last step and, on rank 0, saves the whole parameters
    (model.state_dict(): gathered one at a time) to OUT.pt. Modes:
    limit-units (built on the meta device, ZeRO-3 with units), limit-zero2
    (built on the CPU, distopt's ZeRO-2), ddp (no limit: DDP + AdamW, the
    reference). Each rank writes OUT.<rank>: its losses, or the error."""
    import resource
    import torch
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    from distopt.torch import DistributedOptimizer
    torch.set_num_threads(1)
    cache = os.path.join(tempfile.gettempdir(), "distopt-b15-cache")
    recipe = {"type": "adamw", "lr": LR}
    result = {"rank": rank, "losses": []}
    base, _ = rss()
    if limit_mb:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA,
                           (vm_data() + int(limit_mb * MB), hard))
    try:
        if mode == "limit-units":
            model, block = gpt(device="meta")
            torch.manual_seed(0)
            opt = DistributedOptimizer(model, recipe, pipeline="zero-stage=3",
                                       comm=comm, cache=cache, timeout=120,
                                       auto_wrap_policy=block)
            forward = model
        elif mode == "limit-zero2":
            model, _ = gpt()
            opt = DistributedOptimizer(model.named_parameters(), recipe,
                                       pipeline="zero-stage=2", comm=comm,
                                       cache=cache, timeout=120)
            forward = model
        else:
            import torch.distributed as dist
            path = comm.bcast(tempfile.mktemp(prefix="distopt-b15-")
                              if rank == 0 else None)
            dist.init_process_group("gloo", init_method=f"file://{path}",
                                    rank=rank, world_size=size)
            model, _ = gpt()
            forward = torch.nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.AdamW(model.parameters(), lr=recipe["lr"])
            if rank == 0:  # (what the steps moved, for the comparison)
                torch.save(model.state_dict(), out + ".init.pt")
        g = torch.Generator().manual_seed(rank)

        def loss_of():  # (targets of their own: with the output layer
            # tied to the embedding, the input tokens' loss is 0 in f32)
            tokens, targets = torch.randint(
                0, SHAPES["vocab"], (2, 1, SHAPES["context"]), generator=g)
            logits = forward(tokens)
            return torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

        for _ in range(steps):
            loss = loss_of()
            loss.backward()
            opt.step()
            opt.zero_grad()
            result["losses"].append(loss.item())
        with torch.no_grad():
            result["evaluated"] = loss_of().item()
        state = model.state_dict()
        if rank == 0:
            torch.save(state, out + ".pt")
        del state
    except Exception as error:  # MemoryError, torch's or distopt's
        result["error"] = f"{type(error).__name__}: " + \
            str(error).strip().splitlines()[0][:200]
    result["peak"] = rss()[1] - base
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    if "error" in result:
        # The other ranks may wait in a collective: no finalization
        # (mpirun reports the exit and ends them; the files say what ran).
        sys.stdout.flush()
        os._exit(0)
    comm.Barrier()


def formula(mode, n, params, root, block, activations):
    """(at rest, peak) in bytes."""
    if mode == "zero2":  # (one rank: nothing reduced into a shard)
        rest = 16 * params if n == 1 else 8 * params + 12 * params / n
        return rest, rest + activations
    if mode == "torch-zero":  # DDP's buckets: the gradients a second time
        rest = 12 * params + 8 * params / n
        return rest, rest + activations
    rest = 16 * params / n  # units, units-uncached
    whole = 8 * (root + block) if n > 1 else 0
    return rest, rest + whole + activations


def run(mode, n):
    # units-uncached: the runtime frees a step's temporaries at once.
    cache = ["-x", "DISTOPT_RT_CACHE_MB=0"] if mode == "units-uncached" \
        else []
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(MPIRUN + cache + ["-np", str(n), sys.executable,
                                 os.path.abspath(__file__), "--worker", mode,
                                 f.name], check=True, cwd=ROOT)
        with open(f.name) as g:
            return json.load(g)


def run_limited(mode, n, limit_mb, steps, out):
    """Per rank: limited()'s result (a rank that wrote none: killed)."""
    subprocess.run(MPIRUN + ["-np", str(n), sys.executable,
                             os.path.abspath(__file__), "--limited", mode,
                             out, str(limit_mb), str(steps)], cwd=ROOT)
    rows = []
    for rank in range(n):
        try:
            with open(f"{out}.{rank}") as f:
                rows.append(json.load(f))
        except (OSError, ValueError):
            rows.append({"rank": rank, "losses": [],
                         "error": "killed (no result)"})
    return rows


def limit_table(n, limit_mb, steps):
    """The GPT trained at n ranks under a per-rank memory limit: ZeRO-3
    with units built on the meta device, and distopt's ZeRO-2, against
    DDP's losses and parameters without a limit."""
    import torch
    lines = [f"| step ({n} ranks, {limit_mb} MB per rank) | trained | "
             "peak MB (rank 0) | losses: largest gap to DDP's | "
             "parameters: largest gap to DDP's | parameters: distance to "
             "DDP's / distance DDP's moved |", "|---|---|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        ref = run_limited("ddp", n, 0, steps, os.path.join(tmp, "ddp"))
        want = torch.load(os.path.join(tmp, "ddp.pt"))
        start = torch.load(os.path.join(tmp, "ddp.init.pt"))
        for mode, limit, name in (
                ("limit-units", limit_mb, "distopt ZeRO-3, units, built on "
                                          "the meta device"),
                ("limit-zero2", limit_mb, "distopt ZeRO-2"),
                ("limit-zero2", 0, "distopt ZeRO-2 without the limit (the "
                                   "summation order's rounding)")):
            out = os.path.join(tmp, f"{mode}-{limit}")
            rows = run_limited(mode, n, limit, steps, out)
            failed = [r for r in rows if "error" in r]
            if failed:
                errors = sorted({re.sub(r"rank \d+: ", "", r["error"])
                                 for r in failed})
                lines.append(f"| {name} | no, on {len(failed)} of {n} "
                             f"ranks: {'; '.join(errors)} | | | | |")
                print(lines[-1], flush=True)
                continue
            gap = max(abs(a - b) / abs(b) for r, w in zip(rows, ref)
                      for a, b in zip(r["losses"] + [r["evaluated"]],
                                      w["losses"] + [w["evaluated"]]))
            got = torch.load(out + ".pt")
            worst = max((got[k] - v).abs().max().item()
                        for k, v in want.items()) / LR
            apart = math.sqrt(sum(((got[k] - v) ** 2).sum().item()
                                  for k, v in want.items()))
            moved = math.sqrt(sum(((v - start[k]) ** 2).sum().item()
                                  for k, v in want.items()))
            lines.append(f"| {name} | {steps} steps | "
                         f"{rows[0]['peak'] / MB:.0f} | {gap:.1e} | "
                         f"{worst:.2f} lr | {apart / moved:.1e} |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def cluster_table(rates):
    """Time per step and peak memory on the emulated cluster (2 nodes of 2
    ranks, each node's link shaped to `rate`): the rows' steps at 4 ranks,
    their collectives across a TCP link instead of shared memory."""
    lines = ["| link | step | s per step | peak MB |", "|---|---|---:|---:|"]
    names = {"torch-zero": "DDP + ZeroRedundancyOptimizer (torch)",
             "zero2": "distopt ZeRO-2", "units": "distopt ZeRO-3, units"}
    for rate in rates:
        for mode in ("torch-zero", "zero2", "units"):
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run(
                    [os.path.join(ROOT, "scripts", "cluster"), "--nodes", "2",
                     "--ranks-per-node", "2", "--rate", rate, "--",
                     sys.executable, os.path.abspath(__file__), "--worker",
                     mode, f.name, "cluster"], check=True, cwd=ROOT,
                    stdout=subprocess.DEVNULL)
                with open(f.name) as g:
                    got = json.load(g)
            seconds = max(r["seconds"] for r in got["rows"])
            peak = max(r["peak"] for r in got["rows"])
            lines.append(f"| {rate} | {names[mode]} | {seconds:.2f} | "
                         f"{peak / MB:.0f} |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def plot(rows, path):
    """The first table as bars: MB per rank at rest and at the peak, by
    world size and step, each with its formula (a black mark)."""
    from plots import figure, save
    names = list(dict.fromkeys(r["step"] for r in rows))
    ranks = sorted({r["ranks"] for r in rows})
    fig, axes = figure(2, 12, "B15: memory per rank, GPT-2 small's shapes "
                       "(AdamW, f32)", height=4.5)
    width = 0.8 / len(names)
    for ax, (key, title) in zip(axes, (("rest", "at rest (after a step)"),
                                       ("peak", "peak (3 steps)"))):
        for k, name in enumerate(names):
            mine = {r["ranks"]: r for r in rows if r["step"] == name}
            xs = [i + (k - (len(names) - 1) / 2) * width
                  for i, n in enumerate(ranks) if n in mine]
            got = [mine[n][key] for n in ranks if n in mine]
            want = [mine[n][key + "_formula"] for n in ranks if n in mine]
            ax.bar(xs, got, width, label=name)
            ax.scatter(xs, want, marker="_", s=200, color="black",
                       label="formula" if k == 0 else None, zorder=3)
        ax.set_xticks(range(len(ranks)))
        ax.set_xticklabels([f"{n} rank{'s' if n > 1 else ''}"
                            for n in ranks])
        ax.set_ylabel("MB per rank")
        ax.set_title(title)
        ax.set_ylim(0, 1.6 * max(r[key] for r in rows))  # (the legend)
    axes[0].legend(fontsize=7, loc="upper right")
    save(fig, path)


def rows_from_doc():
    """The first table of B15 in docs/benchmarks.md, as plot() takes it."""
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
        text = f.read()
    section = text[text.index("<!-- B15:begin -->"):
                   text.index("<!-- B15:end -->")]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 9 and cells[0].isdigit():
            rows.append({"ranks": int(cells[0]), "step": cells[1],
                         "rest": float(cells[2]),
                         "rest_formula": float(cells[3]),
                         "peak": float(cells[5]),
                         "peak_formula": float(cells[6])})
    return rows


PLOT = os.path.join(ROOT, "docs", "img", "b15-memory.png")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", nargs="+", metavar="MODE OUT [WHERE]")
    parser.add_argument("--cluster", default="1gbit,10gbit",
                        help="the emulated cluster's link rates (tc's "
                             "syntax), or '' for none")
    parser.add_argument("--cluster-only", action="store_true")
    parser.add_argument("--plot-only", action="store_true",
                        help="draw docs/img/b15-memory.png from B15's table")
    parser.add_argument("--limited", nargs=4,
                        metavar=("MODE", "OUT", "LIMIT_MB", "STEPS"))
    parser.add_argument("--limit-mb", type=int, default=1536,
                        help="the per-rank limit of the limited run")
    parser.add_argument("--limit-only", action="store_true",
                        help="only the limited run (4 ranks)")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--update", action="store_true",
                        help="write the table into docs/benchmarks.md (B15)")
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.limited:
        mode, out, limit_mb, steps = args.limited
        limited(mode, out, float(limit_mb), int(steps))
        return
    if args.limit_only:
        print(limit_table(4, args.limit_mb, 5))
        return
    if args.plot_only:
        plot(rows_from_doc(), PLOT)
        return
    rates = [r for r in args.cluster.split(",") if r]
    if args.cluster_only:
        print(cluster_table(rates))
        return
    plain = run("activations", 1)
    activations = plain["rows"][0]["peak"] - plain["rows"][0]["rest"] - \
        4 * plain["params"]
    rows = []
    lines = ["| ranks | step | at rest MB | formula | step's buffers MB "
             "| peak MB | formula | peak / formula | s per step |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    names = {"torch-zero": "DDP + ZeroRedundancyOptimizer (torch)",
             "zero2": "distopt ZeRO-2", "units": "distopt ZeRO-3, units",
             "units-uncached": "distopt ZeRO-3, units, "
                               "DISTOPT_RT_CACHE_MB=0"}
    for n in (int(x) for x in args.ranks.split(",")):
        for mode in ("torch-zero", "zero2", "units", "units-uncached"):
            got = run(mode, n)
            rest = max(r["rest"] for r in got["rows"])
            peak = max(r["peak"] for r in got["rows"])
            seconds = max(r["seconds"] for r in got["rows"])
            live = "" if mode == "torch-zero" else \
                f"{max(r['live'] for r in got['rows']) / MB:.0f}"
            want_rest, want_peak = formula(mode, n, got["params"],
                                           got["root"], got["block"],
                                           activations)
            rows.append({"ranks": n, "step": names[mode],
                         "rest": rest / MB, "rest_formula": want_rest / MB,
                         "peak": peak / MB, "peak_formula": want_peak / MB})
            lines.append(f"| {n} | {names[mode]} | {rest / MB:.0f} | "
                         f"{want_rest / MB:.0f} | {live} | {peak / MB:.0f} | "
                         f"{want_peak / MB:.0f} | {peak / want_peak:.2f} | "
                         f"{seconds:.2f} |")
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(f"activations (torch alone, 1 rank): {activations / MB:.0f} MB; "
          f"parameters {got['params'] / 1e6:.1f}M, root unit "
          f"{got['root'] / 1e6:.1f}M, block {got['block'] / 1e6:.2f}M")
    if args.update:
        plot(rows, PLOT)
    table += "\n\n" + limit_table(4, args.limit_mb, 5)
    if rates:
        if cluster_available():
            table += "\n\n" + cluster_table(rates)
        else:
            print("the emulated cluster cannot be made here: no cluster rows")
    print(table)
    if args.update:
        from benchdoc import update_section
        update_section("B15", table + "\n")


if __name__ == "__main__":
    main()
