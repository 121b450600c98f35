#!/usr/bin/env python3
"""distopt.powersgd_all_reduce, lowered and executed, against PyTorch's own
powerSGD_hook given the same Q and error.

The hook runs inside DistributedDataParallel (gloo, one process: the
all-reduces are identities, which is what a single process can check; the
multi-rank sums are the runtime's all_reduce, checked bitwise elsewhere).
It compresses from its third step; its warm-started Q and its error after
that step are read from its state, the fourth step's gradient is computed by
the same autograd outside DDP, and the op gets those three. Compared: the
result (DDP's gradient), the new P and Q (the hook's memory) and the new
error, for ranks 1, 2 and 4 and error feedback on and off.

Above rank 2, torch 1.13's hook orthogonalizes with QR instead of
Gram-Schmidt: the same columns up to sign, so P and Q are compared after
matching each column's sign (the result and error need no such care).

Tolerance: 1e-5 of each tensor's largest magnitude (about 80 ulp of it).
The matrix products and dot products sum in a different order than torch's
BLAS (blocked, vectorised), and Gram-Schmidt carries those roundings through
r columns; observed: at most 5e-7.

Then on several ranks, with two layers whose ops share a batch number, so
that the lowering batches them (both P factors summed in one all_reduce,
both Q factors averaged in another, as the hook does for the tensors of its
bucket): the hook in DDP over gloo in 2 and 4 processes, each with its own
data, and the ops under mpirun on as many ranks, each given its process's
gradients and errors and the shared Qs. Every rank's results, Ps, Qs and
errors are compared with its process's (same tolerance: the sums over ranks
add in a different order than gloo's too). The same two ops without a batch
number (4 all_reduces instead of 2; the check counts them) must give the
same bits: the factors are far below the runtime's 64 KiB, where recursive
doubling adds every element in the same order wherever it sits in the
buffer.

usage: powersgd_vs_torch.py DISTOPT_OPT MLIR_RUNNER LIB_DIR RUNTIME_LIB MPIRUN
"""
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlir_exec import PRINT_DECL, Tally, dense, print_bits, run  # noqa: E402

N, M, K, BATCH = 16, 8, 12, 8
ONE_LAYER = ((N, M),)
TWO_LAYERS = ((N, M), (K, N))  # Linear(M, N) then Linear(N, K): weights N x M, K x N
TOLERANCE = 1e-5


def split(flat, shapes, order):
    """`flat` (the hook's memory for one bucket: the tensors in bucket order,
    each of its shape) as a list in parameter order."""
    pieces, at = {}, 0
    for i in order:
        size = int(np.prod(shapes[i]))
        pieces[i] = flat[at:at + size].clone().view(shapes[i])
        at += size
    assert at == flat.numel()
    return [pieces[i] for i in range(len(shapes))]


