#!/usr/bin/env python3
"""Runs a step function on N ranks and prints its parameters.

Reads a module holding `func.func @step` (as distopt-translate writes it,
possibly transformed: sharded, bucketed...) and appends `@main`, which
  - builds the arguments from their `distopt.role`/`distopt.name` (see
    docs/step-abi.md): parameters from a fixed pattern (the same on every
    rank; for a flat ZeRO shard, this rank's chunk of the laid-out pattern),
    gradients that differ per rank and per step, zero state, lr, step;
  - runs STEPS steps, feeding each result back to the argument with the same
    role and name;
  - gathers sharded parameters, and prints every parameter, by name, as the
    bit patterns of its elements (f32; bf16 is widened exactly).
Then lowers it with --distopt-lower-to-cpu (or $DISTOPT_TEST_LOWERING) and
runs it under mpirun with
mlir-runner, linking the distopt runtime. Prints one line per rank and
parameter: "rank R param NAME: b0 b1 ..." (bit patterns as integers).

usage: step_harness.py STEP.mlir RANKS --opt distopt-opt --runner mlir-runner
       --mlir-lib DIR --runtime-lib LIB [--mpirun CMD] [--steps K]
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlir_exec import PRINT_DECL, print_bits  # noqa: E402


def split_top(text, sep=","):
    """Splits at `sep` outside (), [], {} and <>."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def matching(text, open_index):
    """Index of the bracket closing the one at open_index."""
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] in pairs:
            depth += 1
        elif text[i] in pairs.values():
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced")


class Value:
    def __init__(self, text):
        m = re.match(r"(?:%[\w]+\s*:\s*)?([^\s{]+)\s*(\{.*\})?$", text.strip(), re.S)
        self.type = m.group(1)
        attrs = m.group(2) or ""
        def attr(name):
            mm = re.search(name + r' = "([^"]*)"', attrs)
            return mm.group(1) if mm else None
        self.role = attr("distopt.role")
        self.name = attr("distopt.name")
        self.init = attr("distopt.init")
        so = re.search(r"distopt.shard_of = (\d+)", attrs)
        self.shard_of = int(so.group(1)) if so else None
        self.layout = []
        for e in re.finditer(r'\{name = "([^"]*)", offset = (\d+) : i64,(?: owner = (\d+) : i64,)? shape = array<i64(?:: ([\d, ]*))?>\}', attrs):
            shape = [int(x) for x in e.group(4).split(",")] if e.group(4) else []
            self.layout.append((e.group(1), int(e.group(2)),
                                int(e.group(3)) if e.group(3) else None, shape))

    @property
    def shape(self):
        m = re.match(r"tensor<(.*)x(\w+)>$", self.type)
        if not m:
            m0 = re.match(r"tensor<(\w+)>$", self.type)
            return [] if m0 else None
        return [int(x) for x in m.group(1).split("x")]

    @property
    def element(self):
        return re.match(r"tensor<(?:.*x)?(\w+)>$", self.type).group(1)


def parse_step(module):
    i = module.index("func.func @step(")
    open_args = module.index("(", i)
    close_args = matching(module, open_args)
    args = [Value(a) for a in split_top(module[open_args + 1:close_args])]
    rest = module[close_args + 1:].lstrip()
    assert rest.startswith("->")
    rest = rest[2:].lstrip()
    if rest.startswith("("):
        close = matching(rest, 0)
        results = [Value(r) for r in split_top(rest[1:close])]
    else:
        results = [Value(rest[:rest.index("{")])]
    return args, results


def pattern(name, n):
    """The initial value of parameter `name`: small, different per tensor."""
    seed = sum(ord(c) for c in name)
    i = np.arange(n)
    return (((i * 7 + seed) % 13) - 6).astype(np.float32) / 8.0


def dense(values, shape, element):
    flat = ", ".join(repr(float(v)) for v in values)
    if not shape:
        return f"dense<{float(values[0])!r}> : tensor<{element}>"
    return f"dense<[{flat}]> : tensor<{len(values)}x{element}>"


