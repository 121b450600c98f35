"""distopt.torch's mixed precision and gradient accumulation against DDP
(gloo) + torch.optim (test/Integration/torch-amp-parity.test). Run under
mpirun; usage: torch_amp_parity.py BUILD_PYTHON_DIR CACHE_DIR. The models,
batches and checks are torch_ddp_parity.py's.

- a torch AMP loop on distopt.torch.GradScaler against GradScaler's rule
  applied by hand (torch 1.13's disables itself without CUDA): overflows
  on one rank skip the step on all, the scale backs off and grows,
  clipping after unscale_ (plain: bit for bit at 1 and 2 ranks; ZeRO-2:
  opt.clip_grad_norm_, its norm summed in f64, within 1e-5);
- grad_accumulation with no_sync micro-batches: f32 against DDP dividing
  the loss by K, bf16 with fp32 main parameters against the Session API's
  accumulation, wrong counts refused;
- GPT-2's loop shape: loss scaling, accumulation and clipping together;
- an AMP run with accumulation resumed from save_checkpoint equals the
  unbroken run bit for bit (the loss scale and its tracker included);
- bf16 parameters changed in place after construction (load_state_dict)
  reach the fp32 main parameters.
"""

import contextlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ddp_parity import (CACHE, CLIPPED_TOLERANCE, STEPS, TOLERANCE,  # noqa: E402
                              adamw, batch, check, comm, finish, groups_of,
                              loss_of, net, rank, relative, rendezvous,
                              report, size)

import distopt  # noqa: E402
from distopt import DistoptError  # noqa: E402
from distopt.torch import DistributedOptimizer  # noqa: E402


def resume_amp(tmp):
    """GPT-2's loop shape (bf16 with fp32 main parameters, GradScaler with
    a short growth interval and an overflow, 4 micro-batches under no_sync,
    clipping, ZeRO-2) broken after step 5 and resumed from
    save_checkpoint equals the unbroken run bit for bit: parameters, the
    loss scale and its growth tracker."""
    from distopt.torch import GradScaler
    k = 4

    def make(model):
        opt = DistributedOptimizer(model.named_parameters(), {
            "type": "adamw", "lr": 1e-3, "weight_decay": 0.1},
            pipeline="zero-stage=2", comm=comm, cache=CACHE,
            main_params=True, grad_accumulation=k, loss_scaling={
                "type": "dynamic", "init_scale": 2.0 ** 10,
                "growth_interval": 2})
        return opt, GradScaler(opt)

    def train_steps(model, opt, scaler, steps):
        for step in steps:
            for micro in range(k):
                x, y = batch(3000 + k * step + micro)
                if step == 3 and micro == 1 and rank == size - 1:
                    x = x.clone()
                    x[0, 0] = float("nan")
                with (contextlib.nullcontext() if micro == k - 1
                      else opt.no_sync()):
                    out = model(x.to(torch.bfloat16)).float()
                    scaler.scale(
                        torch.nn.functional.mse_loss(out, y)).backward()
            opt.clip_grad_norm_(0.05)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)

    whole = net().to(torch.bfloat16)
    opt, scaler = make(whole)
    train_steps(whole, opt, scaler, range(10))
    expected = scaler.state_dict()
    first = net().to(torch.bfloat16)
    opt, scaler = make(first)
    train_steps(first, opt, scaler, range(5))
    opt.save_checkpoint(tmp)
    resumed = net().to(torch.bfloat16)
    opt, scaler = make(resumed)
    opt.load_checkpoint(tmp)
    train_steps(resumed, opt, scaler, range(5, 10))
    same = all(torch.equal(a, b) for a, b in zip(resumed.parameters(),
                                                  whole.parameters()))
    check(same, "the resumed AMP run's parameters differ from the "
          "unbroken run's")
    check(scaler.state_dict() == expected, f"the resumed scaler "
          f"{scaler.state_dict()}, the unbroken run's {expected}")
    check(expected["scale"] != 2.0 ** 10,
          f"the scale moved during the run: {expected}")


