//===- FuseElementwiseProducers.cpp - cheap producers into users -*- C++ -*-=//
//
// --distopt-fuse-elementwise-producers (Passes.td): an element-wise
// linalg.generic of a few scalar operations that only another
// linalg.generic reads, as an input, is computed in it, with upstream's
// element-wise fusion: a pass over memory less per producer.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_FUSEELEMENTWISEPRODUCERSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

/// Recomputed in each user at no cost worth a pass over memory.
constexpr unsigned kMaxOpsPerElement = 4;

bool isCheapElementwise(linalg::GenericOp op) {
  return op.getNumDpsInits() == 1 &&
         op.getNumLoops() == op.getNumParallelLoops() &&
         llvm::all_of(op.getIndexingMapsArray(),
                      [](AffineMap map) { return map.isIdentity(); }) &&
         op.getBody()->getOperations().size() <= kMaxOpsPerElement + 1;
}

/// Fuses where the producer disappears: its one use is this input (with
/// other uses, upstream's fusion keeps the producer's result as a result of
/// the fused op, where the consumer is: perhaps after, or inside a region
/// that does not dominate, the other users), which the consumer reads once
/// per element (an identity map: a matrix product would compute each
/// element again for every row or column it meets, and would no longer be
/// a plain product for --distopt-contractions-to-runtime).
bool shouldFuse(linalg::GenericOp consumer, OpOperand *operand) {
  auto producer = operand->get().getDefiningOp<linalg::GenericOp>();
  return producer && isCheapElementwise(producer) && producer->hasOneUse() &&
         consumer.getMatchingIndexingMap(operand).isIdentity();
}

/// Upstream's element-wise fusion alone: its pattern set would also give
/// every generic whose output it does not read a fresh tensor.empty, and
/// take from the unscaled and clipped gradients the input they are written
/// over in place.
struct FuseProducer : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(linalg::GenericOp consumer,
                                PatternRewriter &rewriter) const override {
    for (OpOperand &operand : consumer->getOpOperands()) {
      if (!consumer.isDpsInput(&operand) || !shouldFuse(consumer, &operand) ||
          !linalg::areElementwiseOpsFusable(&operand))
        continue;
      FailureOr<linalg::ElementwiseOpFusionResult> fused =
          linalg::fuseElementwiseOps(rewriter, &operand);
      if (failed(fused))
        continue;
      Operation *producer = operand.get().getDefiningOp();
      for (auto [original, replacement] : fused->replacements)
        rewriter.replaceUsesWithIf(original, replacement, [&](OpOperand &use) {
          return use.getOwner() != producer;
        });
      rewriter.eraseOp(consumer);
      return success();
    }
    return failure();
  }
};

struct FuseElementwiseProducersPass
    : public distopt::impl::FuseElementwiseProducersPassBase<
          FuseElementwiseProducersPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseProducer>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
