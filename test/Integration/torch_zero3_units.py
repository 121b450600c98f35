"""ZeRO-3 with units (FSDP's way) in distopt.torch.DistributedOptimizer
against DDP (gloo) + torch.optim.AdamW (test/Integration/torch-zero3-units.test).
Run under mpirun; usage: torch_zero3_units.py BUILD_PYTHON_DIR CACHE_DIR.

DistributedOptimizer(model, recipe, pipeline="zero-stage=3",
auto_wrap_policy=...) shards each unit's parameters and gathers them only
around the unit's forward and backward. Checked here, 20 steps each:

- a CNN (each conv block a unit) and a small GPT (each transformer block a
  unit, the output layer tied to the token embedding, a layer in a block
  only rank 0 uses on even steps, a block whose output odd steps leave
  unused: DDP's find_unused_parameters) end within 3e-5 of each
  tensor's magnitude of DDP's parameters at 3 ranks (gloo and distopt sum
  in different orders: TOLERANCE), bit for bit at 1 and 2; replicas agree;
- parameter groups (groups=: decay for the matrices only, a rate of
  their own for the rest, changed part way) as torch.optim's over DDP;
- dynamic loss scaling (an inf injected): the skips, the scale and the
  steps of the ZeRO-3 step without units (bit for bit at 1 and 2 ranks);
- clipping by the global norm (opt.clip_grad_norm_): torch's norm on DDP's
  gradients, and the same steps as the ZeRO-3 step without units;
- reshard_after_forward=False, and forwards under no_grad between steps
  (evaluations), as DDP's;
- bf16 parameters with fp32 main copies: the ZeRO-3 step without units,
  bit for bit at 2 ranks (the same collectives and updates; only where the
  whole parameters live differs), within two bf16 steps at 3;
- what is held: between steps every parameter is empty and the step holds
  no gathered parameter or gradient bucket (asking for one raises); during
  forward at most the running block and the next one (prefetched) are
  whole besides the root;
- state: model.state_dict() is whole (gathered) and loads into a plain
  model; model.load_state_dict() of DDP's state writes the shards;
  opt.state_dict() resumes torch.optim.AdamW; a checkpoint resumes without
  units, and with units at one rank more (1 -> 2 without units before,
  2 -> 3 with);
- a model built on the meta device (the GPT): initialized one module at
  a time, it starts from the CPU-built GPT's parameters, and no more than
  a module's own tensors (and the tied embedding) are made at once; a
  module without reset_parameters() is refused by name, then initialized
  by param_init_fn;
- grad_accumulation with units (each micro-batch reduce-scattered, the
  shards summed) against DDP's no_sync loop, and the wrong counts of
  micro-batches refused by name;
- refusals by name: step() without backward,
  auto_wrap_policy without ZeRO-3 or without a model, a parameter list on
  the meta device.
"""

import contextlib
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist

sys.path.insert(0, sys.argv[1])
CACHE = sys.argv[2]

from distopt import DistoptError  # noqa: E402
import distopt.torch  # noqa: E402
from distopt.torch import DistributedOptimizer  # noqa: E402
from mpi4py import MPI  # noqa: E402

LOWERING = os.environ.get("DISTOPT_TEST_LOWERING")
if LOWERING:
    # The GPU lowering's split of each step, run on the host
    # (test/GPU/split-on-host.test): every entry the units start (gathers,
    # reduce-scatters, the update) as launches.
    def _compile_lowered(source, pipeline="", target="cpu", extra_args=(),
                         **options):
        return _compile(source, pipeline, target, list(extra_args) + [
            f"--lowering={LOWERING.lstrip('-')}{{runtime-allocator=true}}"],
            **options)
    _compile, distopt.torch.compile = distopt.torch.compile, _compile_lowered

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
checks = failures = 0
STEPS = 20
# At 3 ranks gloo and distopt sum the ranks' gradients in different orders
# (and distopt's order follows the flat layout, which units change).
# AdamW's first step moves each element by lr * g / (|g| + eps): where an
# element of g is a few roundings from 0, the order changes its step by a
# good part of lr. Measured: 8.7e-6 (units) and 1.2e-5 (ZeRO-3 without
# units) of the GPT's largest qkv weight after 20 steps, the CNN 1.1e-6.
TOLERANCE = 3e-5 if size > 2 else 0.0
RECIPE = {"type": "adamw", "lr": 2e-3, "weight_decay": 0.05}


