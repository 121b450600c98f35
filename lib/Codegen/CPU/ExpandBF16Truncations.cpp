//===- ExpandBF16Truncations.cpp - bf16 without builtins --------*- C++ -*-===//
//
// --distopt-expand-bf16-truncations: scalar arith.truncf to bf16 becomes
// integer arithmetic on the bits, so that the compiled step calls none of
// the compiler-rt builtins (__truncsfbf2, __truncdfbf2) that Debian 12's
// libgcc lacks.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_EXPANDBF16TRUNCATIONSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

/// `x` (f64) rounded to f32 to odd: toward zero, then the lowest bit set
/// when that dropped anything. A second rounding of the result to a type
/// at least two bits narrower (bf16: 16) rounds as if from `x` directly.
Value roundToOddF32(OpBuilder &b, Location loc, Value x) {
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  Value nearest = arith::TruncFOp::create(b, loc, f32, x);
  Value back = arith::ExtFOp::create(b, loc, b.getF64Type(), nearest);
  Value bits = arith::BitcastOp::create(b, loc, i32, nearest);
  Value one = arith::ConstantIntOp::create(b, loc, i32, 1);
  // Rounded away from zero (an overflow to infinity too): one step back
  // toward zero, in the bit pattern's magnitude.
  Value away = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT,
                                     math::AbsFOp::create(b, loc, back),
                                     math::AbsFOp::create(b, loc, x));
  bits = arith::SelectOp::create(
      b, loc, away, arith::SubIOp::create(b, loc, bits, one), bits);
  // Inexact (never for NaN, whose comparisons are unordered): odd.
  Value inexact =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ONE, back, x);
  bits = arith::SelectOp::create(b, loc, inexact,
                                 arith::OrIOp::create(b, loc, bits, one), bits);
  return arith::BitcastOp::create(b, loc, f32, bits);
}

/// `x` (f32) rounded to bf16, to nearest even; NaNs stay (quiet) NaNs.
Value roundToBF16(OpBuilder &b, Location loc, Value x) {
  Type i32 = b.getI32Type();
  auto constant = [&](int64_t v) -> Value {
    return arith::ConstantIntOp::create(b, loc, i32, v);
  };
  Value bits = arith::BitcastOp::create(b, loc, i32, x);
  Value high = arith::ShRUIOp::create(b, loc, bits, constant(16));
  // Adding 0x7FFF, plus 1 when the kept part is odd, carries into it
  // exactly when the dropped half is above half way, or at half way with
  // an odd kept part; a carry out of the mantissa steps the exponent up
  // (to infinity past the largest finite value), as rounding should.
  Value odd = arith::AndIOp::create(b, loc, high, constant(1));
  Value biased = arith::AddIOp::create(
      b, loc, bits, arith::AddIOp::create(b, loc, odd, constant(0x7FFF)));
  Value rounded = arith::ShRUIOp::create(b, loc, biased, constant(16));
  // A NaN whose payload lies in the dropped bits would round to infinity.
  Value nan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, x, x);
  Value quiet = arith::OrIOp::create(b, loc, high, constant(0x40));
  Value result = arith::SelectOp::create(b, loc, nan, quiet, rounded);
  Value result16 = arith::TruncIOp::create(b, loc, b.getI16Type(), result);
  return arith::BitcastOp::create(b, loc, b.getBF16Type(), result16);
}

/// Arithmetic in bf16: LLVM computes it in f32 and rounds back with the
/// builtin. The same here, with the rounding expanded below. (Upstream's
/// arith-emulate-unsupported-floats does this too, but tags its extensions
/// with #arith.fastmath, which outlives the conversion to LLVM and leaves IR
/// that mlir-runner cannot parse.)
struct WidenBF16Arithmetic : public RewritePattern {
  WidenBF16Arithmetic(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *op,
                                PatternRewriter &rewriter) const override {
    Dialect *dialect = op->getDialect(); // null if unregistered
    if (!isa_and_nonnull<arith::ArithDialect, math::MathDialect>(dialect) ||
        isa<arith::ExtFOp, arith::TruncFOp, arith::BitcastOp, arith::ConstantOp,
            arith::SelectOp, arith::NegFOp, arith::CmpFOp>(op) ||
        op->getNumResults() != 1 || !op->getResult(0).getType().isBF16() ||
        !llvm::all_of(op->getOperandTypes(),
                      [](Type type) { return type.isBF16(); }))
      return failure();
    IRMapping extended;
    for (Value operand : op->getOperands())
      extended.map(operand,
                   arith::ExtFOp::create(rewriter, op->getLoc(),
                                         rewriter.getF32Type(), operand));
    Operation *wide = rewriter.clone(*op, extended);
    wide->getResult(0).setType(rewriter.getF32Type());
    rewriter.replaceOpWithNewOp<arith::TruncFOp>(op, op->getResult(0).getType(),
                                                 wide->getResult(0));
    return success();
  }
};

/// A truncation from f32 or f64 to bf16 (to nearest even, the default) as
/// integer arithmetic on the bits.
struct ExpandBF16Truncation : public OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(arith::TruncFOp op,
                                PatternRewriter &rewriter) const override {
    Type from = op.getIn().getType();
    if (!(from.isF32() || from.isF64()) || !op.getType().isBF16() ||
        op.getRoundingmodeAttr())
      return failure();
    Value x = op.getIn();
    if (x.getType().isF64())
      x = roundToOddF32(rewriter, op.getLoc(), x);
    rewriter.replaceOp(op, roundToBF16(rewriter, op.getLoc(), x));
    return success();
  }
};

struct ExpandBF16TruncationsPass
    : public distopt::impl::ExpandBF16TruncationsPassBase<
          ExpandBF16TruncationsPass> {
  void runOnOperation() override {
    // In two walks: the widened arithmetic's truncations are expanded by
    // the second.
    MLIRContext *context = &getContext();
    RewritePatternSet widen(context);
    widen.add<WidenBF16Arithmetic>(context);
    walkAndApplyPatterns(getOperation(), std::move(widen));
    RewritePatternSet expand(context);
    expand.add<ExpandBF16Truncation>(context);
    walkAndApplyPatterns(getOperation(), std::move(expand));
  }
};

} // namespace
