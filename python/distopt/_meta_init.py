"""Deferred initialization for distopt.torch.DistributedOptimizer: a model
built on the meta device (no memory behind its tensors) is made and
initialized one module at a time, each parameter handed to the step as
soon as the last module holding it is initialized, so that no rank ever
holds the model whole (what FSDP's meta-device initialization is for).

Each module's own tensors (the parameters and buffers it holds itself, not
its children's) are made on the step's device and initialized by
param_init_fn(module) when given, else by module.reset_parameters(), in
the order of model.named_modules() (pre-order: for most models the order
their constructors ran in, so that under the same seed the values are
those of the model built on the CPU). A tensor two modules hold (tied) is
initialized by the first of them in that order and keeps its value
through the second's initialization.
"""

import torch

from .errors import DistoptError


def _stand_in(shape, dtype, device):
    """A tensor of `shape` holding one element (a zero broadcast to it):
    no memory, and every shape, dtype and device check passes."""
    return torch.zeros((), dtype=dtype, device=device).expand(shape)


def defer_meta(model, device):
    """Swaps each parameter of `model` on the meta device for a parameter
    on `device` of the same shape, dtype and requires_grad holding a stand
    in (with the attributes the original carried), and marks it (its
    shape) until undefer(). Tied parameters stay tied; references to the
    meta originals held elsewhere go stale. A marked parameter (a
    construction that failed) is deferred again. Returns the deferred
    parameters (id -> parameter)."""
    swapped = {}
    for module in model.modules():
        for key, p in module._parameters.items():
            if p is None:
                continue
            shape = getattr(p, "_distopt_meta", None)
            if shape is not None:
                p.data = _stand_in(shape, p.dtype, device)
                swapped[id(p)] = (p, p)
            elif p.device.type == "meta":
                if id(p) not in swapped:
                    new = torch.nn.Parameter(
                        _stand_in(p.shape, p.dtype, device),
                        requires_grad=p.requires_grad)
                    new.__dict__.update(p.__dict__)
                    new._distopt_meta = tuple(p.shape)
                    swapped[id(p)] = (p, new)
                module._parameters[key] = swapped[id(p)][1]
    # (The meta originals are kept in `swapped` until here, so that no id
    # is taken again by another tensor while the walk compares ids.)
    return {id(new): new for _, new in swapped.values()}


def release(p):
    """Frees a parameter the step holds now. (Its shape stays: autograd
    takes a parameter's shape when its gradient accumulator is made.)"""
    p.data = _stand_in(p.shape, p.dtype, p.device)


def undefer(deferred):
    """Construction succeeded: the parameters are the step's now."""
    for p in deferred.values():
        del p._distopt_meta


def materialize(model, deferred, device, init_fn, adopt, share):
    """Makes and initializes the deferred parameters (defer_meta's) and
    the meta buffers of `model` module by module (the module's text),
    calls share(buffer) on each buffer made (rank 0's values for every
    rank), and adopt(p) for every parameter of the model after the last
    module holding it: it is final then, and adopt may free it. An
    initializer that writes a tensor of another module not made (or
    already freed), replaces a parameter, or leaves a buffer made from the
    meta device unset is refused, naming the module."""
    modules = list(model.named_modules())
    last = {}
    for i, (_, module) in enumerate(modules):
        for p in module._parameters.values():
            if p is not None:
                last[id(p)] = i
    done = set()  # parameters made and initialized
    whole = set()  # ... and not yet adopted (not stand-ins)
    for i, (name, module) in enumerate(modules):
        name = f"module '{name}'" if name else "the model"
        mine = [p for p in module._parameters.values() if p is not None]
        held = [p for p in mine if id(p) in deferred]
        fresh = [p for p in held if id(p) not in done]
        buffers = [key for key, b in module._buffers.items()
                   if b is not None and b.device.type == "meta"]
        # (A module whose tensors are all tied and made is initialized
        # too: it draws what its constructor drew, and later modules get
        # the random numbers they would have got on the CPU.)
        if held or buffers:
            for p in fresh:
                p.data = torch.empty(p.shape, dtype=p.dtype, device=device)
                whole.add(id(p))
            for key in buffers:
                module._buffers[key] = torch.empty_like(
                    module._buffers[key], device=device)
            # A tied tensor initialized by an earlier module keeps that
            # value (this module's initializer may draw for it anyway), as
            # does a parameter that was not on the meta device.
            kept = [(p, p.detach().clone()) for p in mine
                    if id(p) in done or id(p) not in deferred]
            params = dict(module._parameters)
            made = {key: module._buffers[key] for key in buffers}
            versions = {key: b._version for key, b in made.items()}
            # Stand-ins take some writes (zero_, fill_) without an error.
            others = [(p, p._version) for p in deferred.values()
                      if id(p) not in whole]
            _initialize(name, module, init_fn)
            _check_initialized(name, module, params, made, versions, others)
            for p, value in kept:
                p.data.copy_(value)
            for key in buffers:
                share(module._buffers[key])
            done.update(id(p) for p in fresh)
        for p in mine:
            if last[id(p)] == i:
                whole.discard(id(p))
                adopt(p)


def _check_initialized(name, module, params, made, versions, others):
    """What an initializer of module `name` must have done (materialize)."""
    kind = type(module).__name__
    for key, p in params.items():
        if module._parameters.get(key) is not p:
            raise DistoptError(
                f"initializing {name} ({kind}) built on the meta "
                f"device replaced its parameter '{key}': initialize it in "
                "place (the optimizer holds the parameter it had)")
    for key, b in made.items():
        now = module._buffers.get(key)
        if now is b and b._version == versions[key]:
            raise DistoptError(
                f"{name} ({kind}) holds buffer '{key}' built on the "
                "meta device and its initializer left it unset: pass a "
                "param_init_fn(module) that sets it")
    for p, version in others:
        if p._version != version:
            raise DistoptError(
                f"initializing {name} ({kind}) built on the meta "
                "device wrote a parameter of another module (each module's "
                "initialization may touch only the tensors it holds "
                "itself: its children are not made yet)")


def _initialize(name, module, init_fn):
    kind = type(module).__name__
    if init_fn is None and not callable(getattr(module, "reset_parameters",
                                                None)):
        raise DistoptError(
            f"{name} ({kind}) holds tensors on the meta device and "
            "has no reset_parameters(): pass param_init_fn(module) to "
            "initialize them")
    try:
        if init_fn is not None:
            init_fn(module)
        else:
            module.reset_parameters()
    except RuntimeError as error:
        raise DistoptError(
            f"initializing {name} ({kind}) built on the meta device "
            f"failed: {error} (each module's initialization may touch only "
            "the tensors it holds itself: its children are not made "
            "yet)") from error
