//===- DistOptOps.td - distopt operations ------------------*- tablegen -*-===//
//
// Op families: process groups, collectives (sync and async), gradient buckets,
// compression, sharding, optimizer updates, mixed precision and clipping.
// docs/dialect.md explains each family; the formulas of the optimizer ops are
// given there and in each op's description.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_DISTOPTOPS_TD
#define DISTOPT_DIALECT_DISTOPT_IR_DISTOPTOPS_TD

include "distopt/Dialect/DistOpt/IR/DistOptBase.td"
include "distopt/Dialect/DistOpt/IR/DistOptInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// Process groups
//===----------------------------------------------------------------------===//

def DistOpt_MeshOp : DistOpt_Op<"mesh", [Symbol]> {
  let summary = "a device mesh: the world's ranks laid out on a grid";
  let description = [{
    Lays the world's ranks out on an N-D grid, row-major (the last axis
    varies fastest), as upstream's `shard.grid` does: on a `[2, 4]` mesh,
    rank 6 sits at `(1, 2)`. Process groups over some of its axes name the
    data-parallel, tensor-parallel or node-local parts of a job. The world
    has as many ranks as the mesh.

    ```mlir
    distopt.mesh @cluster shape [2, 4]
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, DenseI64ArrayAttr:$shape);
  let assemblyFormat = "$sym_name `shape` $shape attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The number of ranks: the product of the shape.
    int64_t getNumRanks();
  }];
}

def DistOpt_ProcessGroupOp : DistOpt_Op<"process_group", [Symbol,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "a named group of ranks of static size";
  let description = [{
    Declares a process group: the ranks that take part in the collectives
    naming it, each rank's collectives running with the `size - 1` other
    ranks of its part of the group. Three forms:

    - `size N` alone: the whole world, ranks `0 .. N-1`.
    - `over @mesh axes [a, ...]`: the ranks that differ only in their
      coordinates on those axes of a `distopt.mesh`, ranked row-major over
      the axes in the order given (upstream `shard`'s `grid_axes`). On a
      `[2, 4]` mesh, axes `[1]` makes two parts of 4 ranks (0-3 and 4-7),
      axes `[0]` four parts of 2 (0 and 4, 1 and 5, ...).
    - `ranks dense<[[...], ...]>`: the parts listed, one per row, each row
      a part's world ranks in rank order; the rows tile the world.

    A compiled step is specialised to its world: every group it
    communicates on must span it (the lowering checks), the runtime refuses
    a communicator of another size and splits one communicator per group
    from the world.

    ```mlir
    distopt.process_group @dp size 8
    distopt.mesh @cluster shape [2, 4]
    distopt.process_group @intra_node size 4 over @cluster axes [1]
    distopt.process_group @pairs size 2 ranks dense<[[0, 3], [1, 2]]> : tensor<2x2xi64>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, DistOpt_I64Attr:$size,
                       OptionalAttr<FlatSymbolRefAttr>:$mesh,
                       OptionalAttr<DenseI64ArrayAttr>:$axes,
                       OptionalAttr<I64ElementsAttr>:$ranks);
  let assemblyFormat = [{
    $sym_name `size` $size (`over` $mesh^ `axes` $axes)?
    (`ranks` $ranks^)? attr-dict
  }];
  let builders = [
    // The whole world of `size` ranks.
    OpBuilder<(ins "StringRef":$symName, "int64_t":$size), [{
      build($_builder, $_state, $_builder.getStringAttr(symName),
            $_builder.getI64IntegerAttr(size), FlatSymbolRefAttr(),
            DenseI64ArrayAttr(), DenseIntElementsAttr());
    }]>
  ];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Where each world rank falls: the part of the group it is in (its
    /// color) and its rank in that part (its key), indexed by world rank.
    /// Empty when the mesh cannot be found.
    struct Membership {
      SmallVector<int64_t> color, key;
    };
    Membership getMembership();
    /// The number of ranks in the world this group is part of (0 when the
    /// mesh cannot be found).
    int64_t getWorldSize();
    /// Whether the group is the whole world in world rank order.
    bool isWorld();
  }];
}

class DistOpt_GroupQueryOp<string mnemonic>
    : DistOpt_Op<mnemonic, [Pure,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let arguments = (ins FlatSymbolRefAttr:$group);
  let results = (outs Index:$result);
  let assemblyFormat = "$group attr-dict `:` type($result)";
  let hasFolder = 1;
}

def DistOpt_RankOp : DistOpt_GroupQueryOp<"rank"> {
  let summary = "the calling process's rank in a group";
  let description = [{
    Returns the rank, in `[0, size)`, of the calling process in `group`. Folds
    to 0 for a group of size 1.

    ```mlir
    %r = distopt.rank @dp : index
    ```
  }];
}