def check(cond, what):
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print(f"rank {rank}: FAILED: {what}", flush=True)


class ConvBlock(torch.nn.Module):
    def __init__(self, cin, cout, device=None):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 3, padding=1, device=device)
        self.norm = torch.nn.GroupNorm(2, cout, device=device)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


class CNN(torch.nn.Module):
    SEED = 3

    def __init__(self, device=None):
        super().__init__()
        torch.manual_seed(self.SEED)
        self.blocks = torch.nn.Sequential(
            ConvBlock(3, 8, device), ConvBlock(8, 16, device),
            torch.nn.MaxPool2d(2), ConvBlock(16, 16, device))
        self.head = torch.nn.Linear(16 * 4 * 4, 10, device=device)

    def forward(self, x, step=0):
        return self.head(self.blocks(x).flatten(1))


class Block(torch.nn.Module):
    def __init__(self, width, heads, side=False, device=None):
        super().__init__()
        self.heads = heads
        # A layer the block uses on some ranks and steps only.
        self.side = torch.nn.Linear(width, width, device=device) \
            if side else None
        self.use_side = False
        self.norm1 = torch.nn.LayerNorm(width, device=device)
        # No bias on q, k, v: softmax ignores the keys' bias, whose
        # gradient is then rounding noise AdamW turns into steps of lr.
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False,
                                   device=device)
        self.proj = torch.nn.Linear(width, width, device=device)
        self.norm2 = torch.nn.LayerNorm(width, device=device)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width, device=device),
            torch.nn.GELU(), torch.nn.Linear(4 * width, width, device=device))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t).tril() == 0
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        if self.use_side:
            x = x + self.side(x)
        return x + self.mlp(self.norm2(x))


class GPT(torch.nn.Module):
    """Token and position embeddings, blocks, the output layer tied to the
    token embedding; in the last block a layer only rank 0 uses on even
    steps (its unit's reduce-scatter must start at the same point of every
    rank's backward), and a block every rank runs whose output only even
    steps use (its unit's backward never runs on odd steps)."""

    SEED = 4

    def __init__(self, vocab=40, width=32, layers=3, context=12,
                 device=None):
        super().__init__()
        torch.manual_seed(self.SEED)
        self.wte = torch.nn.Embedding(vocab, width, device=device)
        self.wpe = torch.nn.Embedding(context, width, device=device)
        self.blocks = torch.nn.ModuleList(
            Block(width, 4, side=i == layers - 1, device=device)
            for i in range(layers))
        self.probe = Block(width, 4, device=device)
        self.norm = torch.nn.LayerNorm(width, device=device)
        self.head = torch.nn.Linear(width, vocab, bias=False, device=device)
        self.head.weight = self.wte.weight  # tied across units

    def forward(self, tokens, step=0):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        self.blocks[-1].use_side = rank == 0 and step % 2 == 0
        for block in self.blocks:
            x = block(x)
        probe = self.probe(x)
        if step % 2 == 0:
            x = x + probe
        return self.head(self.norm(x))


def batch(kind, step):
    """This rank's share of global batch `step`."""
    g = torch.Generator().manual_seed(500 + step)
    if kind is CNN:
        x = torch.randn(4 * size, 3, 8, 8, generator=g)
        y = torch.randint(0, 10, (4 * size,), generator=g)
    else:
        x = torch.randint(0, 40, (4 * size, 12), generator=g)
        y = torch.randint(0, 40, (4 * size, 12), generator=g)
    return x[rank::size], y[rank::size]


def loss_of(kind, model, step):
    x, y = batch(kind, step)
    out = model(x, step)
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                             y.reshape(-1))


def units_of(kind):
    return ConvBlock if kind is CNN else Block


def ours(model, kind, pipeline="zero-stage=3", **options):
    return DistributedOptimizer(model, dict(RECIPE), pipeline=pipeline,
                                comm=comm, cache=CACHE,
                                auto_wrap_policy=units_of(kind), **options)


