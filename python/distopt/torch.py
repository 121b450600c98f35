"""distopt.torch.DistributedOptimizer: a compiled step in place of DDP + a
torch.optim optimizer.

    opt = DistributedOptimizer(model.named_parameters(),
                               {"type": "adamw", "lr": 1e-3,
                                "weight_decay": 0.01},
                               pipeline="zero-stage=2")
    for x, y in batches:                 # this rank's share of the batch
        loss = F.cross_entropy(model(x), y)
        loss.backward()                  # reduces each bucket when ready
        opt.step()                       # updates (all-gathers under ZeRO)
        opt.zero_grad()

Run it with `mpirun -np N python3 train.py`, with no DDP wrapper. Each
parameter's .data and .grad become views of the step's buffers; rank 0's
parameters are broadcast at construction, and backward averages each
bucket as soon as its gradients are ready, as DDP does.

It takes what torch.optim takes (parameters, (name, parameter) pairs, or
groups of them with their own hyperparameters), and every hyperparameter
torch lets a program or a scheduler change is a runtime value of the
compiled step, read from param_groups at every step().
"""

import contextlib
import os

import torch

from .compiler import compile
from ._reducer import Reducer
from ._scaler import GradScaler
from ._state import StateView
from ._meta_init import defer_meta, materialize, release, undefer
from ._units import UnitReducer, find_units
from ._torch_params import (
    _EXECUTION_KEYS, _SPEC_DTYPES, _TUPLE_KEYS, _check_options,
    _check_structure, _check_value, _clip_arguments, _default_comm,
    _glob_literal, _group_defaults, _group_runtime_keys, _group_values,
    _keeps_step, _model_groups, _named_groups, _runtime_values,
    _split_pipeline, _split_vectors, _structure, _torch_defaults)
from .errors import CompileError, DistoptError
from .step import Session, Step

__all__ = ["DistributedOptimizer", "GradScaler"]


def _bits(tensor):
    """A CPU tensor as numpy can send it (bf16 and f16 as their bits)."""
    return tensor.view(torch.int16) if tensor.dtype in (
        torch.bfloat16, torch.float16) else tensor


