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

Then on several ranks: the hook in DDP over gloo in 2 and 4 processes, each
with its own data, and the op under mpirun on as many ranks, each given its
process's gradient and error and the shared Q. Every rank's result, P, Q
and error are compared with its process's (same tolerance: the sums over
ranks add in a different order than gloo's too).

usage: powersgd_vs_torch.py DISTOPT_OPT MLIR_RUNNER LIB_DIR RUNTIME_LIB MPIRUN
"""
import os
import shlex
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlir_exec import PRINT_DECL, Tally, dense, print_bits, run  # noqa: E402

N, M, BATCH = 16, 8, 8
TOLERANCE = 1e-5


def hook_reference(rank, error_feedback, data_seed=7):
    """The hook's Q and error before step 4, step 4's gradient, and what the
    hook made of it: the result, P, Q and the error (in this process's
    process group; `data_seed` picks this process's data)."""
    torch.manual_seed(rank)
    model = torch.nn.Linear(M, N, bias=False)
    plain = torch.nn.Linear(M, N, bias=False)
    plain.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = powersgd.PowerSGDState(
        process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2,
        min_compression_rate=0, use_error_feedback=error_feedback, warm_start=True,
        orthogonalization_epsilon=0)
    ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    rng = np.random.default_rng(data_seed)
    for step in range(4):
        x = torch.tensor(rng.standard_normal((BATCH, M)), dtype=torch.float32)
        d = torch.tensor(rng.standard_normal((BATCH, N)), dtype=torch.float32)
        if step == 3:
            q = state.q_memory_dict[0].clone().view(M, rank)
            e = (state.error_dict[0].clone().view(N, M) if error_feedback
                 else torch.zeros(N, M))
            plain.zero_grad()
            (plain(x) * d).sum().backward()
            grad = plain.weight.grad.clone()
        model.zero_grad()
        (ddp(x) * d).sum().backward()
    want = [model.weight.grad, state.p_memory_dict[0].view(N, rank),
            state.q_memory_dict[0].view(M, rank)]
    if error_feedback:
        want.append(state.error_dict[0].view(N, M))
    return grad.numpy(), q.numpy(), e.numpy(), [w.numpy().copy() for w in want]


def ours(opt, runner, libdir, rtlib, grad, q, e, rank, error_feedback):
    gt, pt, qt = f"tensor<{N}x{M}xf32>", f"tensor<{N}x{rank}xf32>", f"tensor<{M}x{rank}xf32>"
    lines = ["distopt.process_group @world size 1", PRINT_DECL, "func.func @main() {",
             f"  %g = arith.constant {dense(grad)}",
             f"  %q = arith.constant {dense(q)}",
             f"  %p = arith.constant {dense(np.zeros((N, rank)))}"]
    if error_feedback:
        lines += [f"  %e = arith.constant {dense(e)}",
                  f"  %r, %p1, %q1, %e1 = distopt.powersgd_all_reduce %g, %p, %q, %e on @world "
                  f"rank {rank} : {gt}, {pt}, {qt}"]
    else:
        lines += [f"  %r, %p1, %q1 = distopt.powersgd_all_reduce %g, %p, %q on @world "
                  f"rank {rank} : {gt}, {pt}, {qt}"]
    shapes = [(N, M), (N, rank), (M, rank)]
    lines += print_bits("r", "%r", shapes[0]) + print_bits("p", "%p1", shapes[1])
    lines += print_bits("q", "%q1", shapes[2])
    if error_feedback:
        lines += print_bits("e", "%e1", (N, M))
        shapes.append((N, M))
    lines += ["  return", "}"]
    return run(opt, runner, libdir, "\n".join(lines) + "\n", shapes, extra_libs=[rtlib])


def hook_process(process, world, init_file, rank, error_feedback, queue):
    """One DDP process of a multi-rank reference run."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=process,
                            world_size=world)
    queue.put((process, hook_reference(rank, error_feedback, data_seed=7 + 101 * process)))
    dist.barrier()
    dist.destroy_process_group()


def hook_reference_ranks(world, rank, error_feedback):
    """hook_reference on `world` gloo processes, in process order."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=hook_process,
                             args=(p, world, os.path.join(tmp, "init"), rank, error_feedback, queue))
                 for p in range(world)]
        for p in procs:
            p.start()
        results = dict(queue.get(timeout=120) for _ in range(world))
        for p in procs:
            p.join(timeout=120)
            if p.exitcode != 0:
                raise RuntimeError(f"reference process exited with {p.exitcode}")
    return [results[p] for p in range(world)]