def hook_reference(rank, error_feedback, data_seed=7, layers=ONE_LAYER, epsilon=0):
    """The hook's Qs and errors before step 4, step 4's gradients, and what
    the hook made of them: for each weight (layers: (out, in) each, chained),
    the result, P, Q and the error (in this process's process group;
    `data_seed` picks this process's data)."""
    torch.manual_seed(rank)

    def mlp():
        return torch.nn.Sequential(*[torch.nn.Linear(i, o, bias=False) for o, i in layers])
    model, plain = mlp(), mlp()
    plain.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = powersgd.PowerSGDState(
        process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2,
        min_compression_rate=0, use_error_feedback=error_feedback, warm_start=True,
        orthogonalization_epsilon=epsilon)
    index = {id(p): i for i, p in enumerate(model.parameters())}
    order = []  # the bucket's tensors, as parameter indices

    def hook(state, bucket):
        order[:] = [index[id(p)] for p in bucket.parameters()]
        return powersgd.powerSGD_hook(state, bucket)
    ddp.register_comm_hook(state, hook)
    rng = np.random.default_rng(data_seed)
    pshapes = [(o, rank) for o, _ in layers]
    qshapes = [(i, rank) for _, i in layers]
    for step in range(4):
        x = torch.tensor(rng.standard_normal((BATCH, layers[0][1])), dtype=torch.float32)
        d = torch.tensor(rng.standard_normal((BATCH, layers[-1][0])), dtype=torch.float32)
        if step == 3:
            assert len(state.q_memory_dict) == 1, "one DDP bucket expected"
            qs = split(state.q_memory_dict[0], qshapes, order)
            es = (split(state.error_dict[0], layers, order) if error_feedback
                  else [torch.zeros(shape) for shape in layers])
            plain.zero_grad()
            (plain(x) * d).sum().backward()
            grads = [p.grad.clone() for p in plain.parameters()]
        model.zero_grad()
        (ddp(x) * d).sum().backward()
    want = [[p.grad.clone()] for p in model.parameters()]
    for w, p, q in zip(want, split(state.p_memory_dict[0], pshapes, order),
                       split(state.q_memory_dict[0], qshapes, order)):
        w += [p, q]
    if error_feedback:
        for w, e in zip(want, split(state.error_dict[0], layers, order)):
            w.append(e)
    numpy = [[t.numpy() for t in w] for w in want]
    return ([g.numpy() for g in grads], [q.numpy() for q in qs], [e.numpy() for e in es],
            numpy)


def types(shape, rank):
    n, m = shape
    return f"tensor<{n}x{m}xf32>", f"tensor<{n}x{rank}xf32>", f"tensor<{m}x{rank}xf32>"


def ours(opt, runner, libdir, rtlib, grads, qs, es, rank, error_feedback, epsilon=0):
    """The ops on one process; per weight: result, P, Q (and error)."""
    attrs = f" {{orthogonalization_epsilon = {epsilon!r} : f64}}" if epsilon else ""
    lines = ["distopt.process_group @world size 1", PRINT_DECL, "func.func @main() {"]
    shapes, prints = [], []
    for t, (grad, q, e) in enumerate(zip(grads, qs, es)):
        gt, pt, qt = types(grad.shape, rank)
        n, m = grad.shape
        lines += [f"  %g{t} = arith.constant {dense(grad)}",
                  f"  %q{t} = arith.constant {dense(q)}",
                  f"  %p{t} = arith.constant {dense(np.zeros((n, rank)))}"]
        tensor_shapes = [(n, m), (n, rank), (m, rank)]
        if error_feedback:
            lines += [f"  %e{t} = arith.constant {dense(e)}",
                      f"  %r{t}, %p{t}n, %q{t}n, %e{t}n = distopt.powersgd_all_reduce "
                      f"%g{t}, %p{t}, %q{t}, %e{t} on @world rank {rank}{attrs} : {gt}, {pt}, {qt}"]
            tensor_shapes.append((n, m))
        else:
            lines += [f"  %r{t}, %p{t}n, %q{t}n = distopt.powersgd_all_reduce "
                      f"%g{t}, %p{t}, %q{t} on @world rank {rank}{attrs} : {gt}, {pt}, {qt}"]
        for name, value, shape in zip("rpqe", [f"%r{t}", f"%p{t}n", f"%q{t}n", f"%e{t}n"],
                                      tensor_shapes):
            prints += print_bits(f"{name}{t}", value, shape)
            shapes.append(shape)
    lines += prints + ["  return", "}"]
    got = run(opt, runner, libdir, "\n".join(lines) + "\n", shapes, extra_libs=[rtlib])
    per = 4 if error_feedback else 3
    return [got[t * per:(t + 1) * per] for t in range(len(grads))]