def relative(state, reference):
    worst = 0.0
    for key, y in reference.state_dict().items():
        x = state[key]
        scale = max(y.abs().max().item(), 1e-12)
        worst = max(worst, (x - y).abs().max().item() / scale)
    return worst


def versus_ddp(kind):
    """`kind` trained under DDP + AdamW and with units; returns the units
    model and optimizer, DDP's model and AdamW. The GPT is built on the
    meta device: initialized by its modules one at a time, under the same
    seed, it starts from the parameters of the GPT built on the CPU."""
    reference = kind()
    ddp = torch.nn.parallel.DistributedDataParallel(
        reference, find_unused_parameters=kind is GPT)
    theirs = torch.optim.AdamW(reference.parameters(), lr=RECIPE["lr"],
                               weight_decay=RECIPE["weight_decay"])
    if kind is GPT:
        model = kind(device="meta")
        made = []  # at each module's initialization: the tensors made

        def init(module):
            made.append(sum(p.storage().size() > 1  # (not a stand-in)
                            for p in model.parameters()) -
                        len([p for p in module.parameters(recurse=False)
                             if p is not model.wte.weight]))
            module.reset_parameters()
        torch.manual_seed(kind.SEED)
        opt = ours(model, kind, param_init_fn=init)
        check(relative(model.state_dict(), reference) == 0.0,
              "GPT on the meta device: initialized, it is the GPT built on "
              "the CPU")
        if size > 1:  # (one rank: the step holds every parameter whole)
            check(len(made) > 10 and max(made) <= 1,
                  f"GPT on the meta device: while a module is initialized "
                  f"the tensors made are its own and the tied embedding "
                  f"(saw {max(made)} others)")
    else:
        model = kind()
        opt = ours(model, kind)
    whole = []
    for block in model.modules():
        if isinstance(block, units_of(kind)):
            block.register_forward_pre_hook(
                lambda *_: whole.append(held(model, opt)))
    for step in range(STEPS):
        for m, o in ((ddp, theirs), (model, opt)):
            o.zero_grad()
            loss_of(kind, m, step).backward()
            o.step()
    name = kind.__name__
    diff = relative(model.state_dict(), reference)
    check(diff <= TOLERANCE, f"{name}: parameters {diff:.2e} from DDP's "
          f"(bound {TOLERANCE:.0e})")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    others = comm.allgather(state)
    check(all(torch.equal(o[k], state[k]) for o in others for k in state),
          f"{name}: every rank's model.state_dict() is the same")
    blocks = sum(isinstance(m, units_of(kind)) for m in model.modules())
    check(max(whole) <= min(2, blocks), f"{name}: at most the running block "
          f"and the next are whole in forward (saw {max(whole)})")
    return model, opt, reference, theirs


def held(model, opt):
    """How many units other than the root have their parameters whole
    (one rank: no units, the step holds every parameter whole)."""
    if size == 1:
        return 0
    return sum(f.buffer is not None for flats in opt._reducer.gathers[1:]
               for f in flats[:1])


def at_rest(model, opt, name):
    """Between steps: parameters empty, no whole buffer in the step."""
    check(all(p.numel() == 0 and p.grad is None
              for p in model.parameters()),
          f"{name}: between steps every parameter is empty, without .grad")
    reducer = opt._reducer
    whole = [f.arg for flats in reducer.gathers + reducer.buckets
             for f in flats]
    refused = 0
    for arg in whole:
        try:
            opt.session.arg(arg)
        except DistoptError as e:
            refused += "has no buffer (released" in str(e)
    check(refused == len(whole) > 0, f"{name}: the step holds none of its "
          f"{len(whole)} gathered parameters and gradient buckets "
          f"({refused} refused)")
    # Running what reads one is refused by name, before any rank
    # communicates (every rank refuses alike).
    for what, action in (
            ("the whole step", opt.session.run),
            ("a reduce entry", lambda: opt.session.run_entry(
                reducer.entries[0].index)),
            ("a gather entry", lambda: opt.session.start_entry(
                reducer.gathers[0][0].entry))):
        try:
            action()
            check(False, f"{name}: {what} ran without its buffers")
        except DistoptError as e:
            check("has no buffer" in str(e) and "bind one first" in str(e),
                  f"{name}: {what} without its buffers: {e}")


