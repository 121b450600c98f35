"""What distopt.torch.DistributedOptimizer takes from torch: parameters and
groups as torch.optim takes them, and which of a group's hyperparameters
the compiled step reads at run time or is built on."""

import functools
import json
import subprocess

import torch

from .errors import DistoptError

_SPEC_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16",
                torch.float16: "f16"}

# torch's group keys that hold several of the step's runtime
# hyperparameters (the step reads its keys from the compiled interface).
_TUPLE_KEYS = {"betas": ("beta1", "beta2")}
# How torch runs an update, not what it computes.
_EXECUTION_KEYS = ("foreach", "fused", "capturable", "differentiable")


def _torch_class(kind):
    """torch.optim's class of the recipe's type ("adamw": AdamW), or None.
    Which types the step compiles is the spec reader's to say."""
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if name.lower() == kind and isinstance(cls, type) and \
                issubclass(cls, torch.optim.Optimizer) and \
                cls is not torch.optim.Optimizer:
            return cls
    return None


def _without_none(keys):
    """Keys whose value is None (an optional key with no value: Dion's
    rank, Muon's ns_dtype) left out: the spec takes them as absent."""
    return {k: v for k, v in keys.items() if v is not None}


@functools.lru_cache(maxsize=None)
def _described(text):
    from .compiler import _tool
    return subprocess.run([_tool("distopt-translate"),
                           "--describe-optimizer"], input=text,
                          capture_output=True, text=True)


def _describe(recipe):
    """distopt's description of the recipe's optimizer, from the spec reader
    (distopt-translate --describe-optimizer), which checks its keys and
    values: {"defaults": {"lr": .., <every key the spec reads>: ..},
    "min_param_rank": N, "runtime_keys": [..], "state_keys": [..]}."""
    done = _described(json.dumps(_without_none(recipe), sort_keys=True))
    if done.returncode != 0:
        errors = [line.split("error: ", 1)[1] for line in
                  done.stderr.splitlines() if "error: " in line]
        raise ValueError("the recipe: " + ("; ".join(errors) or
                                            done.stderr.strip()))
    return json.loads(done.stdout)


def _torch_defaults(recipe):
    """The hyperparameters of the recipe as torch.optim's class of the same
    type keeps them in param_groups, every key included, so that
    state_dict() loads into it; for a type torch.optim has no class for
    (Muon in torch 1.13, Dion), every key the spec reads, with the
    defaults of distopt's update."""
    kind = recipe["type"]
    if not isinstance(kind, str):
        raise ValueError(f"unknown optimizer type {kind!r}: the recipe's "
                         "type is the name of a torch.optim class in lower "
                         "case (\"adamw\"), one distopt compiles "
                         "(docs/param-spec.md)")
    cls = _torch_class(kind)
    if cls is None or _describe({"type": kind})["min_param_rank"] > 0:
        # Not torch's (or torch's Muon, in a torch that has one: distopt's
        # keys and defaults, and its AdamW group for the vectors).
        return {k: tuple(v) if isinstance(v, list) else v
                for k, v in _describe(recipe)["defaults"].items()}
    kwargs = {k: tuple(v) if k in _TUPLE_KEYS else v
              for k, v in _without_none(recipe).items() if k != "type"}
    try:
        return dict(cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults)
    except TypeError as e:  # an unknown keyword: torch names it
        raise ValueError(f"the recipe: {e}") from None


def _group_defaults(recipe, defaults, extra):
    """A group's hyperparameters as its optimizer keeps them: the recipe's
    `defaults`, or for a group of another type (AdamW beside Muon) that
    optimizer's, with the group's keys."""
    kind = extra.get("type", recipe["type"])
    if kind == recipe["type"]:
        return defaults
    # The group's rate is the recipe's unless it has its own, as in torch.
    # (Keys of the program's own in the group, a "name", are not the
    # optimizer's: kept in the group, as by torch, and not used.)
    known = _torch_defaults({"type": kind, "lr": defaults["lr"]})
    keys = {k: v for k, v in _without_none(extra).items() if k in known}
    return _torch_defaults(dict({"lr": defaults["lr"]}, **keys, type=kind))


