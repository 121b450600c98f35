"""ctypes declarations of the host step library (runtime/include/distopt_step.h).

ctypes rather than a compiled extension: the library already has a C ABI, so
the bindings need no compiler, work with any CPython 3 (Debian's, a venv's),
and do not tie distopt to the pybind11 or C++ ABI that torch was built with.
"""

import ctypes
import os

from . import _config

API_VERSION = 2

# distopt_rt_status, by code.
STATUS_NAMES = {
    0: "ok",
    1: "invalid_argument",
    2: "world_size_mismatch",
    3: "timeout",
    4: "backend_error",
    5: "unavailable",
    6: "failed",
    7: "peer_died",
    8: "mismatch",
}

_i64 = ctypes.c_int64
_i32 = ctypes.c_int32
_p = ctypes.c_void_p
_s = ctypes.c_char_p


class StepValue(ctypes.Structure):
    _fields_ = [("role", _s), ("name", _s), ("dtype", _s),
                ("dtype_code", _i32), ("is_tensor", _i32), ("ndim", _i64),
                ("shape", ctypes.POINTER(_i64)), ("numel", _i64),
                ("bytes", _i64), ("init", _s), ("per_rank", _i32),
                ("shard_of", _i64), ("in_place_arg", _i64),
                ("layout_entries", _i64)]


class StepTensor(ctypes.Structure):
    _fields_ = [("role", _s), ("name", _s), ("dtype", _s),
                ("dtype_code", _i32), ("per_rank", _i32), ("ndim", _i64),
                ("shape", ctypes.POINTER(_i64)), ("numel", _i64),
                ("bytes", _i64), ("arg", _i64), ("whole", _i32)]


class StepEntry(ctypes.Structure):
    _fields_ = [("name", _s), ("kind", _s), ("num_reduces", _i64),
                ("reduces", ctypes.POINTER(_i64))]


class SessionOptions(ctypes.Structure):
    _fields_ = [("mpi_comm", _p), ("backend", _s),
                ("timeout_seconds", ctypes.c_double), ("lr", ctypes.c_double),
                ("seed", ctypes.c_uint64), ("threads", _i64)]


def library_path():
    return os.environ.get("DISTOPT_RT_LIBRARY") or _config.RUNTIME_LIBRARY


def _load():
    path = library_path()
    # RTLD_GLOBAL: OpenMPI's plugins resolve libmpi's symbols globally, and
    # a compiled step resolves the runtime's distopt_rt_* functions.
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    status = ctypes.c_int
    signatures = {
        "distopt_rt_last_error": (_s, []),
        "distopt_step_api_version": (ctypes.c_int, []),
        "distopt_step_open": (status, [_s, ctypes.POINTER(_p)]),
        "distopt_step_close": (None, [_p]),
        "distopt_step_interface": (_s, [_p]),
        "distopt_step_world_size": (_i64, [_p]),
        "distopt_step_device": (_s, [_p]),
        "distopt_step_num_args": (_i64, [_p]),
        "distopt_step_num_results": (_i64, [_p]),
        "distopt_step_arg": (status, [_p, _i64, ctypes.POINTER(StepValue)]),
        "distopt_step_result": (status, [_p, _i64, ctypes.POINTER(StepValue)]),
        "distopt_step_num_tensors": (_i64, [_p]),
        "distopt_step_tensor_info": (status,
                                     [_p, _i64, ctypes.POINTER(StepTensor)]),
        "distopt_session_default_options": (None,
                                            [ctypes.POINTER(SessionOptions)]),
        "distopt_session_create": (status, [_p, ctypes.POINTER(SessionOptions),
                                            ctypes.POINTER(_p)]),
        "distopt_session_destroy": (None, [_p]),
        "distopt_session_retain_buffers": (_p, [_p]),
        "distopt_session_release_buffers": (None, [_p]),
        "distopt_session_rank": (_i64, [_p]),
        "distopt_session_size": (_i64, [_p]),
        "distopt_session_threads": (_i64, [_p]),
        "distopt_session_arg_data": (_p, [_p, _i64]),
        "distopt_session_bind": (status, [_p, _i64, _p, _i64]),
        "distopt_session_release": (status, [_p, _i64]),
        "distopt_session_entries_started": (_i64, [_p]),
        "distopt_session_entries_finished": (_i64, [_p]),
        "distopt_session_wait_entries": (status, [_p, _i64]),
        "distopt_session_tensor_data": (_p, [_p, _i64]),
        "distopt_session_write_tensor": (status, [_p, _i64, _p, _i64]),
        "distopt_session_read_tensor": (status, [_p, _i64, _p, _i64]),
        "distopt_session_set_lr": (status, [_p, ctypes.c_double]),
        "distopt_session_lr": (ctypes.c_double, [_p]),
        "distopt_session_set_hyperparameter": (status,
                                               [_p, _i64, ctypes.c_double]),
        "distopt_session_hyperparameter": (
            status, [_p, _i64, ctypes.POINTER(ctypes.c_double)]),
        "distopt_session_set_scalar_state": (status,
                                             [_p, _i64, ctypes.c_double]),
        "distopt_session_scalar_state": (
            status, [_p, _i64, ctypes.POINTER(ctypes.c_double)]),
        "distopt_session_run": (status, [_p]),
        "distopt_session_accumulate": (status, [_p]),
        "distopt_session_discard_accumulated": (status, [_p]),
        "distopt_step_num_entries": (_i64, [_p]),
        "distopt_step_entry_info": (status,
                                    [_p, _i64, ctypes.POINTER(StepEntry)]),
        "distopt_session_run_entry": (status, [_p, _i64]),
        "distopt_session_start_entry": (status, [_p, _i64]),
        "distopt_session_wait": (status, [_p]),
        "distopt_step_grad_accumulation": (_i64, [_p]),
        "distopt_session_steps_done": (_i64, [_p]),
        "distopt_session_set_steps_done": (status, [_p, _i64]),
        "distopt_session_scalar": (status,
                                   [_p, _i64, ctypes.POINTER(ctypes.c_double)]),
        "distopt_session_last_seconds": (ctypes.c_double, [_p]),
        "distopt_session_save": (status, [_p, _s]),
        "distopt_session_load": (status, [_p, _s, ctypes.POINTER(_i64)]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    if lib.distopt_step_api_version() != API_VERSION:
        raise ImportError(
            f"{path}: host step library API version "
            f"{lib.distopt_step_api_version()}, these bindings expect "
            f"{API_VERSION}")
    return lib


lib = _load()


def last_error():
    return lib.distopt_rt_last_error().decode("utf-8", "replace")
