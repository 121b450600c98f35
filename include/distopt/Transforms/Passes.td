//===- Passes.td - distopt-to-distopt transformations ------*- tablegen -*-===//
//
// The passes that rewrite a step within the distopt dialect: bucketing,
// the 1/N fusion, reduction precision, ZeRO sharding, PowerSGD, overlap,
// and the checks and report. Flags are part of the product (README.md lists
// them).
// Each pass has a test file named after its flag in test/Transforms/.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRANSFORMS_PASSES_TD
#define DISTOPT_TRANSFORMS_PASSES_TD

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
    kind, `cap-mb` after that (MB = 2^20 bytes, as in DDP). A collective at
    least as large as `cap-mb` would fill a bucket alone, so it is left as
    it is: reduced in place rather than copied into a bucket and out again
    (DDP adds it to the open bucket and closes that). A collective
    joins a bucket only where the bucket can be placed after every input is
    computed and before any result is used; otherwise a new bucket starts.
    An input that another bucket reduces is computed where that bucket
    goes, so a bucket reading one goes there or later, and is left out if
    that is after its first use. A collective never shares a bucket with
    one whose result it reads.
    A bucket of one collective is left as it was, and collectives that
    already reduce a bucket are not bucketed again, so the pass is
    idempotent.

    Caps chosen for the hardware: given the link's all_reduce `latency-us`
    and `bandwidth-gb-per-s` (which `distopt-calibrate` measures on the
    ranks the step will run on), the caps come from a model instead. n
    buckets reduced while other work runs pay n latencies, and the last
    bucket's transfer cannot be hidden; for S bytes of one kind of bucket
    n = round(sqrt(S / (latency * bandwidth))), at least 1, buckets of S/n
    bytes (docs/bucketing.md). The caps are then not given.

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
           "Byte alignment of each tensor in a bucket (a power of two)">,
    Option<"latencyUs", "latency-us", "double", "0.0",
           "All-reduce latency in microseconds (distopt-calibrate); with "
           "bandwidth-gb-per-s, bucket caps come from the link model">,
    Option<"bandwidthGbPerS", "bandwidth-gb-per-s", "double", "0.0",
           "All-reduce bandwidth in GB/s, 10^9 bytes per second "
           "(distopt-calibrate)">
  ];
  let statistics = [
    Statistic<"numBuckets", "num-buckets", "Buckets created">,
    Statistic<"numBucketed", "num-bucketed", "Collectives merged into buckets">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def GradAsBucketViewPass
    : Pass<"distopt-grad-as-bucket-view", "::mlir::func::FuncOp"> {
  let summary = "Make gradients views of their bucket (a flat argument)";
  let description = [{
    PyTorch DDP's `gradient_as_bucket_view` as a transformation of the
    step's interface. Each `distopt.bucket_pack` whose inputs are gradient
    arguments of the function (`distopt.role = "grad"`) becomes one flat
    gradient argument of the bucket's type, `distopt.name = "bucket<i>"`,
    with a `distopt.layout` giving each gradient's name, shape and offset
    (as `--distopt-shard-optimizer` describes its flat buffers). The caller
    writes the gradients straight into that buffer (zero padding), so the
    step no longer copies them into the bucket, and the reduced bucket is
    read in place: `bucket_unpack` lowers to views. Other uses of a
    gradient read it from the bucket argument.

    ```mlir
    func.func @step(%ga: tensor<16xf32> {distopt.name = "a", distopt.role = "grad"},
                    %gb: tensor<8xf32> {distopt.name = "b", distopt.role = "grad"}) ... {
      %p = distopt.bucket_pack %gb, %ga : tensor<8xf32>, tensor<16xf32> -> tensor<32xf32>
      %r = distopt.all_reduce avg %p on @dp : tensor<32xf32>
    // becomes
    func.func @step(%bucket: tensor<32xf32> {distopt.name = "bucket0",
                      distopt.role = "grad", distopt.layout = [
                      {name = "b", offset = 0 : i64, shape = array<i64: 8>},
                      {name = "a", offset = 16 : i64, shape = array<i64: 16>} ]
                    }) ... {
      %r = distopt.all_reduce avg %bucket on @dp : tensor<32xf32>
    ```

    The bucket argument takes the place of its first gradient. Returned
    gradients (results with `distopt.role = "grad"` named after the
    bucket's gradients) become one returned bucket in the same way. A
    bucket is left as it is when a gradient is packed into more than one
    bucket, lacks a unique name, or only some of its gradients are
    returned. Apply it after the passes that form buckets
    (`--distopt-bucketize`, `--distopt-shard-optimizer` with the flat
    strategy at stage 2 or 3, `--distopt-powersgd`, which match packs of
    gradient arguments) and to a function without callers: like them, it
    changes the function's signature.
  }];
  let statistics = [
    Statistic<"numViews", "num-bucket-views",
              "Buckets that became gradient arguments">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def ParamAsBucketViewPass
    : Pass<"distopt-param-as-bucket-view", "::mlir::func::FuncOp"> {
  let summary = "Make parameters views of their flat buffer (a flat argument)";
  let description = [{
    FSDP's `FlatParameter` for the flat ZeRO stages: each
    `distopt.bucket_pack` whose inputs are parameter arguments
    (`distopt.role = "param"`) becomes one flat parameter argument of the
    packed type, `distopt.name = "flat_param<i>"`, with a `distopt.layout`
    giving each parameter's name, shape and offset, exactly as
    `--distopt-grad-as-bucket-view` does for gradients (same conditions,
    same placement). Returned parameters that are all of one
    `bucket_unpack` of the packed type are returned as its input: under
    `--distopt-shard-optimizer=stage=1|2` (flat) that is the all-gathered
    buffer. The caller keeps its parameters as views of that buffer.

    Mixed precision: where the main parameters hold the values, the step
    does not read its bf16/f16 parameters, only returns them, unpacked from
    the all-gathered buffer. A `bucket_unpack` whose outputs are all
    returned as parameters (each once, used nowhere else) under unique
    names of parameter arguments that nothing reads becomes their flat
    argument in the same way, and the unpacked buffer is returned as it.

    ```mlir
      %flat = distopt.bucket_pack %w, %b : tensor<8x4xf32>, tensor<5xf32> -> tensor<64xf32>
      %mine = distopt.shard_slice %flat on @world : tensor<64xf32> -> tensor<32xf32>
      %new, %m, %v = distopt.adamw_update %mine, ...
      %all = distopt.all_gather %new on @world : tensor<32xf32> -> tensor<64xf32>
      %w2, %b2 = distopt.bucket_unpack %all : tensor<64xf32> -> tensor<8x4xf32>, tensor<5xf32>
      return %w2, %b2, ...
    // becomes
    func.func @step(%flat_param0: tensor<64xf32> {distopt.name = "flat_param0",
                      distopt.role = "param", distopt.layout = [...]}, ...) ... {
      %mine = distopt.shard_slice %flat_param0 on @world : tensor<64xf32> -> tensor<32xf32>
      %new, %m, %v = distopt.adamw_update %mine, ...
      %all = distopt.all_gather %new on @world : tensor<32xf32> -> tensor<64xf32>
      return %all, ...
    ```

    Lowered, the shard is a view of the argument, the update writes it in
    place, and the all-gather writes into the argument's buffer (this
    rank's chunk is already in its slot), so a ZeRO-1/2 step copies no
    parameter. Without it, each step copies its parameter shard out of the
    parameters and every parameter back out of the gathered buffer.
  }];
  let statistics = [
    Statistic<"numViews", "num-flat-params",
              "Flat buffers that became parameter arguments">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def FuseDivIntoAllReducePass
    : Pass<"distopt-fuse-div-into-allreduce", "::mlir::func::FuncOp"> {
  let summary = "Fold a scaling by a constant into the reduction";
  let description = [{
    Folds a multiplication or division by a constant that follows a `sum`
    `all_reduce` or `reduce_scatter` (its only use), or that produces its
    input, into the collective, where the collective computes the same
    quotient:
    - a division by exactly `N` (the group size), or a multiplication by
      exactly `1/N`, becomes `avg`, which divides the sum by `N` exactly
      (`N` must be exact in the runtime's arithmetic type: f32 for data of
      32 bits or fewer, f64 for f64);
    - any other factor becomes `premul_sum(factor)` only where the factor
      is exact in the element type and in the wire type (`1/c` for a
      division by `c`: `c` a power of two). A backend multiplies in those
      types (NCCL rounds the factor to the data's type): an inexact factor
      would scale by another number. A division by 3 on 4 ranks stays a
      division after the sum.

    Recognised scalings: `arith.divf` / `arith.mulf` by a splat constant
    (either operand order for `mulf`), `linalg.div` / `linalg.mul` whose
    other input is a splat constant or a `linalg.fill` of a constant, and a
    division by a constant done in a wider type and rounded back
    (`arith.truncf` of an `arith.divf` of an `arith.extf`), as the importer
    divides a bf16 gradient by 257 (which bf16 rounds to 256) in f32.

    The element type and the backend decide the form:
    - `backend=nccl` and `backend=mpi` reduce with `avg` and `premul_sum`
      natively (distopt's MPI runtime scales while it reduces);
    - `backend=sum-only` (gloo-like) has neither: the pass changes nothing.
    - For `f16`, an average is split as FSDP does, so that the sum cannot
      overflow: `premul_sum(1/a)` before the reduction and a division by `b`
      after it (in f32 where f16 cannot hold `b`), with `a * b = N` and `a`
      FSDP's pre-divide factor (doubled from 1 while it is below `N / a`),
      doubled only while it divides `N`: an odd `N` is not split.

    The scaling happens exactly once: the scaling op is replaced (after the
    collective) or bypassed (before it). Anything the pass cannot prove (a
    non-constant or non-splat factor, a result with several uses, a factor
    that is not exact, integer data) is left alone.
  }];
  let options = [
    Option<"backend", "backend", "CollectiveBackend",
           "CollectiveBackend::Nccl",
           "Target backend: nccl, mpi or sum-only",
           "collectiveBackendChoices()">
  ];
  let statistics = [
    Statistic<"numFused", "num-fused", "Scalings folded into collectives">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect",
                           "::mlir::arith::ArithDialect"];
}

def HierarchicalAllReducePass
    : Pass<"distopt-hierarchical-all-reduce", "::mlir::ModuleOp"> {
  let summary = "All-reduce large buffers inside each node, then across nodes";
  let description = [{
    Rewrites each synchronous `all_reduce` over the whole world of at least
    `min-bytes` into the hierarchical form NCCL's trees, Horovod's
    hierarchical allreduce and ZeRO++'s hpZ use on a cluster of nodes of
    `node-size` ranks (world ranks `k*S .. k*S+S-1` on node `k`):

    1. `reduce_scatter` inside the node: each rank holds 1/S of the node's sum;
    2. `all_reduce` of that chunk across the nodes (one rank per node and
       chunk: only 1/S of the data crosses the slow links);
    3. `all_gather` inside the node.

    The data is flattened and padded to a multiple of S (zeros, sliced off
    again). `sum`, `premul_sum` (the scale applied in the first stage),
    `min`, `max` and `prod` keep their kind; `avg` sums in both stages and
    divides the chunk by the world size before the gather, as the flat `avg`
    divides the sum. The wire type carries over to all three. Results equal
    the flat all-reduce up to the order of the additions (bit for bit for
    `min`, `max` and exactly representable sums).

    The pass declares `distopt.mesh @nodes` of shape `[W/S, S]` and the
    groups `@intra_node` (axis 1) and `@inter_node` (axis 0), or reuses
    them. Smaller all-reduces, asynchronous ones, sub-group ones, 0-d
    tensors and a world of one node (or nodes of one rank) are left flat.
    A `node-size` that does not divide the world (the module's
    `distopt.world_size`, or its groups spanning the world) into whole
    nodes is an error, as `--distopt-hybrid-mesh`'s `shard-size` is.
    `node-size=0` (the default) changes nothing.
  }];
  let options = [
    Option<"nodeSize", "node-size", "int64_t", "0",
           "Ranks per node (0: leave every all_reduce flat)">,
    Option<"minBytes", "min-bytes", "int64_t", "1048576",
           "Smallest all_reduce (payload bytes) made hierarchical">
  ];
  let statistics = [
    Statistic<"numSplit", "num-hierarchical",
              "All-reduces made hierarchical">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def WidenReductionsPass
    : Pass<"distopt-widen-reductions", "::mlir::func::FuncOp"> {
  let summary = "Reduce bf16/f16 data in f32 (reduction precision control)";
  let description = [{
    A ring reduction of bf16 or f16 data rounds each partial sum to the
    data's type at every hop, so its error grows with the number of ranks
    (Megatron-LM's `grad_reduce_in_fp32` and FSDP's `reduce_dtype` exist
    for this). The pass makes every `sum`, `avg`, `premul_sum` or `prod`
    `all_reduce`, `reduce_scatter` and `reduce` (and their `*_start`
    forms, with their `wait`) of a float type narrower than `dtype` work in
    `dtype`: the input is extended, the partial sums travel and accumulate
    in `dtype`, and the result is rounded once. Where the result was
    extended to `dtype` anyway (the gradient of an fp32 main parameter) it
    is used as it is, never rounded; other uses get it rounded to the data's
    type. Twice the bytes travel (the report counts them).

    ```mlir
    %r = distopt.all_reduce avg %g on @dp : tensor<1024xbf16>
    %g32 = arith.extf %r : tensor<1024xbf16> to tensor<1024xf32>
    // becomes
    %w = arith.extf %g : tensor<1024xbf16> to tensor<1024xf32>
    %g32 = distopt.all_reduce avg %w on @dp : tensor<1024xf32>
    ```

    An f16 average that `--distopt-fuse-div-into-allreduce` split to keep
    the sum from overflowing (`premul_sum(1/a)`, then a division by `b`,
    in f16 or in f32) becomes one `avg` again: the wide sum cannot
    overflow. Another `premul_sum(s)` followed by a division by `c` becomes
    `premul_sum(s / c)` only where that factor is exact in `dtype`; else
    the division stays. Left as they
    are: `max`/`min` (exact in any precision), integer data, and
    collectives with a `wire` type (a choice of bytes on the wire, warned
    about). Run it after `--distopt-fuse-div-into-allreduce` and before the
    passes that shard, compress or bucket (which then work in `dtype`).
  }];
  let options = [
    Option<"dtype", "dtype", "ReduceDtype", "ReduceDtype::F32",
           "Type to reduce in: f32 or f64", "reduceDtypeChoices()">
  ];
  let statistics = [
    Statistic<"numWidened", "num-widened", "Collectives made to reduce wider">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect",
                           "::mlir::arith::ArithDialect"];
}

def HybridMeshPass : Pass<"distopt-hybrid-mesh", "::mlir::ModuleOp"> {
  let summary = "Declare the mesh and groups of hybrid sharding";
  let description = [{
    Hybrid sharding (FSDP's HYBRID_SHARD, ZeRO++'s hpZ, MiCS) shards the
    optimizer inside groups of `shard-size` consecutive ranks (a node) and
    replicates across them. This pass declares what
    `--distopt-shard-optimizer{shard-group=hybrid_shard
    replicate-group=hybrid_replicate}` then shards over, for a world of W
    ranks:

    ```mlir
    distopt.mesh @hybrid shape [W/S, S]
    distopt.process_group @hybrid_shard size S over @hybrid axes [1]
    distopt.process_group @hybrid_replicate size W/S over @hybrid axes [0]
    ```

    W is the module's `distopt.world_size`, or else the size of its
    process groups that span the world (they must agree). Symbols of these
    names that are the same declarations are reused; anything else of the
    name is an error, as is a `shard-size` that does not divide W.
    `shard-size=0` (the default) declares nothing. The pipeline's
    `hybrid-shard-size=S` runs this pass and the shard pass together.
  }];
  let options = [
    Option<"shardSize", "shard-size", "int64_t", "0",
           "Ranks per shard group (0: declare nothing)">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def ShardOptimizerPass
    : Pass<"distopt-shard-optimizer", "::mlir::func::FuncOp"> {
  let summary = "Shard optimizer state, gradients and parameters (ZeRO)";
  let description = [{
    Each rank keeps and updates only its part of the optimizer state
    (`stage=1`, with fp32 main parameters counted as state), also receives
    only its part of the reduced gradients (`stage=2`), and also keeps only
    its part of the parameters (`stage=3`).

    `strategy=flat` (DeepSpeed, Megatron): like updates (same optimizer,
    hyperparameters, learning rate, step, element types and reduction) share
    one flat layout, each tensor's offset rounded up to `alignment` bytes of
    the parameter type, padded to N equal chunks. Rank r owns chunk r:
    stage 1 slices its chunk of the reduced gradients; stage 2 replaces the
    per-tensor all_reduces with one `reduce_scatter` of the packed local
    gradients; the chunk is updated and `all_gather`ed into every parameter
    (at stage 3 only rounded and kept: parameters stay sharded, and where
    the step itself uses one, it is gathered just before the first use).
    Stage 1 thus sends about 1.5x the bytes of stage 2: every rank
    receives every reduced gradient, as with torch's
    ZeroRedundancyOptimizer, and that all_reduce is what
    `--distopt-powersgd` can compress. Stage 2 sends the ZeRO paper's
    2 x (N-1)/N bytes per gradient byte (`--distopt-report` counts both).

    `strategy=greedy` (ZeroRedundancyOptimizer, fairscale OSS; stages 1 and
    2, stage 3 is an error): whole parameters go to ranks largest first,
    each to the least loaded rank, counting the elements earlier groups of
    updates gave it (as OSS counts across param groups). The owner updates
    a parameter inside `distopt.owned_by` and `broadcast`s it; at stage 2
    its gradient is `reduce`d to the owner only. Each group's state lives in
    one buffer per state key, as long as the most loaded rank's (a state of
    its own shape, Dion's right factor, has its own offsets).

    Updates that read a whole matrix (Muon, Dion: `isElementwise()` false)
    cannot update a chunk alone; `matrix-plan` says how they run.
    `owner`: this owner plan, under either strategy (`strategy=flat` lays
    out the element-wise groups flat and gives such groups' matrices whole
    to owners; stages 1 and 2 only). `gather` (Moonshot's distributed
    Muon; updates whose state has the parameter's shape, so not Dion):
    the matrices are laid out flat like an element-wise group, and every
    rank all-gathers the group's state chunks, its composed gradient
    chunks (at stage 1 only where clipping needs the chunks: else every
    rank holds the reduced gradients and converts them whole), and its
    main parameter or, at stage 3, parameter chunks (those the step
    gathered for its own uses, where it has any), updates every matrix
    whole, and keeps its chunk of the new state; the new parameters need
    no gather at stages 1 and 2 (every rank computed them). It runs at
    every stage and under hybrid sharding, at the price of every rank
    doing every matrix's arithmetic; its collectives are one per buffer
    for the whole group, where owners pay a broadcast per matrix (and at
    stage 2 a reduce). `auto` (the default): owners where they can run
    (stages 1 and 2 without hybrid sharding), else gather; given the rate
    of the updates (`update-gflops`) and the link's (`latency-us`,
    `bandwidth-gb-per-s`, as `distopt-calibrate` prints them; stages 1
    and 2 only), it chooses per matrix instead: the cheapest matrices
    gathered, the rest on owners, whichever split the model predicts
    fastest (docs/choosing-a-pipeline.md has the formulas;
    `--distopt-report` prints the prediction). The owners' part goes
    first: its reductions start with the gradients, and the gathered
    part's collectives would wait behind them. Dion cannot gather (its
    right factor is not laid out as its matrix; a warning under `gather`
    gives it auto's plan): `lowrank`, its own plan and auto's for it where
    owners cannot run, lays each matrix out flat on its own in chunks of
    whole rows (the matrix's rows padded with zero rows to a multiple of
    N), and each rank's `distopt.dion_update` (`row_group`,
    `matrix_rows`) updates its block of rows, gathering the ranks' rows of
    P and summing R over them; the right factor stays whole on every rank
    (an argument of its own, as unsharded). Under `lowrank` Muon takes
    auto's plan, with a warning. A matrix without elements stays whole.
    Given the rates at stages 1 and 2, auto splits a Dion group between
    owners and blocks of rows by the same model, the most costly matrices
    in rows.
    The owners' weight
    is the update's arithmetic (`getUpdateFlops()`: Muon's Newton-Schulz products grow with m^2 n, so
    two matrices of equal size can differ by their smaller side), balanced
    against the FLOPs earlier such groups gave each rank; `owner-balance=
    elements` weighs their elements instead, as for the others (for
    comparisons: B16). Evening FLOPs may leave one rank more elements, and
    each state buffer is as long as the most loaded rank's (the report's
    elements column). `--distopt-report` prints each owner's share.

    The signature changes: the per-parameter state (and main parameter, and
    at stage 3 parameter) arguments and results are replaced by sharded ones,
    appended at the end, named `flat<i>.<key>` or `owned<i>.<key>` and
    carrying `distopt.layout` (each tensor's name, shape, offset and, for
    greedy, owner). The step computes the same parameters as before.

    The updates must have the shape the importer produces: parameter and
    state arguments used only by the update, a gradient from an all_reduce
    (through `arith.extf` for main parameters, `distopt.unscale` by a step
    argument or constant, and `distopt.clip_grad_norm` over gradients of
    the updates), results only returned (through `arith.select` on the
    gradients' `distopt.all_finite`, and `arith.truncf` for model copies).
    With `strategy=flat`, every group's gradient chunk is reduced first
    (then the parameters are packed, where something reads all the chunks:
    work for the reductions to overlap with); the
    overflow check and the clipping are then rebuilt over the chunks `on`
    the group (one small reduction for both: the lowering carries the
    check in the norm's reduction of its partial sums; the norm's `tensor_bounds` make
    each tensor's norm that of the whole tensor, so the step stays bit for
    bit the unsharded one), each chunk's update is kept only if all were
    finite, and what reads the check (the loss scale's update) moves after
    it. `strategy=greedy` keeps such a chain whole at stage 1 (every rank
    holds the reduced gradient; the owner updates from the chain's result,
    kept by the same condition). At stage 2, and at stage 1 where owners'
    groups share the check or the clip with flat groups (`strategy=flat`
    with updates that read whole matrices), each owner copies the gradients
    reduced to it into its rank's buffer of reduced gradients (laid out as
    its state buffer, zeros after its last tensor), and the check and the
    clipping are rebuilt over those buffers as over flat chunks: a tensor
    lies at owner x capacity + offset. Anything else is an error
    at the update, never silently left unsharded. A step compiled for one rank
    (`distopt.world_size = 1`) has nothing to shard: the pass leaves it and
    warns.

    Hybrid sharding (`shard-group` and `replicate-group`, as
    `--distopt-hybrid-mesh` declares them; `strategy=flat`): the flat
    buffers are cut into S chunks, S the shard group's size, and world rank
    r owns chunk r mod S, replicated on the W/S ranks of its replicate
    group. The shard group must be runs of S consecutive world ranks in
    order, the replicate group the ranks holding the same chunk: the step's
    interface (`distopt.shard_of` = S chunks) tells the runtime and
    checkpoints no more than that. Stage 1 slices the world-reduced
    gradient on the shard group; stages 2 and 3 `reduce_scatter` inside the
    shard group and `all_reduce` the chunk across the replicate group (an
    `avg` sums in both and divides once, as the runtime's `avg` does), so
    only 1/S of the gradient crosses between shard groups. The two stages
    add in another order than one world reduction, and round bf16/f16
    chunks after each stage (`--distopt-widen-reductions` avoids that). Updated chunks
    are gathered, and norms and overflow checks agreed, inside the shard
    group only (each element counted once).
  }];
  let options = [
    Option<"stage", "stage", "int64_t", "1", "ZeRO stage: 1, 2 or 3">,
    Option<"strategy", "strategy", "ZeroStrategy", "ZeroStrategy::Flat",
           "flat (chunks of a flat buffer) or greedy (whole parameters)",
           "zeroStrategyChoices()">,
    Option<"alignment", "alignment", "int64_t", "64",
           "Byte alignment of each tensor in the flat layout">,
    Option<"ownerBalance", "owner-balance", "OwnerBalance",
           "OwnerBalance::Flops",
           "What owners of updates that read whole matrices balance: flops "
           "(their arithmetic) or elements", "ownerBalanceChoices()">,
    Option<"matrixPlan", "matrix-plan", "MatrixPlan", "MatrixPlan::Auto",
           "How updates that read whole matrices (Muon, Dion) run: auto, "
           "owner, gather or lowrank (Dion)", "matrixPlanChoices()">,
    Option<"updateGflops", "update-gflops", "double", "0.0",
           "matrix-plan=auto: the rate (GFLOP/s) one rank runs such "
           "updates at; with latency-us and bandwidth-gb-per-s, the plan "
           "is chosen per matrix">,
    Option<"latencyUs", "latency-us", "double", "0.0",
           "matrix-plan=auto: a collective's latency in microseconds "
           "(distopt-calibrate)">,
    Option<"bandwidthGbPerS", "bandwidth-gb-per-s", "double", "0.0",
           "matrix-plan=auto: the link's bandwidth in GB/s "
           "(distopt-calibrate)">,
    Option<"shardGroup", "shard-group", "std::string", "",
           "Hybrid sharding: shard over this process group (runs of "
           "consecutive ranks) instead of the gradients' world group">,
    Option<"replicateGroup", "replicate-group", "std::string", "",
           "Hybrid sharding: the group across which shards are replicated">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def PowerSGDPass : Pass<"distopt-powersgd", "::mlir::func::FuncOp"> {
  let summary = "Compress averaged gradients with PowerSGD";
  let description = [{
    PyTorch's `powerSGD_hook` as a transformation. Each `avg` all_reduce of
    a gradient that PyTorch would compress becomes a
    `distopt.powersgd_all_reduce`: the gradient is viewed as
    `shape[0] x (the rest)`, `r = min(rows, columns, rank)`, and it is
    compressed when `(rows + columns) * r * min-compression-rate <
    rows * columns`. Vectors, scalars and gradients that fail the rule are
    batched into one plain `all_reduce` (per block and kind).

    The PowerSGD state is explicit: each compressed gradient adds arguments
    and results `<name>.powersgd_p` (storage, `distopt.init = "zeros"`),
    `<name>.powersgd_q` (`"randn"`: a normal draw made identically on every
    rank from a shared seed; `"randn_each_step"` without `warm-start`, when
    the runtime draws a fresh Q every step, as the hook does) and, with
    `error-feedback`, `<name>.powersgd_error` (`"zeros"`).

    After `--distopt-shard-optimizer` with `strategy=flat stage>=2`, the
    gradients packed into an `avg` `reduce_scatter` are compressed the same
    way; each rank then takes its chunk of the repacked averages with
    `distopt.shard_slice`. Sum reductions are left alone (PowerSGD yields
    an average).

    With `start-iter=K`, as the hook's `start_powerSGD_iter`, steps 1 to K
    average each gradient uncompressed (an `scf.if` on the step argument,
    which the step must have) and leave the compression's state as it was:
    the error feedback starts at zero and Q at its first draw when step
    K + 1 compresses. Each gradient then decides on its own, so `batch-mb`
    does not batch them.

    On a step that checks its gradients for overflow and keeps its updates
    only if they are finite (`arith.select` on a `distopt.all_finite`, as
    the importer writes loss scaling), the compression's new state is kept
    by the same condition: a skipped step changes nothing, and the inf does
    not reach the error feedback.

    With `batch-mb`, the compressed gradients of a block are numbered into
    batches of up to that many MiB (in program order, per group and element
    type; a larger one alone), and the lowering all-reduces the P factors of
    a batch in one collective and its Q' factors in another, as the hook
    does for the tensors of a DDP bucket: two collectives per batch instead
    of two per tensor. That saves a latency per tensor and costs a pass over
    each gradient that no longer stays in cache between the two products
    (measured in docs/benchmarks.md, B6): worth it on links with a high
    latency per collective, not on shared memory. A gradient viewed as a
    matrix is reshaped back where its average is first used, so that
    nothing stands between the PowerSGD ops of a batch.
  }];
  let options = [
    Option<"rank", "rank", "int64_t", "1",
           "Rank of the approximation (matrix_approximation_rank)">,
    Option<"minCompressionRate", "min-compression-rate", "double", "2.0",
           "Compress only when the compression rate exceeds this">,
    Option<"errorFeedback", "error-feedback", "bool", "true",
           "Keep the local compression error and add it next step">,
    Option<"warmStart", "warm-start", "bool", "true",
           "Start each step from the previous step's Q">,
    Option<"batchMb", "batch-mb", "double", "0",
           "MiB of compressed gradients whose factors share two all_reduces "
           "(0: two per tensor)">,
    Option<"orthogonalizationEpsilon", "orthogonalization-epsilon", "double",
           "0",
           "Added to each column's norm when P is orthogonalized, as the "
           "hook's orthogonalization_epsilon (0: divide by the norm alone)">,
    Option<"startIter", "start-iter", "int64_t", "0",
           "Plain averaging for the first start-iter steps, as the hook's "
           "start_powerSGD_iter (0: compress from the first step)">,
    Option<"seed", "seed", "int64_t", "-1",
           "Seed of Q's first draw, the same on every rank (the module's "
           "distopt.seed; -1: the runtime's default, 42)">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

def DionLowRankSyncPass
    : Pass<"distopt-dion-low-rank-sync", "::mlir::func::FuncOp"> {
  let summary = "Dion's updates average low-rank factors instead of "
                "gradients";
  let description = [{
    Dion's compressed data-parallel sync (Ahn et al. 2025; the idea of
    PowerSGD) as a transformation. A `distopt.dion_update` whose gradient
    is the mean over a group of the ranks' own gradients (a
    `distopt.all_reduce` of that gradient alone: `avg`, or `sum` followed
    by a division by the group's size) comes to read the rank's own
    gradient and to average its two factors over the group (`group`):
    the all_reduce of `m n` elements goes, two of `m r` and `n r` come.
    Element-wise ops between the mean and the update (a conversion, the
    loss scale's `distopt.unscale`) apply to the rank's own gradient
    instead, and an overflow check (`distopt.all_finite`) that read the
    mean reads it too, agreed over the group.

    Each rank's momentum then keeps its own error feedback: its argument
    and result are marked `distopt.per_rank = "mean"`. The mean of the
    ranks' momenta is the momentum of Dion on the averaged gradient, and
    the parameters and right factor stay the same on every rank:
    in exact arithmetic the step computes what it did; in floating point
    the factors are averaged after the products instead of before, which
    changes the rounding (test/Integration/dion-low-rank-sync.test states
    the tolerance). Checkpoints keep the mean of the momenta, so a run
    resumes at any world size.

    The pipeline runs it right after role inference, on the importer's
    reductions (`dion-low-rank-sync`); ZeRO then leaves these updates
    whole on every rank (their state is not sharded). It refuses, at the
    update: a gradient clipped by the global norm (which needs the mean
    that is never formed), reductions that are not this gradient's own
    (a bucket, a reduce_scatter, an asynchronous or compressed one: run it
    first), a sum not divided by the group's size, another wire type,
    other readers of the mean or of what the step makes of it on the way
    to the update (another update among them), an update or reduction
    nested in control flow, and, at the check, an overflow check over
    updates synced over different groups. A function without a Dion
    update gets a warning.

    With `batch-mb`, the synced updates of a block are numbered into
    batches of up to that many MiB of gradients (in program order, per
    group and factor type; a larger one alone), and the lowering
    all-reduces the P factors of a batch in one collective and its R
    factors in another: two collectives per batch instead of two per
    matrix, the latency saved per matrix, for every member's B = M + G
    held until the batch's R is reduced.

    ```mlir
    // before                                  // after
    %s = distopt.all_reduce sum %g on @world   %p1, %m1, %q1 = distopt.dion_update
    %mean = arith.divf %s, %n                      %p, %g state(%m, %q) ...
    %p1, %m1, %q1 = distopt.dion_update            {group = @world}
        %p, %mean state(%m, %q) ...
    ```
  }];
  let options = [
    Option<"batchMb", "batch-mb", "double", "0",
           "MiB of synced gradients whose factors share two all_reduces "
           "(0: two per matrix)">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def InferStepRolesPass
    : Pass<"distopt-infer-step-roles", "::mlir::func::FuncOp"> {
  let summary = "Give a hand-written step's arguments and results their "
                "roles, from its optimizer updates";
  let description = [{
    A driver needs each argument's `distopt.role` and `distopt.name`
    (docs/step-abi.md). Where a step lacks them, its optimizer updates say
    what most arguments are:

    - an update's parameter operand, when it is an argument, is a
      parameter (named `arg<N>` after its position, unless it has a name);
    - its state operands are that parameter's state, named with torch's
      keys (`arg0.exp_avg`, `arg0.momentum_buffer`, ...);
    - its `lr` and `step` operands are the learning rate and step number;
    - the argument its gradient comes from, through all-reduces, bucket
      packing and unpacking (slot by slot), `clip_grad_norm`, `unscale`
      and float casts, is the parameter's gradient;
    - a returned update of an argument (or a select between it and the
      argument, a skipped step) gets that argument's role and name;
    - the momentum of a `distopt.dion_update` with a group (synced by its
      factors) is each rank's own: it and its update get
      `distopt.per_rank = "mean"`.

    Existing attributes are kept and win; an argument two updates disagree
    about (a parameter of one and the state of another) is an error at the
    update, naming the argument. What cannot be inferred (a parameter that
    reaches its update through a ZeRO shard, a loss scale) is left for
    `distopt-compile`, which names each argument still without a role.
    `distopt-pipeline` and `distopt-compile` run this pass first.

    ```mlir
    // Before:
    func.func @step(%w: tensor<16xf32>, %g: tensor<16xf32>, %m: tensor<16xf32>,
                    %v: tensor<16xf32>, %lr: f64, %t: i64) -> (tensor<16xf32>, ...)
    // After: %w {distopt.role = "param", distopt.name = "arg0"},
    //        %g {distopt.role = "grad", distopt.name = "arg0"},
    //        %m {distopt.role = "state", distopt.name = "arg0.exp_avg"}, ...
    ```
  }];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def SplitStepPass : Pass<"distopt-split-step", "::mlir::ModuleOp"> {
  let summary = "Export a step's gradient reductions and its update as "
                "entry points of their own";
  let description = [{
    For a training loop that reduces each gradient bucket as soon as
    backward has produced it (DDP's reducer), adds beside `@step`, which
    stays whole:

    - `@step_reduce<k>` for each reduction (all-reduce or reduce-scatter,
      synchronous or started and waited) of gradient arguments, packed into
      a bucket, cast, scaled or added to their `grad_accum` accumulators
      first, with the collectives that go on with
      its result (a hierarchical all-reduce's parts) and the scalings that
      make the mean: it returns a lone gradient reduced in its own type and
      shape as that argument (an all-reduce: the averaged gradient, in
      place), anything else (a reduce-scatter's shard, a bucket reduced in
      f32) as a new argument of role `reduced_grad` named `reduced<k>`
      (with `distopt.shard_of` for a shard);
    - `@step_update`: `@step` reading what the reduce entries left instead
      of reducing.

    A bucket whose tensors are each scaled by the same constant after
    unpacking (grad_accumulation's division by K) is scaled before
    unpacking instead (the same arithmetic), so that its reduce entry
    returns the mean.

    Every entry takes the same arguments as `@step` (which gains the
    `reduced_grad` ones), so a driver passes one set of buffers to all.
    Gradients reduced otherwise (PowerSGD's compressed ones, reductions to
    one owner) are reduced in `@step_update`. The entries are marked
    `distopt.entry = "reduce"` (with `distopt.reduces`, the gradient
    arguments' indices) or `"update"`; `distopt-compile` exports each
    (docs/step-abi.md). Running the reduce entries then the update computes
    what `@step` computes.

    With `gather-params`, each parameter argument that is a ZeRO-3 flat
    shard (`distopt.shard_of`, with a layout) also gets `@step_gather<k>`:
    an all_gather of the shard over the group its gradient is
    reduce-scattered on, returned as a new argument of role
    `gathered_param` with the flat buffer's layout (the whole parameters a
    unit's forward and backward read, FSDP's), marked
    `distopt.entry = "gather"` with `distopt.gathers` = the shard's index.
    `@step` and `@step_update` do not read the gathered arguments.
  }];
  let options = [
    Option<"gatherParams", "gather-params", "bool", "false",
           "Also export a gather entry per ZeRO-3 flat parameter shard">,
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect",
                           "::mlir::func::FuncDialect"];
}

def VerifyCollectivesPass
    : Pass<"distopt-verify-collectives", "::mlir::ModuleOp"> {
  let summary = "Static cross-rank checks of the collectives of a step";
  let description = [{
    Reports, as errors at the offending op, programs on which ranks would
    disagree or replicas diverge:

    - a collective (any op that communicates) inside `distopt.owned_by`, or
      under `scf.if`/`scf.for`/`scf.while`/`scf.index_switch` (or after a
      `cf.cond_br`) whose control operands are computed from `distopt.rank`:
      some ranks would skip it and the others would wait forever;
    - a gradient argument (role `grad`, see docs/step-abi.md) that reaches
      an optimizer update reduced zero times or more than once, or over only
      part of the world, or that is never reduced at all (buckets are
      followed tensor by tensor); reductions over process groups count by
      the ranks they cover, so one inside each node followed by one across
      nodes is one reduction of the world; not for a module compiled for one
      rank, where reductions fold away;
    - the token of an asynchronous collective not waited on exactly once;
    - a process group that does not span the module's
      `distopt.world_size`.

    The IR is not changed; the pass fails if anything is reported.
  }];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def OverlapCollectivesPass
    : Pass<"distopt-overlap-collectives", "::mlir::func::FuncOp"> {
  let summary = "Overlap collectives with computation (async start/wait)";
  let description = [{
    Turns every synchronous collective into its `*_start` form followed by a
    `distopt.wait`. Each start is placed as early as its input allows: right
    after the input is computed, but never above an earlier op that
    communicates, so the order of all communication is kept. Each wait goes
    just before the first use of the result in its block (or at the end of
    the block when it has none). The work in between runs while the data is
    on the wire.

    A start copies its input (the request owns the copy, so nothing can
    overwrite it in flight): a collective stays synchronous when the work
    that would overlap it writes fewer bytes than `min-work-ratio` times its
    input (0: always overlap).

    ```mlir
    %r = distopt.all_reduce avg %g on @dp : tensor<1024xf32>
    // becomes
    %t = distopt.all_reduce_start avg %g on @dp : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
    ...
    %r = distopt.wait %t : !distopt.token<tensor<1024xf32>>
    ```
  }];
  let options = [
    Option<"minWorkRatio", "min-work-ratio", "double", "1.0",
           "Overlap only when the work in between writes at least this "
           "many times the collective's input bytes (0: always)">,
  ];
  let statistics = [
    Statistic<"numOverlapped", "num-overlapped", "Collectives made asynchronous">,
    Statistic<"numKept", "num-kept-synchronous",
              "Collectives with too little work to overlap">
  ];
  let dependentDialects = ["::mlir::distopt::DistOptDialect"];
}

def ReportPass : Pass<"distopt-report", "::mlir::ModuleOp"> {
  let summary = "Print what each step communicates and stores per rank";
  let description = [{
    Prints a table for each function: its buckets (tensors, elements, bytes,
    alignment padding); per collective kind, how many the step issues and
    the bytes each rank contributes and sends per step under ring algorithms
    (all-reduce 2(n-1)/n of the payload, the others (n-1)/n; wire types and
    PowerSGD's P and Q counted as sent; PowerSGD's collectives counted as
    the lowering issues them, two per batch of tensors); the model-state bytes each rank holds (parameter arguments,
    gradients after reduction, optimizer state with main parameters), per
    parameter of the model (`distopt.num_parameters`); what each owner
    updates where updates run on owners (ZeRO's greedy layout, and updates
    that read whole matrices: tensors, elements, the latter's
    `getUpdateFlops()`, and the most loaded rank's FLOPs against the mean);
    the updates that read whole matrices and run on every rank (without
    ZeRO, or gathered: tensors, elements, FLOPs); where ZeRO's
    matrix-plan=auto chose with the cost model
    (`distopt.matrix_plans`), each group's split between gathering and
    owners, the gathered matrices and the predicted times; and the
    compression ratio. The IR is unchanged.

    For a mixed-precision Adam spec these match the ZeRO paper's figures:
    16 bytes per parameter for plain data parallelism, 4 + 12/N with ZeRO-1,
    2 + 14/N with ZeRO-2 and 16/N with ZeRO-3 (up to alignment padding).
  }];
  let options = [
    Option<"output", "output", "std::string", "\"-\"",
           "Where to write the report (- for standard output)">
  ];
}

#endif // DISTOPT_TRANSFORMS_PASSES_TD
