"""Shared by the benchmarks: running compiled steps and torch processes."""
import json
import math
import os
import re
import statistics
import subprocess
import tempfile
import time
from typing import NamedTuple

# torch runs single-threaded in these benchmarks (torch.set_num_threads(1)),
# but Debian's torch calls its BLAS through libblas.so.3 without setting
# OpenBLAS's threads: each torch process would start one per core, and the
# ranks' BLAS threads would fight over the cores (the PowerSGD hook took
# 3.4x longer). Set before any torch process starts.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def percentile(samples, fraction):
    """Nearest rank, as distopt-run and the runtime's bench compute it."""
    ordered = sorted(samples)
    return ordered[max(math.ceil(fraction * len(ordered)), 1) - 1]


class Timing(NamedTuple):
    """A median with its spread: the 10th and 90th percentile (with fewer
    than ten samples, the fastest and the slowest), so that one
    descheduled sample does not make the spread."""
    median: float
    lo: float
    hi: float

    @classmethod
    def of(cls, samples):
        return cls(statistics.median(samples), percentile(samples, 0.1),
                   percentile(samples, 0.9))

    def scaled(self, factor):
        return Timing(*(x * factor for x in self))

    def minus(self, amount):
        """Every figure less `amount`: a time with a fixed part taken out."""
        return Timing(*(x - amount for x in self))

    def fmt(self, digits):
        """"median (p10-p90)", for the tables."""
        return f"{self.median:.{digits}f} ({self.lo:.{digits}f}-{self.hi:.{digits}f})"


def run_timing(out):
    """The per-step Timing (ms) in distopt-run's output."""
    match = re.search(r"([\d.]+) ms per step \(median[^;]*; p10 ([\d.]+), p90 ([\d.]+)\)", out)
    if not match:
        raise RuntimeError(f"no time in distopt-run's output:\n{out}")
    return Timing(*map(float, match.groups()))


def reduce_only_step(params, ranks):
    """An MLIR step that only averages each f32 gradient across the ranks:
    what bucketing and compression act on, without an optimizer update."""
    def t(shape):
        return "tensor<" + "x".join(map(str, shape)) + "xf32>"
    args, results, body, rets = [], [], [], []
    for i, p in enumerate(params):
        attrs = f'{{distopt.name = "{p["name"]}", distopt.role = "grad"}}'
        args.append(f"%g{i}: {t(p['shape'])} {attrs}")
        results.append(f"{t(p['shape'])} {attrs}")
        body.append(f"  %r{i} = distopt.all_reduce avg %g{i} on @world : {t(p['shape'])}")
        rets.append(f"%r{i}")
    return (f"module attributes {{distopt.world_size = {ranks} : i64}} {{\n"
            f"distopt.process_group @world size {ranks}\n"
            f"func.func @step({', '.join(args)}) -> ({', '.join(results)}) {{\n"
            + "\n".join(body) + "\n"
            f"  return {', '.join(rets)} : {', '.join(t(p['shape']) for p in params)}\n}}\n}}\n")


def compile_step(build, step, options, tmp):
    """distopt-compile `step` with --pipeline=`options`; the library's path."""
    library = os.path.join(tmp, "step.so")
    subprocess.run([os.path.join(build, "bin", "distopt-compile"), step,
                    f"--pipeline={options}", "-o", library], check=True)
    return library


def launch(build, library, ranks, steps, *extra):
    """distopt-run `library` on `ranks` ranks under mpirun; its output."""
    return subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                           "-np", str(ranks), os.path.join(build, "bin", "distopt-run"), library,
                           "--steps", str(steps), "--progress-seconds", "0", *extra],
                          check=True, capture_output=True, text=True).stdout


def compile_and_run(build, step, options, ranks, steps, tmp, launches=1, threads=None):
    """distopt-compile `step` with --pipeline=`options`, run it with
    distopt-run on `ranks` ranks (of `threads` threads; None: distopt-run's
    default) `launches` times; the median over launches of each one's
    median ms per step after the first, with the lowest 10th and highest
    90th percentile of the launches (a Timing)."""
    library = compile_step(build, step, options, tmp)
    extra = () if threads is None else ("--threads", str(threads))
    runs = [run_timing(launch(build, library, ranks, steps, *extra)) for _ in range(launches)]
    return Timing(statistics.median(r.median for r in runs), min(r.lo for r in runs),
                  max(r.hi for r in runs))