def state_hand_over(model, opt, reference, theirs, kind):
    """Whole state out of the units model; DDP's state into it."""
    plain = kind()
    whole = model.state_dict()
    plain.load_state_dict(whole)
    check(relative(whole, plain) == 0.0 and
          all(v.shape == plain.state_dict()[k].shape
              for k, v in whole.items()),
          f"{kind.__name__}: model.state_dict() is whole and loads into a "
          "plain model")
    # The optimizer's state, gathered, is torch.optim's on DDP's side.
    resumed = torch.optim.AdamW(plain.parameters(), lr=RECIPE["lr"],
                                weight_decay=RECIPE["weight_decay"])
    resumed.load_state_dict(opt.state_dict())
    worst = 0.0
    for p, q in zip(plain.parameters(), reference.parameters()):
        for key in ("exp_avg", "exp_avg_sq"):
            x, y = resumed.state[p][key], theirs.state[q][key]
            scale = max(y.abs().max().item(), 1e-12)
            worst = max(worst, (x - y).abs().max().item() / scale)
        check(float(resumed.state[p]["step"]) == STEPS,
              f"{kind.__name__}: the step count resumes")
    check(worst <= max(TOLERANCE, 1e-5 if size > 2 else 0.0),
          f"{kind.__name__}: opt.state_dict() into torch.optim.AdamW: "
          f"AdamW's moments {worst:.2e} from DDP's")
    # DDP's parameters into the units model.
    model.load_state_dict(reference.state_dict())
    check(relative(model.state_dict(), reference) == 0.0,
          f"{kind.__name__}: model.load_state_dict() writes the shards")
    if size > 1:
        at_rest(model, opt, f"{kind.__name__} after load_state_dict")


def kept_and_evaluated():
    """reshard_after_forward=False (FSDP's SHARD_GRAD_OP: a unit's
    parameters stay from its forward to its backward), with a forward
    under no_grad after every step (an evaluation, which leaves the root
    gathered): the steps DDP's AdamW takes."""
    reference = CNN()
    ddp = torch.nn.parallel.DistributedDataParallel(reference)
    theirs = torch.optim.AdamW(reference.parameters(), lr=RECIPE["lr"],
                               weight_decay=RECIPE["weight_decay"])
    model = CNN()
    opt = ours(model, CNN, reshard_after_forward=False)
    evaluations = []
    for step in range(8):
        for m, o in ((ddp, theirs), (model, opt)):
            o.zero_grad()
            loss_of(CNN, m, step).backward()
            o.step()
            with torch.no_grad():
                evaluations.append(loss_of(CNN, m, 100 + step).item())
    diff = relative(model.state_dict(), reference)
    check(diff <= TOLERANCE, f"reshard_after_forward=False with "
          f"evaluations: parameters {diff:.2e} from DDP's")
    worst = max(abs(a - b) / abs(b) for a, b in
                zip(evaluations[1::2], evaluations[0::2]))
    check(worst <= max(TOLERANCE, 1e-6), f"the evaluations' losses are "
          f"DDP's ({worst:.2e} apart)")


def clipping():
    """opt.clip_grad_norm_ with units: the norm torch's clip_grad_norm_
    gives on DDP's gradients (within f32 rounding: torch sums the norms in
    f32, distopt the squares in f64), and 20 clipped steps bit for bit
    those of the ZeRO-3 step without units (the same shards, summed in the
    same order). Against DDP the runs part: a clip coefficient a last bit
    apart, every step, grows through AdamW to ~4e-4 of this GPT's
    parameters."""
    reference = GPT()
    ddp = torch.nn.parallel.DistributedDataParallel(
        reference, find_unused_parameters=True)
    ddp_loss = loss_of(GPT, ddp, 0)
    ddp_loss.backward()
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    runs = []
    for units in (True, False):
        model = GPT()
        opt = ours(model, GPT) if units else DistributedOptimizer(
            model.named_parameters(), dict(RECIPE), pipeline="zero-stage=3",
            comm=comm, cache=CACHE)
        norms = []
        for step in range(STEPS):
            opt.zero_grad()
            loss_of(GPT, model, step).backward()
            norms.append(float(opt.clip_grad_norm_(0.5)))
            opt.step()
        runs.append((norms, {k: v.clone()
                             for k, v in model.state_dict().items()}))
    first = runs[0][0][0]
    check(abs(first - float(expected)) <= 1e-6 * float(expected),
          f"clipped: the first norm {first} is torch's {float(expected)}")
    (norms, state), (norms_without, state_without) = runs
    plain = GPT()
    plain.load_state_dict(state_without)
    diff = relative(state, plain)
    check(diff <= TOLERANCE and all(
        abs(a - b) <= TOLERANCE * b for a, b in zip(norms, norms_without)),
        f"clipped: 20 steps with units are those without (parameters "
        f"{diff:.2e} apart, bound {TOLERANCE:.0e})")