def DistOpt_GroupSizeOp : DistOpt_GroupQueryOp<"group_size"> {
  let summary = "the number of ranks of a group";
  let description = [{
    Returns the static size of `group`; always folds to a constant.

    ```mlir
    %n = distopt.group_size @dp : index
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// Arguments every collective has: the data, the group and an optional element
/// type used on the wire (values are rounded to it for transport only).
defvar CollectiveArgs = (ins
  AnyStaticShapeTensor:$input,
  FlatSymbolRefAttr:$group,
  OptionalAttr<TypeAttrOf<AnyFloat>>:$wire_type);

/// Arguments of the collectives that combine values.
defvar ReductionArgs = (ins
  DistOpt_ReductionKindAttr:$reduction,
  OptionalAttr<F64Attr>:$scale);

defvar RootArg = (ins DistOpt_I64Attr:$root);

/// A collective of kind `kind` (a CollectiveKind case). `reduces` and `rooted`
/// say whether it has the ReductionArgs and the RootArg; the interface reads
/// them through the accessors declared here, and checks the op.
class DistOpt_CollectiveOp<string mnemonic, string kind, bit reduces,
                           bit rooted, list<Trait> traits = []>
    : DistOpt_Op<mnemonic, !listconcat(traits, [DistOpt_Communicates,
        SymbolUserOpInterface, DistOpt_CollectiveOpInterface])> {
  let extraClassDeclaration = [{
    ::mlir::distopt::CollectiveKind getCollectiveKind() {
      return ::mlir::distopt::CollectiveKind::}] # kind # [{;
    }
    std::optional<::mlir::distopt::ReductionKind> getReductionKind() {
      return }] # !if(reduces, "getReduction()", "std::nullopt") # [{;
    }
  }] # !if(reduces, "", [{
    std::optional<::llvm::APFloat> getScale() { return std::nullopt; }
  }]) # [{
    std::optional<int64_t> getRootRank() {
      return }] # !if(rooted, "getRoot()", "std::nullopt") # [{;
    }
    ::mlir::LogicalResult verifySymbolUses(
        ::mlir::SymbolTableCollection &symbolTable) {
      return ::mlir::distopt::detail::verifyCollectiveSymbolUses(
          *this, symbolTable);
    }
  }];
}

defvar AllReduceDoc = [{
  Every rank contributes `input`; every rank receives the element-wise
  reduction of all contributions. `premul_sum(s)` computes `sum_r s * x_r`,
  `avg` computes `sum_r x_r / size`. With `wire T`, values travel as `T`
  (bf16/f16 compression) and are converted back to the input's type.
}];

def DistOpt_AllReduceOp : DistOpt_CollectiveOp<"all_reduce", "AllReduce", 1, 0,
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "reduce a tensor over a group, result on every rank";
  let description = AllReduceDoc # [{
    Folds to `input` on a group of size 1 (unless it scales: `premul_sum`).

    ```mlir
    %0 = distopt.all_reduce avg %g on @dp : tensor<1024xf32>
    %1 = distopt.all_reduce premul_sum(1.250000e-01) %g on @dp wire bf16 : tensor<1024xf32>
    ```
  }];
  let arguments = !con(CollectiveArgs, ReductionArgs);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    custom<Reduction>($reduction, $scale) $input `on` $group
    (`wire` $wire_type^)? attr-dict `:` type($input)
  }];
  let hasFolder = 1;
}

def DistOpt_AllReduceStartOp
    : DistOpt_CollectiveOp<"all_reduce_start", "AllReduce", 1, 0> {
  let summary = "start an asynchronous all_reduce";
  let description = AllReduceDoc # [{
    Returns a token; `distopt.wait` on it yields the reduced tensor.

    ```mlir
    %t = distopt.all_reduce_start sum %g on @dp : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
    %r = distopt.wait %t : !distopt.token<tensor<1024xf32>>
    ```
  }];
  let arguments = !con(CollectiveArgs, ReductionArgs);
  let results = (outs DistOpt_TokenType:$token);
  let assemblyFormat = [{
    custom<Reduction>($reduction, $scale) $input `on` $group
    (`wire` $wire_type^)? attr-dict `:` type($input) `->` qualified(type($token))
  }];
}

defvar ReduceScatterDoc = [{
  Reduces like `all_reduce`, then splits the result along dimension 0 into
  `size` equal chunks; rank `r` receives chunk `r`. Dimension 0 of the input
  must be divisible by the group size.
}];

def DistOpt_ReduceScatterOp
    : DistOpt_CollectiveOp<"reduce_scatter", "ReduceScatter", 1, 0> {
  let summary = "reduce over a group and scatter the chunks along dim 0";
  let description = ReduceScatterDoc # [{
    ```mlir
    %s = distopt.reduce_scatter sum %flat on @dp : tensor<1024xf32> -> tensor<256xf32>
    ```
  }];
  let arguments = !con(CollectiveArgs, ReductionArgs);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    custom<Reduction>($reduction, $scale) $input `on` $group
    (`wire` $wire_type^)? attr-dict `:` type($input) `->` type($result)
  }];
  let hasFolder = 1;
}

def DistOpt_ReduceScatterStartOp
    : DistOpt_CollectiveOp<"reduce_scatter_start", "ReduceScatter", 1, 0> {
  let summary = "start an asynchronous reduce_scatter";
  let description = ReduceScatterDoc # [{
    ```mlir
    %t = distopt.reduce_scatter_start avg %flat on @dp : tensor<1024xf32> -> !distopt.token<tensor<256xf32>>
    ```
  }];
  let arguments = !con(CollectiveArgs, ReductionArgs);
  let results = (outs DistOpt_TokenType:$token);
  let assemblyFormat = [{
    custom<Reduction>($reduction, $scale) $input `on` $group
    (`wire` $wire_type^)? attr-dict `:` type($input) `->` qualified(type($token))
  }];
}

defvar AllGatherDoc = [{
  Concatenates the inputs of all ranks along dimension 0, in rank order; every
  rank receives the concatenation.
}];

def DistOpt_AllGatherOp
    : DistOpt_CollectiveOp<"all_gather", "AllGather", 0, 0> {
  let summary = "concatenate the inputs of all ranks along dim 0";
  let description = AllGatherDoc # [{
    ```mlir
    %p = distopt.all_gather %shard on @dp : tensor<256xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = CollectiveArgs;
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `on` $group (`wire` $wire_type^)? attr-dict `:` type($input) `->` type($result)
  }];
  let hasFolder = 1;
}

def DistOpt_AllGatherStartOp
    : DistOpt_CollectiveOp<"all_gather_start", "AllGather", 0, 0> {
  let summary = "start an asynchronous all_gather";
  let description = AllGatherDoc # [{
    ```mlir
    %t = distopt.all_gather_start %shard on @dp : tensor<256xf32> -> !distopt.token<tensor<1024xf32>>
    ```
  }];
  let arguments = CollectiveArgs;
  let results = (outs DistOpt_TokenType:$token);
  let assemblyFormat = [{
    $input `on` $group (`wire` $wire_type^)? attr-dict `:` type($input) `->` qualified(type($token))
  }];
}

defvar BroadcastDoc = [{
  Every rank receives the input of rank `root`; the inputs of the other ranks
  are ignored.
}];

def DistOpt_BroadcastOp : DistOpt_CollectiveOp<"broadcast", "Broadcast", 0, 1,
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "copy the root's tensor to every rank";
  let description = BroadcastDoc # [{
    ```mlir
    %p = distopt.broadcast %p0 on @dp root 3 : tensor<1024xf32>
    ```
  }];
  let arguments = !con(CollectiveArgs, RootArg);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `on` $group `root` $root (`wire` $wire_type^)? attr-dict `:` type($input)
  }];
  let hasFolder = 1;
}