class DistributedOptimizer(torch.optim.Optimizer):
    """A data-parallel optimizer step compiled by distopt.

    params: what torch.optim takes: parameters (model.parameters()),
      (name, parameter) pairs (model.named_parameters(): names in
      checkpoints), or a list of group dicts {"params": [...], <the
      group's hyperparameters>}; or the model itself (its named
      parameters; under zero-stage=3, units: below). Parameters that do
      not require a gradient are left out.
    recipe: the optimizer and its defaults (docs/param-spec.md): {"type":
      "sgd" | "adam" | "adamw" | "rmsprop" | "adagrad", "lr": ..., and
      torch.optim's keyword names}, or "muon" | "dion" with the spec's
      keys; a Muon or Dion group's parameters of rank < 2 go to an AdamW
      group of their own at its rate. A group may name its own "type".
    pipeline: distopt-pipeline's options ("zero-stage=2",
      "powersgd-rank=4", "bucket-cap-mb=25", ...), or "auto" and options
      to keep ("auto zero-stage=3"): distopt-plan chooses the rest, as
      `plan` says (below); the choice is in `opt.pipeline`.
    plan: for pipeline="auto", a dict: "calibration" (distopt-calibrate
      --compute --json's output, a path or dict; default
      $DISTOPT_CALIBRATION, else measured on `comm` now with
      distopt.calibrate), "memory_per_rank" (model state one rank may
      hold: "8GiB"), "nodes" (default 1; their ranks consecutive),
      "allow_lossy" (PowerSGD and 16-bit reductions, default False).
    comm: an mpi4py communicator (default: COMM_WORLD where mpi4py is
      installed, else one process).
    main_params: bf16/f16 parameters get an fp32 main copy that the
      optimizer updates.
    loss_scaling: dynamic loss scaling compiled into the step, with
      torch's GradScaler rule: True (GradScaler's defaults) or the spec's
      {"type": "dynamic", "init_scale": ..., "growth_factor": ...,
      "backoff_factor": ..., "growth_interval": ...} (or {"type":
      "static", "scale": S}). The loss is multiplied by `opt.scale`
      (GradScaler(opt).scale(loss) does it); the step checks the reduced
      gradients on every rank, skips the update on an inf or NaN
      (`opt.skipped`), unscales, and grows or backs off the scale.
    grad_accumulation: K micro-batches per step, accumulated in f32 (also
      for bf16/f16 gradients, NeMo's way): run the first K - 1 backward
      passes under `with opt.no_sync():` (each adds its gradients into the
      step's f32 accumulators and zeroes .grad) and the K-th outside it;
      the step reduces the f32 sum once and divides it by K: the loss is
      the micro-batch's mean, not divided by K as a DDP loop divides it.
      Exactly K - 1 no_sync passes come before each step() (another count
      raises, naming it). With units (ZeRO-3 given the model) each
      micro-batch is reduce-scattered all the same and the shards summed
      in f32 (docs/host-library.md).
    target: "cpu" or "cuda"; timeout: seconds a collective may wait;
    cache: the directory of compiled steps; seed: PowerSGD's draws;
    threads: threads of the step's parallel loops (Session's threads).
    overlap: reduce each bucket as soon as backward has produced it, on the
      session's communication thread, while backward goes on (DDP's way);
      False: reduce them all when backward ends, on its thread (for
      machines whose cores the backward pass needs, where the polling of a
      communication thread slows it). Either way the gradients are reduced
      when backward() returns.

    Each group's hyperparameters (lr, betas, momentum, dampening,
    weight_decay, eps, alpha, lr_decay, initial_accumulator_value) are
    read from param_groups at every step(), so torch.optim.lr_scheduler
    (OneCycleLR's momentum cycling included) and a loop's own changes take
    effect in that step. What decides the compiled step's structure
    (nesterov, amsgrad, centered, maximize, a momentum of 0 or not) cannot
    change: step() raises an error naming it. add_param_group after
    construction is refused (pass every group to the constructor).

    Under zero-stage=3 given a parameter list, the step keeps each rank's
    shard of the parameters; the model's parameters are then tensors of
    their own, gathered after every step (collective), so the model holds
    them whole. Given the nn.Module itself (params=model), ZeRO-3 runs as
    FSDP does: the model is split into units (auto_wrap_policy: a module
    class or tuple of them, a callable(module) -> bool, or a number of
    parameters; None: one unit), each unit's parameters are gathered just
    before its forward and again before its backward and freed after
    (reshard_after_forward=False keeps them from forward to backward), its
    gradients reduce-scattered as soon as its backward is done; between
    steps no parameter is held whole (docs/host-library.md, "ZeRO-3 with
    units"). model.state_dict() then gathers whole tensors (collective)
    and model.load_state_dict() writes them to the shards. With the model
    as params, `groups` gives its parameter groups: torch.optim's group
    dicts over its parameters, each parameter that requires a gradient in
    exactly one.

    The model may be built on the meta device (nn.Linear(..., device=
    "meta"): no memory): each module's own tensors are then made and
    initialized one module at a time, by param_init_fn(module) or else the
    module's reset_parameters(), in model.named_modules() order (a tied
    tensor by its first holder), and each parameter goes to the step's
    shards as soon as its last holder is initialized, so that with units
    no rank ever holds the model whole; rank 0's values are broadcast.
    """

    def __init__(self, params, recipe, pipeline="", comm=None,
                 main_params=False, model="model", target="cpu", timeout=None,
                 cache=None, seed=None, threads=None, overlap=True,
                 loss_scaling=None, grad_accumulation=1,
                 auto_wrap_policy=None, reshard_after_forward=True,
                 param_init_fn=None, groups=None, plan=None):
        if not isinstance(recipe, dict) or "type" not in recipe:
            raise ValueError("the recipe needs a 'type' (a torch.optim "
                             "class's name in lower case: \"adamw\")")
        module = params if isinstance(params, torch.nn.Module) else None
        device = "cuda" if target == "cuda" else "cpu"
        deferred = {}
        if module is not None:
            # (Groups by name: a meta parameter is swapped for another.)
            named_groups = None if groups is None else \
                _model_groups(module, groups)
            # A model built on the meta device is made one module at a
            # time after compiling (_meta_init.py).
            deferred = defer_meta(module, device)
            if param_init_fn is not None and not deferred and not any(
                    b.device.type == "meta" for b in module.buffers()):
                raise ValueError("param_init_fn initializes a model built "
                                 "on the meta device; this model has no "
                                 "tensor there")
            params = module.named_parameters()
            if named_groups is not None:
                by_name = dict(module.named_parameters())
                params = [dict(g, params=[(name, by_name[name])
                                          for name in g["params"]])
                          for g in named_groups]
        elif groups is not None:
            raise ValueError("groups are for the model itself as params; "
                             "with a parameter list, pass group dicts as "
                             "params (as torch.optim takes them)")
        elif param_init_fn is not None:
            raise ValueError("param_init_fn initializes a model built on "
                             "the meta device: pass the nn.Module itself "
                             "as params")
        elif auto_wrap_policy is not None:
            raise ValueError("auto_wrap_policy wraps a model: pass the "
                             "nn.Module itself as params")
        defaults = _torch_defaults(recipe)
        self.kind = recipe["type"]
        groups = _split_vectors(_named_groups(params), self.kind,
                                defaults["lr"])
        # Each group's optimizer and its hyperparameters (a group may name
        # another type: AdamW for what Muon or Dion does not update).
        self._kinds = [extra.get("type", self.kind) for _, extra in groups]
        self._group_defaults = [_group_defaults(recipe, defaults, extra)
                                for _, extra in groups]
        self.comm = comm if comm is not None else _default_comm()
        world = self.comm.Get_size() if self.comm is not None else 1
        named = [entry for members, _ in groups for entry in members]
        parameters = []
        for name, p in named:
            if p.dtype not in _SPEC_DTYPES:
                raise DistoptError(f"parameter '{name}' is {p.dtype}; the "
                                   "step takes float32, bfloat16 or float16")
            if p.device.type == "meta" or (
                    module is None and
                    getattr(p, "_distopt_meta", None) is not None):
                raise DistoptError(f"parameter '{name}' is on the meta "
                                   "device (or stands in for one whose "
                                   "optimizer's construction failed): pass "
                                   "the model itself (params=model), whose "
                                   "modules initialize it")
            if p.device.type != device:
                raise DistoptError(f"parameter '{name}' is on {p.device}, "
                                   f"the step is compiled for {target}")
            parameters.append({"name": name, "shape": list(p.shape),
                               "dtype": _SPEC_DTYPES[p.dtype]})
        self.spec = {"model": model, "world_size": world,
                     "main_params": bool(main_params),
                     "runtime_hyperparameters": True,
                     "optimizer": dict(recipe), "parameters": parameters,
                     "param_groups": [
                         self._spec_group(i, members, extra)
                         for i, (members, extra) in enumerate(groups)]}
        if grad_accumulation != 1:
            self.spec["grad_accumulation"] = grad_accumulation
        _check_options(loss_scaling, grad_accumulation)
        if loss_scaling is True:
            loss_scaling = {"type": "dynamic"}
        if loss_scaling:
            self.spec["loss_scaling"] = dict(loss_scaling)
        self.loss_scaling = self.spec.get("loss_scaling")
        if pipeline.split()[:1] == ["auto"]:
            pipeline = self._plan(pipeline, plan or {}, world)
        elif plan is not None:
            raise ValueError("plan is for pipeline='auto'")
        self.pipeline = pipeline
        self._zero_stage = next(
            (int(o.split("=", 1)[1]) for o in pipeline.split()
             if o.startswith("zero-stage=") and o[11:].isdigit()), 0)
        units = None
        split = _split_pipeline(pipeline)
        if module is not None and self._zero_stage == 3 and world > 1:
            # FSDP's units: each a flat shard of its own, gathered around
            # its forward and backward (_units.py).
            # Units sum the micro-batches' reduced shards themselves
            # (_units.py): the step's f32 accumulators would be whole.
            if grad_accumulation < 1:
                raise ValueError(f"grad_accumulation is {grad_accumulation}:"
                                 " the micro-batches per step, at least 1")
            self.spec.pop("grad_accumulation", None)
            units, unit_of = find_units(module, auto_wrap_policy)
            for entry in parameters:
                entry["unit"] = unit_of[entry["name"]]
            if "gather-params=true" not in split.split():
                split += " gather-params"
        elif auto_wrap_policy is not None and self._zero_stage != 3:
            raise ValueError("auto_wrap_policy is for zero-stage=3 (units "
                             "gathered around their forward and backward)")
        if reshard_after_forward is not True and units is None and \
                world > 1:
            raise ValueError("reshard_after_forward is for units: pass the "
                             "model itself under zero-stage=3")
        if units is not None and not overlap:
            raise ValueError("overlap=False is not supported with units "
                             "(ZeRO-3 given the model): their gathers and "
                             "reduce-scatters run on the communication "
                             "thread")
        self.library = compile(self.spec, pipeline=split,
                               target=target, cache=cache, comm=self.comm)
        self.compiled = Step(self.library)
        self._units = units is not None
        # torch.optim's state has a "step" per parameter (not SGD's).
        self._keeps_step = _keeps_step(self.kind)
        self.session = Session(self.compiled, comm=self.comm, timeout=timeout,
                               seed=seed, threads=threads)
        self._named = named
        self._param_views = [None] * len(named)
        self._grad_views = [None] * len(named)
        self._gathered = []
        with torch.no_grad():
            if module is None:
                for index in range(len(named)):
                    self._adopt(index)
            else:
                # Each parameter as soon as it is final: a model on the
                # meta device is then never whole on a rank.
                index_of = {id(p): i for i, (_, p) in enumerate(named)}

                def share(tensor):  # rank 0's values, as DDP's
                    if self.comm is not None and self.comm.Get_size() > 1:
                        host = tensor.detach().cpu()
                        self.comm.Bcast(_bits(host).numpy(), root=0)
                        tensor.copy_(host)

                def adopt(p):
                    if id(p) not in index_of:  # frozen: stays the model's
                        share(p.data)
                        return
                    self._adopt(index_of[id(p)])
                    if self._units and id(p) in deferred:
                        release(p)
                materialize(module, deferred, device, param_init_fn, adopt,
                            share)
        if self._units:
            self._reducer = UnitReducer(self, units, unit_of,
                                        reshard_after_forward,
                                        grad_accumulation)
            self._hook_model_state(module)
        else:
            self._reducer = Reducer(self, bool(overlap))
        self._versions = None
        self._constructed = False
        super().__init__([dict(self._group_defaults[i], **extra,
                               params=[p for _, p in members])
                          for i, (members, extra) in enumerate(groups)],
                         defaults)
        # torch gave every group the recipe's keys; a group of another type
        # (AdamW beside Muon) keeps its own and the caller's only.
        for i, (group, (_, extra)) in enumerate(zip(self.param_groups,
                                                    groups)):
            if self._kinds[i] != self.kind:
                for key in set(defaults) - set(self._group_defaults[i]) - \
                        set(extra):
                    del group[key]
        self._constructed = True
        self._runtime_keys = _group_runtime_keys(self.compiled,
                                                 len(self.param_groups))
        self._structure = [
            _structure(g, self._group_defaults[i], self._kinds[i],
                       self._runtime_keys[i])
            for i, g in enumerate(self.param_groups)]
        self._members = [list(g["params"]) for g in self.param_groups]
        self._pushed = {}
        self._push_hyperparameters()
        self.scalars = {}
        self.state = StateView(self)
        self._unscaled = False
        self._set_to_none = False
        self._ever = [False] * len(named)  # given a gradient on some rank
        self._has_main = {t.name for t in self.compiled.tensors
                          if t.role == "main_param"}
        self._seen_versions(params=True)
        undefer(deferred)

    def _spec_group(self, index, members, extra):
        """A torch group as the spec's: its parameters by exact name, its
        optimizer's type where it is not the recipe's, and every
        hyperparameter it sets (the structural ones included)."""
        group = {"params": [_glob_literal(name) for name, _ in members]}
        if self._kinds[index] != self.kind:
            group["type"] = self._kinds[index]
        for key, value in extra.items():
            if key in _EXECUTION_KEYS or value is None or \
                    key not in self._group_defaults[index]:
                continue  # how torch runs it, or a key of the program's
            group[key] = list(value) if isinstance(value, tuple) else value
        return group

    def add_param_group(self, param_group):
        if getattr(self, "_constructed", True):
            raise DistoptError(
                "DistributedOptimizer compiles its parameter groups into "
                "the step: add_param_group after construction is not "
                "supported; pass every group to the constructor")
        super().add_param_group(param_group)

    def _plan(self, pipeline, plan, world):
        """distopt-plan's choice for "auto [options kept]" (rank 0 plans,
        the others get its answer), evaluated as this optimizer compiles
        steps: gradients as bucket views, reductions as entry points."""
        from .compiler import planned_pipeline
        from .planner import calibrate
        nodes = _plan_nodes(plan, world)
        kept = pipeline.split()[1:]
        if world == 1:
            return " ".join(kept)  # one rank: nothing to choose
        calibration = plan.get("calibration") or \
            os.environ.get("DISTOPT_CALIBRATION")
        if calibration is None:
            calibration = calibrate(self.comm, ranks_per_node=world // nodes)
        needed = ["grad-as-bucket-view=true", "split-step=true"]
        keys = {o.split("=", 1)[0] for o in kept}
        auto = " ".join(["auto"] + kept +
                        [o for o in needed if o.split("=")[0] not in keys])
        outcome = None
        if self.comm.Get_rank() == 0:
            try:
                outcome = ("ok", planned_pipeline(
                    self.spec, auto, calibration,
                    plan.get("memory_per_rank"), nodes,
                    bool(plan.get("allow_lossy", False))))
            except Exception as e:  # the others must not wait forever
                outcome = ("error", str(e))
        outcome = self.comm.bcast(outcome, root=0)
        if outcome[0] == "error":
            raise CompileError(outcome[1])
        # ZeRO-3's gathers, which the planner counts as gather entries: the
        # units' (which add them back), or the gather after each step.
        return " ".join(o for o in outcome[1].split()
                        if o != "gather-params=true")

    def _adopt(self, index):
        name, p = self._named[index]
        info = self.compiled.tensor(name, "param")
        initial = p.detach().cpu().clone()
        if self.comm is not None and self.comm.Get_size() > 1:
            # As DDP does: every rank starts from rank 0's parameters.
            self.comm.Bcast(_bits(initial).numpy(), root=0)
        self.session.write(name, initial, "param")
        if any(t.role == "main_param" and t.name == name
               for t in self.compiled.tensors):
            self.session.write(name, initial.float(), "main_param")
        if self._units:
            # Held as shards; the unit reducer gathers them for forward
            # and backward, and gives .grad only during backward.
            p.grad = None
            return
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
        self._param_views[index] = view
        self._grad_views[index] = grad

    def _hook_model_state(self, module):
        """With units: model.state_dict() gives whole parameters (gathered
        from the shards: collective, as FSDP's full state dict), and
        model.load_state_dict() writes them into the shards and their fp32
        main copies (every rank loads the same dict)."""
        names = {id(p): name for name, p in self._named}
        keys = {}
        for module_name, m in module.named_modules():
            for param_name, p in m._parameters.items():
                if p is not None and id(p) in names:
                    keys[(module_name + "." if module_name else "") +
                         param_name] = (names[id(p)], p)

        def save(_, state_dict, prefix, local_metadata):
            for key, (name, _) in keys.items():
                if prefix + key in state_dict:
                    state_dict[prefix + key] = self.session.read(
                        name, "param", like="torch")
            return state_dict

        def load(state_dict, prefix, *_):
            for key, (name, p) in keys.items():
                value = state_dict.get(prefix + key)
                if value is None or tuple(value.shape) != \
                        tuple(self.compiled.tensor(name, "param").shape):
                    continue  # torch reports it (missing, or mismatched)
                value = value.detach().to("cpu", p.dtype)
                self.session.write(name, value, "param")
                self._write_main(name, value)
                # torch copies into p next: a tensor of its shape, dropped
                # when the load is done.
                p.data = torch.empty_like(value, device=p.device)

        def loaded(*_):
            self._release_units()
            for index in range(len(self._named)):
                self._reducer._free_param(index)

        module._register_state_dict_hook(save)
        module._register_load_state_dict_pre_hook(load)
        module.register_load_state_dict_post_hook(loaded)

    # --- hyperparameters ---------------------------------------------------

    def _push_hyperparameters(self):
        """Every group's runtime hyperparameters into the session (those
        that changed), after checking what the step cannot change."""
        for i, group in enumerate(self.param_groups):
            where = f"param_groups[{i}]"
            if [id(p) for p in group["params"]] != \
                    [id(p) for p in self._members[i]]:
                raise DistoptError(
                    f"{where}['params'] changed; the step was compiled "
                    "for the parameters given to the constructor")
            self._check_structure(i, group, DistoptError, where)
            for key, value in _runtime_values(self._runtime_keys[i],
                                              group).items():
                value = _check_value(where, key, value)
                if self._pushed.get((i, key)) != value:
                    self.session.set_hyperparameter(f"group{i}.{key}", value)
                    self._pushed[(i, key)] = value

    def _check_structure(self, index, group, error, where):
        _check_structure(self._structure[index], group,
                         self._group_defaults[index], self._kinds[index],
                         error, where)

    def _pull_hyperparameters(self):
        """The session's hyperparameters (restored from a checkpoint) into
        param_groups."""
        values = self.session.hyperparameters
        for i, group in enumerate(self.param_groups):
            got = {key.split(".", 1)[1]: v for key, v in values.items()
                   if key.startswith(f"group{i}.")}
            group.update(_group_values(got))
            self._pushed.update({(i, k): v for k, v in got.items()})

    # --- the gradients --------------------------------------------------------

    def _adopt_grad(self, index, p):
        """p.grad as the view of its bucket the step reads (backward made
        a tensor of its own after zero_grad(set_to_none=True), or the
        program set one)."""
        grad = self._grad_views[index]
        if p.grad is None:
            grad.zero_()  # no gradient this step (an unused parameter)
            self._seen[index] = grad._version
        elif p.grad.data_ptr() != grad.data_ptr():
            grad.copy_(p.grad)
        p.grad = grad

    def _grads_reduced(self):
        """After backward's reductions: what the update will not read again
        (a gradient whose reduction left a shard, or that the update
        reduces itself) must not change before step()."""
        self._versions = [g._version if g is not None else None
                          for g in self._grad_views]

    def _check_unchanged(self, why="this step reduces it during backward "
                         "into a buffer of its own (a shard per rank under "
                         "ZeRO-2/3, a bucket summed with the accumulated "
                         "micro-batches, or compressed under PowerSGD) and "
                         "updates from that, not from .grad"):
        if self._units:
            return  # .grad is gone once a unit's gradients are reduced
        for index, (name, p) in enumerate(self._named):
            bucket = self._reducer.bucket_of.get(index)
            if bucket is not None and self._reducer.in_place[bucket]:
                continue  # the update reads the averaged .grad
            if (p.grad is not None and
                p.grad.data_ptr() != self._grad_views[index].data_ptr()) or \
                    self._grad_views[index]._version != self._versions[index]:
                raise DistoptError(
                    f"the gradient of '{name}' changed after backward(): "
                    f"{why}; clip with opt.clip_grad_norm_(max_norm), not "
                    "torch.nn.utils.clip_grad_norm_ on the model (which "
                    "would clip this rank's own gradient)")

    @contextlib.contextmanager
    def no_sync(self):
        """DDP's no_sync: backward inside it accumulates this rank's
        gradients with no communication (in .grad; with grad_accumulation,
        in the step's f32 accumulators, .grad zeroed); the first backward
        after it reduces the sum."""
        enabled = self._reducer.enabled
        self._reducer.enabled = False
        try:
            yield
        finally:
            self._reducer.enabled = enabled

    def _update_reads(self):
        """The gradient buffers the next update reads, each with the number
        of ranks holding each of its elements: a bucket reduced in place
        (.grad averaged: every rank), the argument a reduction left its
        result in (a shard's part: the shard's replicas), and the
        gradients the update reduces itself (PowerSGD's: this rank's)."""
        reducer = self._reducer
        world = self.comm.Get_size() if self.comm is not None else 1
        if not reducer.reduced and reducer.accumulates:
            return [(acc, 1) for acc in self._fold_accumulated()]
        if not reducer.reduced:  # the whole step reduces them
            return [(self.session.arg(a.index, like="torch"), 1)
                    for a in self.compiled.args if a.role == "grad"]
        reads = []
        for e, left in zip(reducer.entries, reducer.left_in):
            if left is None:
                reads += [(self.session.arg(a, like="torch"), world)
                          for a in e.reduces]
            else:
                parts = (left.shard_of // left.numel if left.shard_of
                         else 1)
                reads.append((self.session.arg(left.index, like="torch"),
                              world // parts))
        reads += [(grad, 1) for index, grad in enumerate(self._grad_views)
                  if index not in reducer.bucket_of]
        return reads

    def _fold_accumulated(self):
        """With grad_accumulation and no reduction yet (one rank: the step
        has no reduce entry points), the last micro-batch's gradients are
        added into the f32 accumulators, as the step would add them, and
        zeroed (the step then adds zero): the accumulators are what the
        update reads, the sum of the micro-batches. Returns them."""
        accumulators = []
        for a in self.compiled.args:
            if a.role != "grad_accum":
                continue
            acc = self.session.arg(a.index, like="torch")
            grad = self.session.tensor(a.name, "grad", like="torch")
            acc.add_(grad.to(acc.dtype))
            grad.zero_()
            accumulators.append(acc)
        self._grads_reduced()
        return accumulators

    # --- loss scaling --------------------------------------------------------

    @property
    def scale(self):
        """The loss scale the next step unscales by (1.0 without
        loss_scaling): multiply the loss by it before backward()."""
        if not self.loss_scaling:
            return 1.0
        if self.loss_scaling.get("type") == "static":
            return float(self.loss_scaling["scale"])
        return self.session.scalar_state("loss_scale")

    @property
    def skipped(self):
        """Whether the last step() was skipped for an inf or NaN gradient
        on some rank (under loss_scaling): no parameter or state changed,
        and the step was not counted."""
        return bool(self.scalars.get("skipped", 0))

    @torch.no_grad()
    def unscale_(self):
        """GradScaler.unscale_: divides the gradients the update reads by
        the loss scale (times its f32 reciprocal, as torch), so that a
        clip or a look at .grad between backward() and step() sees
        unscaled values; step() then scales them back first (exactly, for
        a power-of-two scale), as the compiled step unscales itself."""
        if self._unscaled is not False:
            raise RuntimeError("unscale_() has already been called on this "
                               "optimizer since the last step()")
        if not self.loss_scaling:
            return
        world = self.comm.Get_size() if self.comm is not None else 1
        if not self._reducer.reduced and world > 1:
            raise DistoptError("unscale_ takes the gradients backward() "
                               "reduced: call it after backward()")
        if not self._reducer.reduced:
            # Nothing reduced them (one rank): .grad into the buffers first.
            for index, (_, p) in enumerate(self._named):
                self._adopt_grad(index, p)
        scale = torch.tensor(self.scale, dtype=torch.float32)
        inverse = scale.double().reciprocal().float()
        for buffer, _ in self._update_reads():
            buffer.mul_(inverse.to(buffer.dtype))
        self._unscaled = scale
        if self._reducer.reduced:
            self._grads_reduced()

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Clips the gradients the next step() takes by their global norm
        (torch.nn.utils.clip_grad_norm_'s rule: times max_norm / (norm +
        1e-6) where that is below 1) and returns the norm, as FSDP's
        clip_grad_norm_ does: call it after backward(), before step().
        Under loss_scaling it unscales first (unscale_). Under ZeRO-2/3 it
        clips this rank's reduced shards (the norm is summed over the ranks
        in f64: collective); without sharding it is torch's
        clip_grad_norm_ on the averaged gradients."""
        max_norm, norm_type = _clip_arguments(max_norm, norm_type)
        world = self.comm.Get_size() if self.comm is not None else 1
        if self.loss_scaling and self._unscaled is False:
            self.unscale_()
        reducer = self._reducer
        if reducer.accumulates and not reducer.reduced and world == 1:
            # One rank's step has no reduce entry points: the clip is by
            # the norm of the mean the step takes, the f32 sum of the
            # micro-batches divided by K.
            shards, k = self._update_reads(), self.compiled.grad_accumulation
        elif reducer.averages or world == 1:
            return torch.nn.utils.clip_grad_norm_(
                [p for _, p in self._named], max_norm, norm_type)
        elif len(reducer.bucket_of) != len(self._named):
            raise DistoptError("clip_grad_norm_: some gradients are not "
                               "reduced by backward(): PowerSGD reduces them "
                               "inside step() (not supported yet), and "
                               "dion-low-rank-sync never forms their average, "
                               "whose norm clipping needs")
        elif not reducer.reduced:
            raise DistoptError("clip_grad_norm_ clips the gradients reduced "
                               "by backward(): call it after backward()")
        elif reducer.accumulates and self._zero_stage == 1:
            # ZeRO-1 divides each rank's part by K in the update, after the
            # reduction: what backward reduced is the sum of the
            # micro-batches' means, K times the mean's norm (and clipping
            # it scales the mean alike).
            shards, k = self._update_reads(), self.compiled.grad_accumulation
        else:
            shards, k = self._update_reads(), 1
        if norm_type == float("inf"):
            local = max((s.abs().max().item() for s, _ in shards), default=0)
            total = self._allreduce(local, "max") / k
        else:
            local = sum(float((s.double().abs() ** norm_type).sum()) / copies
                        for s, copies in shards)
            total = self._allreduce(local, "sum") ** (1.0 / norm_type) / k
        coef = torch.tensor(max_norm, dtype=torch.float32) / (
            torch.tensor(total, dtype=torch.float32) + 1e-6)
        if coef < 1:
            for s, _ in shards:
                s.mul_(coef)
        return torch.tensor(total, dtype=torch.float32)

    def _allreduce(self, value, op):
        if self.comm is None or self.comm.Get_size() == 1:
            return value
        from mpi4py import MPI
        return self.comm.allreduce(value, op=MPI.MAX if op == "max"
                                   else MPI.SUM)

    # --- the step ------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._push_hyperparameters()
        # ZeRO-3: an in-place edit of a gathered parameter since the last
        # step (under no_grad, which bumps its version) goes to the shards.
        for entry in self._gathered:
            name, p, version = entry
            if p._version != version:
                self.session.write(name, p.detach(), "param")
                self._write_main(name, p)
        reducer = self._reducer
        if self._units and not reducer.reduced:
            if reducer.micro:
                raise DistoptError(
                    f"grad_accumulation={reducer.accumulation}: step() "
                    f"after {reducer.micro} backward passes under "
                    "no_sync(); the last micro-batch's backward runs "
                    "outside it")
            raise DistoptError(
                "with units (ZeRO-3 given the model), step() updates from "
                "the gradients backward() reduce-scattered: call backward() "
                "first (a gradient set by the program is not taken)")
        if self._set_to_none or not all(self._ever):
            self._refuse_unused()
        if reducer.reduced:
            self._check_unchanged()
        elif reducer.ended:
            self._check_unchanged(
                "the step adds it to the micro-batches accumulated before "
                "(grad_accumulation), inside step(): .grad holds the last "
                "micro-batch's only")
        for index, ((name, p), view) in enumerate(zip(self._named,
                                                     self._param_views)):
            if self._units:
                break  # parameters and gradients are the units' to hold
            if view is not None and (p.data.data_ptr() != view.data_ptr() or
                                     p._version != self._param_seen[index]):
                # The program replaced .data (adopted), or changed the
                # parameter in place since the last step (load_state_dict,
                # an edit under no_grad): the fp32 main copy the update
                # starts from follows.
                if p.data.data_ptr() != view.data_ptr():
                    view.copy_(p.data)
                    p.data = view
                self._write_main(name, view)
            self._adopt_grad(index, p)
        if self._unscaled is not False:
            # unscale_() divided by the scale the step divides by itself.
            for buffer, _ in self._update_reads():
                buffer.mul_(self._unscaled.to(buffer.dtype))
            self._unscaled = False
        if reducer.reduced:
            # Backward reduced the buckets: the update takes it from there.
            self.scalars = self.session.run_entry(reducer.update)
        else:
            self.scalars = self.session.run()
        reducer._reset()
        reducer.got.clear()
        self._gather()
        self._release_units()
        self._seen_versions(params=True)
        return loss

    def _release_units(self):
        """With units: the shards changed (a step, a loaded checkpoint), so
        no unit keeps parameters gathered before (a forward under no_grad
        leaves the root's)."""
        if self._units:
            for u in range(len(self._reducer.units)):
                self._reducer._free_params(u)

    def _write_main(self, name, value):
        """A parameter's new value into its fp32 main copy, if it has one."""
        if name in self._has_main:
            self.session.write(name, value.detach().float(), "main_param")

    def _seen_versions(self, params=False):
        """The gradient views' versions now (a write since is a gradient
        the program gave); with params, the parameters' (a write since is
        an edit the main parameters must follow)."""
        self._seen = [g._version if g is not None else None
                      for g in self._grad_views]
        if params:
            self._param_seen = [p._version for _, p in self._named]

    def _refuse_unused(self):
        """torch.optim skips a parameter whose .grad is None: one never
        given a gradient, or none since zero_grad(set_to_none=True) (DDP
        leaves None the gradient of a parameter no rank used). The compiled
        step updates every parameter (weight decay and momentum apply): such
        a parameter is refused by name. Collective while some parameter
        has never had a gradient, and after set_to_none (every rank
        decides alike). A gradient is given by backward, by setting .grad
        to a tensor, or by writing into .grad."""
        views = self._grad_views
        got = [index in self._reducer.got or (
            views[index] is not None and p.grad is not None and (
                p.grad.data_ptr() != views[index].data_ptr() or
                views[index]._version != self._seen[index]))
            for index, (_, p) in enumerate(self._named)]
        if self.comm is not None and self.comm.Get_size() > 1:
            import numpy as np
            from mpi4py import MPI
            local = np.array(got, dtype=np.uint8)
            anywhere = np.empty_like(local)
            self.comm.Allreduce(local, anywhere, op=MPI.MAX)
            got = anywhere.astype(bool).tolist()
        unused = [name for (name, _), g, ever in zip(self._named, got,
                                                     self._ever)
                  if not g and (self._set_to_none or not ever)]
        self._ever = [a or b for a, b in zip(self._ever, got)]
        if unused:
            shown = ", ".join(f"'{n}'" for n in unused[:5]) + (
                f" and {len(unused) - 5} more" if len(unused) > 5 else "")
            raise DistoptError(
                f"{shown} got no gradient on any rank"
                f"{' since zero_grad(set_to_none=True)' if self._set_to_none else ''}"
                ": torch.optim would skip them (their .grad is None), the "
                "compiled step updates every parameter; leave them out of "
                "the optimizer (requires_grad=False before constructing "
                "it)")

    def _gather(self):
        for entry in self._gathered:
            name, p = entry[0], entry[1]
            p.data.copy_(self.session.read(name, "param", like="torch"))
            entry[2] = p._version

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in the step's buffers; with set_to_none,
        p.grad is None until the next backward gives it a gradient (which
        lands in the step's buffer again). A parameter that gets none on
        some ranks takes the others' average, as under DDP; one that gets
        none on any rank is updated with a zero gradient, or, after
        set_to_none=True, refused at step() (torch.optim would skip it)."""
        self._unscaled = False  # the gradients to come are scaled
        self._set_to_none = set_to_none
        # As torch's zero_grad drops what .grad accumulated: the step's f32
        # accumulators too, and what a step refused part way left.
        if self._reducer.accumulates:
            self.session.discard_accumulated()
        self._reducer._reset()
        self._reducer.got.clear()
        for (_, p), grad in zip(self._named, self._grad_views):
            if grad is None:  # units: .grad only during backward
                p.grad = None
                continue
            grad.zero_()
            p.grad = None if set_to_none else grad
        self._seen_versions()

    # --- torch.optim's state_dict ------------------------------------------

    def _state_keys(self, name):
        prefix = name + "."
        return [t.name[len(prefix):] for t in self.compiled.tensors
                if t.role == "state" and t.name.startswith(prefix)
                and (not t.per_rank or t.rank_mean)]

    def state_dict(self):
        """torch.optim's format: {"state": {index: {"step", "exp_avg",
        ...}}, "param_groups": [...]} with every group's live
        hyperparameters. Collective under ZeRO (the shards are gathered).
        Per-rank state (PowerSGD's error feedback) is in
        save_checkpoint's file only; the momenta of Dion's low-rank sync
        are given as their mean (collective)."""
        steps = self.session.steps_done
        state = {}
        if steps > 0:
            for index, (name, _) in enumerate(self._named):
                entry = {}
                if self._keeps_step:
                    entry["step"] = torch.tensor(float(steps))
                for key in self._state_keys(name):
                    entry[key] = self.session.read(f"{name}.{key}", "state",
                                                   like="torch")
                state[index] = entry
        groups, index = [], 0
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = list(range(index, index + len(group["params"])))
            index += len(group["params"])
            groups.append(packed)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Loads torch.optim's format (from this optimizer or from the
        torch.optim optimizer of the same recipe and groups over the same
        parameters): the state, the step and every group's hyperparameters.
        Collective: every rank loads the same dict."""
        groups = state_dict["param_groups"]
        ours = [len(g["params"]) for g in self.param_groups]
        theirs = [len(g["params"]) for g in groups]
        if ours != theirs:
            raise ValueError(
                f"the state dict has {len(groups)} parameter groups of "
                f"{theirs} parameters; this optimizer has {len(ours)} of "
                f"{ours}")
        merged = []
        for i, (group, loaded) in enumerate(zip(self.param_groups, groups)):
            merged.append(dict(group))
            for key, value in loaded.items():
                if key != "params" and key in self._group_defaults[i]:
                    merged[i][key] = tuple(value) if key in _TUPLE_KEYS \
                        else value
            self._check_structure(i, merged[i], ValueError,
                                  f"the state dict's param_groups[{i}]")
        for group, values in zip(self.param_groups, merged):
            group.update({k: v for k, v in values.items() if k != "params"})
        steps = None
        order = [index for g in groups for index in g["params"]]
        for position, (name, p) in enumerate(self._named):
            entry = state_dict["state"].get(order[position])
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
                # (The parameter's shape, or one of the state's own:
                # Dion's right factor, rank x columns.)
                want = self.compiled.tensor(f"{name}.{key}", "state").shape
                if tuple(value.shape) != tuple(want):
                    raise ValueError(
                        f"state '{key}' of parameter '{name}' has shape "
                        f"{list(value.shape)}, the step keeps "
                        f"{list(want)}")
                self.session.write(f"{name}.{key}", value, "state")
        if steps is not None:
            self.session.steps_done = steps
        elif state_dict["state"]:
            # SGD keeps no step; its momentum exists only after step 1.
            self.session.steps_done = max(self.session.steps_done, 1)
        self._push_hyperparameters()

    # --- distopt's checkpoints ---------------------------------------------

    def save_checkpoint(self, path):
        """Parameters, all optimizer state (sharded or not), the step count
        and every group's hyperparameters as they are now, in distopt's
        format (docs/checkpoint.md); collective, rank 0 writes."""
        self._push_hyperparameters()
        self.session.save(path)

    def load_checkpoint(self, path):
        """Loads a checkpoint saved at any world size into the model's
        parameters, the optimizer and param_groups' hyperparameters;
        returns that world size."""
        saved = self.session.load(path)
        self._gather()
        self._release_units()
        self._pull_hyperparameters()
        return saved


def _plan_nodes(plan, world):
    """The nodes of DistributedOptimizer's `plan` dict, its keys checked."""
    unknown = set(plan) - {"calibration", "memory_per_rank", "nodes",
                           "allow_lossy"}
    if unknown:
        raise ValueError(f"plan takes calibration, memory_per_rank, nodes "
                         f"and allow_lossy, not {', '.join(sorted(unknown))}")
    nodes = plan.get("nodes", 1)
    if not isinstance(nodes, int) or nodes < 1 or world % nodes:
        raise ValueError(f"plan's nodes={nodes!r} must divide the world of "
                         f"{world} ranks")
    return nodes
