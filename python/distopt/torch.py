"""distopt.torch.DistributedOptimizer: a compiled step in place of DDP + a
torch.optim optimizer.

    opt = DistributedOptimizer(model.named_parameters(),
                               {"type": "adamw", "lr": 1e-3,
                                "weight_decay": 0.01},
                               pipeline="zero-stage=2")
    for x, y in batches:                 # this rank's share of the batch
        loss = F.cross_entropy(model(x), y)
        loss.backward()                  # writes into the step's buffers
        opt.step()                       # averages, updates, all-gathers
        opt.zero_grad()

Run it with `mpirun -np N python3 train.py`. Each parameter's .data and
.grad become views of the step's buffers (gradients lie in its buckets, as
with DDP's gradient_as_bucket_view), so backward writes each gradient where
the step reads it and the update lands in the model with no copy. The step
averages the gradients over the ranks (there is no DDP wrapper) and
broadcasts rank 0's initial parameters at construction, as DDP does.
"""

import torch

from .compiler import compile
from .errors import DistoptError
from .step import Session, Step

_SPEC_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16",
                torch.float16: "f16"}


_TORCH_OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW",
                     "rmsprop": "RMSprop", "adagrad": "Adagrad"}


def _torch_defaults(recipe):
    """The hyperparameters of the recipe as torch.optim's class of the same
    type keeps them in param_groups, every key included, so that
    state_dict() loads into it."""
    kind = recipe["type"]
    if kind not in _TORCH_OPTIMIZERS:
        raise ValueError(f"unknown optimizer type '{kind}'")
    kwargs = {k: tuple(v) if k == "betas" else v
              for k, v in recipe.items() if k != "type"}
    cls = getattr(torch.optim, _TORCH_OPTIMIZERS[kind])
    return dict(cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults)


def _default_comm():
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD


