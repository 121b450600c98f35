#!/usr/bin/env python3
"""B2 and B4: the runtime's all-reduce against raw MPI and gloo, and the
average fused into the reduction against a sum followed by a scaling pass.

In one run, at 2 and 4 ranks, f32, 8 B to 128 MiB (x4), 25 MiB and 256 MiB:
the runtime's bench
(runtime/bench/allreduce_bench.cpp) times MPI_Allreduce and
distopt_rt_all_reduce (sum, avg, premul_sum) alternating on the same
buffers, the unfused average (sum, then x *= 1/N) and that scaling pass
alone; then torch.distributed's gloo all_reduce (sum) runs on the same sizes
and ranks. Every figure is the median over iterations of the slowest rank,
with the 10th and 90th percentiles in brackets (and as bands in the plots).
The bound of each row is memory: each rank sends the ring's 2(N-1)/N of
the bytes, and on shared memory each byte sent is at least copied once, at
the copy bandwidth memory gives each rank when all copy at once (measured
in the same run, common.memory_bound).
--update writes the tables into docs/benchmarks.md (B2, B4) and plots
docs/img/b2-allreduce-{2,4}ranks.png and docs/img/b4-fusion.png.

    /usr/bin/python3 bench/allreduce.py [--build build] [--max-bytes N] [--update]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plots  # noqa: E402
from benchdoc import update_section  # noqa: E402
from common import Timing, memory_bound, slowest_timing, spawn_gloo  # noqa: E402


def iterations(nbytes):
    # As the C++ bench: enough samples for a median, bounded time.
    return 200 if nbytes <= 1 << 20 else 20 if nbytes <= 1 << 24 else 5


def gloo_worker(rank, init_file, ranks, sizes, queue):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=ranks)
    results = {}
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        times = []
        for i in range(iterations(nbytes) + 2):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - start)
        # Two warm-up rounds; slowest_timing drops one more. In us.
        results[nbytes] = slowest_timing(dist, torch, times[1:]).scaled(1e3)
    if rank == 0:
        queue.put(results)
    dist.barrier()
    dist.destroy_process_group()


def gloo_times(ranks, sizes):
    return spawn_gloo(gloo_worker, ranks, ranks, sizes)


def sizes_up_to(max_bytes):
    """8 B by factors of 4, and the two sizes issue 6 names: 25 MiB (DDP's
    bucket, where gloo is compared) and 256 MiB (the top of the range)."""
    sizes = {8 * 4 ** k for k in range(13)} | {25 << 20, 256 << 20}
    return sorted(s for s in sizes if s <= max_bytes)


def runtime_times(bench, ranks, sizes):
    out = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                          "-np", str(ranks), bench] + [str(s) for s in sizes],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def spread(row, name):
    """The bench's median and range of series `name` as a Timing (us)."""
    return Timing(row[f"{name}_us"], row[f"{name}_p10_us"], row[f"{name}_p90_us"])


def bound_us(row, bound):
    """The memory bound of one all-reduce of the row's size (us)."""
    return bound.ms(copied=row["busbw_factor"] * row["bytes"]) * 1e3


