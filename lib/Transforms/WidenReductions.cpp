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
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

namespace mlir::distopt {
#define GEN_PASS_DEF_WIDENREDUCTIONSPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

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
    wide = dtype == ReduceDtype::F64 ? FloatType(Float64Type::get(context))
                                     : FloatType(Float32Type::get(context));
    SmallVector<Operation *> collectives;
    getOperation().walk([&](Operation *op) {
      if (isa<AllReduceOp, AllReduceStartOp, ReduceScatterOp,
              ReduceScatterStartOp, ReduceOp, ReduceStartOp>(op))
        collectives.push_back(op);
    });
    for (Operation *op : collectives)
      TypeSwitch<Operation *>(op)
          .Case<AllReduceOp, AllReduceStartOp, ReduceScatterOp,
                ReduceScatterStartOp, ReduceOp, ReduceStartOp>(
              [&](auto collective) { widen(collective); });
  }

  template <typename OpTy> void widen(OpTy op);

  FloatType wide;
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
static void replaceWithWide(Value narrow, Value wide) {
  Value rounded;
  unsigned wideBits =
      getElementTypeOrSelf(wide.getType()).getIntOrFloatBitWidth();
  for (OpOperand &use : llvm::make_early_inc_range(narrow.getUses())) {
    auto extend = dyn_cast<arith::ExtFOp>(use.getOwner());
    if (extend && extend.getType() == wide.getType()) {
      extend.replaceAllUsesWith(wide);
      extend.erase();
      continue;
    }
    if (extend &&
        getElementTypeOrSelf(extend.getType()).getIntOrFloatBitWidth() <
            wideBits) {
      OpBuilder builder(extend);
      Value once = arith::TruncFOp::create(builder, extend.getLoc(),
                                           extend.getType(), wide);
      extend.replaceAllUsesWith(once);
      extend.erase();
      continue;
    }
    if (!rounded) {
      OpBuilder builder(wide.getContext());
      builder.setInsertionPointAfterValue(wide);
      rounded = arith::TruncFOp::create(builder, wide.getLoc(),
                                        narrow.getType(), wide);
    }
    use.set(rounded);
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

template <typename OpTy> void WidenReductionsPass::widen(OpTy op) {
  auto inputType = cast<RankedTensorType>(op.getInput().getType());
  auto narrow = dyn_cast<FloatType>(inputType.getElementType());
  if (!narrow || narrow.getWidth() >= wide.getWidth())
    return;
  ReductionKind kind = op.getReduction();
  if (kind == ReductionKind::Max || kind == ReductionKind::Min)
    return; // exact in any precision
  if (op.getWireType()) {
    op.emitWarning() << "--distopt-widen-reductions: left in " << narrow
                     << ": its wire type is set explicitly";
    return;
  }
  // The value the step reads: the result, or the wait's for a start.
  Operation *wait = nullptr;
  Value reduced = op->getResult(0);
  if (isa<TokenType>(reduced.getType())) {
    if (!reduced.hasOneUse() || !isa<WaitOp>(*reduced.getUsers().begin())) {
      op.emitWarning() << "--distopt-widen-reductions: left in " << narrow
                       << ": its token is not waited on exactly once";
      return;
    }
    wait = *reduced.getUsers().begin();
    reduced = wait->getResult(0);
  }

  OpBuilder builder(op);
  Location loc = op.getLoc();
  Value extended =
      arith::ExtFOp::create(builder, loc, inputType.clone(wide), op.getInput());
  auto widened = cast<OpTy>(builder.clone(*op));
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
        widened.setScaleAttr(builder.getF64FloatAttr(*factor));
      }
      split = division;
      reduced = division.ops.front()->getResult(0);
    }

  Value wideResult = widened->getResult(0);
  if (wait) {
    builder.setInsertionPoint(wait);
    wideResult = WaitOp::create(builder, wait->getLoc(), wideResult);
  }
  replaceWithWide(reduced, wideResult);
  if (split)
    for (Operation *divisionOp : split->ops)
      divisionOp->erase();
  if (wait)
    wait->erase();
  op.erase();
  ++numWidened;
}
