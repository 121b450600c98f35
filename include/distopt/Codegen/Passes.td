//===- Passes.td - loop, vector and kernel tuning ---------*- tablegen -*-===//
//
// The code generation passes of distopt's lowerings that do not concern its
// ops: they tune the loops, vectors and kernels the lowerings produce from
// linalg (lib/Codegen/Common for both targets, CPU, GPU). Flags are part of
// the product (README.md lists them).
// Each pass has a test file named after its flag in test/Codegen/<Dir>/.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CODEGEN_PASSES_TD
#define DISTOPT_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Common: linalg on tensors and buffers, for both targets
//===----------------------------------------------------------------------===//

def FoldSplatInputsPass : Pass<"distopt-fold-splat-inputs"> {
  let summary = "Read splat constants as scalars in linalg.generic";
  let description = [{
    An input of a `linalg.generic` that is a splat constant (the importer's
    division by the world size, `arith.divf %sum, dense<N>`, once converted
    to linalg) becomes a scalar constant in the body. Bufferized, the splat
    would be a global as large as the tensor: at 10^8 parameters a 400 MB
    library, 1.6 GB of memory and 12 s to compile; at 10^12, out of memory.
    The CPU and GPU lowerings run it after converting element-wise ops to
    linalg.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def FuseElementwiseProducersPass : Pass<"distopt-fuse-elementwise-producers"> {
  let summary = "Compute cheap element-wise results inside their consumers";
  let description = [{
    A `linalg.generic` that is element-wise (parallel, identity maps), a
    few scalar operations per element, and read only as an input by one
    other `linalg.generic` is computed inside it instead of into a tensor
    of its own: the clipped gradient inside the optimizer update,
    for instance, so that the update reads the reduced gradient once and no
    pass over memory writes and reads the clipped copy. The fused body runs
    the same operations in the same order: results are unchanged bit for
    bit. The CPU lowering runs it after converting element-wise ops to
    linalg.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def CollapseContiguousLoopsPass : Pass<"distopt-collapse-contiguous-loops"> {
  let summary = "Run linalg loops over contiguous memory as one loop";
  let description = [{
    On a bufferized step: each run of consecutive loops of a linalg op
    (all parallel, or all reductions) that every operand's indexing map
    keeps together and in order, over memrefs contiguous along it, becomes
    one loop over `memref.collapse_shape`s of the operands. The iterations
    run in the same order, so results do not change.

    An element-wise update of a 512x512x3x3 conv weight kept as four loops
    leaves LLVM an innermost loop of 3, which it unrolls before vectorizing
    the loop around it with gathers and scatters (a stride of 9 elements);
    collapsed, it is one loop over 2359296 contiguous elements, vectorized
    with plain loads and stores. GPU kernels index one dimension instead of
    dividing the thread's index back into four. The CPU and GPU lowerings
    run it after bufferization.

    ```mlir
    linalg.generic {indexing_maps = [#id4, #id4], iterator_types = [4 x "parallel"]}
        ins(%g : memref<512x512x3x3xf32>) outs(%p : memref<512x512x3x3xf32>)
    // becomes
    %g1 = memref.collapse_shape %g [[0, 1, 2, 3]] : memref<512x512x3x3xf32> into memref<2359296xf32>
    %p1 = memref.collapse_shape %p [[0, 1, 2, 3]] : memref<512x512x3x3xf32> into memref<2359296xf32>
    linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]}
        ins(%g1 : memref<2359296xf32>) outs(%p1 : memref<2359296xf32>)
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect"];
}

//===----------------------------------------------------------------------===//
// CPU: parallel and vector loops, what the host's LLVM needs
//===----------------------------------------------------------------------===//

def ParallelizeLoopsPass : Pass<"distopt-parallelize-loops"> {
  let summary = "Run large element-wise ops, reductions and copies as parallel loops";
  let description = [{
    On a bufferized step (CPU), each of these, when it runs at least
    `min-iterations` iterations (elements), becomes an `scf.parallel` loop:
    - a linalg op whose loops are all parallel: an `scf.parallel` nest;
    - a linalg.generic that reduces a whole contiguous tensor to a scalar
      (a norm's partial sum, a finite check, a count): partial results of
      fixed chunks of 65536 elements, computed in parallel, then combined
      in order. A floating-point sum or product is split only if its
      combine may be reassociated (`fastmath<reassoc>`, as the norms'
      are); its chunks do not depend on the thread count, so neither does
      the result;
    - a `memref.copy` between contiguous buffers (bucket packing and
      unpacking): a parallel loop of copies of 65536-element chunks.

    Every other op stays for `--convert-linalg-to-loops`. The CPU lowering
    turns the parallel loops into OpenMP work-sharing loops
    (`--convert-scf-to-openmp`): their iterations are split among the
    threads the runtime gives the step (`distopt-run --threads`, the
    session's `threads` option). Each iteration writes its own elements, so
    the results do not depend on the number of threads. Ops inside a
    sequential loop stay as they are (each iteration would start the
    threads again), and so do small ones: starting a parallel region costs
    about 10 us. Measured with AdamW on one f32 tensor, 1 thread against 2
    (distopt-run --threads): 65536 elements 13.5 against 19 us, 131072
    elements 28 against 22.5 us, 262144 elements 55 against 39 us.
  }];
  let options = [
    Option<"minIterations", "min-iterations", "int64_t", "131072",
           "Iterations below which an op stays sequential">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect"];
}

def AnnotateVectorWidthPass : Pass<"distopt-annotate-vector-width"> {
  let summary = "Ask LLVM for vectors of a given width in element-wise loops";
  let description = [{
    On a step lowered to loops (after `--convert-linalg-to-loops` and
    `--convert-scf-to-openmp`): every element-wise loop asks LLVM's loop
    vectorizer for vectors of `bits` bits, as many lanes as fit of the
    widest scalar it reads, writes or computes floating-point arithmetic
    with (8 for f32 at 256 bits, 4 for f64; a power of two up to 64).
    A loop is element-wise when it runs one index by steps of 1, every
    value it writes goes to a one-dimensional unit-stride buffer, defined
    outside the loop, at that index, every value it reads comes from such
    a buffer at that index or from a 0-d one, and the rest of its body
    has no memory effects and no regions: an optimizer update, a scaling,
    a cast, after `--distopt-collapse-contiguous-loops` whatever the
    tensors' shapes. A sequential `scf.for` gets a `loop_annotation`
    attribute holding an `#llvm.loop_annotation` (the name the `llvm.br`
    property takes, so the loop's `!llvm.loop` metadata in LLVM IR);
    LLVM still checks its memory dependences. An OpenMP work-sharing
    loop without clauses is wrapped in a composite
    `omp.simd simdlen(n)`, which tells LLVM its iterations are
    independent: the `scf.parallel` it came from said so, and OpenMP
    divides them among threads on that premise. Other loops (PowerSGD's
    contractions, reductions, loops over 2-D buffers) keep the target's
    own choice. The width changes how many elements an instruction
    computes, not what it computes: results are the same bit for bit.

    Why: these loops stream memory and do a few operations per element.
    On a Zen 5 CPU, whose LLVM tuning picks 512-bit vectors, B1's SGD and
    AdamW updates took 0.89-0.96x and 0.93-1.00x the time with 256-bit
    vectors in three runs (docs/benchmarks.md), while PowerSGD's
    products, which compute, lose about a quarter at 256 bits: one width
    for the whole object cannot serve both. LLVM's tuning for Intel's
    AVX-512 CPUs and x86-64-v4 already prefers 256 bits and AVX2 CPUs
    have no wider vectors, so there 256 changes nothing; on CPUs with
    128-bit vectors only (`distopt-compile --cpu=x86-64`) LLVM computes
    each 256-bit operation as two.

    ```mlir
    scf.for %i = %c0 to %c1024 step %c1 {
      %g = memref.load %grad[%i] : memref<1024xf32>
      ...
      memref.store %p1, %param[%i] : memref<1024xf32>
    }
    // gets
    {loop_annotation = #llvm.loop_annotation<vectorize = <width = 8 : i32>>}
    ```
  }];
  let options = [
    Option<"bits", "bits", "unsigned", "256",
           "Vector width of element-wise loops, in bits: a power of two, or "
           "0 for the target's choice">,
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect",
                           "::mlir::omp::OpenMPDialect"];
}

def ExpandBF16TruncationsPass : Pass<"distopt-expand-bf16-truncations"> {
  let summary = "Round to bf16 without compiler-rt's builtins";
  let description = [{
    Unless the CPU converts to bf16 itself (AVX512-BF16), LLVM turns a
    scalar `arith.truncf` to bf16 into a call of `__truncsfbf2` (from f32)
    or `__truncdfbf2` (from f64), which compiler-rt provides and libgcc 12
    (Debian 12's, which compiled steps are loaded with) does not: a step
    compiled for a portable CPU (`distopt-compile --cpu=x86-64`), or on a
    CPU without AVX512-BF16, would not load. Arithmetic in bf16 (which LLVM
    computes in f32 and rounds back the same way) is made to compute in f32
    explicitly, and every rounding to bf16 is done on the bits, to nearest
    even, NaNs kept quiet NaNs. From f64 it first
    rounds to f32 to odd (toward zero, with the lowest bit set when
    anything was dropped), which makes the two roundings one: rounding to
    nearest f32 first would round twice, and a value just above half way
    between two bf16 numbers could end on the lower one. The CPU lowering
    runs it on loops, before the LLVM dialect.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

//===----------------------------------------------------------------------===//
// GPU: what kernels need
//===----------------------------------------------------------------------===//

def ExactGPUSqrtPass : Pass<"distopt-exact-gpu-sqrt"> {
  let summary = "Correctly rounded square roots in GPU kernels";
  let description = [{
    The NVVM conversion calls libdevice's `__nv_sqrtf` for an f32
    `math.sqrt`, which is an approximation (`sqrt.approx.f32`) unless the
    `__CUDA_PREC_SQRT` reflection is set, and MLIR gives no way to set it.
    torch's CUDA kernels, built with nvcc's default `-prec-sqrt=true`, round
    correctly. This pass rewrites a scalar f32 or f64 `math.sqrt` as a call
    of NVVM's `llvm.nvvm.sqrt.rn.f` (`.d`), emitted as `sqrt.rn.f32`
    (`sqrt.rn.f64`), so that Adam's,
    RMSprop's and Adagrad's denominators are the IEEE square roots the CPU
    lowering and torch compute. distopt-lower-to-gpu runs it on the kernels'
    `gpu.module`, before the NVVM conversion.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

#endif // DISTOPT_CODEGEN_PASSES_TD