def b2_table(rows, gloo, bound):
    lines = ["| bytes | MPI us (p10-p90) | distopt sum us (p10-p90) | sum / MPI | avg / MPI "
             "| premul / MPI | gloo us (p10-p90) | gloo / distopt | busbw GB/s (distopt) "
             "| memory bound us | bound / distopt |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        g = gloo[r["bytes"]]
        mpi, ours = spread(r, "mpi"), spread(r, "sum")
        lines.append(
            f"| {r['bytes']} | {mpi.fmt(1)} | {ours.fmt(1)} | {r['sum_us'] / r['mpi_us']:.2f} "
            f"| {r['avg_us'] / r['mpi_us']:.2f} | {r['premul_us'] / r['mpi_us']:.2f} | {g.fmt(1)} "
            f"| {g.median / r['sum_us']:.2f} | {r['busbw_factor'] * r['bytes'] / r['sum_us'] / 1e3:.2f} "
            f"| {bound_us(r, bound):.2f} | {bound_us(r, bound) / r['sum_us']:.2f} |")
    return "\n".join(lines)


def b4_table(rows, bound):
    lines = ["| bytes | fused avg us (p10-p90) | sum, then scale us (p10-p90) | unfused / fused "
             "| time saved us | scaling pass alone us (p10-p90) | saved / one pass "
             "| memory bound us | bound / fused |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        saved = r["sum_then_scale_us"] - r["avg_us"]
        lines.append(
            f"| {r['bytes']} | {spread(r, 'avg').fmt(1)} | {spread(r, 'sum_then_scale').fmt(1)} "
            f"| {r['sum_then_scale_us'] / r['avg_us']:.2f} | {saved:.1f} "
            f"| {spread(r, 'scale_pass').fmt(1)} | {saved / r['scale_pass_us']:.2f} "
            f"| {bound_us(r, bound):.2f} | {bound_us(r, bound) / r['avg_us']:.2f} |")
    return "\n".join(lines)


def plot(rows, gloo, ranks, path):
    sizes = [r["bytes"] for r in rows]
    fig, (ax,) = plots.figure(1, 6.4, f"all-reduce, {ranks} ranks, one 2-core host")
    # Medians as lines, each with its 10th-90th percentile band.
    for timings, style, label in (
            ([spread(r, "mpi") for r in rows], "o-", "MPI_Allreduce (OpenMPI 4.1)"),
            ([spread(r, "sum") for r in rows], "s-", "distopt sum"),
            ([gloo[s] for s in sizes], "x-", "gloo (torch 1.13)")):
        line, = ax.loglog(sizes, [t.median for t in timings], style, label=label)
        ax.fill_between(sizes, [t.lo for t in timings], [t.hi for t in timings],
                        color=line.get_color(), alpha=0.15, linewidth=0)
    ax.loglog(sizes, [r["avg_us"] for r in rows], "^--", label="distopt avg")
    ax.set_xlabel("bytes (f32)")
    ax.set_ylabel("time of the slowest rank (us): median, p10-p90")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    plots.save(fig, path)


def plot_fusion(by_ranks, path):
    """B4: the unfused average's time over the fused one, per size."""
    fig, (ax,) = plots.figure(1, 6.4, "B4: the 1/N division fused into the all-reduce")
    for ranks, rows in by_ranks.items():
        ax.semilogx([r["bytes"] for r in rows],
                    [r["sum_then_scale_us"] / r["avg_us"] for r in rows], "o-",
                    label=f"{ranks} ranks")
    ax.axhline(1.0, color="k", linestyle=":", label="no gain")
    ax.set_xlabel("bytes (f32)")
    ax.set_ylabel("(sum, then scale) / fused avg: medians")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    plots.save(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    bench = os.path.join(args.build, "runtime", "bin", "distopt-rt-allreduce-bench")
    b2, b4 = "", ""
    by_ranks = {}
    for ranks in (2, 4):
        rows = by_ranks[ranks] = runtime_times(bench, ranks, sizes_up_to(args.max_bytes))
        gloo = gloo_times(ranks, [r["bytes"] for r in rows])
        bound = memory_bound(ranks)
        b2 += f"{ranks} ranks; {bound.describe()}:\n\n{b2_table(rows, gloo, bound)}\n\n"
        b4 += f"{ranks} ranks; {bound.describe()}:\n\n{b4_table(rows, bound)}\n\n"
        if args.update:
            plot(rows, gloo, ranks,
                 os.path.join(ROOT, "docs", "img", f"b2-allreduce-{ranks}ranks.png"))
            b2 += f"![all-reduce, {ranks} ranks](img/b2-allreduce-{ranks}ranks.png)\n\n"
    print(b2)
    print(b4)
    if args.update:
        update_section("B2", b2.rstrip() + "\n")
        plot_fusion(by_ranks, os.path.join(ROOT, "docs", "img", "b4-fusion.png"))
        update_section("B4", b4 + "![division fusion](img/b4-fusion.png)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
