//===- WidenReductions.cpp - reduce narrow floats in f32 --------*- C++ -*-===//
//
// --distopt-widen-reductions: bf16/f16 reductions accumulate in a wider type
// and round once, instead of once per ring hop.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

namespace mlir::distopt {
#define GEN_PASS_DEF_WIDENREDUCTIONSPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Why `op`, a reduction in a narrow float type, stays narrow (a warning's
/// text), or "" when it is widened.
template <typename OpTy> std::string leftNarrow(OpTy op) {
  if (op.getWireType())
    return "its wire type is set explicitly";
  Value result = op->getResult(0);
  if (isa<TokenType>(result.getType()) &&
      (!result.hasOneUse() || !isa<WaitOp>(*result.getUsers().begin())))
    return "its token is not waited on exactly once";
  return "";
}

/// Whether `op` reduces floats narrower than `wide` in a kind whose
/// rounding depends on the precision (not max or min).
template <typename OpTy> bool isNarrowSum(OpTy op, FloatType wide) {
  auto narrow = dyn_cast<FloatType>(
      cast<RankedTensorType>(op.getInput().getType()).getElementType());
  ReductionKind kind = op.getReduction();
  return narrow && narrow.getWidth() < wide.getWidth() &&
         kind != ReductionKind::Max && kind != ReductionKind::Min;
}

/// A narrow reduction in `wide`, its users given the wide result.
template <typename OpTy> struct WidenReduction : public OpRewritePattern<OpTy> {
  WidenReduction(MLIRContext *context, FloatType wide, llvm::Statistic &count)
      : OpRewritePattern<OpTy>(context), wide(wide), count(count) {}

  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    if (!isNarrowSum(op, wide) || !leftNarrow(op).empty())
      return rewriter.notifyMatchFailure(op, "not a reduction to widen");
    widen(op, rewriter);
    ++count;
    return success();
  }

  void widen(OpTy op, PatternRewriter &rewriter) const;

  FloatType wide;
  llvm::Statistic &count;
};

struct WidenReductionsPass
    : public distopt::impl::WidenReductionsPassBase<WidenReductionsPass> {
  using WidenReductionsPassBase::WidenReductionsPassBase;

  void runOnOperation() override {
    MLIRContext *context = &getContext();
    // Option parsing admits f32 and f64 only; a C++ caller may pass None.
    if (dtype == ReduceDtype::None) {
      emitError(getOperation().getLoc())
          << "--distopt-widen-reductions: dtype must be f32 or f64";
      return signalPassFailure();
    }
    FloatType wide = dtype == ReduceDtype::F64
                         ? FloatType(Float64Type::get(context))
                         : FloatType(Float32Type::get(context));
    // What stays narrow says why, once.
    getOperation().walk([&](Operation *op) {
      TypeSwitch<Operation *>(op)
          .Case<AllReduceOp, AllReduceStartOp, ReduceScatterOp,
                ReduceScatterStartOp, ReduceOp, ReduceStartOp>(
              [&](auto collective) {
                std::string why = leftNarrow(collective);
                if (isNarrowSum(collective, wide) && !why.empty())
                  collective.emitWarning()
                      << "--distopt-widen-reductions: left in "
                      << getElementTypeOrSelf(collective.getInput()) << ": "
                      << why;
              });
    });
    RewritePatternSet patterns(context);
    patterns.add<WidenReduction<AllReduceOp>, WidenReduction<AllReduceStartOp>,
                 WidenReduction<ReduceScatterOp>,
                 WidenReduction<ReduceScatterStartOp>, WidenReduction<ReduceOp>,
                 WidenReduction<ReduceStartOp>>(context, wide, numWidened);
    // Only these rewrites: the step otherwise stays as it came.
    GreedyRewriteConfig config;
    config.enableFolding(false)
        .enableConstantCSE(false)
        .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(
            applyPatternsGreedily(getOperation(), std::move(patterns), config)))
      return signalPassFailure();
  }
};

} // namespace

/// `type` (a tensor, or the token of one) with `element` as element type.
static Type withElementType(Type type, Type element) {
  if (auto token = dyn_cast<TokenType>(type))
    return TokenType::get(type.getContext(),
                          token.getValueType().clone(element));
  return cast<RankedTensorType>(type).clone(element);
}

