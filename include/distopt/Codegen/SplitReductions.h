//===- SplitReductions.h - whole-tensor reductions in parallel --*- C++ -*-===//
//
// A linalg.generic that reduces a whole tensor to a scalar (a norm, an
// all-finite check, a count) is one sequential loop. Split, it computes
// partial results in parallel and combines them in order: the GPU
// lowering's two kernels, and the CPU's OpenMP loop over fixed chunks.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CODEGEN_SPLITREDUCTIONS_H
#define DISTOPT_CODEGEN_SPLITREDUCTIONS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt {

/// How a split reduction shares the elements out among its partial results.
struct ReductionSplit {
  enum Layout {
    /// `size` partial results; partial t combines elements t, t + size, ...
    /// (GPU threads read neighbouring elements at once).
    Strided,
    /// A partial result per `size` consecutive elements, the last one
    /// shorter (a CPU thread streams through its chunks). The input must be
    /// contiguous in memory and read in order.
    Chunked,
  } layout;
  int64_t size;
};

/// Splits a bufferized linalg.generic that reduces a whole tensor to a
/// scalar into an scf.parallel loop of partial results and a loop that
/// combines them in order into the output. The partial results do not
/// depend on the number of threads that compute them, so the result is the
/// same on every run (a floating-point sum in another order than the
/// unsplit loop's: a float combine is split only if it may be reassociated,
/// or on the GPU, where the unsplit loop would be one thread's). Returns
/// failure, touching nothing, for any other op.
LogicalResult splitWholeReduction(IRRewriter &rewriter, linalg::GenericOp op,
                                  ReductionSplit split);

} // namespace mlir::distopt

#endif // DISTOPT_CODEGEN_SPLITREDUCTIONS_H
