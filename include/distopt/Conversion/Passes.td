//===- Passes.td - conversions out of the distopt dialect --*- tablegen -*-===//
//
// The passes that lower a step out of the distopt dialect: the upstream
// shard dialect into distopt (ShardToDistOpt), optimizer and local ops to
// linalg and tensor (DistOptToLoops), collectives to calls of the runtime
// on buffers (DistOptToRuntime), and a bufferized step's memory work onto
// the GPU (DistOptToGPU). The loop, vector and kernel tuning that does not
// concern distopt's ops is in include/distopt/Codegen/Passes.td. Flags are
// part of the product (README.md lists them).
// Each pass has a test file named after its flag in test/Conversion/<Name>/.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_PASSES_TD
#define DISTOPT_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerOptimizersPass : Pass<"distopt-lower-optimizers"> {
  let summary = "Lower optimizer updates to one fused loop each";
  let description = [{
    Each `distopt.*_update` becomes a single `linalg.generic` over the
    tensor's elements: the gradient is its input, the parameter and the state
    tensors its outputs (so that bufferization updates them in place), and
    its body reads each operand once and writes each result once. The body
    follows torch.optim's single-tensor code (PyTorch 1.13) operation by
    operation (`add(alpha=)` as a fused multiply-add, like torch's CPU
    kernel; `addcmul`; `addcdiv`); the scalars torch keeps
    as Python floats (bias corrections, step sizes, AdamW's decay factor,
    Adagrad's decayed rate) are computed once before the loop, in f64, from
    the learning rate and the step. bf16/f16 tensors are computed in f32 and
    rounded once when stored (torch rounds after every operation).

    An update whose every result is kept only under one condition
    (`arith.select %ok, %new, %old`, `%old` the operand it updates: a step
    skipped on overflow) runs under `scf.if %ok` instead: a skipped step
    computes nothing, and the update still writes its buffers in place (a
    select would need the old values after the update overwrote them, so
    bufferization would copy every parameter and state tensor).
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect"];
}

def LowerLocalOpsPass : Pass<"distopt-lower-local-ops", "::mlir::ModuleOp"> {
  let summary = "Lower the ops that do not communicate, for CPU code";
  let description = [{
    Lowers, on tensors, what does not communicate: `bucket_pack` to slices
    of one tensor (zeros only in the alignment gaps, each input copied
    once), `bucket_unpack` to slices and reshapes, `shard_slice` to a slice
    at this rank's offset, `owned_by` to an `scf.for` that runs once on the
    owner and not at all elsewhere (`distopt.owner_loop`; an `scf.if` after
    bufferization, --distopt-owner-loops-to-branches),
    `distopt.rank` to a runtime call and `group_size` to a constant. The
    synchronous collectives stay: one-shot bufferization turns them into
    runtime calls on buffers (in place where legal). Process groups become
    private, so that `symbol-dce` removes them once nothing refers to them.

    The asynchronous forms bufferize too: a `*_start` copies its input into
    a buffer its request owns (the analysis cannot see that the request
    still uses it until the wait) and starts the runtime collective; the
    `wait` completes the request and yields that buffer.

    Mixed precision and clipping follow torch: `unscale` multiplies by the
    reciprocal taken once; `all_finite` is an AND over the elements (and a
    min over the ranks with a group); `loss_scale_update` is GradScaler's
    update; `clip_grad_norm` takes each tensor's p-norm (accumulated in f64,
    rounded to f32 as torch stacks them), the p-norm of those (combined over
    the ranks with a group) and scales by min(1, max_norm / (norm + 1e-6)).

    `powersgd_all_reduce` becomes its matrix products (`linalg.generic`),
    modified Gram-Schmidt unrolled over the rank (norms in f64, as torch's
    CPU norm) and two `all_reduce`s: P summed, Q' averaged. The ops of a
    block with the same `batch` number, group and element type are lowered
    as one batch, as PyTorch's hook treats the tensors of a bucket: every P
    goes into one packed `all_reduce`, every Q' into another (two
    collectives for the batch, not two per tensor), where a place exists
    after all their operands and before any use of their results; an op
    without one starts the next batch. `orthogonalize` is the same
    Gram-Schmidt. `topk_all_reduce` finds the
    k-th largest magnitude bit by bit (a count per bit, no sort), selects in
    index order (ties: lower index), all-gathers the (value, index) pairs
    and adds them into zeros in rank order: the same bits on every rank.

    A ZeRO step's own parameter shard (`shard_slice` of a `bucket_pack`)
    packs only this rank's chunk: one `scf.index_switch` case per rank with
    static slices, or beyond `max-shard-cases` ranks (so that the code does
    not grow with the ranks) each input's overlap with the chunk computed at
    run time, under an `scf.if`.

    Optimizer updates left for `--distopt-lower-optimizers` are errors at
    the op, as is any op on a process group whose size is not the world's
    (`distopt.world_size`, else the largest group): the runtime runs every
    collective on the world, so sub-groups do not run yet.
  }];
  let options = [
    Option<"maxShardCases", "max-shard-cases", "int64_t", /*default=*/"64",
           "Beyond this many ranks, a shard of a pack is cut at run time">
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

def MarkInPlaceResultsPass
    : Pass<"distopt-mark-in-place-results", "::mlir::ModuleOp"> {
  let summary = "Drop the results of a bufferized step that are its arguments";
  let description = [{
    After bufferization, a step updates its parameter and state buffers in
    place and returns them. For each function that nothing calls, records in
    `distopt.in_place_results` (one entry per original result) the index of
    the argument a result returns, or -1 for a new buffer, and drops the
    results returned in the argument they replace (the same `distopt.role`
    and `distopt.name`, or neither has them), seen through casts, reshapes
    back to the argument's type, and `scf.if` results whose branches both
    yield the argument (an update skipped on overflow); a result returned in another
    argument's buffer stays a result, which the deallocation pipeline
    copies. Returned, they would be copied every step by
    the deallocation pipeline, which must own what a function returns;
    distopt-compile tells the driver which results live in their argument's
    buffer (`in_place_arg`, docs/step-abi.md). A result that bufferization
    copied out of a view into a new buffer (a parameter unpacked from a ZeRO
    all-gather) is copied into its argument's buffer instead, when nothing
    uses that argument after the copy, and so stays in place. A result
    all-gathered into a new buffer (ZeRO's flat parameters, under
    `--distopt-param-as-bucket-view`) is gathered into its argument's
    buffer instead, under the same condition: the gather then sends this
    rank's chunk from its own slot there when the update wrote it in place.
    A result that is a view, in its argument's type, of a buffer the step
    allocates is copied into the argument before the return (returned, it
    would keep the whole buffer alive into the next step). Functions with
    callers keep their results.
  }];
}

def ReturnStatusPass : Pass<"distopt-return-status", "::mlir::ModuleOp"> {
  let summary = "Return the status of a failed runtime call from the step";
  let description = [{
    Every runtime call a step makes returns a status, and a failure (a
    collective timed out, a peer died, ranks ran different collectives)
    calls `distopt_rt_fatal`, which does not return. In each function
    that C code calls (`llvm.emit_c_interface`, which distopt-compile sets
    on the step's entry points) and nothing in the module calls, this pass
    gives the function an `i32`
    result after its own, `0` where it returns, and replaces each such call
    with a branch to a block that returns the status (and poison for the
    other results, which the caller does not read then); the function is
    marked `distopt.returns_status`. The caller frees what the step still
    held (the runtime records what a step allocates) and reports the
    status; nothing is unwound past C++ frames. Other functions keep the
    fatal path: their callers are compiled code with no status to take (a
    test's `@main` under mlir-runner). Runs on the control-flow
    form, after `--convert-scf-to-cf`: a check inside a remaining region (a
    parallel loop) is an error.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::cf::ControlFlowDialect",
                           "::mlir::ub::UBDialect"];
}

def ContractionsToRuntimePass
    : Pass<"distopt-contractions-to-runtime", "::mlir::ModuleOp"> {
  let summary = "Run f32 matrix products through the runtime's BLAS";
  let description = [{
    On a bufferized step (CPU), each `linalg.generic` of three loops, one of
    them a reduction, whose body is `out + lhs * rhs` on f32 matrices with
    contiguous rows (each operand indexed by two of the loops, the result
    by the two parallel ones) becomes a call of `distopt_rt_matmul_f32`:
    `out += op(a) op(b)`, each input read as it is or transposed. The
    runtime runs it through the machine's BLAS (OpenBLAS, found at run
    time, on one thread) or, without one, a loop of its own. Muon's
    Newton-Schulz products then run at the library's rate: a 768x768
    Muon step took 1.13 s as loops and 0.12 s through OpenBLAS on this
    machine, torch's own 0.12-0.13 s (B16). The sums are added in the
    library's order, not the loops': results differ in their last bits
    (as torch's own do from the loops), and alike on every rank. The CPU
    lowering runs it after bufferization.

    Products with a loop below `min-dim` iterations stay loops: PowerSGD's
    factors (a few columns) are matrix-vector shapes that sgemm is not
    tuned for; the loops ran ResNet-50's rank-1 products at 11.8 GFLOP/s
    against sgemm's 6.3 (bench/powersgd_kernels.py, 2026-11-27; B6's
    table, 1.5-4.7x, is of an earlier run). `min-dim` must be positive.
  }];
  let options = [
    Option<"minDim", "min-dim", "int64_t", "32",
           "Smallest loop size (m, n and k) of a product given to the BLAS">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::memref::MemRefDialect"];
}

def OwnerLoopsToBranchesPass
    : Pass<"distopt-owner-loops-to-branches", "::mlir::func::FuncOp"> {
  let summary = "Turn the loops `owned_by` became back into branches";
  let description = [{
    `--distopt-lower-local-ops` lowers `distopt.owned_by` to an `scf.for`
    marked `distopt.owner_loop` that runs once on the owner rank and not at
    all on the others, so that one-shot bufferization sees each as a write
    of the values it carries: as a chain of `scf.if`s whose else branches
    pass the state on, greedy ZeRO's step took the analysis a time cubic in
    its number of tensors. After bufferization this pass makes each marked
    loop an `scf.if` on the owner test, with its body as the then branch
    and the loop's initial values as the else branch's results; nothing
    else changes. Later passes see a branch, not a sequential loop (CPU
    loops inside it still run in parallel). A marked loop that does not
    run from 0 to `select(%owner, 1, 0)` by 1 is an error: it might run
    more than once.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
}

def AsyncInPlacePass : Pass<"distopt-async-in-place", "::mlir::ModuleOp"> {
  let summary = "Let asynchronous collectives work in their input's buffer";
  let description = [{
    After bufferization, a `*_start` collective first copies its input into
    a buffer its request owns (marked `distopt.request_input`): the one-shot
    analysis cannot see that the request keeps using the buffer until its
    wait. This pass drops that copy, and the request works in the input's
    own buffer, where nothing else can notice: the buffer is an allocation
    in the same block, or an argument of a function nothing calls that the
    step ABI lets it update (a parameter, main parameter, state or gradient,
    docs/step-abi.md), and no view of it is used after the copy. The
    collective's result then lies in that buffer, as a synchronous one's
    would; a gradient bucket handed in (`--distopt-grad-as-bucket-view`) is
    reduced where the caller wrote it. Every marker is removed.
  }];
}

def OffloadToGPUPass
    : Pass<"distopt-offload-to-gpu", "::mlir::func::FuncOp"> {
  let summary = "Put a bufferized step's memory work on the GPU";
  let description = [{
    Runs on a step after bufferization, before the GPU lowering: every
    buffer lives in device memory and only kernels touch it; the host keeps
    the control flow, the runtime calls (collectives on device buffers) and
    the scalars it needs.

    - `memref.copy` and linalg ops become parallel loops; each outermost
      `scf.parallel` is collapsed to one dimension and tiled by
      `block-size`, the tiles mapped to blocks and the elements to threads
      (`convert-parallel-loops-to-gpu` then makes them launches);
    - the remaining host ops that read or write buffers (reductions over a
      whole tensor, scalar loads and stores) are grouped, consecutive ones
      together, into one-thread `gpu.launch`es; a scalar such a group
      computes for the host goes through a device buffer and a
      device-to-host copy;
    - `memref.alloc`/`dealloc` become `gpu.alloc`/`dealloc`; constants
      (`memref.get_global`) and host `memref.alloca`s get device copies.
  }];
  let options = [
    Option<"blockSize", "block-size", "int64_t", "256",
           "Threads per block of the element-wise kernels">,
  ];
  let dependentDialects = ["::mlir::affine::AffineDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect"];
}

def VerifyOffloadPass
    : Pass<"distopt-verify-offload", "::mlir::func::FuncOp"> {
  let summary = "Check that every parallel loop became a GPU launch";
  let description = [{
    Runs after `convert-parallel-loops-to-gpu`, which leaves a nest it
    cannot map as it is, without a word: run on the host, such a loop would
    read and write device memory (a segmentation fault on a GPU, correct
    results in the host emulation). An `scf.parallel` left outside a
    `gpu.launch` is an error here, at the loop.
  }];
}

def ConvertShardToDistOptPass
    : Pass<"convert-shard-to-distopt", "::mlir::ModuleOp"> {
  let summary = "Turn the upstream shard dialect's collectives into distopt's";
  let description = [{
    Takes a program partitioned by upstream MLIR (`--sharding-propagation`,
    `--shard-partition`) and expresses its communication in distopt, so
    that distopt's fusion, bucketing and MPI/NCCL lowering apply to it,
    including the average reduction, `all_gather` and `reduce_scatter` that
    upstream's `--convert-shard-to-mpi` cannot lower.

    Each `shard.grid @g(shape = AxB...)` becomes `distopt.process_group @g
    size A*B...` (ranks are the grid's row-major linear indices). Then:

    | shard | distopt |
    |---|---|
    | `all_reduce` sum / average / min / max / product | `all_reduce` sum / avg / min / max / prod (the input converted first where the result's element type differs) |
    | `all_gather` along axis k | `all_gather` (dim 0), then a transpose to axis k |
    | `reduce_scatter` along axis k | a transpose of axis k to dim 0, then `reduce_scatter` |
    | `broadcast` root `[i, j]` | `broadcast` root (the root's linear rank) |
    | `all_slice` along axis k | `tensor.extract_slice` at this rank's chunk |
    | `process_linear_index`, `process_multi_index`, `grid_shape` | `distopt.rank` and index arithmetic, constants |

    A collective whose `grid_axes` span only processes of size-1 axes is the
    identity and is removed. A collective over a proper sub-grid (e.g.
    `grid_axes = [1]` of a 2x4 grid), or a gather, scatter or slice over
    every axis in another order, runs on a process group over those axes
    (size-1 axes dropped) of a `distopt.mesh @<grid>_mesh` shaped like the
    grid: `distopt.process_group @<grid>_axes_1 size 4 over @<grid>_mesh
    axes [1]`, declared before the grid's group on first use (a reduction or
    broadcast over every axis, in any order, stays on the grid's group; a
    broadcast root is then the root's rank in the group). Errors: grids with
    dynamic sizes, tensors with dynamic shapes, collectives on memrefs,
    `bitwise_*` and `generic` reductions, dynamic broadcast roots, and shard
    ops without a distopt counterpart (`all_to_all`, `gather`, `scatter`, `send`, `recv`,
    `shift`, `neighbors_linear_indices`, and `sharding`/`shard`, which
    `--shard-partition` removes). Every error is reported before anything is
    rewritten: on failure the module is unchanged.

    ```mlir
    shard.grid @grid(shape = 4)
    %r = shard.all_reduce %x on @grid grid_axes = [0] reduction = average
      : tensor<8x8xf32> -> tensor<8x8xf32>
    // becomes
    distopt.process_group @grid size 4
    %r = distopt.all_reduce avg %x on @grid : tensor<8x8xf32>
    ```
  }];
  let statistics = [
    Statistic<"numConverted", "num-converted", "shard ops converted">
  ];
  let dependentDialects = [
    "::mlir::distopt::DistOptDialect", "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect"
  ];
}

#endif // DISTOPT_CONVERSION_PASSES_TD
