# -*- Python -*-
# lit configuration of the distopt regression tests.

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "DISTOPT"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.distopt_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs", "optimizers_vs_torch.py",
                   "step_harness.py", "passes_preserve_step.py", "compiled_step.py",
                   "amp_clip_vs_torch.py", "mlir_exec.py", "shard_to_distopt.py", "snippets.py", "overflow_skip.py", "checkpoint_corruption.py", "clip_sharded_vs_torch.py", "interface_errors.py", "runtime_hyperparameters.py", "torch_ddp_parity.py", "split_step.py"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%distopt_obj_root", config.distopt_obj_root))
# Where the tools are, for scripts that run several of them.
config.substitutions.append(("%distopt_bin", config.distopt_tools_dir))
config.substitutions.append(("%lit", os.path.join(config.llvm_tools_dir, "lit")))
config.substitutions.append(("%examples", os.path.join(config.distopt_src_root, "examples")))
# Debian's torch calls OpenBLAS (libblas.so.3) without limiting its
# threads: one per core in every torch process of a multi-rank test.
config.environment["OPENBLAS_NUM_THREADS"] = "1"
config.environment["FILECHECK_OPTS"] = "-enable-var-scope --allow-unused-prefixes=false"

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
tool_dirs = [config.distopt_tools_dir, config.llvm_tools_dir]
tools = ["distopt-opt", "distopt-translate", "distopt-compile", "distopt-plan", "distopt-run", "distopt-calibrate", "distopt-checkpoint", "not", "count", "llvm-nm", "llvm-objdump", "llvm-readelf",
         "distopt-capi-test"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# The runtime's tests run its test driver under mpirun when MPI is present.
import shutil

config.substitutions.append(
    ("%rt_test", os.path.join(config.distopt_obj_root, "runtime", "bin", "distopt-rt-test")))
config.substitutions.append(
    ("%step_test", os.path.join(config.distopt_obj_root, "runtime", "bin", "distopt-step-test")))
mpirun = shutil.which("mpirun")
if mpirun:
    config.available_features.add("mpi")
    # Root may run it (CI does); more ranks than cores is fine for tests;
    # each launch gets its own session directory (test/mpirun.sh says why).
    config.substitutions.append(
        ("%mpirun", os.path.join(config.test_source_root, "mpirun.sh")))

import subprocess

# LeakSanitizer's runtime, preloaded into a program built without it: the
# leak checks of failed steps (test/Runtime/step-failure-leaks.test).
lsan = subprocess.run(["cc", "-print-file-name=liblsan.so"], capture_output=True,
                      text=True).stdout.strip() if shutil.which("cc") else ""
if os.path.isabs(lsan) and os.path.exists(lsan):
    config.available_features.add("lsan")
    config.substitutions.append(("%lsan", os.path.realpath(lsan)))

# scripts/cluster (emulated nodes: network namespaces, veth, a bridge)
# needs root and a kernel that allows them; its tests are skipped elsewhere.
cluster = os.path.join(config.distopt_src_root, "scripts", "cluster")
if mpirun and subprocess.run([cluster, "--check"], capture_output=True).returncode == 0:
    config.available_features.add("cluster")
    config.substitutions.append(("%cluster", cluster))

# Integration tests against PyTorch need Debian's python3-torch (CPU). The
# interpreter on PATH may be another one, so Debian's is used by path.
torch_python = "/usr/bin/python3"
if os.path.exists(torch_python) and subprocess.run(
        [torch_python, "-c", "import torch, numpy"], capture_output=True).returncode == 0:
    config.available_features.add("torch")
    config.substitutions.append(("%torch_python", torch_python))
    # The Python package (python/distopt) and its examples, from the build
    # tree; `mpi4py` where Debian's python3-mpi4py is installed.
    if subprocess.run([torch_python, "-c", "import mpi4py, sklearn"],
                      capture_output=True).returncode == 0:
        config.available_features.add("mpi4py")
config.substitutions.append(("%distopt_python", os.path.join(config.distopt_obj_root, "python")))
config.substitutions.append(("%mlir_runner", os.path.join(config.llvm_tools_dir, "mlir-runner")))
config.substitutions.append(("%mlir_lib_dir", os.path.join(os.path.dirname(config.llvm_tools_dir), "lib")))
config.substitutions.append(
    ("%rt_lib", os.path.join(config.distopt_obj_root, "runtime", "lib", "libdistopt_rt.so")))

# GPU: `cuda-toolkit` where ptxas can assemble kernels into cubins (fatbin);
# `cuda-gpu` where the CUDA driver loads and sees a device (execution tests).
cuda_root = os.environ.get("CUDA_ROOT") or os.environ.get("CUDA_HOME") or "/usr/local/cuda"
if os.access(os.path.join(cuda_root, "bin", "ptxas"), os.X_OK):
    config.available_features.add("cuda-toolkit")


def cuda_device_count():
    import ctypes
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


if cuda_device_count() > 0:
    config.available_features.add("cuda-gpu")
