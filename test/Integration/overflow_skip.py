"""Overflow in one rank's gradient skips the step on every rank.

A mixed-precision step (bf16 gradients under a dynamic loss scale, fp32 main
parameters, SGD with momentum, GradScaler's update; as
examples/mixed_precision_step.mlir) is lowered and run under mpirun at 2 and
4 ranks. One rank's gradient gets an inf, a -inf or a NaN; every rank must
then return its main parameters, momentum and bf16 model bitwise unchanged,
the loss scale halved and the growth tracker reset, identically. Two forms:
`replicated` checks finiteness after an all-reduce (every rank sees the
overflow), `sharded` after a ZeRO-2 reduce-scatter, where only the rank
owning the poisoned chunk sees it and all_finite's vote over the group must
carry it to the others. A clean step is the control: it must change the
parameters and grow the tracker.

usage: overflow_skip.py OPT RUNNER MLIR_LIB_DIR RUNTIME_LIB MPIRUN
"""
import shlex
import sys

import numpy as np

import mlir_exec

N = 64
SCALE = 1024.0


bf16 = mlir_exec.bf16  # float32 values rounded to bf16 (what the step holds)


def step_function(form, ranks):
    """@f(model, grad, main, momentum, scale, tracker) -> the same, updated."""
    chunk = N // ranks
    if form == "replicated":
        reduce = [f"  %r = distopt.all_reduce avg %grad on @world : tensor<{N}xbf16>",
                  f"  %finite = distopt.all_finite %r on @world : tensor<{N}xbf16>",
                  f"  %g32 = arith.extf %r : tensor<{N}xbf16> to tensor<{N}xf32>"]
        main, mom, n = "%main", "%momentum", N
    else:
        # ZeRO-2: this rank's chunk of the averaged gradient, its chunk of the
        # main parameters and momentum, then an all-gather of the update.
        reduce = [f"  %r = distopt.reduce_scatter avg %grad on @world : tensor<{N}xbf16> -> tensor<{chunk}xbf16>",
                  f"  %finite = distopt.all_finite %r on @world : tensor<{chunk}xbf16>",
                  f"  %g32 = arith.extf %r : tensor<{chunk}xbf16> to tensor<{chunk}xf32>",
                  f"  %ms = distopt.shard_slice %main on @world : tensor<{N}xf32> -> tensor<{chunk}xf32>",
                  f"  %vs = distopt.shard_slice %momentum on @world : tensor<{N}xf32> -> tensor<{chunk}xf32>"]
        main, mom, n = "%ms", "%vs", chunk
    t = f"tensor<{n}xf32>"
    lines = [f"func.func @f(%model: tensor<{N}xbf16>, %grad: tensor<{N}xbf16>, %main: tensor<{N}xf32>,",
             f"             %momentum: tensor<{N}xf32>, %scale: f32, %tracker: i64)",
             f"    -> (tensor<{N}xbf16>, tensor<{N}xf32>, tensor<{N}xf32>, f32, i64) {{",
             "  %lr = arith.constant 0.5 : f32",
             "  %step = arith.constant 3 : i64",
             *reduce,
             f"  %g = distopt.unscale %g32 by %scale : {t}, f32",
             f"  %m1, %v1 = distopt.sgd_update {main}, %g state({mom}) lr(%lr) step(%step)",
             f"      {{momentum = 0.9, weight_decay = 1.0e-4}} : {t}, f32",
             f"  %m2 = arith.select %finite, %m1, {main} : {t}",
             f"  %v2 = arith.select %finite, %v1, {mom} : {t}"]
    if form == "sharded":
        lines += [f"  %m3 = distopt.all_gather %m2 on @world : {t} -> tensor<{N}xf32>",
                  f"  %v3 = distopt.all_gather %v2 on @world : {t} -> tensor<{N}xf32>"]
        main_out, mom_out = "%m3", "%v3"
    else:
        main_out, mom_out = "%m2", "%v2"
    lines += [f"  %model1 = arith.truncf {main_out} : tensor<{N}xf32> to tensor<{N}xbf16>",
              "  %scale1, %tracker1 = distopt.loss_scale_update %scale, %tracker, %finite : f32, i64",
              f"  return %model1, {main_out}, {mom_out}, %scale1, %tracker1",
              f"      : tensor<{N}xbf16>, tensor<{N}xf32>, tensor<{N}xf32>, f32, i64",
              "}"]
    return lines


