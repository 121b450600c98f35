"""Steps and sessions: the host step library (distopt_step.h) from Python.

    step = distopt.Step(distopt.compile(spec, pipeline="zero-stage=2"))
    session = distopt.Session(step, comm=MPI.COMM_WORLD)
    weight = session.tensor("fc.weight")            # numpy view, zero copy
    grad = session.tensor("fc.weight", role="grad", like="torch")
    ...backward writes grad...
    scalars = session.run()

Views share memory with the session's buffers while it is open and the
argument is not bound again; a view keeps its session alive. A view
outlives close() safely: the buffers it shows stay allocated until the last
view of them goes (detached from the session, whose step no longer reads
or writes them).
"""

import ctypes
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from ._native import STATUS_NAMES, SessionOptions, StepEntry, StepTensor
from ._native import StepValue
from ._native import last_error, lib
from .errors import DistoptError

# The step's dtypes as numpy holds them (bf16 as its raw 16 bits).
_NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
                 "bf16": np.uint16, "i32": np.int32, "i64": np.int64,
                 "i1": np.bool_}
_TORCH_DTYPE_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16",
                      "bf16": "bfloat16", "i32": "int32", "i64": "int64",
                      "i1": "bool"}


def _check(status):
    if status != 0:
        raise DistoptError(last_error(), STATUS_NAMES.get(status, str(status)))


def _text(value):
    return value.decode() if value else ""


def _number(value, name, what, ok):
    """`value` as a float, or DistoptError naming the argument `name` when
    it is no real number or `ok(value)` is false (`what` says what it must
    be)."""
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise DistoptError(f"{name} must be {what}, not {value!r}") from None
    if not ok(number):
        raise DistoptError(f"{name} must be {what}, not {number!r}")
    return number


def _integer(value, name, low, high, what=None):
    """`value` as an int from `low` to `high`, or DistoptError naming the
    argument `name`."""
    what = what or f"an integer from {low} to {high}"
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise DistoptError(f"{name} must be {what}, not {value!r}")
    number = value.__index__()
    if not low <= number <= high:
        raise DistoptError(f"{name} must be {what}, not {number}")
    return number


def _path(value, name="path"):
    """`value` (a str or os.PathLike) as bytes for the library, or
    DistoptError naming the argument: a NUL would end it early there."""
    try:
        text = os.fspath(value)
    except TypeError:
        raise DistoptError(f"{name} must be a str or os.PathLike, not "
                           f"{type(value).__name__}") from None
    if isinstance(text, str):
        text = text.encode()
    if not text or b"\0" in text:
        raise DistoptError(f"{name} must be a non-empty path without NUL "
                           f"characters, not {value!r}")
    return text


def _like(value):
    if value not in ("numpy", "torch"):
        raise DistoptError(f"like must be 'numpy' or 'torch', not {value!r}")
    return value


def _rate(value, name="lr"):
    return _number(value, name, "a finite number >= 0",
                   lambda x: math.isfinite(x) and x >= 0)


_INT64_MAX = 2**63 - 1
# distopt_step.h's DISTOPT_STEP_PER_RANK_MEAN.
_PER_RANK_MEAN = 2


