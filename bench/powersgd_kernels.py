#!/usr/bin/python3
"""B6's arithmetic: PowerSGD's products and orthogonalization as distopt
compiles them, against OpenBLAS on the same shapes, in the same process.

For every gradient a step compresses (the shapes come from the
powersgd_all_reduce ops that `--distopt-pipeline=powersgd-rank=R` leaves in
the step: M is n x m, the factors n x r and m x r):
  - products: P = M Q and Q'^T = (M^T P)^T, the linalg.generic
    contractions `--distopt-lower-local-ops` emits for a
    powersgd_all_reduce of that shape (taken from its output, each made a
    function of its operands) and lowered by `distopt-opt
    --distopt-lower-to-cpu`, the CPU lowering distopt-compile runs (which
    calls the runtime's distopt_rt_matmul_f32, itself OpenBLAS's sgemm on
    one thread, since --distopt-contractions-to-runtime); against
    cblas_sgemm.
  - orthogonalization of P (n x r) and Q (m x r): the dialect's own
    `distopt.orthogonalize`, lowered the same way; against modified
    Gram-Schmidt from OpenBLAS's level-1 routines (snrm2, sscal, sdot,
    saxpy on strided columns), which is what PyTorch's hook runs.
The kernels are compiled for this machine's CPU (opt -O3 and llc -O3,
-mcpu=native, as distopt-compile does in process) into a C driver that times each one (median of
--repeat calls) with both sides on --threads threads (1 by default: OpenMP for distopt's
parallel loops, OpenBLAS's own), and checks that both sides
agree (relative difference below 1e-3: the sums are ordered differently).
GFLOP/s count 2nmr per product and 2kr^2 for orthogonalizing a k x r
matrix (the usual count for modified Gram-Schmidt), on both sides.

Needs Debian's libopenblas-dev, gcc, mlir-translate-22 and llc (LLVM 22).

    bench/powersgd_kernels.py [--build build] [--model resnet50] [--rank 4] [--threads 1]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import reduce_only_step  # noqa: E402

LLVM = "/usr/lib/llvm-22/bin"
OPENBLAS_INCLUDE = "/usr/include/x86_64-linux-gnu/openblas-pthread"


def compressed_shapes(build, spec_path, rank, tmp):
    """(n, m) of every gradient `powersgd-rank=rank` compresses, in order."""
    spec = json.load(open(spec_path))
    step = os.path.join(tmp, "reduce.mlir")
    with open(step, "w") as f:
        f.write(reduce_only_step(spec["parameters"], 2))
    ir = subprocess.run([os.path.join(build, "bin", "distopt-opt"), step,
                         f"--distopt-pipeline=overlap=false powersgd-rank={rank}"],
                        check=True, capture_output=True, text=True).stdout
    return [(int(n), int(m)) for n, m in
            re.findall(r"distopt\.powersgd_all_reduce .* : tensor<(\d+)x(\d+)xf32>", ir)]


def lowered_contractions(build, shapes, rank, tmp):
    """For each shape, the two contractions `--distopt-lower-local-ops`
    emits for a distopt.powersgd_all_reduce of that shape (P = M Q, then
    Q'^T = (M^T P)^T), as the op texts the lowering prints, maps inline."""
    step = os.path.join(tmp, "compress.mlir")
    with open(step, "w") as f:
        f.write("distopt.process_group @dp size 2\n")
        for s, (n, m) in enumerate(shapes):
            M, P, Q = (f"tensor<{n}x{m}xf32>", f"tensor<{n}x{rank}xf32>",
                       f"tensor<{m}x{rank}xf32>")
            f.write(f"func.func @compress_{s}(%g: {M}, %p: {P}, %q: {Q}) -> ({M}, {P}, {Q}) {{\n"
                    f"  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank {rank} : "
                    f"{M}, {P}, {Q}\n"
                    f"  return %r#0, %r#1, %r#2 : {M}, {P}, {Q}\n}}\n")
    ir = subprocess.run([os.path.join(build, "bin", "distopt-opt"), step,
                         "--distopt-lower-local-ops", "--mlir-print-local-scope"],
                        check=True, capture_output=True, text=True).stdout
    funcs = re.split(r"func\.func @compress_", ir)[1:]
    found = []
    for (n, m), body in zip(shapes, funcs):
        # Each single-result contraction (three loops, one a sum): a
        # linalg.generic from its line to "} -> tensor<..>".
        by_inputs, op = {}, None
        for line in body.splitlines():
            if op is None and re.match(r" *%\S+ = linalg\.generic ", line):
                op = [line.split(" = ", 1)[1]]
            elif op is not None:
                op.append(line)
                if re.match(r" *\} -> ", line):
                    loops = re.search(r"iterator_types = \[([^\]]*)\]", op[0]).group(1)
                    if (re.match(r" *\} -> tensor<[^>]*>$", line) and
                            loops.count('"') == 6 and '"reduction"' in loops):
                        types = re.search(r"ins\(%[^:]*: ([^)]*)\)", op[0]).group(1)
                        if types in by_inputs:
                            sys.exit(f"powersgd_kernels: two contractions of {types} in the "
                                     f"lowering of a {n}x{m} powersgd_all_reduce")
                        by_inputs[types] = "\n".join(op)
                    op = None
        M = f"tensor<{n}x{m}xf32>"
        pair = (by_inputs.get(f"{M}, tensor<{rank}x{m}xf32>"),
                by_inputs.get(f"{M}, tensor<{n}x{rank}xf32>"))
        if None in pair:
            sys.exit(f"powersgd_kernels: no contractions P = MQ and M^T P in the "
                     f"lowering of a {n}x{m} powersgd_all_reduce")
        found.append(pair)
    return found


def kernels_mlir(build, shapes, rank, tmp):
    """One module: mq_i and mtp_i, per shape, each the lowering's
    contraction on the function's arguments; orth_k, the dialect's op."""
    out = []
    r = rank
    for s, ((n, m), (mq, mtp)) in enumerate(zip(shapes, lowered_contractions(build, shapes,
                                                                           rank, tmp))):
        M, P, QT = f"tensor<{n}x{m}xf32>", f"tensor<{n}x{r}xf32>", f"tensor<{r}x{m}xf32>"
        for name, op, second, result in (("mq", mq, "%qt: " + QT, P),
                                         ("mtp", mtp, "%p: " + P, QT)):
            operand = second.split(":")[0]
            op = re.sub(r"ins\(%[^,]*, %[^ :]* :", f"ins(%m, {operand} :", op, count=1)
            op = re.sub(r"outs\(%[^ :]* :", "outs(%f :", op, count=1)
            out.append(f"""
func.func @{name}_{s}(%m: {M}, {second}) -> {result} {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : {result}
  %f = linalg.fill ins(%z : f32) outs(%e : {result}) -> {result}
  %r = {op}
  return %r : {result}
}}""")
    for k in sorted({d for shape in shapes for d in shape}):
        out.append(f"""
func.func @orth_{k}(%x: tensor<{k}x{r}xf32>) -> tensor<{k}x{r}xf32> {{
  %o = distopt.orthogonalize %x : tensor<{k}x{r}xf32>
  return %o : tensor<{k}x{r}xf32>
}}""")
    return "\n".join(out) + "\n"


DRIVER_HEAD = r"""
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef struct { float *allocated, *aligned; long offset, sizes[2], strides[2]; } D2;
#define MEMREF(p, a, b) p, p, 0L, (long)(a), (long)(b), (long)(b), 1L
static int repeat;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double median(double *t) { qsort(t, repeat, sizeof *t, cmp); return t[repeat / 2]; }
static float *filled(long count, unsigned seed) {
  float *p = aligned_alloc(64, ((count * 4 + 63) / 64) * 64);
  for (long i = 0; i < count; ++i) { seed = seed * 1103515245u + 12345u; p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f; }
  return p;
}
static double worst = 0;
static void agree(const float *x, const float *y, long count) {
  double num = 0, den = 0;
  for (long i = 0; i < count; ++i) { num += (x[i] - y[i]) * (double)(x[i] - y[i]); den += (double)y[i] * y[i]; }
  double rel = sqrt(num / (den > 0 ? den : 1));
  if (rel > worst) worst = rel;
}
/* Modified Gram-Schmidt on the columns of a row-major k x r matrix. */
static void mgs(float *x, long k, long r) {
  for (long i = 0; i < r; ++i) {
    float norm = cblas_snrm2(k, x + i, r);
    cblas_sscal(k, 1.0f / norm, x + i, r);
    for (long c = i + 1; c < r; ++c)
      cblas_saxpy(k, -cblas_sdot(k, x + i, r, x + c, r), x + i, r, x + c, r);
  }
}
/* Times products and orthogonalization, both ways; adds the seconds. */
static double t_mq, t_mtp, t_orth, b_mq, b_mtp, b_orth;
"""


def driver_c(shapes, rank, repeat):
    r = rank
    lines = [DRIVER_HEAD]
    for s, _ in enumerate(shapes):
        lines.append(f"D2 mq_{s}(float *, float *, long, long, long, long, long, "
                     "float *, float *, long, long, long, long, long);")
        lines.append(f"D2 mtp_{s}(float *, float *, long, long, long, long, long, "
                     "float *, float *, long, long, long, long, long);")
    for k in sorted({d for shape in shapes for d in shape}):
        lines.append(f"D2 orth_{k}(float *, float *, long, long, long, long, long);")
    lines.append("int main(void) {")
    lines.append(f"  repeat = {repeat}; double t[4][{repeat}];")
    for s, (n, m) in enumerate(shapes):
        lines.append(f"""  {{
    long n = {n}, m = {m}, r = {r};
    float *M = filled(n * m, {s + 1}u), *QT = filled(r * m, {s + 101}u);
    float *P = filled(n * r, {s + 201}u), *Pb = malloc(n * r * 4), *Qb = malloc(r * m * 4);
    float *O = malloc((n > m ? n : m) * r * 4);
    for (int it = 0; it < repeat; ++it) {{
      double a = now(); D2 p = mq_{s}(MEMREF(M, n, m), MEMREF(QT, r, m)); t[0][it] = now() - a;
      a = now(); D2 q = mtp_{s}(MEMREF(M, n, m), MEMREF(P, n, r)); t[1][it] = now() - a;
      a = now(); cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, r, m, 1.0f, M, m, QT, m, 0.0f, Pb, r); t[2][it] = now() - a;
      a = now(); cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, m, n, 1.0f, P, r, M, m, 0.0f, Qb, m); t[3][it] = now() - a;
      if (it == 0) {{ agree(p.aligned, Pb, n * r); agree(q.aligned, Qb, r * m); }}
      free(p.allocated); free(q.allocated);
    }}
    t_mq += median(t[0]); t_mtp += median(t[1]); b_mq += median(t[2]); b_mtp += median(t[3]);
    for (int side = 0; side < 2; ++side) {{
      long k = side ? m : n; float *X = side ? QT : P;
      for (int it = 0; it < repeat; ++it) {{
        double a = now(); D2 o = ORTH(MEMREF(X, k, r)); t[0][it] = now() - a;
        memcpy(O, X, k * r * 4);
        a = now(); mgs(O, k, r); t[1][it] = now() - a;
        if (it == 0) agree(o.aligned, O, k * r);
        free(o.allocated);
      }}
      t_orth += median(t[0]); b_orth += median(t[1]);
    }}
    free(M); free(QT); free(P); free(Pb); free(Qb); free(O);
  }}""")
    lines.append('  printf("{\\"mq\\": %.9g, \\"mtp\\": %.9g, \\"orth\\": %.9g, '
                 '\\"blas_mq\\": %.9g, \\"blas_mtp\\": %.9g, \\"blas_orth\\": %.9g, '
                 '\\"worst\\": %.3g}\\n", t_mq, t_mtp, t_orth, b_mq, b_mtp, b_orth, worst);')
    lines.append("  return 0;\n}")
    return "\n".join(lines)


def orth_dispatch(shapes):
    """A C function choosing orth_k by k (the sizes are static)."""
    ks = sorted({d for shape in shapes for d in shape})
    body = "\n".join(f"  case {k}: return orth_{k}(a, b, c, d, e, f, g);" for k in ks)
    return ("static D2 ORTH(float *a, float *b, long c, long d, long e, long f, long g) {\n"
            f"  switch (d) {{\n{body}\n  }}\n  abort();\n}}\n")


def measure(build, shapes, rank, repeat, tmp, threads=1):
    """Seconds per step of each kernel family, distopt's and OpenBLAS's,
    each on `threads` threads (OpenMP's for distopt's lowered kernels,
    whose large products run as parallel loops; OpenBLAS's own)."""
    mlir = os.path.join(tmp, "kernels.mlir")
    with open(mlir, "w") as f:
        f.write(kernels_mlir(build, shapes, rank, tmp))
    lowered = os.path.join(tmp, "kernels.llvm.mlir")
    subprocess.run([os.path.join(build, "bin", "distopt-opt"), mlir, "--distopt-lower-to-cpu",
                    "-o", lowered], check=True)
    subprocess.run(["mlir-translate-22", "--mlir-to-llvmir", lowered, "-o",
                    os.path.join(tmp, "kernels.ll")], check=True)
    # LLVM's O3 pipeline, then code generation, for this CPU: what
    # distopt-compile's makeOptimizingTransformer and emit do in process.
    triple = subprocess.run([os.path.join(LLVM, "llvm-config"), "--host-target"], check=True,
                            capture_output=True, text=True).stdout.strip()
    subprocess.run([os.path.join(LLVM, "opt"), "-O3", f"-mtriple={triple}", "-mcpu=native",
                    os.path.join(tmp, "kernels.ll"),
                    "-o", os.path.join(tmp, "kernels.bc")], check=True)
    subprocess.run([os.path.join(LLVM, "llc"), "-O3", f"-mtriple={triple}", "-mcpu=native",
                    "-filetype=obj",
                    "-relocation-model=pic", os.path.join(tmp, "kernels.bc"), "-o",
                    os.path.join(tmp, "kernels.o")], check=True)
    driver = driver_c(shapes, rank, repeat)
    head, main = driver.split("int main(void) {", 1)
    with open(os.path.join(tmp, "driver.c"), "w") as f:
        f.write(head + orth_dispatch(shapes) + "int main(void) {" + main)
    exe = os.path.join(tmp, "kernels")
    # The lowered products call the runtime (distopt_rt_matmul_f32).
    runtime = os.path.join(os.path.abspath(build), "runtime", "lib")
    subprocess.run(["gcc", "-O2", "-I", OPENBLAS_INCLUDE, os.path.join(tmp, "driver.c"),
                    os.path.join(tmp, "kernels.o"), "-o", exe, "-lopenblas", "-lm",
                    f"-L{runtime}", "-ldistopt_rt", f"-Wl,-rpath,{runtime}",
                    f"-L{LLVM}/../lib", "-lomp", f"-Wl,-rpath,{LLVM}/../lib"], check=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS=str(threads),
                                  OMP_NUM_THREADS=str(threads))).stdout
    result = json.loads(out)
    if result["worst"] > 1e-3:
        sys.exit(f"powersgd_kernels: distopt's kernels and OpenBLAS disagree "
                 f"(relative difference {result['worst']:.3g})")
    return result


