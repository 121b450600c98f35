//===- CollapseContiguousLoops.cpp - linalg loops over memory -*- C++ -*-===//
//
// --distopt-collapse-contiguous-loops (Passes.td): a bufferized linalg op
// whose loops walk contiguous memory in every operand runs them as one loop.
// A 512x512x3x3 update kept as four loops leaves LLVM an innermost loop of
// 3, which it unrolls and then vectorizes the next one with gathers and
// scatters at a stride of 9; one loop of 2359296 is vectorized with plain
// loads and stores. The order of the iterations does not change.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_COLLAPSECONTIGUOUSLOOPSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

/// The runs of consecutive loops, of one iterator type, that every indexing
/// map keeps together and in order: each run can be one loop. Whether the
/// buffers are contiguous along a run is checked by the collapse itself
/// (it leaves an op alone when a memref is not guaranteed collapsible).
SmallVector<ReassociationIndices> contiguousRuns(linalg::LinalgOp op) {
  SmallVector<ReassociationIndices> runs;
  if (!op.hasPureBufferSemantics())
    return runs;
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  if (!llvm::all_of(maps,
                    [](AffineMap map) { return map.isProjectedPermutation(); }))
    return runs;
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  ReassociationIndices run;
  for (int64_t dim = 0, e = op.getNumLoops(); dim < e; ++dim) {
    if (!run.empty()) {
      ReassociationIndices longer = run;
      longer.push_back(dim);
      if (iterators[dim] == iterators[run.front()] &&
          linalg::areDimSequencesPreserved(maps, longer)) {
        run = std::move(longer);
        continue;
      }
      if (run.size() > 1)
        runs.push_back(run);
    }
    run = {dim};
  }
  if (run.size() > 1)
    runs.push_back(run);
  return runs;
}

struct CollapseContiguousLoopsPass
    : public distopt::impl::CollapseContiguousLoopsPassBase<
          CollapseContiguousLoopsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    linalg::populateCollapseDimensions(patterns, contiguousRuns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) {
      getOperation()->emitError("collapsing loops did not converge");
      return signalPassFailure();
    }
  }
};

} // namespace