def mixed_precision():
    """bf16 parameters, fp32 main copies: units against the ZeRO-3 step
    without units, bit for bit."""
    # At 3 ranks bf16 sums in different orders (the flat layouts differ)
    # part by whole bf16 steps, which AdamW then spreads: the gradients are
    # reduced in f32 there, and only the main parameters' last bits differ.
    pipeline = "zero-stage=3" + (" reduce-dtype=f32" if size > 2 else "")

    def run(units):
        model = CNN().to(torch.bfloat16)
        if units:
            opt = ours(model, CNN, pipeline, main_params=True)
        else:
            opt = DistributedOptimizer(model.named_parameters(),
                                       dict(RECIPE), pipeline=pipeline,
                                       comm=comm, cache=CACHE,
                                       main_params=True)
        for step in range(6):
            x, y = batch(CNN, step)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(
                model(x.to(torch.bfloat16)).float(), y).backward()
            opt.step()
        return {k: v.clone() for k, v in model.state_dict().items()}

    a, b = run(True), run(False)
    # At 3 ranks the f32 main parameters differ in their last bits, which
    # may round a bf16 parameter to its neighbour: two bf16 steps of the
    # largest element.
    bound = 2.0 ** -7 if size > 2 else 0.0
    worst = max((a[k].float() - b[k].float()).abs().max().item() /
                max(b[k].float().abs().max().item(), 1e-12) for k in b)
    check(worst <= bound, f"bf16 with main params: units are the ZeRO-3 "
          f"step without units ({worst:.2e} apart, bound {bound:.0e})")


def scaled():
    """Dynamic loss scaling with units (loss_scaling=True, an inf injected
    at step 2): the steps the ZeRO-3 step without units takes (bit for
    bit at 1 and 2 ranks, within TOLERANCE at 3), and the same skips and
    scale (the overflow vote on the reduced shards)."""
    def run(units):
        model = CNN()
        opt = DistributedOptimizer(
            model if units else model.named_parameters(), dict(RECIPE),
            pipeline="zero-stage=3", comm=comm, cache=CACHE,
            auto_wrap_policy=ConvBlock if units else None, loss_scaling=True)
        skipped = []
        for step in range(6):
            opt.zero_grad()
            loss = loss_of(CNN, model, step) * opt.scale
            (loss * float("inf") if step == 2 else loss).backward()
            opt.step()
            skipped.append(bool(opt.skipped))
        return ({k: v.clone() for k, v in model.state_dict().items()},
                skipped, float(opt.scale))

    (a, skips, scale), (b, skips_without, scale_without) = run(True), \
        run(False)
    plain = CNN()
    plain.load_state_dict(b)
    diff = relative(a, plain)  # (3 ranks: the flat layouts' sums differ)
    check(skips == skips_without == [False, False, True, False, False,
                                     False] and scale == scale_without and
          diff <= TOLERANCE,
          f"loss scaling with units: skips {skips}, scale {scale}, the "
          f"steps of ZeRO-3 without units ({diff:.2e} apart, bound "
          f"{TOLERANCE:.0e})")