def DistOpt_BroadcastStartOp
    : DistOpt_CollectiveOp<"broadcast_start", "Broadcast", 0, 1> {
  let summary = "start an asynchronous broadcast";
  let description = BroadcastDoc # [{
    ```mlir
    %t = distopt.broadcast_start %p0 on @dp root 3 : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
    ```
  }];
  let arguments = !con(CollectiveArgs, RootArg);
  let results = (outs DistOpt_TokenType:$token);
  let assemblyFormat = [{
    $input `on` $group `root` $root (`wire` $wire_type^)? attr-dict `:` type($input)
    `->` qualified(type($token))
  }];
}

defvar ReduceDoc = [{
  Reduces like `all_reduce`, but only rank `root` receives the reduction; the
  result on the other ranks is their own input, unchanged.
}];

def DistOpt_ReduceOp : DistOpt_CollectiveOp<"reduce", "Reduce", 1, 1,
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "reduce a tensor over a group, result on the root";
  let description = ReduceDoc # [{
    ```mlir
    %g = distopt.reduce avg %g0 on @dp root 1 : tensor<1024xf32>
    ```
  }];
  let arguments = !con(CollectiveArgs, ReductionArgs, RootArg);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    custom<Reduction>($reduction, $scale) $input `on` $group `root` $root
    (`wire` $wire_type^)? attr-dict `:` type($input)
  }];
  let hasFolder = 1;
}

def DistOpt_ReduceStartOp
    : DistOpt_CollectiveOp<"reduce_start", "Reduce", 1, 1> {
  let summary = "start an asynchronous reduce";
  let description = ReduceDoc # [{
    ```mlir
    %t = distopt.reduce_start sum %g0 on @dp root 1 : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
    ```
  }];
  let arguments = !con(CollectiveArgs, ReductionArgs, RootArg);
  let results = (outs DistOpt_TokenType:$token);
  let assemblyFormat = [{
    custom<Reduction>($reduction, $scale) $input `on` $group `root` $root
    (`wire` $wire_type^)? attr-dict `:` type($input) `->` qualified(type($token))
  }];
}

def DistOpt_WaitOp : DistOpt_Op<"wait", [DistOpt_Communicates,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "complete an asynchronous collective";
  let description = [{
    Blocks until the collective that produced `token` has completed, and yields
    its result. Every token must be waited on exactly once.

    ```mlir
    %r = distopt.wait %t : !distopt.token<tensor<1024xf32>>
    ```
  }];
  let arguments = (ins DistOpt_TokenType:$token);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$token attr-dict `:` qualified(type($token))";
}

//===----------------------------------------------------------------------===//
// Gradient buckets
//===----------------------------------------------------------------------===//

