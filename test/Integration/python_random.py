"""A seeded random driver of the Python package (test/Integration/
python-random.test): hypothesis is not in Debian, so this draws programs of
Step / Session calls itself, with hostile arguments often (NaN, infinities,
negative and huge numbers, strings for numbers, unknown names and roles,
NUL in names and paths, arrays of the wrong dtype, shape or layout, calls on
closed sessions, views used after close). Usage:

  python_random.py BUILD_PYTHON_DIR WORK_DIR SEEDS CALLS STEP.so...

Every call must return, or raise DistoptError with a message (KeyError for
a name the step does not have, as documented); any other exception, a
crash, a learning rate that is not finite and >= 0 or negative steps done is
a failure, printed with the seed and the call that caused it.
"""

import math
import os
import random
import sys
import traceback
import warnings

import numpy as np

# Casting 1e308 or NaN to the step's dtypes warns; it is what is tested.
warnings.simplefilter("ignore", RuntimeWarning)

sys.path.insert(0, sys.argv[1])
WORK, SEEDS, CALLS, PATHS = (sys.argv[2], int(sys.argv[3]),
                             int(sys.argv[4]), sys.argv[5:])

import distopt  # noqa: E402

NUMBERS = [math.nan, math.inf, -math.inf, -1, -0.5, 0, 1e-3, 0.5, 1, 7, 1e308,
           2**31, 2**63 - 2, 2**63 - 1, 2**63, 2**64, -2**63, 1.5, True, "3",
           None, [1], b"\0"]
ROLES = ["param", "grad", "state", "main_param", "lr", "step", "", "bogus",
         None, 3]
LIKES = ["numpy", "torch", "jax", None, 1]