def checkpoint(model, opt, kind):
    """A units checkpoint resumes without units (the shards of the whole
    parameters and of AdamW's state); the checkpoint the run at one rank
    fewer left (the .test runs 1, 2 and 3 ranks in order, in one
    directory) resumes with units at this world size."""
    name = kind.__name__
    earlier = os.path.join(CACHE, f"units-{name}-{size - 1}.ckpt")
    if size > 1 and os.path.exists(earlier):
        resumed = kind()
        again = ours(resumed, kind)
        again.load_checkpoint(earlier)
        want = torch.load(earlier + ".whole")
        state = resumed.state_dict()
        steps = again.state_dict()["state"]
        check(all(torch.equal(state[k], v) for k, v in want["model"].items())
              and all(torch.equal(steps[i][k], v[k])
                      for i, v in want["state"].items() for k in v),
              f"{name}: the checkpoint of {size - 1} rank(s) resumes with "
              f"units at {size}, parameters and AdamW's state")
    path = comm.bcast(os.path.join(CACHE, f"units-{name}-{size}.ckpt")
                      if rank == 0 else None)
    opt.save_checkpoint(path)
    whole = {"model": model.state_dict(), "state": opt.state_dict()["state"]}
    if rank == 0:
        torch.save(whole, path + ".whole")
    plain = kind()
    other = DistributedOptimizer(plain.named_parameters(), dict(RECIPE),
                                 pipeline="zero-stage=2", comm=comm,
                                 cache=CACHE)
    other.load_checkpoint(path)
    check(relative(model.state_dict(), plain) == 0.0,
          f"{kind.__name__}: a checkpoint with units resumes under ZeRO-2")
    got = other.state_dict()["state"]
    want = opt.state_dict()["state"]
    check(all(torch.equal(got[i][k], want[i][k]) for i in want
              for k in want[i]),
          f"{kind.__name__}: and AdamW's state with it")


def refusals():
    def refused(what, words, action, error=DistoptError):
        try:
            action()
            check(False, f"{what} was accepted")
        except error as e:
            check(all(w in str(e) for w in words), f"{what}: {e}")

    if size > 1:
        model = CNN()
        opt = ours(model, CNN)
        refused("step() without backward", ["call backward() first"],
                opt.step)
    refused("auto_wrap_policy under ZeRO-2", ["zero-stage=3"],
            lambda: DistributedOptimizer(CNN(), dict(RECIPE),
                                         pipeline="zero-stage=2", comm=comm,
                                         cache=CACHE,
                                         auto_wrap_policy=ConvBlock),
            ValueError)
    if size > 1:
        refused("overlap=False with units", ["overlap=False"],
                lambda: ours(CNN(), CNN, overlap=False), ValueError)
        refused("reshard_after_forward without units",
                ["reshard_after_forward"],
                lambda: DistributedOptimizer(
                    CNN().named_parameters(), dict(RECIPE),
                    pipeline="zero-stage=3", comm=comm, cache=CACHE,
                    reshard_after_forward=False), ValueError)
    refused("a parameter list on the meta device", ["meta device",
                                                   "model itself"],
            lambda: DistributedOptimizer(CNN(device="meta").parameters(),
                                         dict(RECIPE), comm=comm,
                                         cache=CACHE))
    meta_init()
    refused("auto_wrap_policy with a parameter list", ["nn.Module"],
            lambda: DistributedOptimizer(CNN().parameters(), dict(RECIPE),
                                         pipeline="zero-stage=3", comm=comm,
                                         cache=CACHE,
                                         auto_wrap_policy=ConvBlock),
            ValueError)


def grouped():
    """Parameter groups with units (groups=): weight decay and a rate of
    their own for the matrices, none for the rest, as torch.optim's groups
    over DDP; the GPT on the meta device (the groups name its meta
    parameters). Each unit's shards are split by group."""
    def split(model):
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        return [{"params": decay, "weight_decay": 0.1},
                {"params": rest, "weight_decay": 0.0, "lr": 1e-3}]

    reference = GPT()
    ddp = torch.nn.parallel.DistributedDataParallel(
        reference, find_unused_parameters=True)
    theirs = torch.optim.AdamW(split(reference), lr=RECIPE["lr"])
    model = GPT(device="meta")
    torch.manual_seed(GPT.SEED)
    opt = DistributedOptimizer(model, {"type": "adamw", "lr": RECIPE["lr"]},
                               pipeline="zero-stage=3", comm=comm,
                               cache=CACHE, auto_wrap_policy=Block,
                               groups=split(model))
    check([g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0],
          "groups with units: torch's param_groups")
    for step in range(12):
        for m, o in ((ddp, theirs), (model, opt)):
            o.zero_grad()
            loss_of(GPT, m, step).backward()
            o.step()
        if step == 5:  # a scheduler's change reaches the compiled step
            for o in (theirs, opt):
                o.param_groups[1]["lr"] = 5e-4
    diff = relative(model.state_dict(), reference)
    check(diff <= TOLERANCE, f"groups with units: parameters {diff:.2e} "
          f"from DDP's (bound {TOLERANCE:.0e})")
    try:
        DistributedOptimizer(GPT(), dict(RECIPE), pipeline="zero-stage=3",
                             comm=comm, cache=CACHE, auto_wrap_policy=Block,
                             groups=split(GPT())[:1] + [{"params": []}])
        check(False, "groups from another model were accepted")
    except ValueError as e:
        check("not a parameter of the model" in str(e), f"groups: {e}")
    model = GPT()
    try:
        DistributedOptimizer(model, dict(RECIPE), pipeline="zero-stage=3",
                             comm=comm, cache=CACHE, auto_wrap_policy=Block,
                             groups=split(model)[:1])
        check(False, "groups leaving parameters out were accepted")
    except ValueError as e:
        check("'blocks.0.norm1.weight' (and" in str(e) and
              "is in no group" in str(e), f"groups: {e}")