def DistOpt_BucketPackOp : DistOpt_Op<"bucket_pack", [Pure]> {
  let summary = "pack tensors into one flat, aligned buffer";
  let description = [{
    Copies each input, flattened in row-major order, into a 1-D tensor. Input
    `i` starts at the offset of input `i-1` plus its size, rounded up to
    `alignment` bytes (input 0 at offset 0). Padding, including any tail
    beyond the last input, is zero. The result may be longer than the packed
    size (for example, padded to a multiple of the group size for
    `reduce_scatter`); all inputs share one element type.

    ```mlir
    %b = distopt.bucket_pack %w, %bias : tensor<10x10xf32>, tensor<10xf32> -> tensor<128xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyStaticShapeTensor>:$inputs,
                       DefaultValuedAttr<DistOpt_I64Attr, "64">:$alignment);
  let results = (outs DistOpt_BucketTensor:$bucket);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($bucket)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Element offsets of each input within the bucket, and the packed size.
    ::llvm::SmallVector<int64_t> getOffsets(int64_t *packedSize = nullptr);
  }];
}

def DistOpt_BucketUnpackOp : DistOpt_Op<"bucket_unpack", [Pure]> {
  let summary = "split a flat bucket back into tensors";
  let description = [{
    The inverse of `bucket_pack` with the same `alignment`: result `i` is the
    slice of the bucket at the offset `bucket_pack` gives input `i`, reshaped.

    ```mlir
    %w, %bias = distopt.bucket_unpack %b : tensor<128xf32> -> tensor<10x10xf32>, tensor<10xf32>
    ```
  }];
  let arguments = (ins DistOpt_BucketTensor:$bucket,
                       DefaultValuedAttr<DistOpt_I64Attr, "64">:$alignment);
  let results = (outs Variadic<AnyStaticShapeTensor>:$outputs);
  let assemblyFormat = [{
    $bucket attr-dict `:` type($bucket) `->` type($outputs)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    /// Element offsets of each output within the bucket, and the packed size.
    ::llvm::SmallVector<int64_t> getOffsets(int64_t *packedSize = nullptr);
  }];
}

//===----------------------------------------------------------------------===//
// Compression
//===----------------------------------------------------------------------===//

def DistOpt_PowerSGDAllReduceOp : DistOpt_GroupOp<"powersgd_all_reduce", [
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "all-reduce a matrix gradient through a rank-r approximation";
  let description = [{
    PowerSGD (Vogels et al.), as PyTorch's `powerSGD_hook` computes it for one
    n x m gradient `G` with rank `r`, `P` (n x r), `Q` (m x r) and, with
    `error_feedback`, the error `E` (n x m):

    ```
    M  = G + E                (G without error feedback)
    Q  = orthogonalize(Q)
    P  = M Q;        P = all_reduce_sum(P);   P = orthogonalize(P)
    Q' = M^T P;      Q' = all_reduce_sum(Q') / size
    R  = P Q'^T      (the result, the same on every rank)
    E' = M - R
    ```

    P is summed, not averaged: its scale is removed by the orthogonalization
    (as in the hook). Only the averaged `Q'` scales the result.
    The incoming `P` is storage only (it is overwritten). `Q` is this step's
    starting Q: the previous step's `Q'` with `warm_start`, else a fresh
    seeded draw that the caller makes identically on all ranks.
    `orthogonalization_epsilon` is as in `distopt.orthogonalize`. The result
    is an average over the group, like the hook's.

    Ops of a block with the same `batch` number (and group and element
    type) are lowered together, as the hook treats a bucket: one
    `all_reduce` for all their P factors and one for all their Q' factors
    (`--distopt-powersgd` numbers them with `batch-mb`). Without `batch`,
    an op all-reduces its own two factors.

    ```mlir
    %r, %p1, %q1, %e1 = distopt.powersgd_all_reduce %g, %p, %q, %e on @dp rank 2
        : tensor<64x32xf32>, tensor<64x2xf32>, tensor<32x2xf32>
    ```
  }];
  let arguments = (ins DistOpt_FloatTensor:$grad, DistOpt_FloatTensor:$p,
                       DistOpt_FloatTensor:$q,
                       Optional<DistOpt_FloatTensor>:$error,
                       FlatSymbolRefAttr:$group, DistOpt_I64Attr:$rank,
                       DefaultValuedAttr<F64Attr, "0.0">:$orthogonalization_epsilon,
                       OptionalAttr<I64Attr>:$batch);
  let results = (outs DistOpt_FloatTensor:$result, DistOpt_FloatTensor:$new_p,
                      DistOpt_FloatTensor:$new_q,
                      Optional<DistOpt_FloatTensor>:$new_error);
  let assemblyFormat = [{
    $grad `,` $p `,` $q (`,` $error^)? `on` $group `rank` $rank attr-dict
    `:` custom<GradAndErrorTypes>(type($grad), ref($error), type($error))
    `,` type($p) `,` type($q)
  }];
  let hasVerifier = 1;
}

def DistOpt_OrthogonalizeOp : DistOpt_Op<"orthogonalize",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "orthonormalise the columns of a matrix (Gram-Schmidt)";
  let description = [{
    Modified Gram-Schmidt over the columns of an n x r matrix, left to right:
    each column is divided by its 2-norm (plus `epsilon` when `epsilon > 0`),
    then its projection is subtracted from every later column.

    ```mlir
    %q = distopt.orthogonalize %p : tensor<64x2xf32>
    ```
  }];
  let arguments = (ins DistOpt_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "0.0">:$epsilon);
  let results = (outs DistOpt_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def DistOpt_TopKAllReduceOp : DistOpt_GroupOp<"topk_all_reduce", [
    AllTypesMatch<["grad", "error", "result", "new_error"]>]> {
  let summary = "all-reduce the largest entries, keeping the rest as error";
  let description = [{
    Top-K sparsification with local error accumulation (as in SINGA's
    DistOpt): `A = G + E`; the `k = max(1, ceil(density * numel))` entries of
    `A` with the largest magnitude (ties broken by lower index) are reduced
    across ranks as a sparse sum (`sum`) or average (`avg`) and returned dense,
    zero elsewhere; `E' = A` with the sent entries set to zero.

    ```mlir
    %r, %e1 = distopt.topk_all_reduce avg %g, %e on @dp density 5.000000e-02 : tensor<4096xf32>
    ```
  }];
  let arguments = (ins DistOpt_FloatTensor:$grad, DistOpt_FloatTensor:$error,
                       FlatSymbolRefAttr:$group, F64Attr:$density,
                       DistOpt_ReductionKindAttr:$reduction,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs DistOpt_FloatTensor:$result,
                      DistOpt_FloatTensor:$new_error);
  let assemblyFormat = [{
    custom<Reduction>($reduction, $scale) $grad `,` $error `on` $group
    `density` $density attr-dict `:` type($grad)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Sharding
//===----------------------------------------------------------------------===//

def DistOpt_ShardSliceOp : DistOpt_Op<"shard_slice", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "this rank's chunk of a tensor split evenly along dim 0";
  let description = [{
    Flat-chunk (DeepSpeed/Megatron ZeRO) ownership: dimension 0 is split into
    `size` equal chunks and rank `r` gets chunk `r`, with no communication. It
    selects the chunk that `reduce_scatter` delivers and `all_gather` takes.

    ```mlir
    %mine = distopt.shard_slice %flat on @dp : tensor<1024xf32> -> tensor<256xf32>
    ```
  }];
  let arguments = (ins AnyStaticShapeTensor:$input, FlatSymbolRefAttr:$group);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $input `on` $group attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def DistOpt_OwnedByOp : DistOpt_Op<"owned_by", [
    RecursiveMemoryEffects, SingleBlock,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "computation performed only by the rank that owns it";
  let description = [{
    Per-parameter (ZeroRedundancyOptimizer/OSS) ownership: the body runs only
    on rank `owner` of `group`, and the op's results are the values its
    `distopt.yield` returns there. On every other rank the body does not run
    and the results are the `otherwise` operands. The body must not
    communicate over `group` (the other ranks would never join).

    ```mlir
    %p1, %m1 = distopt.owned_by @dp rank 1 otherwise(%p, %m) : tensor<64xf32>, tensor<64xf32> {
      %a, %b = distopt.sgd_update %p, %g state(%m) lr(%lr) step(%t) {momentum = 9.000000e-01}
          : tensor<64xf32>, f32
      distopt.yield %a, %b : tensor<64xf32>, tensor<64xf32>
    }
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$group, DistOpt_I64Attr:$owner,
                       Variadic<AnyType>:$otherwise);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $group `rank` $owner `otherwise` `(` $otherwise `)` `:`
    custom<TypesAndSameResults>(type($otherwise), type($results))
    $body attr-dict
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def DistOpt_YieldOp : DistOpt_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"OwnedByOp">]> {
  let summary = "the results of a distopt.owned_by body";
  let description = [{
    ```mlir
    distopt.yield %a, %b : tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

/// An optimizer update: `param` and `grad` share one floating-point tensor
/// type, and so does every state tensor except one of a shape of its own
/// (getStateShapeFor: Dion's right factor); `lr` is a float scalar; `step`
/// is the 1-based number of this step. Hyperparameters are attributes, except those named in
/// `runtime_hyperparameter_names`, whose f64 values are the
/// `runtime_hyperparameters` operands (the attribute, if any, then says what
/// the structure follows: which state tensors there are). Results: the new
/// parameter, then the new state in the order of `state`.
// An optimizer update; `specType` is the param spec's `optimizer.type` that
// selects it. Each defines getStateKeysFor, getRuntimeHyperparameterKeys,
// getSpecKeys and getCompiledHyperparameter (OptimizerOps.cpp) and its
// lowering (LowerOptimizers.cpp); the spec reader, the passes and the step
// interface find it through OptimizerOpInterface.
// `effects`: Pure, or (an update that may communicate, as Dion's low-rank
// sync) the op's own getEffects.
// `extraDeclaration`: more of the op's C++ class (an interface method of
// its own).
class DistOpt_OptimizerOp<string mnemonic, string specType,
                          dag hyperparameters, bit elementwise = 1,
                          int minParamRank = 0, bit ownStateShapes = 0,
                          list<Trait> effects = [Pure],
                          code extraDeclaration = "">
    : DistOpt_Op<mnemonic, !listconcat(effects, [AttrSizedOperandSegments,
        DeclareOpInterfaceMethods<InferTypeOpInterface>,
        DistOpt_OptimizerOpInterface])> {
  let arguments = !con((ins DistOpt_FloatTensor:$param,
                            DistOpt_FloatTensor:$grad,
                            Variadic<DistOpt_FloatTensor>:$state,
                            DistOpt_Scalar:$lr, I64:$step,
                            Variadic<F64>:$runtime_hyperparameters),
                       hyperparameters,
                       (ins UnitAttr:$maximize,
                            DefaultValuedAttr<StrArrayAttr, "{}">:
                                $runtime_hyperparameter_names));
  let results = (outs DistOpt_FloatTensor:$new_param,
                      Variadic<DistOpt_FloatTensor>:$new_state);
  let assemblyFormat = [{
    $param `,` $grad (`state` `(` $state^ `)`)? `lr` `(` $lr `)` `step` `(` $step `)`
    (`runtime` `(` custom<RuntimeHyperparameters>($runtime_hyperparameters,
                                                  $runtime_hyperparameter_names)^ `)`)?
    attr-dict `:` custom<SameTypeAs>(type($param), ref($state), type($grad), type($state))
    `,` type($lr)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// torch.optim's names of the state tensors the hyperparameters call
    /// for, in operand order.
    ::llvm::SmallVector<::llvm::StringRef> getStateKeys() {
      return getStateKeysFor([&](::llvm::StringRef name) {
        return (*this)->getAttr(name);
      });
    }
    static ::llvm::SmallVector<::llvm::StringRef> getStateKeysFor(
        ::llvm::function_ref<::mlir::Attribute(::llvm::StringRef)>
            hyperparameter);
    /// The f64 hyperparameters that may be runtime operands instead.
    static ::llvm::ArrayRef<::llvm::StringRef> getRuntimeHyperparameterKeys();
    /// The keys of the spec's optimizer object it reads (besides type, lr).
    static ::llvm::ArrayRef<::mlir::distopt::OptimizerSpecKey> getSpecKeys();
    static ::llvm::StringRef getSpecType() { return "}] # specType # [{"; }
    static bool isElementwise() { return }] # !if(elementwise, "true", "false") # [{; }
    static int64_t getMinParamRank() { return }] # minParamRank # [{; }
    /// The compiled value of one of those (its attribute or default).
    double getCompiledHyperparameter(::llvm::StringRef key);
    /// The number of state tensors the hyperparameters call for.
    unsigned getExpectedNumState() { return getStateKeys().size(); }
  }] # !if(elementwise, [{
    /// An element-wise update's work grows with its elements.
    int64_t getUpdateFlops() {
      return ::llvm::cast<::mlir::RankedTensorType>(getParam().getType())
          .getNumElements();
    }
  }], [{
    /// The matrix products of one update (OptimizerOps.cpp).
    int64_t getUpdateFlops();
  }]) # !if(ownStateShapes, [{
    static ::llvm::SmallVector<int64_t> getStateShapeFor(
        ::llvm::StringRef key, ::llvm::ArrayRef<int64_t> paramShape,
        ::llvm::function_ref<::mlir::Attribute(::llvm::StringRef)>
            hyperparameter);
  }], "") # extraDeclaration;
}