def hook_process(process, world, init_file, rank, error_feedback, layers, queue):
    """One DDP process of a multi-rank reference run."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=process,
                            world_size=world)
    queue.put((process, hook_reference(rank, error_feedback, data_seed=7 + 101 * process,
                                       layers=layers)))
    dist.barrier()
    dist.destroy_process_group()


def hook_reference_ranks(world, rank, error_feedback, layers):
    """hook_reference on `world` gloo processes, in process order."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=hook_process,
                             args=(p, world, os.path.join(tmp, "init"), rank, error_feedback,
                                   layers, queue))
                 for p in range(world)]
        for p in procs:
            p.start()
        results = dict(queue.get(timeout=120) for _ in range(world))
        for p in procs:
            p.join(timeout=120)
            if p.exitcode != 0:
                raise RuntimeError(f"reference process exited with {p.exitcode}")
    return [results[p] for p in range(world)]


def ranks_text(world, grads, qs, errors, rank, batched):
    """The ops (error feedback on) on `world` ranks, rank k taking
    grads[k][t] and errors[k][t] for weight t and the shared qs[t], in one
    batch if `batched`; every rank's result, P, Q and error gathered to rank
    0 and printed, weight by weight. Returns the text and the printed
    shapes."""
    lines = [f"distopt.process_group @world size {world}", PRINT_DECL, "func.func @main() {",
             "  %rank = distopt.rank @world : index",
             "  %zero = arith.constant 0 : index"]
    gathered, printed = [], []
    for t, q in enumerate(qs):
        n, m = grads[0][t].shape
        gt, pt, qt = types((n, m), rank)
        lines += [f"  %gs{t} = arith.constant {dense(np.stack([g[t] for g in grads]))}",
                  f"  %es{t} = arith.constant {dense(np.stack([e[t] for e in errors]))}",
                  f"  %g{t} = tensor.extract_slice %gs{t}[%rank, 0, 0] [1, {n}, {m}] [1, 1, 1]"
                  f" : tensor<{world}x{n}x{m}xf32> to {gt}",
                  f"  %e{t} = tensor.extract_slice %es{t}[%rank, 0, 0] [1, {n}, {m}] [1, 1, 1]"
                  f" : tensor<{world}x{n}x{m}xf32> to {gt}",
                  f"  %q{t} = arith.constant {dense(q)}",
                  f"  %p{t} = arith.constant {dense(np.zeros((n, rank)))}",
                  f"  %r{t}, %p{t}n, %q{t}n, %e{t}n = distopt.powersgd_all_reduce "
                  f"%g{t}, %p{t}, %q{t}, %e{t} on @world rank {rank}"
                  f"{' {batch = 0 : i64}' if batched else ''} : {gt}, {pt}, {qt}"]
        for name, (a, b) in zip("rpqe", [(n, m), (n, rank), (m, rank), (n, m)]):
            value, out = f"%{name}{t}" if name == "r" else f"%{name}{t}n", f"%{name}{t}all"
            gathered += [f"  %{name}{t}x = tensor.expand_shape {value} [[0, 1], [2]]"
                       f" output_shape [1, {a}, {b}] : tensor<{a}x{b}xf32> into tensor<1x{a}x{b}xf32>",
                       f"  {out} = distopt.all_gather %{name}{t}x on @world"
                       f" : tensor<1x{a}x{b}xf32> -> tensor<{world}x{a}x{b}xf32>"]
            printed.append((f"{name}{t}o", out, (world, a, b)))
    lines += gathered + ["  %first = arith.cmpi eq, %rank, %zero : index", "  scf.if %first {"]
    for name, value, shape in printed:
        lines += ["  " + line for line in print_bits(name, value, shape)]
    lines += ["  }", "  return", "}"]
    return "\n".join(lines) + "\n", [shape for _, _, shape in printed]


def all_reduces(opt, text):
    """How many all_reduces the lowering of `text` issues."""
    lowered = subprocess.run([opt, "--distopt-lower-local-ops"], input=text, check=True,
                             capture_output=True, text=True).stdout
    return lowered.count("distopt.all_reduce ")


def ours_ranks(opt, runner, libdir, rtlib, mpirun, text, shapes, world):
    """`text` under mpirun on `world` ranks: per weight, [world, ...] arrays
    of every rank's result, P, Q and error."""
    got = run(opt, runner, libdir, text, shapes, extra_libs=[rtlib],
              launcher=[*shlex.split(mpirun), "-np", str(world)])
    return [got[t:t + 4] for t in range(0, len(got), 4)]