def accumulated():
    """grad_accumulation=3 with units: two backward passes under no_sync()
    and one outside it per step, SGD with momentum, 6 steps: the CNN
    against DDP's loop (no_sync, each loss divided by 3), the GPT against
    the ZeRO-3 step without units (the step's own f32 accumulators; DDP's
    no_sync mishandles the GPT's layers some ranks leave unused: its
    replicas part). Units reduce-scatter each micro-batch and sum the
    shards; the others sum each rank's gradients first: the same sums in
    another order, which SGD's linear update keeps at f32 rounding (1e-5
    of each tensor's magnitude; at 1 rank there are no units and the
    step's accumulators run)."""
    recipe = {"type": "sgd", "lr": 0.05, "momentum": 0.9}

    def train(kind, how):
        model = kind()
        if how == "ddp":
            quiet_of = torch.nn.parallel.DistributedDataParallel(model)
            forward, divide = quiet_of, 3
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        else:
            params = model if how == "units" else model.named_parameters()
            opt = DistributedOptimizer(
                params, recipe, pipeline="zero-stage=3", comm=comm,
                cache=CACHE, grad_accumulation=3,
                auto_wrap_policy=units_of(kind) if how == "units" else None)
            quiet_of, forward, divide = opt, model, 1
        for step in range(6):
            for k in range(3):
                quiet = quiet_of.no_sync() if k < 2 else \
                    contextlib.nullcontext()
                with quiet:
                    (loss_of(kind, forward, 3 * step + k) / divide).backward()
            opt.step()
            opt.zero_grad()
        return model, opt

    for kind, against in ((CNN, "ddp"), (GPT, "list")):
        model, opt = train(kind, "units")
        other, _ = train(kind, against)
        diff = relative(model.state_dict(), other)
        check(diff <= 1e-5, f"grad_accumulation=3 with units, {kind.__name__}"
              f": parameters {diff:.2e} from {against}'s (bound 1e-5)")
    if size == 1:
        return
    with opt.no_sync():
        loss_of(GPT, model, 0).backward()
    try:
        opt.step()
        check(False, "step() after one of three micro-batches ran")
    except DistoptError as e:
        check("after 1 backward passes under no_sync()" in str(e),
              f"step() too early: {e}")
    try:
        loss_of(GPT, model, 1).backward()
        check(False, "a second micro-batch outside no_sync() was taken")
    except DistoptError as e:
        check("this was backward 2 since the last step, outside" in str(e),
              f"the last micro-batch too early: {e}")
    for k in range(3):  # dropped: a whole step again
        with opt.no_sync() if k < 2 else contextlib.nullcontext():
            loss_of(GPT, model, k).backward()
    opt.step()
    plain = GPT()
    other = ours(plain, GPT)
    try:
        with other.no_sync():
            loss_of(GPT, plain, 0).backward()
        check(False, "no_sync() without grad_accumulation was taken")
    except DistoptError as e:
        check("needs grad_accumulation" in str(e), f"no_sync(): {e}")


