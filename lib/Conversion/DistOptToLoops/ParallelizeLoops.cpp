//===- ParallelizeLoops.cpp - large element-wise ops in parallel -*- C++
//-*-===//
//
// --distopt-parallelize-loops (Passes.td): a bufferized linalg op whose
// loops are all parallel and that runs at least min-iterations iterations
// becomes an scf.parallel nest, which the CPU lowering turns into an OpenMP
// work-sharing loop. Every other linalg op is left for
// --convert-linalg-to-loops.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_PARALLELIZELOOPSPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

/// The op's iteration count when every loop is parallel and static; 0
/// otherwise.
int64_t parallelIterations(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() ||
      op.getNumParallelLoops() != op.getNumLoops() || op.getNumLoops() == 0)
    return 0;
  int64_t count = 1;
  for (int64_t size : op.getStaticLoopRanges()) {
    if (ShapedType::isDynamic(size))
      return 0;
    count *= size;
  }
  return count;
}

struct ParallelizeLoopsPass
    : public distopt::impl::ParallelizeLoopsPassBase<ParallelizeLoopsPass> {
  using ParallelizeLoopsPassBase::ParallelizeLoopsPassBase;

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> large;
    getOperation()->walk([&](linalg::LinalgOp op) {
      // Inside a sequential loop, each iteration would start the threads
      // again.
      if (op->getParentOfType<scf::ForOp>() ||
          op->getParentOfType<scf::WhileOp>())
        return;
      if (parallelIterations(op) >= minIterations)
        large.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : large) {
      rewriter.setInsertionPoint(op);
      if (failed(linalg::linalgOpToParallelLoops(rewriter, op))) {
        op->emitError("could not be lowered to parallel loops");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
    }
  }
};

} // namespace
