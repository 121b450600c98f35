//===- OwnerLoopsToBranches.cpp - owner loops as scf.if -*- C++ -*-===//
//
// --distopt-owner-loops-to-branches: after bufferization, each scf.for that
// an owned_by became (marked distopt.owner_loop: from 0 to select(isOwner,
// 1, 0) by 1) is an scf.if on the owner test. The loop form is for one-shot
// bufferization's analysis only (LowerBuckets.cpp says why).
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_OWNERLOOPSTOBRANCHESPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

/// The owner test of a loop the lowering built: it runs from 0 to
/// `select(isOwner, 1, 0)` by 1. Null for any other loop.
static Value ownerTest(scf::ForOp loop) {
  auto select = loop.getUpperBound().getDefiningOp<arith::SelectOp>();
  if (select && matchPattern(loop.getLowerBound(), m_Zero()) &&
      matchPattern(loop.getStep(), m_One()) &&
      matchPattern(select.getTrueValue(), m_One()) &&
      matchPattern(select.getFalseValue(), m_Zero()))
    return select.getCondition();
  return {};
}

static void toBranch(IRRewriter &rewriter, scf::ForOp loop, Value isOwner) {
  rewriter.setInsertionPoint(loop);
  Location loc = loop.getLoc();
  auto branch = scf::IfOp::create(rewriter, loc, loop.getResultTypes(), isOwner,
                                  loop.getNumResults() > 0);
  Block *then = branch.thenBlock();
  if (!then->empty())
    rewriter.eraseOp(then->getTerminator());
  // The body's scf.yield ends the then branch.
  SmallVector<Value> entry = {loop.getLowerBound()};
  llvm::append_range(entry, loop.getInitArgs());
  rewriter.inlineBlockBefore(loop.getBody(), then, then->end(), entry);
  if (loop.getNumResults() > 0) {
    rewriter.setInsertionPointToEnd(branch.elseBlock());
    scf::YieldOp::create(rewriter, loc, loop.getInitArgs());
  }
  rewriter.replaceOp(loop, branch.getResults());
}

namespace {

struct OwnerLoopsToBranchesPass
    : public distopt::impl::OwnerLoopsToBranchesPassBase<
          OwnerLoopsToBranchesPass> {
  void runOnOperation() override {
    SmallVector<std::pair<scf::ForOp, Value>> loops;
    WalkResult walk = getOperation().walk([&](scf::ForOp loop) {
      if (!loop->hasAttr(abi::kOwnerLoop))
        return WalkResult::advance();
      // Any other loop may run more than once: as a branch it would not.
      Value isOwner = ownerTest(loop);
      if (!isOwner) {
        loop.emitOpError() << "marked " << abi::kOwnerLoop
                           << " must run from 0 to select(%owner, 1, 0) by 1";
        return WalkResult::interrupt();
      }
      loops.push_back({loop, isOwner});
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    IRRewriter rewriter(&getContext());
    for (auto [loop, isOwner] : loops)
      toBranch(rewriter, loop, isOwner);
  }
};

} // namespace
