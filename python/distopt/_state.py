"""distopt.torch.DistributedOptimizer's `state`: torch.optim's per-parameter
state over the compiled step's buffers."""

import collections.abc

import torch

from .errors import DistoptError


class StateView(collections.abc.Mapping):
    """torch.optim's `optimizer.state` over the step's buffers: state[p] is
    {"step": tensor, "exp_avg": ..., ...} by torch's names, the tensors
    views of the step's own (a change through them is the step's), empty
    before the first step, as torch's. A tensor sharded over the ranks
    (ZeRO) has no view: opt.state_dict() gathers it (collective)."""

    def __init__(self, optimizer):
        self._opt = optimizer
        self._names = {id(p): name for name, p in optimizer._named}

    def _name(self, p):
        name = self._names.get(id(p))
        if name is None:
            raise KeyError("not a parameter of this optimizer")
        return name

    def __getitem__(self, p):
        name, opt = self._name(p), self._opt
        if opt.session.steps_done == 0:
            return {}
        entry = {}
        if opt._keeps_step:
            entry["step"] = torch.tensor(float(opt.session.steps_done))
        for key in opt._state_keys(name):
            if not opt.compiled.tensor(f"{name}.{key}", "state").whole:
                raise DistoptError(
                    f"state '{key}' of '{name}' is sharded over the ranks "
                    "(ZeRO): opt.state_dict() gathers it (collective)")
            entry[key] = opt.session.tensor(f"{name}.{key}", "state",
                                            like="torch")
        return entry

    def __iter__(self):
        if self._opt.session.steps_done == 0:
            return iter(())
        return iter(p for _, p in self._opt._named)

    def __len__(self):
        return 0 if self._opt.session.steps_done == 0 else len(self._names)

    def __contains__(self, p):
        return id(p) in self._names and self._opt.session.steps_done > 0
