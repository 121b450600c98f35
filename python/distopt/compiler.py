"""Compiling steps: a parameter spec or an MLIR file, through a pipeline, to a
shared library the host step library opens. Results are cached by the hash of
everything that decides them (the input, the pipeline, the target, the
compiler binaries), so a training script recompiles only when one changes.
"""

import hashlib
import json
import os
import subprocess
import tempfile

from . import _config
from .errors import CompileError


def tools_dir():
    return os.environ.get("DISTOPT_TOOLS_DIR") or _config.TOOLS_DIR


def _tool(name):
    path = os.path.join(tools_dir(), name)
    if not os.access(path, os.X_OK):
        raise CompileError(f"{path}: not found (set DISTOPT_TOOLS_DIR to the "
                           "directory holding distopt-compile)")
    return path


def _tool_identity(path):
    stat = os.stat(path)
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def _host_cpu():
    """What --cpu=native compiles for: the processor's model and features.
    A cache shared between machines (a home directory on NFS) must not hand
    one machine code built for another's instructions."""
    identity = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key in ("model name", "flags", "Features", "CPU part"):
                    identity.append(line.strip())
                elif not line.strip() and identity:
                    break  # the first processor says it for all
    except OSError:
        pass
    import platform
    return platform.machine() + "\n" + "\n".join(identity)


def cache_dir():
    return os.environ.get("DISTOPT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "distopt")


def _read_source(source):
    """(kind, bytes): kind is 'spec' or 'mlir'."""
    if isinstance(source, dict):
        return "spec", json.dumps(source, sort_keys=True).encode()
    path = os.fspath(source)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CompileError(f"{path}: {e.strerror}") from None
    return ("spec" if path.endswith(".json") else "mlir"), data


def _run(command, what):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise CompileError(f"{what} failed:\n{result.stderr.strip()}")


def compile(source, pipeline="", target="cpu", extra_args=(), cache=None,
            comm=None, calibration=None, memory_per_rank=None, nodes=1,
            allow_lossy=False):
    """Compiles `source` and returns the path of the step's shared library.

    source: a parameter spec (a dict, or a path ending in .json,
      docs/param-spec.md) or a path to an MLIR step (docs/dialect.md).
    pipeline: distopt-pipeline's options ("zero-stage=2 powersgd-rank=4"),
      or "auto" and options to keep: distopt-plan chooses the rest
      (distopt.planner.plan) from `calibration` (a path or dict, default
      $DISTOPT_CALIBRATION), within `memory_per_rank` of model state, for
      `nodes` nodes, lossy choices only with `allow_lossy`.
    target: "cpu" or "cuda" (distopt-compile --target).
    extra_args: more distopt-compile arguments.
    cache: the directory of compiled steps (default $DISTOPT_CACHE_DIR, else
      ~/.cache/distopt); compiled once per content hash.
    comm: an mpi4py communicator: rank 0 compiles, the others wait for it
      and get its path (or its error).
    """
    if comm is not None and comm.Get_size() > 1:
        outcome = None
        if comm.Get_rank() == 0:
            try:
                outcome = ("ok", compile(source, pipeline, target, extra_args,
                                         cache, None, calibration,
                                         memory_per_rank, nodes, allow_lossy))
            except Exception as e:  # the others must not wait forever
                outcome = ("error", str(e) if isinstance(e, CompileError)
                           else f"{type(e).__name__}: {e}")
        outcome = comm.bcast(outcome, root=0)
        if outcome[0] == "error":
            raise CompileError(outcome[1])
        return outcome[1]

    if pipeline.split()[:1] == ["auto"]:
        pipeline = planned_pipeline(source, pipeline, calibration,
                                    memory_per_rank, nodes, allow_lossy)
    elif calibration is not None or memory_per_rank is not None or \
            nodes != 1 or allow_lossy:
        raise ValueError("calibration, memory_per_rank, nodes and "
                         "allow_lossy are for pipeline='auto'")
    kind, data = _read_source(source)
    translate = _tool("distopt-translate") if kind == "spec" else ""
    compiler = _tool("distopt-compile")
    key = hashlib.sha256()
    for part in (kind, data, pipeline, target, *extra_args,
                 _tool_identity(translate) if translate else "",
                 _tool_identity(compiler),
                 _host_cpu()):
        key.update(part if isinstance(part, bytes) else part.encode())
        key.update(b"\0")
    directory = cache or cache_dir()
    os.makedirs(directory, exist_ok=True)
    output = os.path.join(directory, key.hexdigest()[:32] + ".so")
    if os.path.exists(output):
        return output

    with tempfile.TemporaryDirectory(dir=directory) as work:
        mlir = os.path.join(work, "step.mlir")
        if kind == "spec":
            spec = os.path.join(work, "spec.json")
            with open(spec, "wb") as f:
                f.write(data)
            _run([translate, "--import-param-spec", spec, "-o", mlir],
                 "distopt-translate --import-param-spec")
        else:
            with open(mlir, "wb") as f:
                f.write(data)
        library = os.path.join(work, "step.so")
        command = [compiler, mlir, f"--target={target}", "-o", library]
        if pipeline:
            command.append(f"--pipeline={pipeline}")
        command += list(extra_args)
        _run(command, "distopt-compile")
        # Atomic: a concurrent compile of the same step finds a whole file.
        os.replace(library, output)
    return output


def planned_pipeline(source, pipeline, calibration, memory_per_rank=None,
                     nodes=1, allow_lossy=False):
    """The options distopt-plan chooses for "auto [options kept]"."""
    from .planner import plan
    if calibration is None:
        calibration = os.environ.get("DISTOPT_CALIBRATION")
    if calibration is None:
        raise CompileError("pipeline='auto' needs measured links: pass "
                           "calibration= (a distopt-calibrate --compute --json "
                           "file, or distopt.calibrate(comm)) or set "
                           "DISTOPT_CALIBRATION")
    result = plan(source, calibration, memory_per_rank=memory_per_rank,
                  nodes=nodes, allow_lossy=allow_lossy,
                  keep=" ".join(pipeline.split()[1:]))
    if not result.get("chosen"):
        if any(c["status"] == "over-budget" for c in result["candidates"]):
            raise CompileError(f"pipeline='auto': no configuration holds its "
                               f"model state within memory_per_rank="
                               f"{memory_per_rank}")
        raise CompileError("pipeline='auto': distopt-pipeline refused every "
                           "configuration with the options kept")
    return result["chosen"]
