"""ZeRO-3 as FSDP runs it, for distopt.torch.DistributedOptimizer: the model
split into units (wrapped modules), each unit's parameters flat shards of
the compiled step between uses, gathered whole just before the unit's
forward and again before its backward, and its gradients reduce-scattered
into this rank's shard as soon as its backward has produced them.

The step is compiled with gather-params: a gather entry per flat parameter
shard (all-gather into an argument of role gathered_param) beside the
reduce entries (reduce-scatter of a gradient bucket) and the update. The
whole buffers -- gathered parameters and gradient buckets -- start without
storage in the session; this module binds torch tensors of its own to them
while a unit needs them, and releases them (the tensors are freed) after.
Entries run in the order started on the session's communication thread:
the next unit's gather is started while this one computes (prefetch), a
unit's reduce-scatter while the previous unit's backward runs, and each
wait is for one entry, not for everything started after it.
"""

import torch
from torch.utils._pytree import tree_flatten

from ._reducer import Reducer
from .errors import DistoptError

_TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16,
                 "f16": torch.float16}


def find_units(model, policy):
    """The units of `model` under an auto-wrap policy, in pre-order (the
    model itself first: the root unit), and each parameter's unit by its
    name in model.named_parameters(). policy: None (one unit), a module
    class or a tuple of them (each module of those classes is a unit, as
    FSDP's ModuleWrapPolicy), a callable(module) -> bool, or an int (a
    module whose parameters not already in smaller units number at least
    that many is a unit, as FSDP's size-based policy). A parameter held by
    modules of several units (tied, or a module two units share) belongs
    to the root."""
    modules = [m for _, m in model.named_modules()]
    if policy is None:
        chosen = set()
    elif isinstance(policy, int) and not isinstance(policy, bool):
        if policy < 1:
            raise ValueError("a size-based auto_wrap_policy is a positive "
                             "number of parameters")
        chosen = _by_size(model, policy)
    elif isinstance(policy, type) or (
            isinstance(policy, tuple) and
            all(isinstance(c, type) for c in policy)):
        chosen = {id(m) for m in modules if isinstance(m, policy)}
    elif callable(policy):
        chosen = {id(m) for m in modules if policy(m)}
    else:
        raise TypeError("auto_wrap_policy is a module class (or a tuple of "
                        "them), a callable(module) -> bool, or a number of "
                        "parameters")
    units, unit_index = [model], {id(model): 0}
    reach = {id(model): {0}}  # the units a module runs in

    def walk(module, unit):
        for child in module.children():
            child_unit = unit
            if id(child) in chosen:
                child_unit = unit_index.setdefault(id(child), len(units))
                if child_unit == len(units):
                    units.append(child)
            seen = reach.setdefault(id(child), set())
            if child_unit in seen:
                continue
            seen.add(child_unit)
            walk(child, child_unit)

    walk(model, 0)
    holders = {}
    for module in modules:
        for p in module._parameters.values():
            if p is not None:
                holders.setdefault(id(p), set()).update(reach[id(module)])
    unit_of = {}
    for name, p in model.named_parameters():
        owners = holders.get(id(p), {0})
        unit_of[name] = owners.pop() if len(owners) == 1 else 0
    return units, unit_of


def _by_size(model, least):
    """FSDP's size-based wrapping: bottom up, a module (not the root) whose
    parameters not yet in a unit number at least `least` becomes one."""
    chosen, counted = set(), set()

    def walk(module):
        for child in module.children():
            walk(child)
        if module is model:
            return
        mine = [p for p in module.parameters() if id(p) not in counted]
        if sum(p.numel() for p in mine) >= least:
            chosen.add(id(module))
            counted.update(id(p) for p in mine)

    walk(model)
    return chosen


class _Saved:
    """What autograd keeps of a tensor that views a unit's gathered buffer
    (a weight's transpose a matmul saves): where it lies, not the tensor,
    so that the buffer is freed after the unit's forward and the view is
    made again from the buffer gathered for its backward."""

    def __init__(self, unit, flat, offset, shape, stride):
        self.unit, self.flat = unit, flat
        self.offset, self.shape, self.stride = offset, shape, stride


