"""The reducer of distopt.torch.DistributedOptimizer: DDP's, over the
reduce entry points of a split step."""

import torch


class Reducer:
    """DDP's reducer over a split step's reduce entry points: a hook on each
    parameter's gradient accumulator marks it ready; a bucket whose
    parameters are all ready is reduced at once on the session's
    communication thread (in bucket order, as every rank issues them alike);
    the autograd engine's final callback starts the buckets left (parameters
    that got no gradient) and waits, so that when backward() returns the
    gradients are averaged over the ranks (all-reduced buckets), or this
    rank's shards are reduced (reduce-scattered buckets).

    Under no_sync, a step compiled with grad_accumulation K takes each
    backward's gradients into its f32 accumulators when that backward
    ends (Session.accumulate(), which zeroes .grad); the reductions of the
    next backward outside no_sync add them."""

    def __init__(self, optimizer, overlap):
        self.opt = optimizer
        self.overlap = overlap
        session, step = optimizer.session, optimizer.compiled
        self.entries = [e for e in step.entries if e.kind == "reduce"]
        self.update = next((e.index for e in step.entries
                            if e.kind == "update"), None)
        entry_of_arg = {arg: k for k, e in enumerate(self.entries)
                        for arg in e.reduces}
        self.bucket_of = {}  # parameter index -> bucket
        self.size = [0] * len(self.entries)
        for index, (name, _) in enumerate(optimizer._named):
            bucket = entry_of_arg.get(step.tensor(name, "grad").arg)
            if bucket is not None:
                self.bucket_of[index] = bucket
                self.size[bucket] += 1
        # Buckets reduced in place leave the averaged gradient in the
        # model's .grad (as DDP); the others leave it (this rank's shard
        # under ZeRO-2/3, as FSDP; or the bucket reduced in a wider type) in
        # an argument of role reduced_grad.
        reduced = {a.name: a for a in step.args if a.role == "reduced_grad"}
        results = [step.interface["entries"][e.index]["results"][0]
                   for e in self.entries]
        self.in_place = [r["role"] == "grad" for r in results]
        self.left_in = [None if r["role"] == "grad" else reduced[r["name"]]
                        for r in results]
        # Whether backward leaves every gradient averaged in .grad.
        self.averages = (len(self.bucket_of) == len(optimizer._named) and
                         all(self.in_place))
        self.enabled = True  # no_sync() turns it off
        self.accumulates = step.grad_accumulation > 1
        self.session = session
        self.got = set()  # parameters given a gradient since the last step
        self._hooks = []
        self._reset()
        for index, (_, p) in enumerate(optimizer._named):
            # The AccumulateGrad node of p: its hook runs once p.grad holds
            # this backward's gradient.
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._ready_hook(index, p))
            self._hooks.append(accumulator)  # keeps the node (and hook)

    def _reset(self):
        self.adopted = set()  # parameters whose gradient is in its bucket
        self.pending = list(self.size)
        self.next = 0
        self.active = False
        self.reduced = False
        self.ended = False  # a backward with nothing to reduce ended

    def _ready_hook(self, index, p):
        def hook(*_):
            self.got.add(index)
            if not self.enabled:
                if self.accumulates and not self.active:
                    self.active = True
                    torch.autograd.Variable._execution_engine.queue_callback(
                        self._accumulate)
                return
            if index not in self.bucket_of:
                # Reduced by the update (hooked for no_sync). With no
                # reduction at all (one rank), what .grad holds after
                # backward must reach step() unchanged: the micro-batches
                # accumulated before are added there.
                if self.accumulates and not self.entries and \
                        not self.active:
                    self.active = True
                    torch.autograd.Variable._execution_engine.queue_callback(
                        self._ended)
                return
            if not self.active:  # the first gradient of this backward
                self._reset()
                self.active = True
                torch.autograd.Variable._execution_engine.queue_callback(
                    self._finish)
            self.opt._adopt_grad(index, p)
            self.adopted.add(index)
            bucket = self.bucket_of[index]
            self.pending[bucket] -= 1
            self._launch()
        return hook

    def _launch(self, everything=False):
        """Starts the buckets ready, in order (a bucket waits for the ones
        before it, so every rank issues them alike); without overlap, all
        of them at the end of backward, on this thread."""
        if not self.overlap:
            if everything:
                for e in self.entries:
                    self.session.run_entry(e.index)
                self.next = len(self.entries)
            return
        while self.next < len(self.entries) and (
                everything or self.pending[self.next] <= 0):
            self.session.start_entry(self.entries[self.next].index)
            self.next += 1

    def _finish(self):
        # A parameter this backward gave no gradient still goes into its
        # bucket: the gradient an earlier backward under no_sync left in a
        # tensor of its own, or zero for None (its rank adds nothing, and
        # .grad then holds the reduced value on every rank); one the update
        # reduces itself (PowerSGD's) into the buffer the update reads.
        try:
            for index, (_, p) in enumerate(self.opt._named):
                if index not in self.adopted:
                    self.opt._adopt_grad(index, p)
            self._launch(everything=True)
            self.session.wait()
        finally:
            self.active = False
        self.reduced = True
        self.opt._grads_reduced()

    def _ended(self):
        for index, (_, p) in enumerate(self.opt._named):
            self.opt._adopt_grad(index, p)
        self.active = False
        self.ended = True
        self.opt._grads_reduced()

    def _accumulate(self):
        """The end of a backward under no_sync: its gradients into the f32
        accumulators (the program's .grad included), .grad zeroed. A
        refused count leaves the reducer ready for the next backward."""
        try:
            for index, (_, p) in enumerate(self.opt._named):
                self.opt._adopt_grad(index, p)
            self.session.accumulate()
        finally:
            self.active = False