def report(build, step, options):
    """The text of --distopt-report after --distopt-pipeline=`options`."""
    return subprocess.run([os.path.join(build, "bin", "distopt-opt"), step,
                           f"--distopt-pipeline={options}", "--distopt-report",
                           "-o", "/dev/null"], check=True, capture_output=True, text=True).stdout


def bytes_sent_per_step(report_text):
    """The bytes each rank sends per step: the total of --distopt-report's
    communication table (ring algorithms)."""
    return int(re.search(r"communication per rank.*?\n\s+total\s+\d+\s+\d+\s+(\d+)",
                         report_text, re.S).group(1))


# Bytes an AdamW or Adam update streams per parameter: in f32 it reads p,
# g, m and v and writes p, m and v (B1); with bf16 parameters and f32 main
# parameters it reads the bf16 gradient and writes the bf16 parameter
# (2 + 2) and reads and writes the main parameter, m and v (24).
ADAM_BYTES_PER_PARAM = 28


class MemoryBound(NamedTuple):
    """What memory allows each rank when `ranks` ranks stream at once, in
    GB/s: copying (bytes copied per second, each read once and written
    once, as a byte sent between ranks on shared memory must at least be)
    and streaming in place (bytes read plus bytes written per second, in
    a += s*c, as an optimizer update streams)."""
    copy: float
    in_place: float

    def ms(self, copied=0.0, in_place=0.0):
        """The least time, in ms, for `copied` bytes copied (counted
        once, as sent) and `in_place` bytes read or written in place."""
        return (copied / self.copy + in_place / self.in_place) / 1e6

    def describe(self):
        return (f"memory per rank, measured in this run: copy {self.copy:.1f} GB/s, "
                f"in place {self.in_place:.1f} GB/s")


def best_gbps(kernel, nbytes, repeat):
    """GB/s of `kernel` moving `nbytes`, from the fastest of `repeat` runs."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        kernel()
        times.append(time.perf_counter() - start)
    return nbytes / min(times) / 1e9


def memory_bound(ranks, numel=1 << 25, repeat=8, threads_per_rank=1):
    """MemoryBound measured now with torch on min(ranks x threads_per_rank,
    cores) threads (the ranks' share of the machine), divided among the
    ranks; best of `repeat`."""
    import torch
    threads = max(1, min(ranks * threads_per_rank, len(os.sched_getaffinity(0))))
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b, c = torch.zeros(numel), torch.rand(numel), torch.rand(numel)
        return MemoryBound(best_gbps(lambda: a.copy_(b), 4 * numel, repeat) / ranks,
                           best_gbps(lambda: a.add_(c, alpha=1e-3), 12 * numel, repeat) / ranks)
    finally:
        torch.set_num_threads(saved)


def collectives_per_step(report_text):
    """How many collectives a step issues: the total of --distopt-report's
    communication table."""
    return int(re.search(r"communication per rank.*?\n\s+total\s+(\d+)", report_text,
                         re.S).group(1))


def slowest_timing(dist, torch, times):
    """The Timing (ms), after the first iteration, of each iteration's
    slowest rank; `times` are this rank's seconds; a collective, so every
    rank calls it."""
    slowest = []
    for t in times:
        local = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(local, op=dist.ReduceOp.MAX)
        slowest.append(local.item())
    return Timing.of(slowest[1:]).scaled(1e3)


def backward_step_timing(dist, torch, module, steps, optimizer=None):
    """Forward + backward of `module` (a shaped_module, under DDP or not),
    then optimizer.step() if given: the Timing (ms) after the first of
    `steps` iterations, each the slowest rank's; a collective."""
    times = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        module().backward()
        if optimizer is not None:
            optimizer.step()
        times.append(time.perf_counter() - start)
    return slowest_timing(dist, torch, times)


def spawn_gloo(worker, ranks, *args):
    """Runs worker(rank, init_file, *args, queue) on `ranks` processes joined
    by a gloo file rendezvous; returns what rank 0 puts on the queue."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=worker, args=(r, os.path.join(tmp, "init"), *args, queue))
                 for r in range(ranks)]
        for p in procs:
            p.start()
        result = queue.get(timeout=3600)
        for p in procs:
            p.join()
    return result


def ddp_then_matrices(rank, init, spec, steps, queue, start, update):
    """A peer in torch for optimizers of matrices, run by a spawn_gloo
    worker: DDP's all-reduce of every gradient (one flat buffer, gloo),
    then `update(param, grad, state)` on every matrix of every rank (its
    state from `start(param)`) and AdamW on the rest. Rank 0 puts the
    slowest rank's Timing on `queue`."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    params = [torch.full(p["shape"], 0.01) for p in spec["parameters"]]
    grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) for i, p in
             enumerate(params)]
    state = {k: start(p) for k, p in enumerate(params) if p.dim() >= 2}
    rest = [k for k in range(len(params)) if k not in state]
    vectors = [torch.nn.Parameter(params[k]) for k in rest]
    adamw = torch.optim.AdamW(vectors, lr=0.02, foreach=False)
    times = []
    for _ in range(steps):
        dist.barrier()
        began = time.perf_counter()
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= 2
        reduced = list(flat.split([g.numel() for g in grads]))
        with torch.no_grad():
            for k, s in state.items():
                update(params[k], reduced[k].view(params[k].shape), s)
        for v, k in zip(vectors, rest):
            v.grad = reduced[k].view(v.shape)
        adamw.step()
        times.append(time.perf_counter() - began)
    timing = slowest_timing(dist, torch, times)
    dist.destroy_process_group()
    if rank == 0:
        queue.put(timing)