class _Flat:
    """A whole argument (a gathered parameter, a gradient bucket or a lone
    gradient) of one unit: the entry that fills or reduces it, and the
    parameters it holds (index, offset, shape)."""

    def __init__(self, step, entry, arg, index_of):
        self.entry, self.arg = entry, arg
        value = step.args[arg]
        self.numel, self.dtype = value.numel, _TORCH_DTYPES[value.dtype]
        layout = step.interface["args"][arg].get("layout")
        self.members = [(index_of[e["name"]], e["offset"], tuple(e["shape"]))
                        for e in layout] if layout else \
            [(index_of[value.name], 0, tuple(value.shape))]
        self.buffer = None

    def views(self):
        for index, offset, shape in self.members:
            count = 1
            for d in shape:
                count *= d
            yield index, self.buffer[offset:offset + count].view(shape)


class UnitReducer(Reducer):
    """The Reducer of a DistributedOptimizer over units (see the module's
    text): module hooks gather each unit's parameters for its forward and
    backward; backward reduce-scatters each unit's bucket when its
    gradients are ready, units in reverse order (every rank issues them
    alike); when backward() returns, every unit's gradient is reduced into
    this rank's shard and no parameter or gradient is held whole."""

    def __init__(self, optimizer, units, unit_of, reshard_after_forward,
                 accumulation=1):
        super().__init__(optimizer, overlap=True)
        # grad_accumulation: each micro-batch's gradients reduce-scattered
        # as usual, the shards summed in f32 (self.sums) through the
        # no_sync() passes and averaged into the step's reduced shards by
        # the last (keeping whole gradients across micro-batches, as
        # FSDP's no_sync does, would take the memory units save).
        self.accumulation = accumulation
        self.micro = 0  # micro-batches reduced since the last step
        self.sums = None
        step, session = optimizer.compiled, optimizer.session
        index_of = {name: i for i, (name, _) in enumerate(optimizer._named)}
        self.units = units
        self.reshard = bool(reshard_after_forward)
        n = len(units)
        self.params = [[] for _ in range(n)]
        for name, index in index_of.items():
            self.params[unit_of[name]].append(index)
        unit_of_index = {index_of[name]: u for name, u in unit_of.items()
                         if name in index_of}  # (not frozen ones)
        self.gathers = [[] for _ in range(n)]
        self.buckets = [[] for _ in range(n)]
        gathered = {(a.name, a.role): a.index for a in step.args}
        for e in step.entries:
            if e.kind == "gather":
                shard = step.args[e.reduces[0]]
                flat = _Flat(step, e.index,
                             gathered[(shard.name, "gathered_param")],
                             index_of)
                self._file(flat, unit_of_index, self.gathers, "parameters")
        for k, e in enumerate(self.entries):
            for arg in e.reduces:
                flat = _Flat(step, e.index, arg, index_of)
                flat.bucket = k
                self._file(flat, unit_of_index, self.buckets, "gradients")
        covered = {i for flats in self.gathers for f in flats
                   for i, _, _ in f.members}
        bucketed = {i for flats in self.buckets for f in flats
                    for i, _, _ in f.members}
        for index, (name, _) in enumerate(optimizer._named):
            if index not in covered or index not in bucketed or \
                    self.left_in[self.bucket_of[index]] is None:
                raise DistoptError(
                    f"parameter '{name}' is not in a flat ZeRO-3 shard the "
                    "step gathers and reduce-scatters: units need "
                    "zero-stage=3 with the flat strategy and updates that "
                    "read no whole matrix (not PowerSGD, Muon or Dion)")
        # Backward reduces the units in reverse order of construction
        # (pre-order: the reverse of a forward pass's order), each unit's
        # buckets in their own order.
        self.grad_slot = {i: (f, offset, shape) for flats in self.buckets
                          for f in flats for i, offset, shape in f.members}
        self._plan_launches(list(range(n)))
        self.unit_of_bucket = {}
        for u in range(n):
            for f in self.buckets[u]:
                if self.unit_of_bucket.setdefault(f.bucket, u) != u:
                    raise DistoptError(
                        "the step reduces the gradients of several units "
                        "in one entry: compile it from a spec whose "
                        "parameters carry their 'unit'")
        self.session = session
        # Where the whole buffers live: the step's memory (device memory
        # for a step compiled for cuda, bound through the same calls).
        self.device = "cuda" if step.device == "cuda" else "cpu"
        self.placeholder = {}
        self.gather_ticket = [0] * n  # entries started up to its gather
        self.reduce_ticket = [None] * n  # ... up to its last reduction
        self.order = []  # units in the order the first forward ran them
        self.recording = True
        self.backward_seen = [False] * n
        # Gathered buffers by storage (what autograd saves views of), the
        # saving hooks while the root's forward runs, and the parameters
        # this backward will not reach (DDP's find_unused_parameters).
        self.live = {}
        self.saving = None
        self.unreached = set()
        self.in_backward = False
        self.accumulator_of = {id(node): i for i, node in
                               enumerate(self._hooks)}
        # A unit holding a parameter several modules hold (an output layer
        # tied to the embedding) gets its bucket only when its gradients
        # are all ready: autograd sums such a parameter's gradients in
        # tensors of its own first (the output layer's, held through all of
        # backward, and the embedding's), and a bucket given at the unit's
        # backward would be a third copy at that moment.
        holders = {}
        for module in units[0].modules():
            for p in module._parameters.values():
                if p is not None:
                    holders[id(p)] = holders.get(id(p), 0) + 1
        self.late_bucket = [
            any(holders.get(id(optimizer._named[i][1]), 0) > 1
                for i in self.params[u]) for u in range(n)]
        for p_index in range(len(optimizer._named)):
            self._free_param(p_index)
        for u, module in enumerate(units):
            module.register_forward_pre_hook(self._pre_forward(u))
            module.register_forward_hook(self._post_forward(u))

    def _plan_launches(self, order):
        """Backward reduces the units in the reverse of the order their
        forward started (the order their backward ends: a unit started
        later, or nested, ends first), units that did not run before the
        root, the root last; each unit's buckets in their own order. Every
        rank plans alike (they run the same units in the same order)."""
        started = [u for u in order if u != 0]
        rest = [u for u in range(1, len(self.units)) if u not in started]
        self.launch_order = list(dict.fromkeys(
            f.bucket for u in list(reversed(started)) + rest + [0]
            for f in self.buckets[u]))
        self.position = {b: i for i, b in enumerate(self.launch_order)}

    def _file(self, flat, unit_of_index, table, what):
        owners = {unit_of_index[i] for i, _, _ in flat.members}
        if len(owners) != 1:
            raise DistoptError(
                f"the step holds the {what} of several units in one flat "
                "buffer: compile it from a spec whose parameters carry "
                "their 'unit'")
        table[owners.pop()].append(flat)

    # --- parameters ------------------------------------------------------

    def _free_param(self, index):
        _, p = self.opt._named[index]
        if p.dtype not in self.placeholder:
            self.placeholder[p.dtype] = torch.empty(0, dtype=p.dtype,
                                                    device=p.device)
        p.data = self.placeholder[p.dtype]

    def _start_gather(self, u):
        """Starts unit u's gathers unless it is held or on its way."""
        flats = self.gathers[u]
        if not flats or flats[0].buffer is not None:
            return
        for k, flat in enumerate(flats):
            flat.buffer = torch.empty(flat.numel, dtype=flat.dtype,
                                      device=self.device)
            self.live[flat.buffer.storage().data_ptr()] = (u, k)
            self.session.bind_arg(flat.arg, flat.buffer)
            self.session.start_entry(flat.entry)
        self.gather_ticket[u] = self.session.entries_started

    def _ensure(self, u):
        """Unit u's parameters whole, as views of its gathered buffers."""
        self._start_gather(u)
        if self.session.entries_finished < self.gather_ticket[u]:
            self.session.wait_entries(self.gather_ticket[u])
        for flat in self.gathers[u]:
            for index, view in flat.views():
                self.opt._named[index][1].data = view
        self._free_reduced()

    def _free_params(self, u):
        if self.gathers[u] and self.gathers[u][0].buffer is None:
            return
        if self.session.entries_finished < self.gather_ticket[u]:
            self.session.wait_entries(self.gather_ticket[u])
        for index in self.params[u]:
            self._free_param(index)
        for flat in self.gathers[u]:
            self.session.release_arg(flat.arg)
            self.live.pop(flat.buffer.storage().data_ptr(), None)
            flat.buffer = None

    def _prefetch(self, u, step):
        """Starts the gather of the unit after u in the recorded forward
        order (step 1) or before it (step -1, backward's next)."""
        if u in self.order:
            at = self.order.index(u) + step
            if 0 <= at < len(self.order):
                self._start_gather(self.order[at])

    def _pre_forward(self, u):
        def hook(module, inputs):
            if self.recording and u not in self.order:
                self.order.append(u)
            if u == 0:
                self.in_backward = False  # a backward that raised left it
                self._stop_saving()  # a forward that raised left them
                self.saving = torch.autograd.graph.saved_tensors_hooks(
                    self._pack, self._unpack)
                self.saving.__enter__()
            self._ensure(u)
            if not self.in_backward:  # (a recomputation in backward: no)
                self._prefetch(u, 1)
        return hook

    def _post_forward(self, u):
        def hook(module, inputs, output):
            tensors = [t for t in tree_flatten(output)[0]
                       if isinstance(t, torch.Tensor) and t.requires_grad]
            if torch.is_grad_enabled():
                for t in tensors:
                    t.register_hook(self._pre_backward(u))
            if u == 0:
                self._stop_saving()
                if torch.is_grad_enabled():
                    self.unreached = self._unreached(tensors)
            # A forward recomputed in backward (activation checkpointing)
            # keeps them for the backward that follows.
            if self.reshard and u != 0 and not self.in_backward:
                self._free_params(u)
        return hook

    def _stop_saving(self):
        if self.saving is not None:
            self.saving.__exit__(None, None, None)
            self.saving = None

    def _pack(self, t):
        """A tensor autograd saves that views a gathered buffer is kept as
        where it lies (_Saved); anything else as itself."""
        try:
            where = self.live.get(t.storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            return t
        if where is None:
            return t
        return _Saved(*where, t.storage_offset(), tuple(t.shape), t.stride())

    def _unpack(self, saved):
        if not isinstance(saved, _Saved):
            return saved
        self._ensure(saved.unit)  # gathered already before its backward
        buffer = self.gathers[saved.unit][saved.flat].buffer
        return buffer.as_strided(saved.shape, saved.stride, saved.offset)

    def _unreached(self, outputs):
        """The parameters the backward of `outputs` will give no gradient
        on this rank (their accumulators are not in its graph): counted
        ready when it starts, so that a unit's buckets are reduced when its
        backward ends on every rank alike (DDP's find_unused_parameters)."""
        # (The nodes are kept while walking: a node's Python object may be
        # made afresh for each visit, and a freed one's id taken again.)
        seen, stack = {}, [t.grad_fn for t in outputs
                           if t.grad_fn is not None]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            stack.extend(n for n, _ in node.next_functions if n is not None)
        reached = {self.accumulator_of[i] for i in seen
                   if i in self.accumulator_of}
        return set(range(len(self.opt._named))) - reached

    # --- gradients -------------------------------------------------------

    def _pre_backward(self, u):
        def hook(grad):
            self.in_backward = True
            if self.recording:
                self.recording = False
                self._plan_launches(self.order)
            if not self.backward_seen[u]:
                self.backward_seen[u] = True
                self._ensure(u)
                self._prefetch(u, -1)
                if not self.late_bucket[u]:
                    self._grads_for(u)
            return None
        return hook

    def _grads_for(self, u):
        """Unit u's gradient buckets, with .grad their views: what .grad
        held, else zeros."""
        for flat in self.buckets[u]:
            if flat.buffer is not None:
                continue
            flat.buffer = torch.zeros(flat.numel, dtype=flat.dtype,
                                      device=self.device)
            self.session.bind_arg(flat.arg, flat.buffer)
            for index, view in flat.views():
                p = self.opt._named[index][1]
                # Made by autograd before this (a late bucket's gradients).
                if p.grad is not None and p.grad.shape == view.shape:
                    view.copy_(p.grad)
                # A freed parameter takes none: the zeros stand for no
                # gradient.
                p.grad = view if p.shape == view.shape else None

    def _free_reduced(self, everything=False):
        """Frees the buckets whose reduce-scatter has finished (all, after
        a wait); .grad is None again."""
        finished = self.session.entries_finished
        for u, ticket in enumerate(self.reduce_ticket):
            if ticket is None or (ticket > finished and not everything):
                continue
            for flat in self.buckets[u]:
                for index, _ in flat.views():
                    self.opt._named[index][1].grad = None
                self.session.release_arg(flat.arg)
                flat.buffer = None
            self.reduce_ticket[u] = None

    def _ready_hook(self, index, p):
        def hook(*_):
            self.got.add(index)
            if not self.enabled and self.accumulation == 1:
                raise DistoptError(
                    "no_sync() with units (ZeRO-3 given the model) needs "
                    "grad_accumulation=K: each micro-batch is "
                    "reduce-scattered and the shards summed")
            if not self.active:  # the first gradient of this backward
                self._reset()
                self.active = True
                torch.autograd.Variable._execution_engine.queue_callback(
                    self._finish)
                for i in self.unreached:
                    self.pending[self.bucket_of[i]] -= 1
            bucket = self.bucket_of[index]
            u = self.unit_of_bucket[bucket]
            if self.position[bucket] < self.next or index in self.unreached:
                raise DistoptError(
                    f"'{self.opt._named[index][0]}' got its gradient after "
                    "its unit's reduce-scatter started: a parameter used "
                    "outside its unit's forward belongs to a unit around "
                    "that use (the root)")
            if not self.late_bucket[u]:
                self._grads_for(u)
                view = self._grad_view(index)
                if p.grad is not None and \
                        p.grad.data_ptr() != view.data_ptr():
                    view.copy_(p.grad)  # autograd made a tensor of its own
                p.grad = view
            # (else .grad stays autograd's until the bucket is launched)
            self.adopted.add(index)
            self.pending[bucket] -= 1
            self._launch()
        return hook

    def _grad_view(self, index):
        flat, offset, shape = self.grad_slot[index]
        count = 1
        for d in shape:
            count *= d
        return flat.buffer[offset:offset + count].view(shape)

    def _launch(self, everything=False):
        """Starts the buckets ready, in launch order; a unit whose buckets
        have all started no longer needs its parameters."""
        while self.next < len(self.launch_order):
            bucket = self.launch_order[self.next]
            if self.pending[bucket] > 0 and not everything:
                return
            u = self.unit_of_bucket[bucket]
            self._grads_for(u)  # a unit backward never reached: zeros
            self.session.start_entry(self.entries[bucket].index)
            self.next += 1
            last = self.next == len(self.launch_order) or \
                self.unit_of_bucket[self.launch_order[self.next]] != u
            if last:
                self.reduce_ticket[u] = self.session.entries_started
                self._free_params(u)

    def _finish(self):
        try:
            self._launch(everything=True)
            self.session.wait()
            self._free_reduced(everything=True)
            for u in range(len(self.units)):
                self._free_params(u)
        finally:
            self.active = False
            self.in_backward = False
            self.backward_seen = [False] * len(self.units)
        if self.accumulation > 1 and not self._accumulated():
            return  # a micro-batch under no_sync: no step yet
        self.reduced = True
        self.opt._grads_reduced()

    def _accumulated(self):
        """grad_accumulation after a micro-batch's reductions: under
        no_sync() its shards are added into the f32 sums (False); outside
        it, the last micro-batch's are, and the sums over the
        micro-batches, divided by their number, become the shards the
        update reads (True). Another count of micro-batches raises."""
        self.micro += 1
        last = self.enabled
        wrong = (self.micro != self.accumulation) if last else \
            (self.micro >= self.accumulation)
        if wrong:
            got, self.micro, self.sums = self.micro, 0, None
            raise DistoptError(
                f"grad_accumulation={self.accumulation}: "
                f"{self.accumulation - 1} backward passes under no_sync() "
                f"and one outside it make a step; this was backward "
                f"{got} since the last step, "
                f"{'outside' if last else 'under'} no_sync() (the "
                "micro-batches so far are dropped)")
        shards = [self.session.arg(left.index, like="torch")
                  for left in self.left_in]
        if self.sums is None:
            self.sums = [torch.zeros(s.shape, dtype=torch.float32,
                                     device=s.device) for s in shards]
        for total, shard in zip(self.sums, shards):
            total.add_(shard.float())
        if not last:
            return False
        for total, shard in zip(self.sums, shards):
            shard.copy_(total.div_(self.accumulation))
        self.micro, self.sums = 0, None
        return True