def flops(shapes, rank):
    """(products, orthogonalization) floating-point operations per step."""
    products = sum(2 * 2 * n * m * rank for n, m in shapes)
    orth = sum(2 * k * rank * rank for n, m in shapes for k in (n, m))
    return products, orth


def arithmetic(build, spec_path, rank, repeat=9, threads=1):
    """GFLOP/s of distopt's kernels and of OpenBLAS for one model and rank,
    both on `threads` threads: {"products": (distopt, blas),
    "orthogonalization": (distopt, blas), "tensors": count}."""
    with tempfile.TemporaryDirectory() as tmp:
        shapes = compressed_shapes(build, spec_path, rank, tmp)
        t = measure(build, shapes, rank, repeat, tmp, threads)
    products, orth = flops(shapes, rank)
    return {"tensors": len(shapes),
            "products": (products / (t["mq"] + t["mtp"]) / 1e9,
                         products / (t["blas_mq"] + t["blas_mtp"]) / 1e9),
            "orthogonalization": (orth / t["orth"] / 1e9, orth / t["blas_orth"] / 1e9)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for distopt's kernels and for OpenBLAS alike")
    args = parser.parse_args()
    spec = os.path.join(ROOT, "examples", "specs", args.model + ".json")
    a = arithmetic(args.build, spec, args.rank, args.repeat, args.threads)
    print(f"{args.model}, rank {args.rank}, {args.threads} thread(s): {a['tensors']} "
          "compressed tensors")
    for kind in ("products", "orthogonalization"):
        ours, blas = a[kind]
        print(f"  {kind}: distopt {ours:.2f} GFLOP/s, OpenBLAS {blas:.2f} GFLOP/s, "
              f"ratio {ours / blas:.2f}")


if __name__ == "__main__":
    main()
