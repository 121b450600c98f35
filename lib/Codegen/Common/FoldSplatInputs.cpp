//===- FoldSplatInputs.cpp - splat inputs of linalg as scalars --*- C++ -*-===//
//
// --distopt-fold-splat-inputs (Passes.td): a linalg.generic input that is a
// splat constant is read as a scalar constant in the body, so that no
// tensor-sized constant reaches bufferization (which would make it a
// global as large as the tensor).
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_FOLDSPLATINPUTSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

struct FoldSplatInput : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    // Which inputs are splats, and their values.
    SmallVector<std::pair<unsigned, TypedAttr>> splats;
    SmallVector<Value> inputs;
    SmallVector<AffineMap> maps;
    for (OpOperand *input : op.getDpsInputOperands()) {
      DenseElementsAttr dense;
      if (matchPattern(input->get(), m_Constant(&dense)) && dense.isSplat()) {
        splats.push_back(
            {input->getOperandNumber(), dense.getSplatValue<TypedAttr>()});
        continue;
      }
      inputs.push_back(input->get());
      maps.push_back(op.getMatchingIndexingMap(input));
    }
    if (splats.empty())
      return rewriter.notifyMatchFailure(op, "no splat constant input");
    for (OpOperand &init : op.getDpsInitsMutable())
      maps.push_back(op.getMatchingIndexingMap(&init));

    auto generic = linalg::GenericOp::create(
        rewriter, op.getLoc(), op.getResultTypes(), inputs, op.getDpsInits(),
        maps, op.getIteratorTypesArray());
    rewriter.inlineRegionBefore(op.getRegion(), generic.getRegion(),
                                generic.getRegion().begin());
    Block &body = generic.getRegion().front();
    rewriter.setInsertionPointToStart(&body);
    // Highest argument first, so that the numbers of the others hold.
    for (auto [index, value] : llvm::reverse(splats)) {
      Value scalar = arith::ConstantOp::create(rewriter, op.getLoc(), value);
      rewriter.replaceAllUsesWith(body.getArgument(index), scalar);
      body.eraseArgument(index);
    }
    rewriter.replaceOp(op, generic.getResults());
    return success();
  }
};

struct FoldSplatInputsPass
    : public distopt::impl::FoldSplatInputsPassBase<FoldSplatInputsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FoldSplatInput>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