def compare(got, want, rank):
    """The largest difference, relative to each tensor's largest magnitude,
    after matching P's and Q's column signs where torch used QR."""
    if rank > 2:
        # torch 1.13 orthogonalizes with QR above rank 2: the same
        # columns as Gram-Schmidt up to their signs (P and Q flip
        # together; the result and the error do not change).
        signs = np.sign(np.sum(got[1] * want[1], axis=0))
        got[1], got[2] = got[1] * signs, got[2] * signs
    return max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(got, want))


def main():
    opt, runner, libdir, rtlib, mpirun = sys.argv[1:6]
    init = tempfile.NamedTemporaryFile(delete=False)
    dist.init_process_group("gloo", init_method=f"file://{init.name}", rank=0, world_size=1)
    tally = Tally()
    names = ["result", "P", "Q", "error"]
    cases = [(rank, ef, ONE_LAYER, 0) for rank in (1, 2, 4) for ef in (True, False)]
    cases.append((2, True, TWO_LAYERS, 0))
    # The hook's orthogonalization_epsilon (--distopt-powersgd's option):
    # large enough to change every column.
    cases.append((2, True, ONE_LAYER, 0.5))
    for rank, error_feedback, layers, epsilon in cases:
        grads, qs, es, want = hook_reference(rank, error_feedback, layers=layers,
                                             epsilon=epsilon)
        got = ours(opt, runner, libdir, rtlib, grads, qs, es, rank, error_feedback, epsilon)
        worst = max(compare(g, w, rank) for g, w in zip(got, want))
        ok = len(got) == len(want) and all(len(g) == len(w) for g, w in zip(got, want))
        ok = ok and worst <= TOLERANCE
        label = (f"rank {rank}, error feedback {'on' if error_feedback else 'off'}"
                 + (f", {len(layers)} weights" if len(layers) > 1 else "")
                 + (f", orthogonalization epsilon {epsilon}" if epsilon else ""))
        tally.check(ok, f"{label}: {', '.join(names[:len(want[0])])} "
              f"within {worst:.1e} of their largest magnitude")
    dist.destroy_process_group()

    for world in (2, 4):
        for rank in (1, 2):
            processes = hook_reference_ranks(world, rank, True, TWO_LAYERS)
            grads = [g for g, _, _, _ in processes]
            errors = [e for _, _, e, _ in processes]
            qs = [q for _, q, _, _ in processes]
            # Warm start: the hook's Qs are the same on every process.
            assert all(np.array_equal(a, b) for q in qs for a, b in zip(q, qs[0]))
            text, shapes = ranks_text(world, grads, qs[0], errors, rank, batched=True)
            got = ours_ranks(opt, runner, libdir, rtlib, mpirun, text, shapes, world)
            worst = max(compare([t[r] for t in got[w]], processes[r][3][w], rank)
                        for r in range(world) for w in range(len(TWO_LAYERS)))
            tally.check(worst <= TOLERANCE and all_reduces(opt, text) == 2,
                        f"{world} ranks, rank {rank}, 2 weights in one batch (2 all_reduces): "
                        f"every rank's results, Ps, Qs, errors within {worst:.1e} of their "
                        f"largest magnitude")
            if rank != 1:
                continue
            text, shapes = ranks_text(world, grads, qs[0], errors, rank, batched=False)
            alone = ours_ranks(opt, runner, libdir, rtlib, mpirun, text, shapes, world)
            same = all(np.array_equal(a.view(np.int32), b.view(np.int32))
                       for x, y in zip(got, alone) for a, b in zip(x, y))
            tally.check(same and all_reduces(opt, text) == 4,
                        f"{world} ranks, rank {rank}: batched == unbatched "
                        f"(4 all_reduces), bit for bit")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