def DistOpt_SGDUpdateOp : DistOpt_OptimizerOp<"sgd_update", "sgd", (ins
    DefaultValuedAttr<F64Attr, "0.0">:$momentum,
    DefaultValuedAttr<F64Attr, "0.0">:$dampening,
    DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
    UnitAttr:$nesterov)> {
  let summary = "the update of torch.optim.SGD";
  let description = [{
    With `g = grad` (negated if `maximize`), `wd = weight_decay`, `mu = momentum`,
    `tau = dampening`:

    ```
    g = g + wd * p                                 (if wd != 0)
    b = (step == 1) ? g : mu * b + (1 - tau) * g   (if mu != 0; state: b)
    g = nesterov ? g + mu * b : b                  (if mu != 0)
    p = p - lr * g
    ```

    State: the momentum buffer, present exactly when `momentum != 0`.

    ```mlir
    %p1, %b1 = distopt.sgd_update %p, %g state(%b) lr(%lr) step(%t) {momentum = 9.000000e-01, nesterov}
        : tensor<1024xf32>, f32
    ```
  }];
}

defvar AdamHyperparameters = (ins
    DefaultValuedAttr<F64Attr, "0.9">:$beta1,
    DefaultValuedAttr<F64Attr, "0.999">:$beta2,
    DefaultValuedAttr<F64Attr, "1e-08">:$eps,
    UnitAttr:$amsgrad);

def DistOpt_AdamUpdateOp : DistOpt_OptimizerOp<"adam_update", "adam",
    !con(AdamHyperparameters,
         (ins DefaultValuedAttr<F64Attr, "0.0">:$weight_decay))> {
  let summary = "the update of torch.optim.Adam (L2 weight decay added to the gradient)";
  let description = [{
    With `g = grad` (negated if `maximize`), `t = step`:

    ```
    g  = g + weight_decay * p                      (if weight_decay != 0)
    m  = beta1 * m + (1 - beta1) * g
    v  = beta2 * v + (1 - beta2) * g * g
    vm = max(vm, v)                                (if amsgrad; state: vm)
    bc1 = 1 - beta1^t;   bc2 = 1 - beta2^t
    p  = p - (lr / bc1) * m / (sqrt(amsgrad ? vm : v) / sqrt(bc2) + eps)
    ```

    State: `m` (exp_avg), `v` (exp_avg_sq), and `vm` (max_exp_avg_sq) with
    `amsgrad`.

    ```mlir
    %p1, %m1, %v1 = distopt.adam_update %p, %g state(%m, %v) lr(%lr) step(%t)
        : tensor<1024xf32>, f32
    ```
  }];
}