class Scaled(torch.nn.Module):
    """A module with a parameter of its own and no reset_parameters(); a
    frozen layer beside it."""

    def __init__(self, device=None):
        super().__init__()
        self.inner = torch.nn.Linear(6, 6, device=device)
        self.gain = torch.nn.Parameter(torch.empty(6, device=device))
        self.frozen = torch.nn.Linear(6, 6, device=device)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.frozen(self.inner(x) * self.gain)


class Reaching(torch.nn.Module):
    """Initializes its child's bias (as nn.MultiheadAttention does)."""

    def __init__(self, device=None):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.empty(4, device=device))
        self.child = torch.nn.Linear(4, 4, device=device)

    def reset_parameters(self):
        torch.nn.init.ones_(self.scale)
        torch.nn.init.zeros_(self.child.bias)


class Replacing(torch.nn.Linear):
    """reset_parameters() assigns a new parameter."""

    def reset_parameters(self):
        self.weight = torch.nn.Parameter(torch.ones_like(self.weight))


class Positions(torch.nn.Linear):
    """A buffer computed in the constructor, which reset_parameters()
    does not set again."""

    def __init__(self, device=None):
        super().__init__(4, 4, device=device)
        self.register_buffer("pos", torch.arange(4, device=device))


def meta_init():
    """A module the step cannot initialize on its own is refused by name;
    param_init_fn then initializes it (the same model, whose construction
    failed: still deferred, refused as a parameter list), its frozen layer
    too, with rank 0's values. Initializers that write another module's
    parameter, replace a parameter or leave a buffer unset are refused."""
    def refused(what, model, words, **options):
        try:
            ours(model, CNN, **options)
            check(False, f"{what} was accepted")
        except DistoptError as e:
            check(all(w in str(e) for w in words), f"{what}: {e}")

    model = Scaled(device="meta")
    refused("a meta module without reset_parameters", model,
            ["the model (Scaled)", "param_init_fn"])
    try:
        DistributedOptimizer(model.parameters(), dict(RECIPE), comm=comm,
                             cache=CACHE)
        check(False, "a failed construction's parameters were taken")
    except DistoptError as e:
        check("model itself" in str(e), f"after a failed construction: {e}")

    def init(module):
        if isinstance(module, Scaled):
            torch.nn.init.constant_(module.gain, 0.5)
        else:
            module.reset_parameters()
    torch.manual_seed(9 + rank)  # (rank 0's values win)
    ours(model, CNN, param_init_fn=init)
    torch.manual_seed(9)
    plain = Scaled()
    torch.nn.init.constant_(plain.gain, 0.5)
    state = model.state_dict()
    check(torch.equal(state["gain"], torch.full((6,), 0.5)) and
          relative(state, plain) == 0.0,
          "param_init_fn initializes a meta model after a failed attempt, "
          "its frozen layer too, with rank 0's values")
    try:
        ours(CNN(), CNN, param_init_fn=init)
        check(False, "param_init_fn with a model off the meta device was "
              "accepted (and would be ignored)")
    except ValueError as e:
        check("no tensor there" in str(e), f"param_init_fn: {e}")
    refused("an initializer writing its child's parameter",
            Reaching(device="meta"),
            ["the model (Reaching)", "wrote a parameter of another module"])
    refused("an initializer replacing a parameter", Replacing(4, 4,
                                                              device="meta"),
            ["replaced its parameter 'weight'"])
    refused("a buffer no initializer sets", Positions(device="meta"),
            ["buffer 'pos'", "left it unset", "param_init_fn"])


def main():
    path = comm.bcast(tempfile.mktemp(prefix="distopt-units-")
                      if rank == 0 else None)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank,
                            world_size=size)
    try:
        for kind in (CNN, GPT):
            model, opt, reference, theirs = versus_ddp(kind)
            if size > 1:
                at_rest(model, opt, kind.__name__)
            checkpoint(model, opt, kind)
            state_hand_over(model, opt, reference, theirs, kind)
        kept_and_evaluated()
        scaled()
        grouped()
        accumulated()
        clipping()
        if size > 1:
            mixed_precision()
        refusals()
    finally:
        dist.destroy_process_group()
        comm.Barrier()
        if rank == 0 and os.path.exists(path):
            os.remove(path)
    print(f"torch_zero3_units: rank {rank}: {checks} checks, {failures} "
          "failed", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