@dataclass(frozen=True)
class Value:
    """An argument or result of the compiled function (docs/step-abi.md)."""
    index: int
    role: str
    name: str
    dtype: str
    shape: tuple  # () for a scalar or a 0-d tensor
    is_tensor: bool
    numel: int
    nbytes: int
    init: str
    per_rank: bool  # state that differs per rank
    shard_of: int  # a flat ZeRO shard: the whole buffer's length, else 0
    in_place_arg: int  # results: the argument it is left in, or -1
    # Per-rank copies that stand for their mean (Dion's low-rank sync):
    # read_tensor and checkpoints give the mean.
    rank_mean: bool = False


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as the model names it, wherever the arguments hold it."""
    index: int
    role: str
    name: str
    dtype: str
    shape: tuple
    numel: int
    nbytes: int
    arg: int
    whole: bool  # this rank holds all of it (no ZeRO shard or owner)
    per_rank: bool  # state that differs per rank
    rank_mean: bool = False  # ... whose copies stand for their mean


@dataclass(frozen=True)
class Entry:
    """An entry point of a split step (split-step): a reduction of one
    gradient argument, a gather of a ZeRO-3 parameter shard
    (gather-params), or the update."""
    index: int
    name: str     # "reduce0", ..., "gather0", ..., "update"
    kind: str     # "reduce", "gather" or "update"
    reduces: tuple  # reduce: the gradient arguments it reduces; gather:
    #                 the parameter shard it gathers


def _value(index, v):
    return Value(index, _text(v.role), _text(v.name), _text(v.dtype),
                 tuple(v.shape[i] for i in range(v.ndim)), bool(v.is_tensor),
                 v.numel, v.bytes, _text(v.init), bool(v.per_rank),
                 v.shard_of, v.in_place_arg, v.per_rank == _PER_RANK_MEAN)


class Step:
    """A step compiled by distopt-compile (or distopt.compile), loaded."""

    def __init__(self, path):
        encoded = _path(path)
        self.path = encoded.decode(errors="replace")
        handle = ctypes.c_void_p()
        _check(lib.distopt_step_open(encoded, ctypes.byref(handle)))
        self._handle = handle
        self.interface = json.loads(lib.distopt_step_interface(handle))
        self.world_size = lib.distopt_step_world_size(handle)
        # Micro-batches per step (grad_accumulation; 1: none).
        self.grad_accumulation = lib.distopt_step_grad_accumulation(handle)
        self.device = _text(lib.distopt_step_device(handle))
        self.args = []
        for i in range(lib.distopt_step_num_args(handle)):
            v = StepValue()
            _check(lib.distopt_step_arg(handle, i, ctypes.byref(v)))
            self.args.append(_value(i, v))
        self.results = []
        for i in range(lib.distopt_step_num_results(handle)):
            v = StepValue()
            _check(lib.distopt_step_result(handle, i, ctypes.byref(v)))
            self.results.append(_value(i, v))
        self.tensors = []
        for i in range(lib.distopt_step_num_tensors(handle)):
            t = StepTensor()
            _check(lib.distopt_step_tensor_info(handle, i, ctypes.byref(t)))
            self.tensors.append(TensorInfo(
                i, _text(t.role), _text(t.name), _text(t.dtype),
                tuple(t.shape[d] for d in range(t.ndim)), t.numel, t.bytes,
                t.arg, bool(t.whole), bool(t.per_rank),
                t.per_rank == _PER_RANK_MEAN))
        self._by_name = {(t.role, t.name): t for t in self.tensors}
        self.entries = []
        for k in range(lib.distopt_step_num_entries(handle)):
            e = StepEntry()
            _check(lib.distopt_step_entry_info(handle, k, ctypes.byref(e)))
            self.entries.append(Entry(
                k, _text(e.name), _text(e.kind),
                tuple(e.reduces[i] for i in range(e.num_reduces))))

    def tensor(self, name, role="param"):
        """The TensorInfo of `name` with `role`; KeyError naming both."""
        try:
            return self._by_name[(role, name)]
        except (KeyError, TypeError):  # TypeError: an unhashable name
            raise KeyError(f"the step has no {role} tensor '{name}'") from None

    def hyperparameter_arg(self, name):
        """The argument index of runtime hyperparameter `name`; KeyError
        naming the ones there are."""
        for v in self.args:
            if v.role == "hyperparameter" and v.name == name:
                return v.index
        known = [v.name for v in self.args if v.role == "hyperparameter"]
        raise KeyError(f"the step has no runtime hyperparameter '{name}' "
                       f"(it has {known or 'none'})")

    def close(self):
        """Releases the step; sessions still open keep it loaded until they
        close."""
        if getattr(self, "_handle", None):
            lib.distopt_step_close(self._handle)
            self._handle = None

    __del__ = close

    def __repr__(self):
        return (f"Step({self.path!r}: {len(self.args)} arguments, "
                f"{self.world_size} ranks, {self.device})")


def _torch():
    import torch
    return torch


class _CudaBuffer:
    """Device memory exposed to torch through __cuda_array_interface__."""

    def __init__(self, pointer, shape, typestr):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (pointer, False),
            "version": 2}


class _Buffers:
    """The session's buffers as its views hold them: allocated until the
    session is closed and the last view is gone
    (distopt_session_retain_buffers)."""

    def __init__(self, session_handle):
        self._handle = lib.distopt_session_retain_buffers(session_handle)

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.distopt_session_release_buffers(self._handle)
            self._handle = None


class Session:
    """A step on a communicator: collective to create, run and checkpoint.

    comm: an mpi4py communicator (its size must be the step's world size);
      None: backend.
    backend: "mpi", "single", or None for the process's default world
      (DISTOPT_RT_BACKEND, else MPI under mpirun, else one process).
    timeout: seconds a collective waits for its peers, at most 1e9
      (default: DISTOPT_RT_TIMEOUT, else 300).
    lr: the learning rate to start with, finite and >= 0 (default: the
      compiled one).
    seed: the seed of the draws the interface asks for (PowerSGD's Q), 0 to
      2**64 - 2; None: the step's compiled seed, else 42.
    threads: threads of a CPU step's parallel loops, 1 to 1024; None:
      DISTOPT_THREADS, else this process's cores divided among the ranks on
      its node.
    A value out of range (NaN, negative, too large, not a number) raises
    DistoptError naming the argument.
    """

    def __init__(self, step, comm=None, backend=None, timeout=None, lr=None,
                 seed=None, threads=None):
        if not isinstance(step, Step):
            raise DistoptError("step must be a distopt.Step (a compiled step, "
                               f"loaded), not {type(step).__name__}")
        if not getattr(step, "_handle", None):
            raise DistoptError(f"{step!r} is closed")
        if backend is not None and not isinstance(backend, str):
            raise DistoptError("backend must be 'mpi', 'single' or None, not "
                               f"{backend!r}")
        self.step = step
        options = SessionOptions()
        lib.distopt_session_default_options(ctypes.byref(options))
        self._comm_handle = None
        if comm is not None:
            from mpi4py import MPI
            self._comm_handle = MPI._addressof(comm)
            options.mpi_comm = self._comm_handle
        elif backend:
            options.backend = backend.encode()
        # Every value is checked here, naming the argument, before the ranks
        # meet (the library checks them again).
        if timeout is not None:
            options.timeout_seconds = _number(
                timeout, "timeout", "a positive number of seconds, at most "
                "1e9 (None: DISTOPT_RT_TIMEOUT, else 300)",
                lambda x: 0 < x <= 1e9)
        if lr is not None:
            options.lr = _rate(lr)
        if seed is not None:
            options.seed = _integer(seed, "seed", 0, 2**64 - 2)
        if threads is not None:
            options.threads = _integer(
                threads, "threads", 1, 1024,
                "an integer from 1 to 1024 (None: the default)")
        handle = ctypes.c_void_p()
        _check(lib.distopt_session_create(step._handle, ctypes.byref(options),
                                          ctypes.byref(handle)))
        self._handle = handle
        self.rank = lib.distopt_session_rank(handle)
        self.size = lib.distopt_session_size(handle)
        self.threads = lib.distopt_session_threads(handle)
        self._bound = {}
        self._buffers = None
        self._scalar_results = [
            r for r in step.results if not r.is_tensor and r.in_place_arg < 0]

    # --- buffers -------------------------------------------------------------

    def _live(self):
        if not self._handle:
            raise DistoptError("the session is closed")
        return self._handle

    def _view(self, pointer, dtype, shape, like, arg):
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(
            _NUMPY_DTYPES[dtype]).itemsize
        # A view keeps the session alive until close(), and the memory it
        # shows after: each holds the object it was made from, which holds
        # the session, its buffers (kept past close() while a view lives)
        # and the caller's array bound to the argument, if any.
        if self._buffers is None:
            self._buffers = _Buffers(self._live())
        owner = (self, self._buffers, self._bound.get(arg))
        if self.step.device == "cuda":
            torch = _torch()
            if like != "torch":
                raise DistoptError("a step compiled for cuda has its buffers "
                                   "in device memory: use like='torch'")
            raw = {2: "<i2", 4: "<i4", 8: "<i8", 1: "|b1"}[
                np.dtype(_NUMPY_DTYPES[dtype]).itemsize]
            source = _CudaBuffer(pointer, tuple(shape), raw)
            source.owner = owner
            view = torch.as_tensor(source, device="cuda")
            return view.view(getattr(torch, _TORCH_DTYPE_NAMES[dtype]))
        count = nbytes // np.dtype(_NUMPY_DTYPES[dtype]).itemsize
        if count == 0:  # nothing to view; frombuffer refuses an empty buffer
            empty = np.empty(shape, dtype=_NUMPY_DTYPES[dtype])
            return _numpy_to_torch(empty, dtype) if like == "torch" else empty
        buffer = (ctypes.c_char * nbytes).from_address(pointer)
        buffer.owner = owner
        if like == "torch":
            torch = _torch()
            flat = torch.frombuffer(buffer, dtype=getattr(
                torch, _TORCH_DTYPE_NAMES[dtype]), count=count)
            return flat.view(shape)
        return np.frombuffer(buffer, dtype=_NUMPY_DTYPES[dtype],
                             count=count).reshape(shape)

    def tensor(self, name, role="param", like="numpy"):
        """A view (zero copy) of tensor `name` in this rank's buffers: a
        numpy array (bf16 as uint16 bits) or, with like="torch", a torch
        tensor. Only for a tensor this rank holds whole (not a ZeRO shard):
        read() gathers the others."""
        info = self.step.tensor(name, role)
        like = _like(like)
        pointer = lib.distopt_session_tensor_data(self._live(), info.index)
        if not pointer:
            raise DistoptError(last_error())
        return self._view(pointer, info.dtype, info.shape, like, info.arg)

    def arg(self, index, like="numpy"):
        """A view of argument `index`'s whole buffer (a bucket, a shard)."""
        value = self._arg_value(index)
        index = value.index
        like = _like(like)
        if not value.is_tensor:
            raise DistoptError(f"argument #{index} ('{value.name}') has no "
                               "buffer: it is a scalar")
        pointer = lib.distopt_session_arg_data(self._live(), index)
        if not pointer:  # released: the runtime's message names it
            raise DistoptError(last_error())
        return self._view(pointer, value.dtype, value.shape, like, index)

    def bind(self, name, array, role="param"):
        """Makes the caller's `array` (numpy or torch, contiguous, of the
        argument's dtype and shape) the buffer of the argument that holds
        `name` with `role` (zero copy). Only for a tensor that is an
        argument of its own; the array must outlive the binding."""
        info = self.step.tensor(name, role)
        value = self.step.args[info.arg]
        what = f"{role} '{name}' (argument #{info.arg})"
        if value.shape != info.shape or not info.whole:
            raise DistoptError(f"cannot bind {what}: it lies in the flat "
                               f"argument '{value.name}' of shape "
                               f"{list(value.shape)}; use tensor() for a view")
        pointer, nbytes, dtype, shape, contiguous = _describe_array(array)
        if dtype != value.dtype:
            raise DistoptError(f"cannot bind {what}: the array is {dtype}, "
                               f"the step takes {value.dtype}")
        if tuple(shape) != value.shape:
            raise DistoptError(f"cannot bind {what}: the array has shape "
                               f"{list(shape)}, the step takes "
                               f"{list(value.shape)}")
        if not contiguous:
            raise DistoptError(f"cannot bind {what}: the array is not "
                               "contiguous")
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            raise DistoptError(f"cannot bind {what}: the array is read-only "
                               "(the step writes into it)")
        _check(lib.distopt_session_bind(self._live(), info.arg, pointer,
                                        nbytes))
        self._bound[info.arg] = array

    def bind_arg(self, index, array):
        """Makes the caller's `array` (contiguous, the argument's dtype and
        number of elements) the buffer of argument `index` (zero copy): a
        flat buffer (a gradient bucket, a gathered parameter) as a whole.
        The array must outlive the binding."""
        value = self._arg_value(index)
        what = f"argument #{value.index} ('{value.name}')"
        pointer, nbytes, dtype, shape, contiguous = _describe_array(
            array, device=self.step.device)
        if dtype != value.dtype or nbytes != value.nbytes or not contiguous:
            raise DistoptError(
                f"cannot bind {what}: it takes {value.numel} contiguous "
                f"{value.dtype} elements, the array has shape {list(shape)} "
                f"of {dtype}{'' if contiguous else ', not contiguous'}")
        _check(lib.distopt_session_bind(self._live(), value.index, pointer,
                                        nbytes))
        self._bound[value.index] = array

    def release_arg(self, index):
        """Leaves argument `index` without a buffer until it is bound again
        (a gathered parameter, a gradient bucket: the step then never holds
        them between uses); running what reads it raises."""
        value = self._arg_value(index)
        _check(lib.distopt_session_release(self._live(), value.index))
        self._bound.pop(value.index, None)

    def _arg_value(self, index):
        count = len(self.step.args)
        if isinstance(index, bool) or not hasattr(index, "__index__") or \
                not 0 <= index.__index__() < count:
            raise DistoptError(f"index must be an argument's, 0 to "
                               f"{count - 1}, not {index!r}")
        return self.step.args[index.__index__()]

    def unbind(self, name, role="param"):
        """Gives the argument a zeroed buffer of the session's again."""
        info = self.step.tensor(name, role)
        _check(lib.distopt_session_bind(self._live(), info.arg, None, 0))
        self._bound.pop(info.arg, None)

    def write(self, name, value, role="param"):
        """Copies a whole tensor (numpy, torch or anything np.asarray takes)
        into the parts of it this rank holds. Every rank passes the same
        values for a tensor that is not per rank."""
        info = self.step.tensor(name, role)
        try:
            host = _to_numpy(value, info.dtype)
        except (TypeError, ValueError, OverflowError) as e:
            raise DistoptError(f"cannot write {role} '{name}': the value is "
                               f"not {info.dtype} numbers ({e})") from None
        if host.shape != info.shape and host.size != info.numel:
            raise DistoptError(f"cannot write {role} '{name}': shape "
                               f"{list(host.shape)}, the step's is "
                               f"{list(info.shape)}")
        host = np.ascontiguousarray(host)
        _check(lib.distopt_session_write_tensor(
            self._live(), info.index, host.ctypes.data, info.nbytes))

    def read(self, name, role="param", like="numpy"):
        """A copy of a whole tensor. Collective for a tensor this rank does
        not hold whole, and for per-rank copies that stand for their mean
        (Dion's low-rank sync: it gives the mean); every rank reads it, in
        the same order."""
        info = self.step.tensor(name, role)
        like = _like(like)
        out = np.empty(info.shape, dtype=_NUMPY_DTYPES[info.dtype])
        _check(lib.distopt_session_read_tensor(
            self._live(), info.index, out.ctypes.data, info.nbytes))
        if like == "torch":
            return _numpy_to_torch(out, info.dtype)
        return out

    # --- steps ---------------------------------------------------------------

    @property
    def lr(self):
        """The learning rate the next step takes."""
        return lib.distopt_session_lr(self._live())

    @lr.setter
    def lr(self, value):
        _check(lib.distopt_session_set_lr(self._live(), _rate(value)))

    @property
    def hyperparameters(self):
        """The hyperparameters the step takes at run time, by name
        ("group0.lr", "group0.beta1", ...): the values the next step
        takes. Empty for a step compiled with fixed hyperparameters."""
        out = {}
        value = ctypes.c_double()
        for v in self.step.args:
            if v.role == "hyperparameter":
                _check(lib.distopt_session_hyperparameter(
                    self._live(), v.index, ctypes.byref(value)))
                out[v.name] = value.value
        return out

    def set_hyperparameter(self, name, value):
        """Sets runtime hyperparameter `name` ("group1.weight_decay") for
        the next steps (the same on every rank)."""
        arg = self.step.hyperparameter_arg(name)
        _check(lib.distopt_session_set_hyperparameter(self._live(), arg,
                                                      float(value)))

    def _scalar_state_arg(self, name):
        for v in self.step.args:
            if v.role == "state" and not v.is_tensor and v.name == name:
                return v.index
        known = [v.name for v in self.step.args
                 if v.role == "state" and not v.is_tensor]
        raise KeyError(f"the step keeps no scalar state '{name}' (it keeps "
                       f"{known or 'none'})")

    def scalar_state(self, name):
        """Scalar state the next step takes ("loss_scale",
        "loss_scale_growth_tracker", "lr_schedule.last_epoch"), as a
        float."""
        value = ctypes.c_double()
        _check(lib.distopt_session_scalar_state(
            self._live(), self._scalar_state_arg(name), ctypes.byref(value)))
        return value.value

    def set_scalar_state(self, name, value):
        """Sets scalar state `name` for the next step (the same on every
        rank): restoring a loss scaler or a schedule."""
        arg = self._scalar_state_arg(name)
        _check(lib.distopt_session_set_scalar_state(self._live(), arg,
                                                    float(value)))

    @property
    def steps_done(self):
        return lib.distopt_session_steps_done(self._live())

    @steps_done.setter
    def steps_done(self, steps):
        _check(lib.distopt_session_set_steps_done(
            self._live(), _integer(steps, "steps_done", 0, _INT64_MAX - 1)))

    def run(self):
        """Runs one step on every rank (collective). Returns the step's
        scalar results by name (or role, for an unnamed one): its loss,
        gradient norm, loss scale."""
        _check(lib.distopt_session_run(self._live()))
        return self.scalars()

    def run_entry(self, k):
        """Runs entry point k of a split step (collective); the update is a
        step, as run() is, and returns its scalars."""
        _check(lib.distopt_session_run_entry(self._live(), int(k)))
        if self.step.entries[k].kind == "update":
            return self.scalars()
        return None

    def start_entry(self, k):
        """Starts reduce or gather entry k on the session's communication
        thread and returns at once; wait() waits for all started."""
        _check(lib.distopt_session_start_entry(self._live(), int(k)))

    def wait(self):
        """Waits for the entries started (their failure raises here)."""
        _check(lib.distopt_session_wait(self._live()))

    @property
    def entries_started(self):
        """Entries started so far; the n-th is done once entries_finished
        reaches n (they run in the order started)."""
        return lib.distopt_session_entries_started(self._live())

    @property
    def entries_finished(self):
        return lib.distopt_session_entries_finished(self._live())

    def wait_entries(self, count):
        """Waits until the first `count` entries started have finished (not
        those started after them)."""
        _check(lib.distopt_session_wait_entries(self._live(), int(count)))

    def accumulate(self):
        """Adds this micro-batch's gradients into the step's f32
        accumulators and zeroes the gradient buffers, with no communication
        (DDP's no_sync): after each of the first grad_accumulation - 1
        micro-batches; run() takes the last one's. Another count (a call
        too many, a run() too early) raises DistoptError naming it."""
        _check(lib.distopt_session_accumulate(self._live()))

    def discard_accumulated(self):
        """Forgets the micro-batches accumulated since the last step (the
        accumulators and the count), as zeroing .grad forgets them."""
        _check(lib.distopt_session_discard_accumulated(self._live()))

    def scalars(self):
        out = {}
        value = ctypes.c_double()
        for r in self._scalar_results:
            _check(lib.distopt_session_scalar(self._live(), r.index,
                                              ctypes.byref(value)))
            out[r.name or r.role or f"result{r.index}"] = value.value
        return out

    @property
    def last_seconds(self):
        return lib.distopt_session_last_seconds(self._live())

    def save(self, path):
        """Saves parameters and state (collective; rank 0 writes)."""
        _check(lib.distopt_session_save(self._live(), _path(path)))

    def load(self, path):
        """Loads a checkpoint saved at any world size (collective); returns
        the world size it was saved at."""
        saved = ctypes.c_int64()
        _check(lib.distopt_session_load(self._live(), _path(path),
                                        ctypes.byref(saved)))
        return saved.value

    def close(self):
        """Frees the session and its communicator. Views of its buffers
        stay usable (their memory is kept until the last goes) but are no
        longer the session's."""
        if getattr(self, "_handle", None):
            lib.distopt_session_destroy(self._handle)
            self._handle = None
            self._bound.clear()
            self._buffers = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _describe_array(array, device="cpu"):
    """(pointer, nbytes, distopt dtype or None, shape, contiguous); a torch
    tensor in the memory of `device` ("cuda": device memory, for a step
    compiled for cuda)."""
    if hasattr(array, "data_ptr"):  # torch
        names = {v: k for k, v in _TORCH_DTYPE_NAMES.items()}
        dtype = names.get(str(array.dtype).replace("torch.", ""), "?")
        if array.device.type != device:
            raise DistoptError(
                "bind() takes host memory (device memory: a step compiled "
                "for cuda owns its buffers)" if device == "cpu" else
                f"bind_arg() takes {device} memory for a step compiled for "
                f"{device}, not {array.device.type}")
        return (array.data_ptr(), array.numel() * array.element_size(), dtype,
                tuple(array.shape), array.is_contiguous())
    if not isinstance(array, np.ndarray):
        raise DistoptError(f"bind() takes a numpy array or a torch tensor, "
                           f"not {type(array).__name__}")
    # numpy has no bf16: its raw bits, as uint16.
    names = {np.dtype(v): k for k, v in _NUMPY_DTYPES.items()}
    return (array.ctypes.data, array.nbytes, names.get(array.dtype),
            array.shape, array.flags["C_CONTIGUOUS"])


def _numpy_to_torch(array, dtype):
    """A torch tensor sharing `array`'s memory (bf16 from its uint16 bits:
    torch takes no uint16 array)."""
    torch = _torch()
    if dtype == "bf16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _to_numpy(value, dtype):
    """`value` as numpy holds the step's dtype (bf16: rounded to nearest
    even, as raw uint16 bits; a uint16 array is taken as bits already)."""
    if hasattr(value, "detach"):  # torch
        torch = _torch()
        value = value.detach().cpu().contiguous()
        if dtype == "bf16":
            return value.to(torch.bfloat16).view(torch.int16).numpy().view(
                np.uint16)
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy().astype(_NUMPY_DTYPES[dtype], copy=False)
    value = np.asarray(value)
    if dtype == "bf16" and value.dtype != np.uint16:
        bits = value.astype(np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        nan = np.isnan(value.astype(np.float32))
        return np.where(nan, 0x7FC0, rounded).astype(np.uint16)
    return value.astype(_NUMPY_DTYPES[dtype], copy=False)