def DistOpt_AdamWUpdateOp : DistOpt_OptimizerOp<"adamw_update", "adamw",
    !con(AdamHyperparameters,
         (ins DefaultValuedAttr<F64Attr, "0.01">:$weight_decay))> {
  let summary = "the update of torch.optim.AdamW (decoupled weight decay)";
  let description = [{
    As `distopt.adam_update`, except that the decay is applied to the
    parameter, not added to the gradient, before the moment updates:

    ```
    p = p * (1 - lr * weight_decay)
    ```

    ```mlir
    %p1, %m1, %v1 = distopt.adamw_update %p, %g state(%m, %v) lr(%lr) step(%t) {weight_decay = 1.000000e-01}
        : tensor<1024xf32>, f32
    ```
  }];
}

def DistOpt_RMSpropUpdateOp : DistOpt_OptimizerOp<"rmsprop_update", "rmsprop", (ins
    DefaultValuedAttr<F64Attr, "0.99">:$alpha,
    DefaultValuedAttr<F64Attr, "1e-08">:$eps,
    DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
    DefaultValuedAttr<F64Attr, "0.0">:$momentum,
    UnitAttr:$centered)> {
  let summary = "the update of torch.optim.RMSprop";
  let description = [{
    With `g = grad` (negated if `maximize`):

    ```
    g  = g + weight_decay * p                      (if weight_decay != 0)
    s  = alpha * s + (1 - alpha) * g * g           (state: s)
    ga = alpha * ga + (1 - alpha) * g              (if centered; state: ga)
    d  = sqrt(centered ? s - ga * ga : s) + eps
    b  = momentum * b + g / d;  p = p - lr * b     (if momentum > 0; state: b)
    p  = p - lr * g / d                            (otherwise)
    ```

    State, in order: `s` (square_avg), `b` (momentum_buffer) when
    `momentum > 0`, `ga` (grad_avg) when `centered`.

    ```mlir
    %p1, %s1 = distopt.rmsprop_update %p, %g state(%s) lr(%lr) step(%t) : tensor<1024xf32>, f32
    ```
  }];
}