class Driver:
    def __init__(self, rng, steps):
        self.rng = rng
        self.steps = steps
        self.sessions = []
        self.views = []  # views of closed or open sessions: always usable

    def pick(self, options):
        return options[self.rng.randrange(len(options))]

    def number(self):
        if self.rng.random() < 0.5:
            return self.rng.choice([0.01, 0.1, 1, 2, 30])
        return self.pick(NUMBERS)

    def name(self, step):
        if self.rng.random() < 0.8:
            return self.pick(step.tensors).name
        return self.pick(["", "nope", "w\0x", "\u00e9", 5, None])

    def role(self):
        return self.pick(["param", "grad", "state"]) \
            if self.rng.random() < 0.8 else self.pick(ROLES)

    def array(self, step, name, role):
        try:
            info = step.tensor(name, role)
            shape, dtype = info.shape, np.float32
        except Exception:  # noqa: BLE001 -- any name: any array
            shape, dtype = (3,), np.float32
        kind = self.rng.randrange(8)
        if kind == 0:
            shape = tuple(s + 1 for s in shape) or (2,)
        if kind == 1:
            dtype = self.pick([np.float64, np.int32, np.uint16, np.bool_])
        fill = self.pick([math.nan, math.inf, -1, 1e308, 7]) if kind == 2 \
            else 0.25
        values = np.full(shape, fill, dtype)
        if kind == 3 and values.ndim:
            return np.asfortranarray(np.stack([values, values], -1))[..., 0]
        if kind == 4:
            values.setflags(write=False)
        if kind == 5:
            import torch
            return torch.from_numpy(values)
        if kind == 6:
            return self.pick([[1, 2], "abc", None, 7])
        return values

    def path(self):
        return self.pick([os.path.join(WORK, "r.ckpt"),
                          os.path.join(WORK, "missing", "r.ckpt"),
                          os.path.join(WORK, "r\0.ckpt"), "", 5, None,
                          os.path.join(WORK, "r.ckpt")])

    def call(self):
        """One call; self.what describes it."""
        r = self.rng
        if not self.sessions or r.random() < 0.06:
            step = self.pick(self.steps)
            kw = {}
            for key in ("lr", "timeout", "seed", "threads"):
                if r.random() < 0.3:
                    kw[key] = self.number() if key != "threads" else \
                        self.pick([1, 2, 0, -1, 1025, 2**70, 1.5, "2"])
            kw["backend"] = self.pick(["single"] * 6 + ["bogus", "mpi", 5])
            target = self.pick([step] * 8 + [None, "step.so", 3])
            self.what = f"Session({target!r}, **{kw!r})"
            self.sessions.append(distopt.Session(target, **kw))
            return
        s = self.pick(self.sessions)
        step = s.step
        op = r.randrange(17)
        name, role = self.name(step), self.role()
        if op == 0:
            like = self.pick(LIKES) if r.random() < 0.3 else "numpy"
            self.what = f"tensor({name!r}, {role!r}, like={like!r})"
            self.views.append(s.tensor(name, role, like=like))
        elif op == 1:
            index = r.randrange(len(step.args)) if r.random() < 0.7 else \
                self.pick([-1, len(step.args), 2**70, "0", None, 1.5])
            self.what = f"arg({index!r})"
            self.views.append(s.arg(index))
        elif op == 2:
            value = self.array(step, name, role)
            self.what = f"write({name!r}, <{type(value).__name__}>, {role!r})"
            s.write(name, value, role=role)
        elif op == 3:
            like = self.pick(LIKES) if r.random() < 0.3 else "numpy"
            self.what = f"read({name!r}, {role!r}, like={like!r})"
            s.read(name, role=role, like=like)
        elif op == 4:
            value = self.array(step, name, role)
            self.what = f"bind({name!r}, <{type(value).__name__}>, {role!r})"
            s.bind(name, value, role=role)
        elif op == 5:
            self.what = f"unbind({name!r}, {role!r})"
            s.unbind(name, role=role)
        elif op in (6, 7):
            self.what = "run()"
            s.run()
        elif op == 8:
            self.what = "accumulate()"
            s.accumulate()
        elif op == 9:
            value = self.number()
            self.what = f"lr = {value!r}"
            s.lr = value
        elif op == 10:
            value = self.pick(NUMBERS)
            self.what = f"steps_done = {value!r}"
            s.steps_done = value
        elif op == 11:
            self.what = "scalars()"
            s.scalars()
        elif op == 12:
            path = self.path()
            self.what = f"save({path!r})"
            s.save(path)
        elif op == 13:
            path = self.path()
            self.what = f"load({path!r})"
            s.load(path)
        elif op == 14:
            self.what = "close()"
            s.close()
            if r.random() < 0.5:
                self.sessions.remove(s)
        elif op == 15:
            self.what = "use the views"
            for v in self.views[-8:]:
                v[...] = 1.5
                float(v.sum())
        else:
            self.what = "step queries"
            step.tensor(name, role)

    def check(self):
        for s in self.sessions:
            if s._handle:
                lr, done = s.lr, s.steps_done
                assert math.isfinite(lr) and lr >= 0, f"lr {lr}"
                assert done >= 0, f"steps done {done}"


def main():
    steps = [distopt.Step(p) for p in PATHS]
    calls = failures = refused = 0
    for seed in range(SEEDS):
        driver = Driver(random.Random(seed), steps)
        for k in range(CALLS):
            driver.what = "?"
            calls += 1
            try:
                driver.call()
            except distopt.DistoptError as e:
                what = driver.what
                refused += 1
                if not str(e):
                    failures += 1
                    print(f"FAIL: seed {seed} call {k}: {what}: an empty "
                          "message")
            except KeyError as e:
                what = driver.what
                refused += 1
                if "the step has no" not in str(e):
                    failures += 1
                    print(f"FAIL: seed {seed} call {k}: {what}: KeyError {e}")
            except Exception as e:  # noqa: BLE001
                what = driver.what
                failures += 1
                where = traceback.extract_tb(e.__traceback__)[-1]
                print(f"FAIL: seed {seed} call {k}: {what}: "
                      f"{type(e).__name__}: {e} ({os.path.basename(where[0])}"
                      f":{where[1]})")
            try:
                driver.check()
            except AssertionError as e:
                failures += 1
                print(f"FAIL: seed {seed} call {k}: after {driver.what}: {e}")
        for s in driver.sessions:
            s.close()
    print(f"python_random: {SEEDS} seeds, {calls} calls, {refused} refused "
          f"with an error, {failures} failures")


main()
