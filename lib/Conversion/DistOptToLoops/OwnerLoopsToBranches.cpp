//===- OwnerLoopsToBranches.cpp - owner loops as scf.if -*- C++ -*-===//
//
// --distopt-owner-loops-to-branches: after bufferization, each scf.for that
// an owned_by became (marked distopt.owner_loop: it runs at most once) is
// an scf.if on whether it runs. The loop form is for one-shot
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

/// Whether `loop` runs: the owner test the lowering built (its upper bound
/// is `select(isOwner, 1, 0)` from 0), or else lower < upper.
static Value runsOnce(OpBuilder &b, scf::ForOp loop) {
  auto select = loop.getUpperBound().getDefiningOp<arith::SelectOp>();
  if (select && matchPattern(loop.getLowerBound(), m_Zero()) &&
      matchPattern(select.getTrueValue(), m_One()) &&
      matchPattern(select.getFalseValue(), m_Zero()))
    return select.getCondition();
  return arith::CmpIOp::create(b, loop.getLoc(), arith::CmpIPredicate::slt,
                               loop.getLowerBound(), loop.getUpperBound());
}

static void toBranch(IRRewriter &rewriter, scf::ForOp loop) {
  rewriter.setInsertionPoint(loop);
  Location loc = loop.getLoc();
  auto branch =
      scf::IfOp::create(rewriter, loc, loop.getResultTypes(),
                        runsOnce(rewriter, loop), loop.getNumResults() > 0);
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
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) {
      if (loop->hasAttr(abi::kOwnerLoop))
        loops.push_back(loop);
    });
    IRRewriter rewriter(&getContext());
    for (scf::ForOp loop : loops)
      toBranch(rewriter, loop);
  }
};

} // namespace
