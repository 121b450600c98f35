"""The planner from Python (docs/choosing-a-pipeline.md): distopt-plan's
choice of distopt-pipeline options, and a quick calibration of the links
and rates it needs, measured on the caller's communicator.

    calibration = distopt.calibrate(comm, ranks_per_node=8)
    chosen = distopt.plan("spec.json", calibration, memory_per_rank="8GiB",
                          nodes=comm.Get_size() // 8)["chosen"]
"""

import json
import os
import subprocess
import tempfile
import time

from .compiler import _read_source, _tool
from .errors import CompileError


def plan(source, calibration, memory_per_rank=None, nodes=1,
         ranks_per_node=None, allow_lossy=False, keep="", backward_ms=0.0):
    """distopt-plan's plan for `source` (a spec dict or .json path, or an
    MLIR step's path) as a dict: "candidates" (each with its options,
    status, and predicted_ms and memory_bytes where evaluated) and
    "chosen" (the options; absent when nothing fits `memory_per_rank`).

    calibration: distopt-calibrate --compute --json's output, as a path or
      a dict (calibrate() below makes one).
    memory_per_rank: model state one rank may hold ("8GiB", or bytes).
    nodes, ranks_per_node: the topology (a spec's world_size becomes their
      product; default: the spec's world over `nodes`).
    allow_lossy: also consider PowerSGD and 16-bit reductions.
    keep: distopt-pipeline options every candidate keeps.
    backward_ms: a backward pass the gradients' reductions overlap.
    """
    kind, data = _read_source(source)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "step.json" if kind == "spec" else "step.mlir")
        with open(path, "wb") as f:
            f.write(data)
        if isinstance(calibration, dict):
            calibration_path = os.path.join(work, "calibration.json")
            with open(calibration_path, "w") as f:
                json.dump(calibration, f)
        else:
            calibration_path = os.fspath(calibration)
        command = [_tool("distopt-plan"), path, f"--calibration={calibration_path}",
                   f"--nodes={int(nodes)}", "--json", f"--backward-ms={float(backward_ms)}"]
        if ranks_per_node:
            command.append(f"--ranks-per-node={int(ranks_per_node)}")
        if memory_per_rank is not None:
            command.append(f"--memory-per-rank={memory_per_rank}")
        if allow_lossy:
            command.append("--allow-lossy")
        if keep:
            command.append(f"--keep={keep}")
        done = subprocess.run(command, capture_output=True, text=True)
    # 2: a plan with nothing within the budget (no "chosen").
    if done.returncode not in (0, 2):
        raise CompileError(f"distopt-plan failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def _fit(samples):
    """t = latency + bytes / bandwidth, least squares on relative errors
    (as distopt-calibrate fits): (latency s, bytes per s)."""
    sw = swx = swxx = swt = swxt = 0.0
    for size, seconds in samples:
        w = 1.0 / (seconds * seconds)
        sw += w
        swx += w * size
        swxx += w * size * size
        swt += w * seconds
        swxt += w * size * seconds
    det = sw * swxx - swx * swx
    latency = (swxx * swt - swx * swxt) / det
    per_byte = (sw * swxt - swx * swt) / det
    if not per_byte > 0:
        raise CompileError("calibrate: the all-reduce times do not grow with "
                           "the size")
    # A latency the noise made negative is none at all.
    return max(latency, 1e-7), 1.0 / per_byte


def _time_all_reduce(comm, group, sizes, seconds_per_size):
    """Median seconds of an f32 sum all-reduce on `group` at each size, each
    iteration the slowest rank's on `comm`."""
    import numpy as np
    from mpi4py import MPI
    samples = []
    buffer = np.ones(max(sizes) // 4, dtype=np.float32)
    for size in sizes:
        view = buffer[:size // 4]
        times = []
        iterations = None
        while iterations is None or len(times) < iterations:
            comm.Barrier()
            start = time.perf_counter()
            group.Allreduce(MPI.IN_PLACE, view, op=MPI.SUM)
            elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
            if iterations is None:  # the first warms up
                iterations = int(min(max(seconds_per_size / max(elapsed, 1e-7), 5), 200))
                continue
            times.append(elapsed)
        times.sort()
        samples.append((size, times[len(times) // 2]))
    return samples


def calibrate(comm, ranks_per_node=None, max_mb=16, seconds_per_size=0.1):
    """A quick calibration on `comm` (an mpi4py communicator; every rank
    calls it and gets the same dict), in distopt-calibrate --compute
    --json's format: the all-reduce's latency and bandwidth over the world
    and, with `ranks_per_node` below the world size, inside each node of
    that many consecutive ranks; the memory rate of an update-like loop and
    the f32 matmul rate, every rank at once. It measures through MPI and
    numpy, where distopt-calibrate measures the runtime's own all-reduce.
    A world of one rank has no link: its latency is 0 and its bandwidth the
    memory rate."""
    import numpy as np
    from mpi4py import MPI
    size = comm.Get_size()
    sizes = [4096 << k for k in range(20) if (4096 << k) <= max_mb * (1 << 20)]
    result = {"backend": "mpi", "world_size": size}
    if size > 1:
        latency, bandwidth = _fit(_time_all_reduce(comm, comm, sizes, seconds_per_size))
        result.update(latency_us=latency * 1e6, bandwidth_gb_per_s=bandwidth * 1e-9)
    if ranks_per_node and 1 < ranks_per_node < size:
        if size % ranks_per_node:
            raise ValueError(f"ranks_per_node={ranks_per_node} does not divide "
                             f"the world of {size} ranks")
        node = comm.Split(comm.Get_rank() // ranks_per_node, comm.Get_rank())
        try:
            node_latency, node_bandwidth = _fit(
                _time_all_reduce(comm, node, sizes, seconds_per_size))
        finally:
            node.Free()
        result["ranks_per_node"] = ranks_per_node
        result["intra_node"] = {"world_size": ranks_per_node,
                                "latency_us": node_latency * 1e6,
                                "bandwidth_gb_per_s": node_bandwidth * 1e-9}
    # p = p * a + g over 64 MiB streams: three streams of f32.
    p = np.ones(16 << 20, dtype=np.float32)
    g = np.full(16 << 20, 0.5, dtype=np.float32)
    times = []
    for _ in range(4):
        comm.Barrier()
        start = time.perf_counter()
        np.multiply(p, np.float32(0.999), out=p)
        np.add(p, g, out=p)
        times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
    # (numpy makes two passes: five streams.)
    result["memory_gb_per_s"] = 5 * 4 * p.size / sorted(times)[len(times) // 2] * 1e-9
    a = np.full((1024, 1024), 0.25, dtype=np.float32)
    b = np.full((1024, 16), 0.5, dtype=np.float32)
    times = []
    for _ in range(5):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(8):
            a @ b
        times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
    result["matmul_gflops"] = 8 * 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / \
        sorted(times[1:])[len(times[1:]) // 2] * 1e-9
    if size == 1:  # no link: nothing crosses one, a copy is memory's
        result.update(latency_us=0.0, bandwidth_gb_per_s=result["memory_gb_per_s"])
    return comm.bcast(result, root=0)