/// Hands `wide`, the widened value of `narrow`, to narrow's users: an
/// arith.extf to the wide type takes it as it is, one to a type between
/// the two (an f32 main parameter's gradient reduced in f64) gets it
/// rounded once to that type (nothing rounds to the narrow type first);
/// every other user gets it rounded once to the narrow type.
static void replaceWithWide(PatternRewriter &rewriter, Value narrow,
                            Value wide) {
  Value rounded;
  unsigned wideBits =
      getElementTypeOrSelf(wide.getType()).getIntOrFloatBitWidth();
  for (OpOperand &use : llvm::make_early_inc_range(narrow.getUses())) {
    auto extend = dyn_cast<arith::ExtFOp>(use.getOwner());
    if (extend && extend.getType() == wide.getType()) {
      rewriter.replaceOp(extend, wide);
      continue;
    }
    if (extend &&
        getElementTypeOrSelf(extend.getType()).getIntOrFloatBitWidth() <
            wideBits) {
      rewriter.setInsertionPoint(extend);
      rewriter.replaceOpWithNewOp<arith::TruncFOp>(extend, extend.getType(),
                                                   wide);
      continue;
    }
    if (!rounded) {
      rewriter.setInsertionPointAfterValue(wide);
      rounded = arith::TruncFOp::create(rewriter, wide.getLoc(),
                                        narrow.getType(), wide);
    }
    rewriter.modifyOpInPlace(use.getOwner(), [&] { use.set(rounded); });
  }
}

/// The split f16 average of --distopt-fuse-div-into-allreduce:
/// `premul_sum(scale)` whose only use divides it by a constant (in the data's
/// type, or in a wider one: ExactDivision.h). Returns the division and what
/// replaces both: avg where scale / divisor is exactly 1/size, else a
/// premul_sum factor where scale / divisor is exact in the `wide` type.
/// Otherwise the division stays.
static std::optional<std::pair<ConstantDivision, std::optional<double>>>
matchSplitAverage(Value reduced, double scale, int64_t size, FloatType wide) {
  std::optional<ConstantDivision> division = matchDivisionOf(reduced);
  if (!division || !std::isfinite(division->divisor) || division->divisor == 0)
    return std::nullopt;
  // scale / divisor == 1 / size exactly (scale * size == divisor, computed
  // without rounding), and avg divides by a size exact in `wide`.
  APFloat product(scale);
  if (isExactIn(static_cast<double>(size), wide) &&
      static_cast<double>(size) <= 0x1p53 &&
      product.multiply(APFloat(static_cast<double>(size)),
                       APFloat::rmNearestTiesToEven) == APFloat::opOK &&
      product.convertToDouble() == division->divisor)
    return std::make_pair(*division, std::optional<double>());
  APFloat factor(scale);
  if (factor.divide(APFloat(division->divisor), APFloat::rmNearestTiesToEven) !=
          APFloat::opOK ||
      !isExactIn(factor.convertToDouble(), wide) ||
      !isRepresentableScale(factor, wide))
    return std::nullopt;
  return std::make_pair(*division,
                        std::optional<double>(factor.convertToDouble()));
}

template <typename OpTy>
void WidenReduction<OpTy>::widen(OpTy op, PatternRewriter &rewriter) const {
  auto inputType = cast<RankedTensorType>(op.getInput().getType());
  ReductionKind kind = op.getReduction();
  // The value the step reads: the result, or the wait's for a start.
  Operation *wait = nullptr;
  Value reduced = op->getResult(0);
  if (isa<TokenType>(reduced.getType())) {
    wait = *reduced.getUsers().begin();
    reduced = wait->getResult(0);
  }

  rewriter.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value extended = arith::ExtFOp::create(rewriter, loc, inputType.clone(wide),
                                         op.getInput());
  auto widened = cast<OpTy>(rewriter.clone(*op));
  widened.getInputMutable().assign(extended);
  widened->getResult(0).setType(
      withElementType(op->getResult(0).getType(), wide));

  // A wide sum cannot overflow: the split f16 average is one average again
  // (its division is folded into the collective's factor). Not for reduce:
  // its other ranks keep their input, which the division still divides.
  constexpr bool toRoot =
      std::is_same_v<OpTy, ReduceOp> || std::is_same_v<OpTy, ReduceStartOp>;
  std::optional<ConstantDivision> split;
  ProcessGroupOp group = lookupProcessGroup(op, op.getGroupAttr());
  if (!toRoot && kind == ReductionKind::PremulSum && op.getScale() && group)
    if (auto match = matchSplitAverage(
            reduced, op.getScale()->convertToDouble(), group.getSize(), wide)) {
      auto [division, factor] = *match;
      if (!factor) {
        widened.setReduction(ReductionKind::Avg);
        widened.removeScaleAttr();
      } else {
        widened.setScaleAttr(rewriter.getF64FloatAttr(*factor));
      }
      split = division;
      reduced = division.ops.front()->getResult(0);
    }

  Value wideResult = widened->getResult(0);
  if (wait) {
    rewriter.setInsertionPoint(wait);
    wideResult = WaitOp::create(rewriter, wait->getLoc(), wideResult);
  }
  replaceWithWide(rewriter, reduced, wideResult);
  if (split)
    for (Operation *divisionOp : split->ops)
      rewriter.eraseOp(divisionOp);
  if (wait)
    rewriter.eraseOp(wait);
  rewriter.eraseOp(op);
}