def _min_param_rank(kind):
    """The lowest rank of the parameters distopt's update of type `kind`
    takes (2 for Muon's and Dion's matrices, 0 for torch.optim's others)."""
    return _describe({"type": kind})["min_param_rank"]


def _split_vectors(groups, kind, lr):
    """torch.optim-style groups with the parameters of lower rank than
    their group's optimizer takes (a Muon or Dion group's biases, norms)
    given to AdamW at the group's rate (`lr` where the group has none; the
    spec reader's rule, docs/param-spec.md), with the group's keys AdamW
    knows (a weight_decay): a group of such parameters only becomes that
    AdamW group in place; the others' go to a group of their own after the
    given groups."""
    out, extra_groups = [], []
    adamw = _torch_defaults({"type": "adamw", "lr": lr})
    for named, extra in groups:
        rank = _min_param_rank(extra.get("type", kind))
        kept = [(n, p) for n, p in named if p.dim() >= rank]
        moved = [(n, p) for n, p in named if p.dim() < rank]
        vectors = dict({k: v for k, v in _without_none(extra).items()
                        if k in adamw}, type="adamw")
        vectors.setdefault("lr", lr)
        if moved and not kept:
            out.append((moved, dict(extra, **vectors)))
            continue
        if moved:
            extra_groups.append((moved, vectors))
        out.append((kept, extra))
    return out + extra_groups


def _keeps_step(kind):
    """Whether torch's optimizer of type `kind` keeps a "step" in each
    parameter's state (SGD does not): its step on one element, with its
    defaults (a type the step compiles: asked after compiling)."""
    p = torch.zeros(1, requires_grad=True)
    p.grad = torch.zeros(1)
    try:
        opt = _torch_class(kind)([p], lr=1e-3)
        opt.step()
    except Exception:  # not a plain torch.optim optimizer: torch's common case
        return True
    return "step" in opt.state[p]


def _default_comm():
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD


def _glob_literal(name):
    """`name` as a spec glob pattern that matches only itself."""
    return "".join("\\" + c if c in "\\*?[]{}" else c for c in name)