class DistributedOptimizer(torch.optim.Optimizer):
    """A data-parallel optimizer step compiled by distopt.

    named_parameters: the model's (name, parameter) pairs, in model order
      (parameters that do not require a gradient are left out).
    recipe: the spec's optimizer (docs/param-spec.md): {"type": "sgd" |
      "adam" | "adamw" | "rmsprop" | "adagrad", "lr": ..., and torch.optim's
      keyword names}.
    pipeline: distopt-pipeline's options ("zero-stage=2",
      "powersgd-rank=4", "bucket-cap-mb=25", ...).
    comm: an mpi4py communicator (default: COMM_WORLD where mpi4py is
      installed, else one process).
    main_params: bf16/f16 parameters get an fp32 main copy that the
      optimizer updates.
    target: "cpu" or "cuda"; timeout: seconds a collective may wait;
    cache: the directory of compiled steps; seed: PowerSGD's draws;
    threads: threads of the step's parallel loops (Session's threads).

    torch.optim.lr_scheduler works: param_groups[0]["lr"] is the rate of
    the next step. One parameter group.

    Under zero-stage=3 the step keeps each rank's shard of the parameters;
    the model's parameters are then tensors of their own, gathered after
    every step (collective), so the model holds them whole: the memory
    saved is the optimizer state's and the gradients' after reduction, not
    the parameters'.
    """

    def __init__(self, named_parameters, recipe, pipeline="", comm=None,
                 main_params=False, model="model", target="cpu", timeout=None,
                 cache=None, seed=None, threads=None):
        named = [(n, p) for n, p in named_parameters if p.requires_grad]
        if not named:
            raise ValueError("DistributedOptimizer got no parameters that "
                             "require a gradient")
        if "type" not in recipe:
            raise ValueError("the recipe needs a 'type' (sgd, adam, adamw, "
                             "rmsprop, adagrad)")
        self.comm = comm if comm is not None else _default_comm()
        world = self.comm.Get_size() if self.comm is not None else 1
        parameters = []
        for name, p in named:
            if p.dtype not in _SPEC_DTYPES:
                raise DistoptError(f"parameter '{name}' is {p.dtype}; the "
                                   "step takes float32, bfloat16 or float16")
            if p.device.type != ("cuda" if target == "cuda" else "cpu"):
                raise DistoptError(f"parameter '{name}' is on {p.device}, "
                                   f"the step is compiled for {target}")
            parameters.append({"name": name, "shape": list(p.shape),
                               "dtype": _SPEC_DTYPES[p.dtype]})
        self.spec = {"model": model, "world_size": world,
                     "main_params": bool(main_params),
                     "optimizer": dict(recipe), "parameters": parameters}
        self.library = compile(self.spec, pipeline=pipeline, target=target,
                               cache=cache, comm=self.comm)
        self.compiled = Step(self.library)
        self.session = Session(self.compiled, comm=self.comm, timeout=timeout,
                               lr=recipe.get("lr"), seed=seed,
                               threads=threads)
        self._named = named
        self._param_views = []
        self._grad_views = []
        self._gathered = []
        with torch.no_grad():
            for name, p in named:
                self._adopt(name, p)
        super().__init__([p for _, p in named], _torch_defaults(recipe))
        self.session.lr = self.param_groups[0]["lr"]
        self.scalars = {}

    def _adopt(self, name, p):
        info = self.compiled.tensor(name, "param")
        initial = p.detach().cpu().clone()
        if self.comm is not None and self.comm.Get_size() > 1:
            # As DDP does: every rank starts from rank 0's parameters.
            bits = initial.view(torch.int16) if initial.dtype in (
                torch.bfloat16, torch.float16) else initial
            self.comm.Bcast(bits.numpy(), root=0)
        self.session.write(name, initial, "param")
        if any(t.role == "main_param" and t.name == name
               for t in self.compiled.tensors):
            self.session.write(name, initial.float(), "main_param")
        grad = self.session.tensor(name, "grad", like="torch")
        grad.zero_()
        if info.whole:
            view = self.session.tensor(name, "param", like="torch")
            p.data = view
        else:
            # ZeRO-3: the step keeps only this rank's shard between steps;
            # the model's forward needs the whole parameter, gathered into
            # its own tensor after every step (as FSDP gathers before the
            # forward).
            view = None
            p.data = initial.to(p.device)
            self._gathered.append([name, p, p._version])
        p.grad = grad
        self._param_views.append(view)
        self._grad_views.append(grad)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # ZeRO-3: an in-place edit of a gathered parameter since the last
        # step (under no_grad, which bumps its version) goes to the shards.
        for entry in self._gathered:
            name, p, version = entry
            if p._version != version:
                self.session.write(name, p.detach(), "param")
        for (name, p), view, grad in zip(self._named, self._param_views,
                                         self._grad_views):
            if view is not None and p.data.data_ptr() != view.data_ptr():
                view.copy_(p.data)  # the program replaced .data: adopt it
                p.data = view
            if p.grad is None:
                grad.zero_()  # no gradient this step (an unused parameter)
                p.grad = grad
            elif p.grad.data_ptr() != grad.data_ptr():
                grad.copy_(p.grad)
                p.grad = grad
        lr = self.param_groups[0]["lr"]
        if lr != self.session.lr:
            self.session.lr = lr
        self.scalars = self.session.run()
        self._gather()
        return loss

    def _gather(self):
        for entry in self._gathered:
            name, p = entry[0], entry[1]
            p.data.copy_(self.session.read(name, "param", like="torch"))
            entry[2] = p._version

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in place: they stay views of the step's
        buffers (set_to_none is ignored for that reason)."""
        for (_, p), grad in zip(self._named, self._grad_views):
            grad.zero_()
            p.grad = grad

    # --- torch.optim's state_dict ------------------------------------------

    def _state_keys(self, name):
        prefix = name + "."
        return [t.name[len(prefix):] for t in self.compiled.tensors
                if t.role == "state" and t.name.startswith(prefix)
                and not t.per_rank]

    def state_dict(self):
        """torch.optim's format: {"state": {index: {"step", "exp_avg",
        ...}}, "param_groups": [...]}. Collective under ZeRO (the shards
        are gathered). Per-rank state (PowerSGD's error feedback) is in
        save_checkpoint's file only."""
        steps = self.session.steps_done
        kind = self.spec["optimizer"]["type"]
        state = {}
        if steps > 0:
            for index, (name, _) in enumerate(self._named):
                entry = {}
                if kind != "sgd":
                    entry["step"] = torch.tensor(float(steps))
                for key in self._state_keys(name):
                    entry[key] = self.session.read(f"{name}.{key}", "state",
                                                   like="torch")
                state[index] = entry
        group = {k: v for k, v in self.param_groups[0].items()
                 if k != "params"}
        group["params"] = list(range(len(self._named)))
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict):
        """Loads torch.optim's format (from this optimizer or from the
        torch.optim optimizer of the same recipe over the same parameters).
        Collective: every rank loads the same dict."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self._named):
            raise ValueError(
                f"the state dict has {len(groups)} parameter groups of "
                f"{[len(g['params']) for g in groups]} parameters; this "
                f"optimizer has 1 group of {len(self._named)}")
        # The learning rate is the step's input; the other hyperparameters
        # are compiled into it.
        for key, value in groups[0].items():
            ours = self.param_groups[0].get(key)
            if key in ("params", "lr", "foreach", "fused", "capturable",
                       "differentiable") or key not in self.param_groups[0]:
                continue  # the rate, or how torch runs, not what it computes
            if ours != value and not (isinstance(ours, (tuple, list)) and
                                      tuple(ours) == tuple(value)):
                raise ValueError(
                    f"the state dict's '{key}' is {value!r}; this step was "
                    f"compiled with {ours!r} (compile one with that "
                    "recipe)")
        self.param_groups[0]["lr"] = groups[0]["lr"]
        steps = None
        for position, (name, p) in enumerate(self._named):
            index = groups[0]["params"][position]
            entry = state_dict["state"].get(index)
            if entry is None:
                continue
            known = set(self._state_keys(name))
            for key, value in entry.items():
                if value is None:  # SGD without momentum: no buffer
                    continue
                if key == "step":
                    steps = int(float(value))
                    continue
                if key not in known:
                    raise ValueError(
                        f"state '{key}' of parameter '{name}': the step "
                        f"keeps {sorted(known) or 'no state'}")
                if tuple(value.shape) != tuple(p.shape):
                    raise ValueError(
                        f"state '{key}' of parameter '{name}' has shape "
                        f"{list(value.shape)}, the parameter "
                        f"{list(p.shape)}")
                self.session.write(f"{name}.{key}", value, "state")
        if steps is not None:
            self.session.steps_done = steps
        elif state_dict["state"]:
            # SGD keeps no step; its momentum exists only after step 1.
            self.session.steps_done = max(self.session.steps_done, 1)
        self.session.lr = self.param_groups[0]["lr"]

    # --- distopt's checkpoints ---------------------------------------------

    def save_checkpoint(self, path):
        """Parameters and all optimizer state, sharded or not, in distopt's
        format (docs/checkpoint.md); collective, rank 0 writes."""
        self.session.save(path)

    def load_checkpoint(self, path):
        """Loads a checkpoint saved at any world size into the model's
        parameters and the optimizer; returns that world size."""
        saved = self.session.load(path)
        self._gather()
        self.param_groups[0]["lr"] = self.session.lr
        return saved
