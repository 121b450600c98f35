//===- ExactGPUSqrt.cpp - correctly rounded sqrt in kernels -----*- C++ -*-===//
//
// --distopt-exact-gpu-sqrt (Passes.td): math.sqrt becomes NVVM's
// correctly rounded intrinsic (sqrt.rn), instead of libdevice's approximate
// __nv_sqrtf.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_EXACTGPUSQRTPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

struct SqrtToIntrinsic : OpRewritePattern<math::SqrtOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::SqrtOp op,
                                PatternRewriter &rewriter) const override {
    // Scalars only: kernels are scalar code. The generic intrinsic call:
    // the NVVM conversion would turn llvm.intr.sqrt into __nv_sqrtf again.
    StringRef intrinsic;
    if (op.getType().isF32())
      intrinsic = "llvm.nvvm.sqrt.rn.f";
    else if (op.getType().isF64())
      intrinsic = "llvm.nvvm.sqrt.rn.d";
    else
      return rewriter.notifyMatchFailure(op, "not a scalar f32 or f64");
    rewriter.replaceOpWithNewOp<LLVM::CallIntrinsicOp>(
        op, op.getType(), rewriter.getStringAttr(intrinsic), op.getOperand());
    return success();
  }
};

struct ExactGPUSqrtPass
    : public distopt::impl::ExactGPUSqrtPassBase<ExactGPUSqrtPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<SqrtToIntrinsic>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