def program(form, ranks, grads, main, momentum):
    """@main: this rank's gradient, @f, everything gathered to rank 0 and
    printed (model, main, momentum, then [scale, tracker] as f32)."""
    model = bf16(main)
    lines = [f"distopt.process_group @world size {ranks}", mlir_exec.PRINT_DECL,
             *step_function(form, ranks),
             "func.func @main() {",
             "  %rank = distopt.rank @world : index",
             "  %zero = arith.constant 0 : index",
             f"  %grads = arith.constant {mlir_exec.dense(np.stack(grads), 'bf16')}",
             f"  %grad = tensor.extract_slice %grads[%rank, 0] [1, {N}] [1, 1]"
             f" : tensor<{ranks}x{N}xbf16> to tensor<{N}xbf16>",
             f"  %model = arith.constant {mlir_exec.dense(model, 'bf16')}",
             f"  %main = arith.constant {mlir_exec.dense(main)}",
             f"  %momentum = arith.constant {mlir_exec.dense(momentum)}",
             f"  %scale = arith.constant {mlir_exec.mlir_float(SCALE)} : f32",
             "  %tracker = arith.constant 7 : i64",
             "  %o:5 = func.call @f(%model, %grad, %main, %momentum, %scale, %tracker)"
             f" : (tensor<{N}xbf16>, tensor<{N}xbf16>, tensor<{N}xf32>, tensor<{N}xf32>, f32, i64)"
             f" -> (tensor<{N}xbf16>, tensor<{N}xf32>, tensor<{N}xf32>, f32, i64)",
             f"  %model32 = arith.extf %o#0 : tensor<{N}xbf16> to tensor<{N}xf32>",
             "  %tracker32 = arith.sitofp %o#4 : i64 to f32",
             "  %scalars = tensor.from_elements %o#3, %tracker32 : tensor<2xf32>",
             f"  %out = tensor.concat dim(0) %model32, %o#1, %o#2, %scalars"
             f" : (tensor<{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>, tensor<2xf32>) -> tensor<{3 * N + 2}xf32>",
             f"  %all = distopt.all_gather %out on @world : tensor<{3 * N + 2}xf32> -> tensor<{ranks * (3 * N + 2)}xf32>",
             "  %first = arith.cmpi eq, %rank, %zero : index",
             "  scf.if %first {",
             *["  " + line for line in mlir_exec.print_bits("all", "%all", [ranks * (3 * N + 2)])],
             "  }",
             "  return",
             "}"]
    return "\n".join(lines) + "\n"


def main():
    opt, runner, libdir, rtlib, mpirun = sys.argv[1:6]
    rng = np.random.default_rng(3)
    main_params = rng.standard_normal(N).astype(np.float32)
    momentum = rng.standard_normal(N).astype(np.float32) * np.float32(0.1)
    tally = mlir_exec.Tally()
    for ranks in (2, 4):
        launcher = [*shlex.split(mpirun), "-np", str(ranks)]
        for form in ("replicated", "sharded"):
            cases = [("clean step", None, None, None)]
            # Poison each rank in turn, in a different chunk each time.
            for victim, bad in zip(range(ranks), [np.inf, -np.inf, np.nan, np.inf]):
                cases.append((f"{bad} on rank {victim}", victim, bad, (victim * 13 + 5) % N))
            for name, victim, bad, where in cases:
                grads = [bf16(rng.standard_normal(N) * SCALE) for _ in range(ranks)]
                if victim is not None:
                    grads[victim][where] = bad
                text = program(form, ranks, grads, main_params, momentum)
                (out,) = mlir_exec.run(opt, runner, libdir, text, [[ranks, 3 * N + 2]],
                                       extra_libs=[rtlib], launcher=launcher)
                model, mains, moms = out[:, :N], out[:, N:2 * N], out[:, 2 * N:3 * N]
                scale, tracker = out[:, 3 * N], out[:, 3 * N + 1]
                same = all(o.tobytes() == out[0].tobytes() for o in out)
                if victim is None:
                    ok = (same and not np.array_equal(mains[0], main_params)
                          and scale[0] == SCALE and tracker[0] == 8)
                    what = "parameters updated, tracker 7 -> 8, identical on every rank"
                else:
                    ok = (same and mains[0].tobytes() == main_params.tobytes()
                          and moms[0].tobytes() == momentum.tobytes()
                          and model[0].tobytes() == bf16(main_params).tobytes()
                          and scale[0] == SCALE / 2 and tracker[0] == 0)
                    what = ("skipped on every rank: main, momentum and model bitwise unchanged, "
                            "scale 1024 -> 512, tracker 7 -> 0")
                tally.check(ok, f"{ranks} ranks, {form}, {name}: {what}")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
