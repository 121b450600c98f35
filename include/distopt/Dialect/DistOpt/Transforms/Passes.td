//===- Passes.td - distopt transformation passes -----------*- tablegen -*-===//
//
// The passes of the distopt pipeline. Flags are part of the product: see
// DESIGN.md. Each pass has a test file named after its flag in
// test/Transforms/.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_TRANSFORMS_PASSES_TD
#define DISTOPT_DIALECT_DISTOPT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def BucketizePass : Pass<"distopt-bucketize", "::mlir::func::FuncOp"> {
  let summary = "Group per-tensor all_reduces into gradient buckets";
  let description = [{
    Replaces the `distopt.all_reduce` ops of each block by fewer, larger ones
    over `distopt.bucket_pack`ed buffers, as PyTorch DDP buckets gradients.

    Collectives are visited in reverse program order (DDP's reverse
    parameter order: the last layers' gradients are ready first) unless
    `reverse=false`. A bucket only holds collectives with the same group,
    element type, reduction (and scale) and wire type. It is closed once it
    reaches its capacity: `first-bucket-cap-mb` for the first bucket of each
    kind, `cap-mb` after that (MB = 2^20 bytes, as in DDP). A collective
    joins a bucket only where the bucket can be placed after every input is
    computed and before any result is used; otherwise a new bucket starts.
    A bucket of one collective is left as it was, and collectives that
    already reduce a bucket are not bucketed again, so the pass is
    idempotent.

    ```mlir
    %a = distopt.all_reduce sum %ga on @dp : tensor<16xf32>
    %b = distopt.all_reduce sum %gb on @dp : tensor<8xf32>
    // becomes
    %p = distopt.bucket_pack %gb, %ga : tensor<8xf32>, tensor<16xf32> -> tensor<32xf32>
    %r = distopt.all_reduce sum %p on @dp : tensor<32xf32>
    %b, %a = distopt.bucket_unpack %r : tensor<32xf32> -> tensor<8xf32>, tensor<16xf32>
    ```
  }];
  let options = [
    Option<"capMb", "cap-mb", "double", "25.0",
           "Capacity of a bucket in MB (2^20 bytes); must be positive">,
    Option<"firstBucketCapMb", "first-bucket-cap-mb", "double", "1.0",
           "Capacity of the first bucket of each kind in MB; must be positive">,
    Option<"reverse", "reverse", "bool", "true",
           "Visit collectives in reverse program order (DDP's order)">,
    Option<"alignment", "alignment", "int64_t", "64",
           "Byte alignment of each tensor in a bucket (a power of two)">
  ];
  let statistics = [
    Statistic<"numBuckets", "num-buckets", "Buckets created">,
    Statistic<"numBucketed", "num-bucketed", "Collectives merged into buckets">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def FuseDivIntoAllReducePass
    : Pass<"distopt-fuse-div-into-allreduce", "::mlir::func::FuncOp"> {
  let summary = "Fold a scaling by a constant into the reduction";
  let description = [{
    Folds a multiplication or division by a constant that follows a `sum`
    `all_reduce` or `reduce_scatter` (its only use), or that produces its
    input, into the collective: a factor of exactly `1/N` (`N` the group
    size) becomes `avg`, any other factor `premul_sum(factor)`.

    Recognised scalings: `arith.divf` / `arith.mulf` by a splat constant
    (either operand order for `mulf`), and `linalg.div` / `linalg.mul` whose
    other input is a splat constant or a `linalg.fill` of a constant.

    The element type and the backend decide the form:
    - `backend=nccl` and `backend=mpi` reduce with `avg` and `premul_sum`
      natively (distopt's MPI runtime scales while it reduces);
    - `backend=sum-only` (gloo-like) has neither: the pass changes nothing.
    - For `f16`, an average is split as FSDP does, so that the sum cannot
      overflow: `premul_sum(1/a)` before the reduction and a division by `b`
      after it, with `a * b = N` and `a` the largest power of two with
      `a <= N / a`.

    The scaling happens exactly once: the scaling op is replaced (after the
    collective) or bypassed (before it). Anything the pass cannot prove (a
    non-constant or non-splat factor, a result with several uses, a factor
    that rounds to zero or infinity in the element type, integer data) is
    left alone.
  }];
  let options = [
    Option<"backend", "backend", "std::string", "\"nccl\"",
           "Target backend: nccl, mpi or sum-only">
  ];
  let statistics = [
    Statistic<"numFused", "num-fused", "Scalings folded into collectives">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect",
                           "::mlir::arith::ArithDialect"];
}

#endif // DISTOPT_DIALECT_DISTOPT_TRANSFORMS_PASSES_TD