def _comparable(value):
    """A hyperparameter's value for comparison: numbers as floats (a rank
    of 2 and of 2.0 are one rank), sequences as tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def _structure(group, defaults, kind, runtime_keys=()):
    """What of a group's hyperparameters the compiled step is built on, as
    {key: what it is}: torch's flags for the optimizer (amsgrad, nesterov,
    centered, maximize), whether there is a momentum buffer, and every
    other value compiled in (not among the step's `runtime_keys`: Muon's
    ns_steps, Dion's rank)."""
    out = {k: bool(group.get(k, False)) for k, v in defaults.items()
           if isinstance(v, bool) and k not in _EXECUTION_KEYS}
    if "momentum" in defaults and _torch_class(kind) is not None:
        # (SGD's and RMSprop's buffer exists for a non-zero momentum only.)
        out["momentum"] = "0" if group["momentum"] == 0 else "non-zero"
    runtime = {_tuple_key(k)[0] for k in runtime_keys}
    for key, value in defaults.items():
        if key not in out and key != "lr" and key not in runtime and \
                key not in _EXECUTION_KEYS and key != "type":
            out[key] = _comparable(group.get(key, value))
    return out


def _check_value(where, key, value):
    """torch.optim's constructor rules, for a value set at any step: a
    value the step cannot honour is an error naming it."""
    if isinstance(value, torch.Tensor):
        raise DistoptError(f"{where}: '{key}' is a tensor; the step takes "
                           "a float")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise DistoptError(f"{where}: '{key}' is {value!r}, not a "
                           "number") from None
    if x != x or abs(x) == float("inf"):
        raise DistoptError(f"{where}: '{key}' is {x}; it must be finite")
    if key in ("beta1", "beta2") and not 0.0 <= x < 1.0:
        raise DistoptError(f"{where}: '{key}' is {x}; it must be in [0, 1)")
    if key != "dampening" and x < 0:
        raise DistoptError(f"{where}: '{key}' is {x}; it must be "
                           "non-negative")
    return x


def _check_structure(compiled, group, defaults, kind, error, where):
    """What the step was compiled on (`compiled`, _structure's) must not
    change: `error` naming the key."""
    now = _structure(group, defaults, kind)
    for key, was in compiled.items():
        if now.get(key, was) != was:
            raise error(
                f"{where}: '{key}' is {now[key]} (was {was}), but the step "
                "was compiled for the latter: it decides the state the step "
                "keeps and the terms it computes; construct "
                "DistributedOptimizer with the value you need")


def _tuple_key(key):
    """The torch group key that holds step key `key` ("beta1": "betas", 0),
    or (key, None)."""
    for name, parts in _TUPLE_KEYS.items():
        if key in parts:
            return name, parts.index(key)
    return key, None


def _runtime_values(keys, group):
    """The group's values of the step's runtime hyperparameters `keys`."""
    out = {}
    for key in keys:
        name, position = _tuple_key(key)
        if position is None:
            out[key] = group[key]
            continue
        values = tuple(group[name])
        if len(values) != len(_TUPLE_KEYS[name]):
            raise DistoptError(f"'{name}' is {group[name]!r}; it must hold "
                               f"{len(_TUPLE_KEYS[name])} values")
        out[key] = values[position]
    return out


def _group_runtime_keys(step, groups):
    """Each group's runtime hyperparameters, by the compiled step's keys
    (its arguments "group<i>.<key>")."""
    return [[a.name.split(".", 1)[1] for a in step.args
             if a.role == "hyperparameter" and a.name.startswith(f"group{i}.")]
            for i in range(groups)]


def _group_values(values):
    """Step keys' values ({"beta1": .., "beta2": ..}) as torch's group keys
    ({"betas": (.., ..)})."""
    out = {}
    for key, value in values.items():
        name, position = _tuple_key(key)
        if position is None:
            out[key] = value
        else:
            parts = list(out.get(name, [None] * len(_TUPLE_KEYS[name])))
            parts[position] = value
            out[name] = tuple(parts)
    return out


def _split_pipeline(pipeline):
    """The pipeline with what DDP's semantics need: gradients as views of
    their buckets, and the reductions as entry points of their own."""
    options = pipeline.split()
    keys = {o.split("=", 1)[0] for o in options}
    if "grad-as-bucket-view" not in keys:
        options.append("grad-as-bucket-view")
    if "split-step" not in keys:
        options.append("split-step")
    return " ".join(options)


def _model_groups(module, groups):
    """`groups` given with the model itself: torch.optim's group dicts over
    the model's parameters, as the same dicts with the parameters' names
    (model.named_parameters()'s) in "params". Every parameter of the model
    that requires a gradient is in exactly one group."""
    names = {id(p): name for name, p in module.named_parameters()}
    if isinstance(groups, dict) or not isinstance(groups, (list, tuple)):
        raise TypeError("groups is a list of dicts {'params': [...], "
                        "<hyperparameters>}")
    named, placed = [], {}
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or "params" not in g:
            raise TypeError(f"groups[{i}] is not a dict with 'params'")
        members = [g["params"]] if isinstance(g["params"], torch.Tensor) \
            else list(g["params"])
        listed = []
        for p in members:
            if isinstance(p, (tuple, list)) and len(p) == 2 and \
                    isinstance(p[0], str):
                p = p[1]  # a (name, parameter) pair
            if not isinstance(p, torch.Tensor) or id(p) not in names:
                raise ValueError(f"groups[{i}] holds a {type(p).__name__} "
                                 "that is not a parameter of the model")
            if id(p) in placed:
                where = "twice" if placed[id(p)] == i else \
                    f"also in groups[{placed[id(p)]}]"
                raise ValueError(f"groups[{i}]: '{names[id(p)]}' is "
                                 f"{where}")
            placed[id(p)] = i
            listed.append(names[id(p)])
        named.append(dict(g, params=listed))
    missing = [name for name, p in module.named_parameters()
               if p.requires_grad and id(p) not in placed]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"groups: the model's parameter '{missing[0]}'"
                         f"{more} is in no group: each parameter that "
                         "requires a gradient goes in one")
    return named