def shaped_module(torch, spec):
    """A module holding parameters of the spec's shapes (f32); its forward
    is their sum, so backward writes every gradient and nothing else."""
    class Params(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.full(p["shape"], 0.01)) for p in spec["parameters"]])

        def forward(self):
            return sum(p.sum() for p in self.ps)
    return Params()


def gpt2_f32_spec(ranks):
    """examples/specs/gpt2-small.json at `ranks` ranks, made f32 (no main
    parameters): what B5 and B7 measure."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = json.load(open(os.path.join(root, "examples", "specs", "gpt2-small.json")))
    spec["world_size"] = ranks
    spec["main_params"] = False
    for p in spec["parameters"]:
        p["dtype"] = "f32"
    return spec


def b13_model(model_name, comm):
    """examples/torch/train.py's model and data at this world size (16
    samples per rank): (factory, batch, loss_fn, recipe). B13's workers."""
    import argparse
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "examples", "torch"))
    import torch
    import train  # examples/torch/train.py
    torch.set_num_threads(1)
    args = argparse.Namespace(model=model_name, batch=16 * comm.Get_size(),
                              lr=None)
    factory, batch, loss_fn, _, recipe = train.build(args)
    torch.manual_seed(0)
    return factory, batch, loss_fn, recipe


def ddp_beside(factory, recipe, comm):
    """What B13 compares distopt against: DDP (gloo, a file rendezvous on
    the shared /tmp) with torch's fastest CPU AdamW (foreach) on a model of
    its own, and a plain model for forward + backward alone. Returns
    (rendezvous path, plain model, DDP model, torch optimizer)."""
    import torch
    import torch.distributed as dist
    rank = comm.Get_rank()
    init = comm.bcast(tempfile.mktemp(prefix="distopt-b13-", dir="/tmp")
                      if rank == 0 else None)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank,
                            world_size=comm.Get_size())
    plain = factory()
    reference = torch.nn.parallel.DistributedDataParallel(
        factory(), broadcast_buffers=False, gradient_as_bucket_view=True)
    kwargs = {k: tuple(v) if k == "betas" else v
              for k, v in recipe.items() if k != "type"}
    torch_opt = torch.optim.AdamW(reference.parameters(), foreach=True,
                                  **kwargs)
    return init, plain, reference, torch_opt


def end_ddp(init, comm):
    """Closes ddp_beside's process group and removes its rendezvous file
    once every rank has closed it."""
    import torch.distributed as dist
    dist.destroy_process_group()
    comm.Barrier()
    if comm.Get_rank() == 0 and os.path.exists(init):
        os.unlink(init)


def cluster_available():
    """Whether scripts/cluster can make its emulated nodes here (root and a
    kernel with network namespaces, veth pairs and bridges)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([os.path.join(root, "scripts", "cluster"), "--check"],
                          capture_output=True).returncode == 0