def accumulation():
    """grad_accumulation K = 4 with DDP's no_sync spelling: the first three
    backward passes of a step under opt.no_sync() go into f32
    accumulators, the fourth reduces. f32 against DDP + AdamW dividing
    each micro-batch's loss by K (the step divides the sum; K is a power
    of two, so bit for bit at 1 and 2 ranks), plain with the reductions
    overlapped and under ZeRO-2; bf16 parameters with fp32 main parameters
    against the Session API running the step compiled with
    grad_accumulation (write, accumulate(), run()), bit for bit at every
    world size; a wrong count of no_sync passes raises naming it."""
    k = 4

    def micro_loss(model, step, micro):
        return loss_of(model, 1000 + k * step + micro)

    def bf16_loss(model, step, micro):
        x, y = batch(1000 + k * step + micro)
        out = model(x.to(torch.bfloat16)).float()
        return torch.nn.functional.mse_loss(out, y)

    for pipeline in ("", "zero-stage=2"):
        reference, ours = net(), net()
        ddp = torch.nn.parallel.DistributedDataParallel(reference)
        theirs = adamw(torch.optim, reference)
        opt = DistributedOptimizer(groups_of(ours), {
            "type": "adamw", "lr": 1e-3, "weight_decay": 0.1},
            pipeline=pipeline, comm=comm, cache=CACHE, grad_accumulation=k)
        for step in range(STEPS // 2):
            theirs.zero_grad()
            opt.zero_grad(set_to_none=True)
            for micro in range(k):
                last = micro == k - 1
                with (contextlib.nullcontext() if last else ddp.no_sync()):
                    (micro_loss(ddp, step, micro) / k).backward()
                with (contextlib.nullcontext() if last else opt.no_sync()):
                    micro_loss(ours, step, micro).backward()
            theirs.step()
            opt.step()
        diff = relative(ours, reference)
        check(diff <= TOLERANCE, f"accumulation '{pipeline}': parameters "
              f"{diff:.2e} from DDP's")

        # bf16 with fp32 main parameters: the Session API's accumulation.
        model = net().to(torch.bfloat16)
        twin = net().to(torch.bfloat16)
        opt = DistributedOptimizer(model.named_parameters(), {
            "type": "adamw", "lr": 1e-3, "weight_decay": 0.1},
            pipeline=pipeline, comm=comm, cache=CACHE, main_params=True,
            grad_accumulation=k)
        session = distopt.Session(distopt.Step(distopt.compile(
            opt.spec, pipeline=pipeline, comm=comm, cache=CACHE)), comm=comm)
        for name, p in twin.named_parameters():
            session.write(name, p.detach())
        for step in range(6):
            for micro in range(k):
                with (contextlib.nullcontext() if micro == k - 1
                      else opt.no_sync()):
                    bf16_loss(model, step, micro).backward()
                twin.zero_grad()
                bf16_loss(twin, step, micro).backward()
                for name, p in twin.named_parameters():
                    session.write(name, p.grad, "grad")
                if micro < k - 1:
                    session.accumulate()
            opt.step()
            opt.zero_grad()
            session.run()
            with torch.no_grad():
                for name, p in twin.named_parameters():
                    p.copy_(session.read(name, like="torch"))
        same = all(torch.equal(a, b) for a, b in zip(model.parameters(),
                                                      twin.parameters()))
        check(same, f"bf16 accumulation '{pipeline}': parameters differ "
              "from the Session API's step")
        session.close()

    # One no_sync pass too many, and one too few.
    model = net()
    opt = DistributedOptimizer(model.parameters(), {"type": "sgd",
                                                    "lr": 0.1},
                               comm=comm, cache=CACHE, grad_accumulation=2)
    with opt.no_sync():
        loss_of(model, 0).backward()
    try:
        with opt.no_sync():
            loss_of(model, 1).backward()
        check(False, "a second no_sync pass at grad_accumulation 2 ran")
    except DistoptError as e:  # raised in autograd's final callback
        check("accumulate() was called 1 times" in str(e) or
              "accumulates 2 micro-batches" in str(e), str(e))
    # zero_grad() drops what was accumulated, as torch's drops .grad: the
    # next step is whole again (before, the reducer stayed stuck).
    opt.zero_grad()
    before = [p.detach().clone() for p in model.parameters()]
    with opt.no_sync():
        loss_of(model, 2).backward()
    loss_of(model, 3).backward()
    opt.step()
    check(not opt.skipped and any(not torch.equal(a, p) for a, p in
                                  zip(before, model.parameters())),
          "a step after a refused no_sync count and zero_grad() runs")
    model = net()
    opt = DistributedOptimizer(model.parameters(), {"type": "sgd",
                                                    "lr": 0.1},
                               comm=comm, cache=CACHE, grad_accumulation=2)
    loss_of(model, 0).backward()
    try:
        opt.step()
        check(False, "a step after no no_sync pass ran")
    except DistoptError as e:
        check("accumulates 2 micro-batches" in str(e), str(e))


def amp_accumulation():
    """GPT-2's loop shape: loss scaling, accumulation of 4 micro-batches
    under no_sync, opt.clip_grad_norm_ at 1.0, against DDP + AdamW with
    GradScaler's rule by hand on loss / K (poisoned micro-batches skip the
    step on every rank). The clip's norm is summed in f64 over what the
    update reads (the f32 accumulators at one rank; under ZeRO-1, whose
    update divides by K after the reduction, K times the mean): within
    1e-5. At one rank, torch's clip on the model (which holds the last
    micro-batch only) is refused at step()."""
    from distopt.torch import GradScaler
    k = 4
    for pipeline in ("", "zero-stage=1", "zero-stage=2"):
        reference, ours = net(), net()
        ddp = torch.nn.parallel.DistributedDataParallel(reference)
        theirs = adamw(torch.optim, reference)
        hand = HandScaler(2.0 ** 12, 3)
        opt = DistributedOptimizer(groups_of(ours), {
            "type": "adamw", "lr": 1e-3, "weight_decay": 0.1},
            pipeline=pipeline, comm=comm, cache=CACHE, grad_accumulation=k,
            loss_scaling={"type": "dynamic", "init_scale": 2.0 ** 12,
                          "growth_interval": 3})
        scaler = GradScaler(opt)
        skips = 0
        for step in range(12):
            for micro in range(k):
                x, y = batch(2000 + k * step + micro)
                if step in (4, 9) and micro == 2 and rank == size - 1:
                    x = x.clone()
                    x[1, 2] = float("inf")
                last = micro == k - 1
                with (contextlib.nullcontext() if last else ddp.no_sync()):
                    loss = torch.nn.functional.mse_loss(ddp(x), y)
                    (loss / k * hand.scale).backward()
                with (contextlib.nullcontext() if last else opt.no_sync()):
                    loss = torch.nn.functional.mse_loss(ours(x), y)
                    scaler.scale(loss).backward()
            hand.unscale_(reference.parameters())
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
            if not hand.found_inf:
                theirs.step()
            hand.update()
            theirs.zero_grad()
            opt.clip_grad_norm_(0.05)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            skips += opt.skipped
            check(opt.skipped == hand.found_inf and
                  scaler.get_scale() == float(hand.scale),
                  f"amp + accumulation '{pipeline}', step {step}: skipped "
                  f"{opt.skipped}, scale {scaler.get_scale()}; torch's rule "
                  f"{hand.found_inf}, {float(hand.scale)}")
        diff = relative(ours, reference)
        check(skips == 2 and diff <= 1e-5, f"amp + accumulation "
              f"'{pipeline}': {skips} skipped, parameters {diff:.2e} from "
              "DDP's")
    if size == 1:
        model = net()
        opt = DistributedOptimizer(model.parameters(), {"type": "sgd",
                                                        "lr": 0.1},
                                   comm=comm, cache=CACHE,
                                   grad_accumulation=2)
        with opt.no_sync():
            loss_of(model, 0).backward()
        loss_of(model, 1).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        try:
            opt.step()
            check(False, "torch's clip of the last micro-batch was taken")
        except DistoptError as e:
            check("opt.clip_grad_norm_" in str(e) and
                  "last micro-batch" in str(e), str(e))


class HandScaler:
    """torch's GradScaler rule by hand (torch 1.13's disables itself
    without CUDA): the loss times the f32 scale, unscale_ times its f32
    reciprocal noting an inf or NaN, the step only without one, then the
    scale backed off, or grown after `interval` clean steps."""

    def __init__(self, init, interval):
        self.scale, self.tracker, self.interval = torch.tensor(init), 0, interval

    def unscale_(self, params):
        inverse = self.scale.double().reciprocal().float()
        self.found_inf = False
        for p in params:
            self.found_inf |= not bool(torch.isfinite(p.grad).all())
            p.grad.mul_(inverse)

    def update(self):
        if self.found_inf:
            self.scale, self.tracker = self.scale * 0.5, 0
            return
        self.tracker += 1
        if self.tracker == self.interval:
            self.scale, self.tracker = self.scale * 2.0, 0


def amp():
    """A torch AMP loop as written (scaler.scale(loss).backward(),
    unscale_, clip, scaler.step, scaler.update) on distopt.torch.GradScaler
    against DDP + AdamW with GradScaler's rule applied by hand: rank
    size-1's batch has a NaN at steps 5 and 13, so every rank skips those
    steps and backs off; the scale grows every 4 clean steps. Plain
    (torch's clip after unscale_), and ZeRO-2 (opt.clip_grad_norm_)."""
    from distopt.torch import GradScaler
    poisoned = (5, 13)

    def loss_at(model, step):
        x, y = batch(step)
        if step in poisoned and rank == size - 1:
            x = x.clone()
            x[0, 3] = float("nan")
        return torch.nn.functional.mse_loss(model(x), y)

    for pipeline in ("", "zero-stage=2"):
        reference, ours = net(), net()
        ddp = torch.nn.parallel.DistributedDataParallel(reference)
        theirs = adamw(torch.optim, reference)
        hand = HandScaler(2.0 ** 14, 4)
        opt = DistributedOptimizer(groups_of(ours), {
            "type": "adamw", "lr": 1e-3, "weight_decay": 0.1},
            pipeline=pipeline, comm=comm, cache=CACHE, loss_scaling={
                "type": "dynamic", "init_scale": 2.0 ** 14,
                "growth_interval": 4})
        scaler = GradScaler(opt)
        what = f"amp '{pipeline}'"
        worst_norm = 0.0
        for step in range(STEPS):
            theirs.zero_grad()
            (loss_at(ddp, step) * hand.scale).backward()
            hand.unscale_(reference.parameters())
            norm = torch.nn.utils.clip_grad_norm_(reference.parameters(),
                                                  0.05)
            if not hand.found_inf:
                theirs.step()
            hand.update()

            # set_to_none: at one rank nothing reduces .grad into the step's
            # buffers before unscale_ (it must take them first).
            opt.zero_grad(set_to_none=not pipeline)
            scaler.scale(loss_at(ours, step)).backward()
            scaler.unscale_(opt)
            if pipeline:
                our_norm = opt.clip_grad_norm_(0.05)
            else:
                our_norm = torch.nn.utils.clip_grad_norm_(ours.parameters(),
                                                          0.05)
            # The closure's value comes back unless the step was skipped.
            returned = scaler.step(opt, lambda: "ran")
            scaler.update()
            check(opt.skipped == hand.found_inf == (step in poisoned),
                  f"{what}, step {step}: skipped {opt.skipped}, torch's "
                  f"rule {hand.found_inf}")
            check(returned == (None if opt.skipped else "ran"),
                  f"{what}: scaler.step returns None exactly when skipped")
            check(scaler.get_scale() == float(hand.scale) and
                  scaler.state_dict()["_growth_tracker"] == hand.tracker,
                  f"{what}, step {step}: scale {scaler.get_scale()} "
                  f"tracker {scaler.state_dict()['_growth_tracker']}, "
                  f"torch's {float(hand.scale)} {hand.tracker}")
            if not hand.found_inf:
                worst_norm = max(worst_norm, abs(float(our_norm) -
                                                 float(norm)) / float(norm))
        # Plain: torch's own clip on the same unscaled averages (the scale
        # is a power of two: unscaling and scaling back are exact), of sums
        # in another order at 3 ranks (torch_ddp_parity.CLIPPED_TOLERANCE).
        # ZeRO-2: the norm summed in f64 from shards (see clipping()).
        bound = CLIPPED_TOLERANCE if not pipeline else 1e-5
        diff = relative(ours, reference)
        check(diff <= bound, f"{what}: parameters {diff:.2e} from DDP's")
        check(worst_norm <= (TOLERANCE if not pipeline else 1e-6),
              f"{what}: clip norms {worst_norm:.2e} from torch's")
        check(opt.session.steps_done == STEPS - len(poisoned),
              f"{what}: {opt.session.steps_done} steps counted")
    # A resumed scaler: torch's state_dict format in and out.
    scaler.load_state_dict({"scale": 256.0, "growth_factor": 2.0,
                            "backoff_factor": 0.5, "growth_interval": 4,
                            "_growth_tracker": 3})
    check(scaler.state_dict()["scale"] == 256.0 and
          scaler.state_dict()["_growth_tracker"] == 3,
          f"GradScaler.load_state_dict: {scaler.state_dict()}")
    try:
        scaler.load_state_dict({"scale": 1.0, "growth_interval": 2000})
        check(False, "a scaler state of another growth_interval was taken")
    except ValueError as e:
        check("growth_interval" in str(e), str(e))
    # update(new_scale) leaves the growth tracker as it was before the
    # step (the step had advanced it), as torch's does.
    tracker = scaler.state_dict()["_growth_tracker"]
    opt.zero_grad()
    scaler.scale(loss_of(ours, 0)).backward()
    scaler.step(opt)
    scaler.update(512.0)
    check(scaler.get_scale() == 512.0 and
          scaler.state_dict()["_growth_tracker"] == tracker,
          f"update(new_scale): {scaler.state_dict()}, tracker before "
          f"{tracker}")
    for name, value, words in [
            ("loss_scale_growth_tracker", 1.5, "a whole number"),
            ("loss_scale_growth_tracker", -1, "a whole number"),
            ("loss_scale", 0.0, "finite and positive")]:
        try:
            opt.session.set_scalar_state(name, value)
            check(False, f"state {name} = {value} was taken")
        except DistoptError as e:
            check(f"state '{name}' must be {words}" in str(e), str(e))
    try:
        opt.session.scalar_state("lr_schedule.last_epoch")
        check(False, "a scalar state the step lacks was read")
    except KeyError as e:
        check("loss_scale_growth_tracker" in str(e), str(e))
    try:
        scaler.update(float("inf"))
        check(False, "an infinite scale was taken")
    except DistoptError as e:
        check("loss_scale" in str(e) and "finite and positive" in str(e),
              str(e))


def edits_after_construction():
    """bf16 parameters with fp32 main parameters: a load_state_dict (an
    in-place copy into the parameters) after the optimizer was built is
    what the next step starts from (before, the main copy reverted it),
    plain and under ZeRO-2/3."""
    for pipeline in ("", "zero-stage=2", "zero-stage=3"):
        model = net().to(torch.bfloat16)
        opt = DistributedOptimizer(model.named_parameters(), {
            "type": "sgd", "lr": 0.0}, pipeline=pipeline, comm=comm,
            cache=CACHE, main_params=True)
        torch.manual_seed(7)
        loaded = {k: torch.randn_like(v.float()).to(torch.bfloat16)
                  for k, v in model.state_dict().items()}
        model.load_state_dict(loaded)
        opt.zero_grad()
        x, y = batch(0)
        torch.nn.functional.mse_loss(model(x.to(torch.bfloat16)).float(),
                                     y).backward()
        opt.step()  # a rate of 0: nothing moves
        same = all(torch.equal(p, loaded[k])
                   for k, p in model.named_parameters())
        check(same, f"'{pipeline}': load_state_dict after construction was "
              "reverted by the main parameters")


def main():
    path = rendezvous()
    try:
        amp()
        accumulation()
        amp_accumulation()
        edits_after_construction()
        resume_amp(comm.bcast(f"{CACHE}/parity-amp.ckpt" if rank == 0 else
                              None))
    finally:
        finish(path)
    report("torch_amp_parity")


if __name__ == "__main__":
    main()