def _named_groups(params):
    """torch.optim's `params` as groups of (name, parameter): an iterable of
    parameters, of (name, parameter) pairs, or of group dicts whose
    "params" are either. Unnamed parameters are named by position."""
    if isinstance(params, torch.Tensor):
        raise TypeError("params must be an iterable of parameters, (name, "
                        "parameter) pairs or group dicts, not a tensor")
    entries = list(params)
    if not entries:
        raise ValueError("DistributedOptimizer got an empty parameter list")
    if isinstance(entries[0], dict):
        raw = [dict(g) for g in entries]
        for i, g in enumerate(raw):
            if not isinstance(g, dict) or "params" not in g:
                raise TypeError(f"param_groups[{i}] is not a dict with "
                                "'params'")
            g["params"] = ([g["params"]] if isinstance(
                g["params"], torch.Tensor) else list(g["params"]))
    else:
        raw = [{"params": entries}]
    groups, seen = [], set()
    for i, g in enumerate(raw):
        named = []
        for entry in g["params"]:
            if isinstance(entry, (tuple, list)) and len(entry) == 2 and \
                    isinstance(entry[0], str):
                name, p = entry
            elif isinstance(entry, torch.Tensor):
                name, p = None, entry
            else:
                raise TypeError(f"param_groups[{i}]: {type(entry).__name__}"
                                " is neither a parameter nor a (name, "
                                "parameter) pair")
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"param_groups[{i}]: '{name}' is a "
                                f"{type(p).__name__}, not a tensor")
            if id(p) in seen:
                raise ValueError(f"param_groups[{i}]: a parameter"
                                 f"{' ' + repr(name) if name else ''} is "
                                 "in more than one group")
            seen.add(id(p))
            if p.requires_grad:
                named.append([name, p])
        if not named:
            raise ValueError(f"param_groups[{i}] has no parameter that "
                             "requires a gradient")
        groups.append((named, {k: v for k, v in g.items() if k != "params"}))
    taken = {n for named, _ in groups for n, _ in named if n}
    if len(taken) != sum(1 for named, _ in groups for n, _ in named if n):
        raise ValueError("two parameters have the same name")
    k = 0
    for named, _ in groups:
        for entry in named:
            while entry[0] is None:
                candidate = f"param{k}"
                k += 1
                if candidate not in taken:
                    entry[0] = candidate
    return [([tuple(e) for e in named], extra) for named, extra in groups]


def _check_options(loss_scaling, grad_accumulation):
    """DistributedOptimizer's options the spec does not check itself."""
    if not isinstance(loss_scaling, (dict, bool, type(None))):
        raise TypeError(f"loss_scaling is {loss_scaling!r}: True, False, "
                        "None or the spec's dict ({\"type\": \"dynamic\", "
                        "...})")
    if isinstance(grad_accumulation, bool) or \
            not isinstance(grad_accumulation, int):
        raise TypeError(f"grad_accumulation is {grad_accumulation!r}: an "
                        "integer, the micro-batches per step")


def _clip_arguments(max_norm, norm_type):
    """clip_grad_norm_'s arguments as floats: a NaN or negative max_norm
    would skip the clip or flip the gradients' sign, a norm_type of 0 or
    less is no norm."""
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not max_norm >= 0:
        raise ValueError(f"clip_grad_norm_: max_norm must be a non-negative "
                         f"number, got {max_norm}")
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm_: norm_type must be positive or "
                         f"inf, got {norm_type}")
    return max_norm, norm_type
