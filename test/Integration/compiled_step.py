"""Compiles a step with distopt-compile and calls it in this process (ctypes),
on numpy arrays: the code users run, O3 for this machine's CPU, with no
driver in between. Shared by the integration tests that compare a step's
numbers with PyTorch's.

usage:
    step = CompiledStep.compile(distopt_compile, runtime_lib, text, tmpdir)
    results = step(arrays_and_scalars)   # one numpy array per result
"""
import ctypes
import json
import os
import subprocess

import numpy as np

_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
_SCALARS = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i64": ctypes.c_int64,
            "i32": ctypes.c_int32}
# MLIR marks the buffers of constant globals with this allocated pointer.
_GLOBAL_MARKER = 0xDEADBEEF


class CompiledStep:
    def __init__(self, library, runtime):
        self.runtime = runtime
        self.lib = ctypes.CDLL(library)
        text = ctypes.cast(ctypes.addressof(ctypes.c_char.in_dll(self.lib, "distopt_step_abi")),
                           ctypes.c_char_p).value
        self.abi = json.loads(text)
        self.entry = self.lib.distopt_step_packed
        self.entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self.entry.restype = ctypes.c_int32
        self.free = runtime._mlir_memref_to_llvm_free
        self.free.argtypes = [ctypes.c_void_p]

    @classmethod
    def compile(cls, distopt_compile, runtime_lib, text, tmpdir, name="step", options=()):
        """Compiles `text` (a module with @step) into tmpdir/name.so."""
        source = os.path.join(tmpdir, name + ".mlir")
        library = os.path.join(tmpdir, name + ".so")
        with open(source, "w") as f:
            f.write(text)
        subprocess.run([distopt_compile, source, "-o", library, *options], check=True)
        # The step finds the runtime's symbols (its allocator) in the process.
        runtime = ctypes.CDLL(runtime_lib, mode=ctypes.RTLD_GLOBAL)
        return cls(library, runtime)

    def __call__(self, values):
        """Runs the step once. `values`: one per argument, numpy arrays (C
        contiguous, of the argument's dtype and shape; updated in place where
        the step does) or Python numbers. Returns the results as arrays."""
        args = self.abi["args"]
        if len(values) != len(args):
            raise ValueError(f"the step takes {len(args)} arguments, got {len(values)}")
        keep = []  # everything the call points into stays alive
        packed = (ctypes.c_void_p * (1 + len(args)))()
        for i, (arg, value) in enumerate(zip(args, values)):
            if "shape" in arg:
                array = value
                want = np.dtype(_DTYPES[arg["dtype"]])
                if (array.dtype != want or list(array.shape) != arg["shape"]
                        or not array.flags.c_contiguous):
                    raise ValueError(f"argument {i}: expected a contiguous {arg['dtype']} "
                                     f"array of shape {arg['shape']}")
                shape = arg["shape"]
                strides = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
                address = array.ctypes.data
                words = (ctypes.c_int64 * (3 + 2 * len(shape)))(
                    address, address, 0, *shape, *strides)
                pointer = ctypes.c_void_p(ctypes.addressof(words))
                keep += [words, pointer]
                packed[1 + i] = ctypes.addressof(pointer)
            else:
                scalar = _SCALARS[arg["dtype"]](value)
                keep.append(scalar)
                packed[1 + i] = ctypes.addressof(scalar)
        results = self.abi["results"]
        words = sum(3 + 2 * len(r.get("shape", [])) for r in results) or 1
        storage = (ctypes.c_int64 * words)()
        storage_pointer = ctypes.c_void_p(ctypes.addressof(storage))
        packed[0] = ctypes.addressof(storage_pointer)
        status = self.entry(packed)
        if status != 0:
            error = self.runtime.distopt_rt_last_error
            error.restype = ctypes.c_char_p
            raise RuntimeError(f"the step failed with status {status}: "
                               f"{error().decode()}")
        out, word, owned = [], 0, set()
        for r in results:
            if r.get("in_place_arg", -1) >= 0:
                out.append(values[r["in_place_arg"]].copy())
                continue
            shape = r["shape"]
            allocated, aligned, offset = storage[word], storage[word + 1], storage[word + 2]
            word += 3 + 2 * len(shape)
            dtype = np.dtype(_DTYPES[r["dtype"]])
            count = int(np.prod(shape)) if shape else 1
            buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(
                aligned + offset * dtype.itemsize)
            out.append(np.frombuffer(bytes(buffer), dtype=dtype).reshape(shape))
            if allocated != _GLOBAL_MARKER:
                owned.add(allocated)
        # Freed once read: results may be views of one allocation.
        for allocated in owned:
            self.free(allocated)
        return out