def harness(module, steps):
    args, results = parse_step(module)
    lines = [PRINT_DECL,
             "func.func @main() {",
             "  %rank = distopt.rank @world : index",
             "  %rank_i = arith.index_cast %rank : index to i64",
             "  %rank_f = arith.sitofp %rank_i : i64 to f32"]
    counter = [0]

    def fresh(prefix):
        counter[0] += 1
        return f"%{prefix}{counter[0]}"

    def const_tensor(values, shape, element):
        """A tensor of `shape` with `values` (a flat array)."""
        flat_type = f"tensor<{len(values)}x{element}>"
        v = fresh("c")
        lines.append(f"  {v} = arith.constant {dense(values, [len(values)], element)}")
        if len(shape) == 1:
            return v
        r = fresh("r")
        full = "tensor<" + "x".join(map(str, shape)) + f"x{element}>" if shape else f"tensor<{element}>"
        if not shape:
            lines.append(f"  {r} = tensor.collapse_shape {v} [] : {flat_type} into {full}")
        else:
            dims = ", ".join(map(str, range(len(shape))))
            lines.append(f"  {r} = tensor.expand_shape {v} [[{dims}]] output_shape [{', '.join(map(str, shape))}] : {flat_type} into {full}")
        return r

    def writable(value, type_):
        """A copy of `value` in a buffer of its own: the step may update its
        parameters and state in place (docs/step-abi.md), which a constant's
        read-only global does not allow."""
        v = fresh("w")
        lines.append(f"  {v} = bufferization.alloc_tensor() copy({value}) : {type_}")
        return v

    def initial_param(arg):
        return writable(initial_value(arg), arg.type)

    def initial_value(arg):
        if arg.layout and arg.shard_of:  # this rank's chunk of a flat layout
            flat = laid_out(arg, arg.shard_of, "")
            whole = fresh("flat")
            lines.append(f"  {whole} = arith.constant {dense(flat, [len(flat)], arg.element)}")
            v = fresh("shard")
            lines.append(f"  {v} = distopt.shard_slice {whole} on @world : tensor<{len(flat)}x{arg.element}> -> {arg.type}")
            return v
        if arg.layout and any(owner is not None for _, _, owner, _ in arg.layout):
            raise SystemExit(f"harness: cannot build {arg.name} (per-owner layout)")
        n = int(np.prod(arg.shape)) if arg.shape else 1
        if arg.layout:  # a flat parameter: each at its offset, zeros between
            return const_tensor(laid_out(arg, n, ""), arg.shape, arg.element)
        return const_tensor(pattern(arg.name, n), arg.shape, arg.element)

    def laid_out(arg, n, suffix):
        """The flat buffer of a laid-out argument: each tensor's pattern
        (its name + `suffix`) at its offset, zeros between."""
        flat = np.zeros(n, np.float32)
        for name, offset, _, shape in arg.layout:
            m = int(np.prod(shape)) if shape else 1
            flat[offset:offset + m] = pattern(name + suffix, m)
        return flat

    def gradient(arg, step):
        n = int(np.prod(arg.shape)) if arg.shape else 1
        if arg.layout:  # a bucket of gradients
            base = laid_out(arg, n, "g" + str(step))
        else:
            base = pattern(arg.name + "g" + str(step), n)
        c = const_tensor(base, arg.shape, arg.element)
        # grad = base * (1 + rank / 4): different on every rank, exact.
        f = fresh("f")
        lines.append(f"  {f} = arith.constant 2.500000e-01 : f32")
        s = fresh("s")
        lines.append(f"  {s} = arith.mulf %rank_f, {f} : f32")
        one = fresh("one")
        lines.append(f"  {one} = arith.constant 1.000000e+00 : f32")
        s2 = fresh("s")
        lines.append(f"  {s2} = arith.addf {s}, {one} : f32")
        if arg.element != "f32":
            s3 = fresh("s")
            lines.append(f"  {s3} = arith.truncf {s2} : f32 to {arg.element}")
            s2 = s3
        sp = fresh("splat")
        lines.append(f"  {sp} = tensor.splat {s2} : {arg.type}")
        g = fresh("g")
        lines.append(f"  {g} = arith.mulf {c}, {sp} : {arg.type}")
        return g

    current = {}
    for i, a in enumerate(args):
        key = (a.role, a.name)
        if a.role in ("param", "main_param"):
            current[key] = initial_param(a)
        elif a.role == "state":
            if a.init not in (None, "zeros"):
                raise SystemExit(f"harness: state init '{a.init}' is not supported")
            z = fresh("zero")
            lines.append(f"  {z} = arith.constant dense<0.0> : {a.type}")
            current[key] = writable(z, a.type)
    for k in range(steps):
        operands, types = [], []
        for a in args:
            if a.role == "grad":
                operands.append(gradient(a, k))
            elif a.role == "lr":
                v = fresh("lr")
                lines.append(f"  {v} = arith.constant 1.250000e-01 : {a.type}")
                operands.append(v)
            elif a.role == "step":
                v = fresh("t")
                lines.append(f"  {v} = arith.constant {k + 1} : i64")
                operands.append(v)
            else:
                operands.append(current[(a.role, a.name)])
            types.append(a.type)
        out = fresh("out")
        result_types = ", ".join(r.type for r in results)
        lines.append(f"  {out}:{len(results)} = func.call @step({', '.join(operands)}) : ({', '.join(types)}) -> ({result_types})")
        for j, r in enumerate(results):
            current[(r.role, r.name)] = f"{out}#{j}"

    def show(name, value, element, n):
        lines.extend(print_bits(fresh("show")[1:], value, (n,), element))
        names.append(name)

    names = []
    for r in results:
        if r.role != "param":
            continue
        value = current[(r.role, r.name)]
        if r.layout:  # gather the shards (if sharded), then each tensor
            full, size = value, int(np.prod(r.shape))
            if r.shard_of:
                full, size = fresh("all"), r.shard_of
                lines.append(f"  {full} = distopt.all_gather {value} on @world : {r.type} -> tensor<{size}x{r.element}>")
            for name, offset, _, shape in r.layout:
                n = int(np.prod(shape)) if shape else 1
                s = fresh("slice")
                lines.append(f"  {s} = tensor.extract_slice {full}[{offset}] [{n}] [1] : tensor<{size}x{r.element}> to tensor<{n}x{r.element}>")
                show(name, s, r.element, n)
            continue
        n = int(np.prod(r.shape)) if r.shape else 1
        flat = value
        if len(r.shape) != 1:
            flat = fresh("flatp")
            if r.shape:
                dims = ", ".join(map(str, range(len(r.shape))))
                lines.append(f"  {flat} = tensor.collapse_shape {value} [[{dims}]] : {r.type} into tensor<{n}x{r.element}>")
            else:
                lines.append(f"  {flat} = tensor.expand_shape {value} [] output_shape [1] : {r.type} into tensor<1x{r.element}>")
        show(r.name, flat, r.element, n)
    lines += ["  return", "}"]
    body = "\n".join(lines) + "\n"
    end = module.rindex("}")
    return module[:end] + body + module[end:], names


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step")
    ap.add_argument("ranks", type=int)
    ap.add_argument("--opt", required=True)
    ap.add_argument("--runner", required=True)
    ap.add_argument("--mlir-lib", required=True)
    ap.add_argument("--runtime-lib", required=True)
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe --bind-to none")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    module, names = harness(open(args.step).read(), args.steps)
    # The GPU lowering's split runs here too (test/GPU/split-on-host.test).
    lowering = os.environ.get("DISTOPT_TEST_LOWERING", "--distopt-lower-to-cpu")
    lowered = subprocess.run([args.opt, lowering], input=module,
                             capture_output=True, text=True)
    if lowered.returncode:
        sys.stderr.write(lowered.stderr)
        return 1
    libs = ",".join([f"{args.mlir_lib}/libmlir_runner_utils.so",
                     f"{args.mlir_lib}/libmlir_c_runner_utils.so", args.runtime_lib])
    cmd = shlex.split(args.mpirun) + ["-np", str(args.ranks)]
    # Each rank writes its own file, so that lines never interleave.
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "run.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexec " + shlex.quote(args.runner) +
                    " -e main -entry-point-result=void -shared-libs=" + shlex.quote(libs) +
                    f" {shlex.quote(os.path.join(tmp, 'step.mlir'))} > {shlex.quote(tmp)}/out.$OMPI_COMM_WORLD_RANK\n")
        os.chmod(script, 0o755)
        with open(os.path.join(tmp, "step.mlir"), "w") as f:
            f.write(lowered.stdout)
        run = subprocess.run(cmd + [script], capture_output=True, text=True)
        if run.returncode:
            sys.stderr.write(run.stdout + run.stderr)
            return 1
        for rank in range(args.ranks):
            out = open(os.path.join(tmp, f"out.{rank}")).read()
            blocks = out.split("Unranked Memref")[1:]
            if len(blocks) != len(names):
                sys.stderr.write(f"rank {rank}: expected {len(names)} tensors\n{out}")
                return 1
            for name, block in zip(names, blocks):
                data = block[block.index("data =") + 6:]
                ints = re.findall(r"-?\d+", data)
                print(f"rank {rank} param {name}: {' '.join(ints)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
