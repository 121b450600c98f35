"""distopt.torch.GradScaler: torch's GradScaler interface over the loss
scaling compiled into a DistributedOptimizer's step."""

import torch

from .errors import DistoptError

_SCALER_DEFAULTS = {"init_scale": 65536.0, "growth_factor": 2.0,
                    "backoff_factor": 0.5, "growth_interval": 2000}


class GradScaler:
    """torch.cuda.amp.GradScaler's interface over the loss scaling compiled
    into a DistributedOptimizer's step (constructed with loss_scaling), so
    that a torch AMP loop runs as written:

        opt = DistributedOptimizer(model.named_parameters(), recipe,
                                   loss_scaling=True)
        scaler = GradScaler(opt)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)            # optional, before clipping
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)                # None if skipped for an inf/NaN
        scaler.update()

    The step itself checks the reduced gradients of every rank, skips the
    update on an inf or NaN, and grows or backs off the scale with
    GradScaler's rule: update() only takes a new_scale. Clip under
    ZeRO-2/3 with opt.clip_grad_norm_ (it unscales first)."""

    def __init__(self, optimizer):
        if not getattr(optimizer, "loss_scaling", None):
            raise DistoptError("GradScaler takes a DistributedOptimizer "
                               "constructed with loss_scaling (the scale is "
                               "compiled into its step)")
        self.optimizer = optimizer
        self._config = dict(_SCALER_DEFAULTS, **optimizer.loss_scaling)
        self._dynamic = self._config.get("type", "dynamic") == "dynamic"

    def _check(self, optimizer):
        if optimizer is not self.optimizer:
            raise DistoptError("this GradScaler scales the loss of the "
                               "DistributedOptimizer it was made with, not "
                               "another optimizer")

    def is_enabled(self):
        return True

    def get_scale(self):
        return self.optimizer.scale

    def get_growth_factor(self):
        return float(self._config["growth_factor"])

    def get_backoff_factor(self):
        return float(self._config["backoff_factor"])

    def get_growth_interval(self):
        return int(self._config["growth_interval"])

    def scale(self, outputs):
        """outputs (a tensor, or lists and tuples of them) times the scale,
        in f32 as torch's."""
        scale = torch.tensor(self.optimizer.scale, dtype=torch.float32)

        def apply(value):
            if isinstance(value, torch.Tensor):
                return value * scale.to(value.device)
            if isinstance(value, (list, tuple)):
                return type(value)(apply(v) for v in value)
            raise ValueError("outputs must be a tensor or an iterable of "
                             "tensors")
        return apply(outputs)

    def unscale_(self, optimizer):
        self._check(optimizer)
        optimizer.unscale_()

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(); None where the step was skipped for an inf or
        NaN gradient, as torch's."""
        self._check(optimizer)
        # What update(new_scale) restores: torch's then leaves the growth
        # tracker as it was, where the step has advanced (or reset) it.
        self._tracker_before = (optimizer.session.scalar_state(
            "loss_scale_growth_tracker") if self._dynamic else None)
        result = optimizer.step(*args, **kwargs)
        return None if optimizer.skipped else result

    def update(self, new_scale=None):
        """The step updated the scale already; new_scale (a float or a
        one-element tensor) replaces it, and the growth tracker is left as
        it was before the step, as torch's update(new_scale) leaves it."""
        if new_scale is None:
            return
        if not self._dynamic:
            raise DistoptError("the step's loss scale is static (compiled "
                               "in): it cannot be set")
        session = self.optimizer.session
        session.set_scalar_state("loss_scale", float(new_scale))
        if getattr(self, "_tracker_before", None) is not None:
            session.set_scalar_state("loss_scale_growth_tracker",
                                     self._tracker_before)
            self._tracker_before = None

    def state_dict(self):
        tracker = (self.optimizer.session.scalar_state(
            "loss_scale_growth_tracker") if self._dynamic else 0)
        return {"scale": self.get_scale(),
                "growth_factor": self.get_growth_factor(),
                "backoff_factor": self.get_backoff_factor(),
                "growth_interval": self.get_growth_interval(),
                "_growth_tracker": int(tracker)}

    def load_state_dict(self, state_dict):
        """The scale and growth tracker of torch's GradScaler (or this);
        its factors and interval must be the ones compiled in. Collective
        only in that every rank must load the same."""
        for key in ("growth_factor", "backoff_factor", "growth_interval"):
            if key in state_dict and \
                    float(state_dict[key]) != float(self._config[key]):
                raise ValueError(f"the state dict's {key} is "
                                 f"{state_dict[key]}, the step was compiled "
                                 f"with {self._config[key]}")
        if not self._dynamic:
            if float(state_dict["scale"]) != self.get_scale():
                raise ValueError(f"the state dict's scale is "
                                 f"{state_dict['scale']}, the step's static "
                                 f"scale {self.get_scale()}")
            return
        session = self.optimizer.session
        session.set_scalar_state("loss_scale", float(state_dict["scale"]))
        session.set_scalar_state("loss_scale_growth_tracker",
                                 int(state_dict.get("_growth_tracker", 0)))