def DistOpt_AdagradUpdateOp : DistOpt_OptimizerOp<"adagrad_update", "adagrad", (ins
    DefaultValuedAttr<F64Attr, "0.0">:$lr_decay,
    DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
    DefaultValuedAttr<F64Attr, "1e-10">:$eps,
    DefaultValuedAttr<F64Attr, "0.0">:$initial_accumulator_value)> {
  let summary = "the update of torch.optim.Adagrad";
  let description = [{
    With `g = grad` (negated if `maximize`):

    ```
    g   = g + weight_decay * p                     (if weight_decay != 0)
    clr = lr / (1 + (step - 1) * lr_decay)
    s   = initial_accumulator_value                (if step == 1)
    s   = s + g * g                                (state: s, the sum)
    p   = p - clr * g / (sqrt(s) + eps)
    ```

    As torch creates the sum filled with `initial_accumulator_value` when it
    first updates a parameter, the state operand is not read at step 1 (as
    SGD's momentum buffer is not).

    ```mlir
    %p1, %s1 = distopt.adagrad_update %p, %g state(%s) lr(%lr) step(%t) : tensor<1024xf32>, f32
    ```
  }];
}

def DistOpt_MuonUpdateOp : DistOpt_OptimizerOp<"muon_update", "muon", (ins
    DefaultValuedAttr<F64Attr, "0.95">:$momentum,
    DefaultValuedAttr<BoolAttr, "true">:$nesterov,
    DefaultValuedAttr<F64Attr, "0.1">:$weight_decay,
    DefaultValuedAttr<F64Attr, "1e-07">:$eps,
    DefaultValuedAttr<I64Attr, "5">:$ns_steps,
    DefaultValuedAttr<DenseF64ArrayAttr, "{3.4445, -4.775, 2.0315}">:
        $ns_coefficients,
    DefaultValuedAttr<StrAttr, "\"original\"">:$adjust_lr_fn,
    OptionalAttr<TypeAttrOf<AnyFloat>>:$ns_dtype), /*elementwise=*/0,
    /*minParamRank=*/2> {
  let summary = "the update of torch.optim.Muon (momentum orthogonalized)";
  let description = [{
    For a matrix parameter (of rank 2, or more: then as the matrix of its
    first dimension's rows, a conv weight flattened), as torch.optim.Muon
    (PyTorch 2.9) does, with `g = grad` (negated if `maximize`),
    `mu = momentum`:

    ```
    b = lerp(b, g, 1 - mu)                       (state: b, momentum_buffer)
    u = nesterov ? lerp(g, b, mu) : b
    X = u / max(||u||_F, eps)   in ns_dtype, transposed when rows > columns
    ns_steps times (a, b, c = ns_coefficients):
      A = X X^T;  B = b A + c A A;  X = a X + B X
    p = p * (1 - lr * weight_decay)
    p = p - lr * ratio * X                       (X transposed back)
    ```

    `lerp(x, y, w)` is torch's: `x + w (y - x)` for `|w| < 0.5`, else
    `y - (y - x)(1 - w)`, each a fused multiply-add. `ratio` is
    `sqrt(max(1, rows / columns))` for `adjust_lr_fn = "original"` (Keller
    Jordan's, torch's default) and `0.2 sqrt(max(rows, columns))` for
    `"match_rms_adamw"` (Moonshot's, which lets AdamW's rate and decay
    carry over). The iterations run in `ns_dtype`, f32 (when absent) or
    bf16 (torch's choice, made for GPUs); matrix products accumulate in f32 and are rounded once.
    The norm accumulates in f64. The momentum buffer starts at zero.

    ```mlir
    %p1, %b1 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {adjust_lr_fn = "match_rms_adamw"}
        : tensor<256x128xf32>, f32
    ```
  }];
}

def DistOpt_DionUpdateOp : DistOpt_OptimizerOp<"dion_update", "dion", (ins
    DefaultValuedAttr<F64Attr, "0.95">:$mu,
    DefaultValuedAttr<F64Attr, "0.01">:$weight_decay,
    DefaultValuedAttr<F64Attr, "1e-08">:$epsilon,
    OptionalAttr<I64Attr>:$rank,
    DefaultValuedAttr<F64Attr, "1.0">:$rank_fraction,
    DefaultValuedAttr<I64Attr, "0">:$seed,
    OptionalAttr<FlatSymbolRefAttr>:$group,
    OptionalAttr<I64Attr>:$batch,
    OptionalAttr<FlatSymbolRefAttr>:$row_group,
    OptionalAttr<I64Attr>:$matrix_rows), /*elementwise=*/0,
    /*minParamRank=*/2, /*ownStateShapes=*/1,
    [DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
     DeclareOpInterfaceMethods<SymbolUserOpInterface>], [{
    /// With a group, the update averages its factors over it.
    ::mlir::FlatSymbolRefAttr getGradientGroup() { return getGroupAttr(); }
    /// The group the update communicates over, if any: `group` (the
    /// low-rank sync) or `row_group` (row shards).
    ::mlir::FlatSymbolRefAttr getCommunicatorGroup() {
      return getGroupAttr() ? getGroupAttr() : getRowGroupAttr();
    }
    /// The type its factors are made (and, synced, averaged) in: the
    /// products' accumulation type, f64 for f64 parameters, else f32.
    ::mlir::FloatType getFactorElementType() {
      ::mlir::Type element = ::llvm::cast<::mlir::RankedTensorType>(
          getParam().getType()).getElementType();
      if (element.isF64())
        return ::llvm::cast<::mlir::FloatType>(element);
      return ::mlir::Float32Type::get(getContext());
    }
  }]> {
  let summary = "the update of Dion (orthonormalized by low-rank power "
                "iteration, with error feedback)";
  let description = [{
    Dion (Ahn et al., "Dion: Distributed Orthonormalized Updates", 2025,
    Algorithm 1, as Microsoft's `dion_simple.py` runs it: a wide matrix is
    not transposed, where their `dion.py` works on the transpose when
    m < n, with an m x r factor) for a
    matrix parameter X of m rows and n columns (of rank 2, or more: then as
    the matrix of its first dimension's rows), with `G = grad` (negated if
    `maximize`) and rank `r`:

    ```
    B  = M + G                             (M: state `momentum`)
    P  = B Q                               (m x r; Q: n x r, see below)
    P  = orthonormalize(P)                 (modified Gram-Schmidt, twice)
    R  = B^T P                             (n x r)
    M  = B - (1 - mu) P R^T                (error feedback)
    Q  = R / (||R||_column + epsilon)      (a zero column keeps its old Q)
    X  = X (1 - lr weight_decay)
    X  = X - lr sqrt(m / n) P Q^T
    ```

    `r` is `rank` when given, else `ceil(rank_fraction * min(m, n))`, and at
    most `min(m, n)` (at least 1 when both are non-zero). The state
    `right_factor` holds Q transposed, r x n, so that each of its rows is
    contiguous. At step 1 the momentum is zero and Q is drawn from `seed`:
    element (i, j) of Q^T is `2 u - 1`, `u` the top 24 bits of
    `h(i n + j + seed * 0x9E3779B9)` over 2^24, in 32-bit arithmetic, with
    `h(x)`: `x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b;
    x ^= x >> 16` (every rank draws the same factor without communicating).
    The orthonormalization is modified Gram-Schmidt over the columns, left
    to right, run twice (once leaves the columns off orthonormal by about
    the rounding times P's condition number; twice, to rounding, as the
    paper's QR); each column is divided by its norm plus `epsilon`, and a
    zero column stays zero (also with `epsilon` 0).
    Products accumulate in f32 (f64 for f64 parameters).

    With `group` (Dion's compressed data-parallel sync, PowerSGD's idea),
    `G` is this rank's own gradient, not yet reduced, and `M` this rank's
    own momentum; the two factors are averaged over the group as they are
    made, and nothing else is communicated:

    ```
    P  = mean over the group of (B Q)      (before the orthonormalization)
    R  = mean over the group of (B^T P)
    ```

    Everything after `R` is as above, so the parameter and Q stay the same
    on every rank while each rank's `M` keeps its own error. As the steps
    are linear in `M` and `G`, the mean of the ranks' momenta follows the
    momentum of Dion on the averaged gradient, and so do the parameters:
    exactly in exact arithmetic, to rounding in floating point
    (`--distopt-dion-low-rank-sync` makes this form from the averaged one).
    Each step all-reduces `(m + n) r` elements instead of `m n`. Updates
    of a block with the same `batch` number (and group and factor type)
    are lowered together, as `distopt.powersgd_all_reduce`'s batches are:
    every member's P, one all-reduce for all of them, every member's R,
    one more; without `batch` an update all-reduces its own two factors.

    With `row_group` and `matrix_rows` (ZeRO's low-rank plan, which
    --distopt-shard-optimizer makes: no matrix is ever whole on a rank),
    the parameter, `G` and `M` are this rank's block of rows of a matrix
    of `matrix_rows` rows: the matrix's rows, padded with zero rows to a
    multiple of the group's size K, cut into K blocks of the parameter's
    rows, block k on the group's rank k. Only the factors move:

    ```
    P  = all_gather over the group of (B Q)   (each rank's rows of P)
    P  = orthonormalize(P)                    (on every rank, whole)
    R  = sum over the group of (B^T P)        (each rank's rows' share)
    ```

    and each rank updates its rows of `M` and `X` from its rows of P; `Q`
    and the scale `sqrt(m / n)` are the whole matrix's (`m` is
    `matrix_rows`), and `Q` is the same on every rank. The padding rows
    stay zero. This is the update of the whole matrix up to the order of
    the sums over rows in `R`; each step moves `m r` elements (gathered)
    and `n r` (all-reduced) instead of the matrix.

    ```mlir
    %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 32 : i64}
        : tensor<256x128xf32> [tensor<256x128xf32>, tensor<32x128xf32>], f32
    %p2, %m2, %q2 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {group = @dp, rank = 32 : i64}
        : tensor<256x128xf32> [tensor<256x128xf32>, tensor<32x128xf32>], f32
    %p3, %m3, %q3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {row_group = @dp, matrix_rows = 250 : i64, rank = 32 : i64}
        : tensor<64x128xf32> [tensor<64x128xf32>, tensor<32x128xf32>], f32
    ```
  }];
}

def DistOpt_CheckRateOp : DistOpt_Op<"check_rate",
    [MemoryEffects<[MemWrite]>]> {
  let summary = "fail the step, before it changes anything, on a learning "
                "rate that is not finite and non-negative";
  let description = [{
    A parameter group's effective rate (the step's rate times the group's
    `lr_scale` times a schedule's factor, or the group's own rate) can reach
    infinity or NaN at run time, and every parameter of the group with it.
    This op makes the step fail instead, with an error naming the group
    (`param_group`: its index in the spec's `param_groups`, -1 for the
    optimizer's defaults) and the rate, before any collective and any
    update: it stands at the start of the step, and the runtime reports the
    failure as an invalid argument that leaves the session usable. It has
    a write effect so that it is neither removed nor moved.

    ```mlir
    distopt.check_rate %rate param_group -1
    ```
  }];
  let arguments = (ins F64:$rate, I64Attr:$param_group);
  let assemblyFormat = "$rate `param_group` $param_group attr-dict";
}

//===----------------------------------------------------------------------===//
// Mixed precision
//===----------------------------------------------------------------------===//

def DistOpt_AllFiniteOp : DistOpt_Op<"all_finite", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "whether every gradient element is finite, on every rank";
  let description = [{
    Returns true when no element of any input is an infinity or a NaN. With
    `on @group` the answer is agreed across the group (a logical AND over
    ranks), so that every rank skips or takes the step alike; without it the
    check is local.

    ```mlir
    %ok = distopt.all_finite %g0, %g1 on @dp : tensor<1024xbf16>, tensor<64xbf16>
    ```
  }];
  let arguments = (ins Variadic<DistOpt_FloatTensor>:$inputs,
                       OptionalAttr<FlatSymbolRefAttr>:$group);
  let results = (outs I1:$result);
  let assemblyFormat = [{
    $inputs (`on` $group^)? attr-dict `:` type($inputs)
  }];
  let hasVerifier = 1;
}

def DistOpt_UnscaleOp : DistOpt_Op<"unscale", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "divide gradients by the loss scale";
  let description = [{
    `result = input * (1 / scale)`, the reciprocal taken once in the scale's
    type, as torch's GradScaler does.

    ```mlir
    %g = distopt.unscale %g0 by %scale : tensor<1024xf32>, f32
    ```
  }];
  let arguments = (ins DistOpt_FloatTensor:$input, DistOpt_Scalar:$scale);
  let results = (outs DistOpt_FloatTensor:$result);
  let assemblyFormat = "$input `by` $scale attr-dict `:` type($input) `,` type($scale)";
}

def DistOpt_LossScaleUpdateOp : DistOpt_Op<"loss_scale_update", [Pure,
    AllTypesMatch<["scale", "new_scale"]>,
    AllTypesMatch<["growth_tracker", "new_growth_tracker"]>]> {
  let summary = "dynamic loss scaling (torch GradScaler.update)";
  let description = [{
    ```
    finite:  tracker = tracker + 1
             if tracker == growth_interval:
               tracker = 0
               scale *= growth_factor   (only if the product is finite)
    else:    scale *= backoff_factor; tracker = 0
    ```

    ```mlir
    %s1, %n1 = distopt.loss_scale_update %s, %n, %ok : f32, i64
    ```
  }];
  let arguments = (ins DistOpt_Scalar:$scale, I64:$growth_tracker, I1:$finite,
                       DefaultValuedAttr<F64Attr, "2.0">:$growth_factor,
                       DefaultValuedAttr<F64Attr, "0.5">:$backoff_factor,
                       DefaultValuedAttr<DistOpt_I64Attr, "2000">:$growth_interval);
  let results = (outs DistOpt_Scalar:$new_scale, I64:$new_growth_tracker);
  let assemblyFormat = [{
    $scale `,` $growth_tracker `,` $finite attr-dict `:` type($scale) `,` type($growth_tracker)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Clipping
//===----------------------------------------------------------------------===//

def DistOpt_ClipGradNormOp : DistOpt_Op<"clip_grad_norm", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "global-norm gradient clipping (torch clip_grad_norm_)";
  let description = [{
    With `n` the `norm_type`-norm of all inputs taken together (the maximum
    absolute value for `inf`):

    ```
    c = min(1, max_norm / (n + 1e-6));   result_i = input_i * c
    ```

    and `n` as the last result. Like torch, the norm of each tensor is
    taken first (accumulated in f64) and rounded to f32, then the norm of
    those norms. With `on @group`, the inputs are this rank's disjoint
    shards of the gradients: the partial norms are combined across the
    group, so each element counts exactly once (sum of p-th powers, or max
    for `inf`) and every rank computes the same `n`.

    `tensor_bounds` (with a group; one array per input) says which tensors
    a shard holds parts of: input `i` is this rank's chunk `[r * S, (r + 1)
    * S)` of a flat buffer (`S` its length, `r` the rank in the group), and
    its array lists `[begin, end)` of each tensor in that flat buffer.
    Each tensor's partial sum is then combined across the group before its
    norm is rounded, so the result is the norm of the whole tensors, bit
    for bit as without sharding (what ZeRO's `--distopt-shard-optimizer`
    writes). Without it, each shard counts as one tensor.

    ```mlir
    %c0, %c1, %n = distopt.clip_grad_norm %g0, %g1 max_norm 1.000000e+00 on @dp
        : tensor<256xf32>, tensor<64xf32> -> f32
    %c, %m = distopt.clip_grad_norm %chunk max_norm 1.000000e+00 on @dp
        {tensor_bounds = [array<i64: 0, 300, 304, 500>]} : tensor<256xf32> -> f32
    ```
  }];
  let arguments = (ins Variadic<DistOpt_FloatTensor>:$inputs, F64Attr:$max_norm,
                       DefaultValuedAttr<F64Attr, "2.0">:$norm_type,
                       OptionalAttr<FlatSymbolRefAttr>:$group,
                       OptionalAttr<TypedArrayAttrBase<DenseI64ArrayAttr,
                           "one array of tensor bounds per input">>:$tensor_bounds);
  let results = (outs Variadic<DistOpt_FloatTensor>:$clipped,
                      DistOpt_Scalar:$total_norm);
  let assemblyFormat = [{
    $inputs `max_norm` $max_norm (`on` $group^)? attr-dict `:`
    custom<TypesAndSameResults>(type($inputs), type($clipped)) `->` type($total_norm)
  }];
  let hasVerifier = 1;
}

#endif // DISTOPT_DIALECT_DISTOPT_IR_DISTOPTOPS_TD