def ours_ranks(opt, runner, libdir, rtlib, mpirun, grads, q, errors, rank):
    """The op on len(grads) ranks (error feedback on), each with its own
    gradient and error; every rank's result, P, Q and error, gathered to
    rank 0 and printed, as [world, ...] arrays."""
    world = len(grads)
    shapes = [(N, M), (N, rank), (M, rank), (N, M)]
    lines = [f"distopt.process_group @world size {world}", PRINT_DECL, "func.func @main() {",
             "  %rank = distopt.rank @world : index",
             "  %zero = arith.constant 0 : index",
             f"  %gs = arith.constant {dense(np.stack(grads))}",
             f"  %es = arith.constant {dense(np.stack(errors))}",
             f"  %g = tensor.extract_slice %gs[%rank, 0, 0] [1, {N}, {M}] [1, 1, 1]"
             f" : tensor<{world}x{N}x{M}xf32> to tensor<{N}x{M}xf32>",
             f"  %e = tensor.extract_slice %es[%rank, 0, 0] [1, {N}, {M}] [1, 1, 1]"
             f" : tensor<{world}x{N}x{M}xf32> to tensor<{N}x{M}xf32>",
             f"  %q = arith.constant {dense(q)}",
             f"  %p = arith.constant {dense(np.zeros((N, rank)))}",
             f"  %r, %p1, %q1, %e1 = distopt.powersgd_all_reduce %g, %p, %q, %e on @world "
             f"rank {rank} : tensor<{N}x{M}xf32>, tensor<{N}x{rank}xf32>, tensor<{M}x{rank}xf32>"]
    printed = []
    for name, value, (a, b) in zip("rpqe", ["%r", "%p1", "%q1", "%e1"], shapes):
        lines += [f"  %{name}x = tensor.expand_shape {value} [[0, 1], [2]] output_shape [1, {a}, {b}]"
                  f" : tensor<{a}x{b}xf32> into tensor<1x{a}x{b}xf32>",
                  f"  %{name}all = distopt.all_gather %{name}x on @world"
                  f" : tensor<1x{a}x{b}xf32> -> tensor<{world}x{a}x{b}xf32>"]
        printed.append((world, a, b))
    lines += ["  %first = arith.cmpi eq, %rank, %zero : index", "  scf.if %first {"]
    for name, shape in zip("rpqe", printed):
        lines += ["  " + line for line in print_bits(name + "o", f"%{name}all", shape)]
    lines += ["  }", "  return", "}"]
    return run(opt, runner, libdir, "\n".join(lines) + "\n", printed, extra_libs=[rtlib],
               launcher=[*shlex.split(mpirun), "-np", str(world)])


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
    for rank in (1, 2, 4):
        for error_feedback in (True, False):
            grad, q, e, want = hook_reference(rank, error_feedback)
            got = ours(opt, runner, libdir, rtlib, grad, q, e, rank, error_feedback)
            names = ["result", "P", "Q", "error"]
            worst = compare(got, want, rank)
            ok = worst <= TOLERANCE and len(got) == len(want)
            label = f"rank {rank}, error feedback {'on' if error_feedback else 'off'}"
            tally.check(ok, f"{label}: {', '.join(names[:len(want)])} "
                  f"within {worst:.1e} of their largest magnitude")
    dist.destroy_process_group()

    for world in (2, 4):
        for rank in (1, 2):
            processes = hook_reference_ranks(world, rank, error_feedback=True)
            grads = [g for g, _, _, _ in processes]
            errors = [e for _, _, e, _ in processes]
            qs = [q for _, q, _, _ in processes]
            # Warm start: the hook's Q is the same on every process.
            assert all(np.array_equal(q, qs[0]) for q in qs)
            got = ours_ranks(opt, runner, libdir, rtlib, mpirun, grads, qs[0], errors, rank)
            worst = max(compare([t[r] for t in got], processes[r][3], rank) for r in range(world))
            ok = worst <= TOLERANCE
            tally.check(ok, f"{world} ranks, rank {rank}, error feedback on: "
                  f"every rank's result, P, Q, error within {worst:.1e} of their largest magnitude")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
