//===- FuseDivIntoAllReduce.cpp - fold 1/N into the reduction ---*- C++ -*-===//
//
// --distopt-fuse-div-into-allreduce: a scaling by a constant next to a sum
// collective becomes part of the collective (avg or premul_sum), once.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace mlir::distopt {
#define GEN_PASS_DEF_FUSEDIVINTOALLREDUCEPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// An elementwise scaling `result = data * factor` by a constant.
struct Scaling {
  Operation *op;
  Value data;
  double factor;
};

/// The value of a float splat: a splat constant, or a linalg.fill of a
/// scalar constant.
static std::optional<double> getSplatValue(Value value) {
  DenseFPElementsAttr dense;
  if (matchPattern(value, m_Constant(&dense)) && dense.isSplat())
    return dense.getSplatValue<APFloat>().convertToDouble();
  if (auto fill = value.getDefiningOp<linalg::FillOp>()) {
    FloatAttr scalar;
    if (matchPattern(fill.getInputs().front(), m_Constant(&scalar)))
      return scalar.getValueAsDouble();
  }
  return std::nullopt;
}

/// Recognises `op` as a scaling of `data` by a constant.
static std::optional<Scaling> matchScaling(Operation *op, Value data) {
  if (!op || op->getNumResults() != 1)
    return std::nullopt;
  auto binary = [&](Value lhs, Value rhs, bool isDivision,
                    bool commutes) -> std::optional<Scaling> {
    Value other;
    if (lhs == data)
      other = rhs;
    else if (commutes && rhs == data)
      other = lhs;
    else
      return std::nullopt;
    std::optional<double> c = getSplatValue(other);
    if (!c || *c == 0 || !std::isfinite(*c))
      return std::nullopt;
    return Scaling{op, data, isDivision ? 1.0 / *c : *c};
  };
  if (auto div = dyn_cast<arith::DivFOp>(op))
    return binary(div.getLhs(), div.getRhs(), true, false);
  if (auto mul = dyn_cast<arith::MulFOp>(op))
    return binary(mul.getLhs(), mul.getRhs(), false, true);
  if (auto div = dyn_cast<linalg::DivOp>(op))
    return binary(div.getInputs()[0], div.getInputs()[1], true, false);
  if (auto mul = dyn_cast<linalg::MulOp>(op))
    return binary(mul.getInputs()[0], mul.getInputs()[1], false, true);
  return std::nullopt;
}

/// Erases `op`, then whatever only it used (the divisor constant, a fill and
/// its empty tensor), so that the pass leaves no dead code behind.
static void eraseWithDeadProducers(RewriterBase &rewriter, Operation *op) {
  SmallVector<Operation *> worklist = {op};
  while (!worklist.empty()) {
    Operation *dead = worklist.pop_back_val();
    SmallVector<Operation *> producers;
    for (Value operand : dead->getOperands())
      if (Operation *producer = operand.getDefiningOp())
        producers.push_back(producer);
    rewriter.eraseOp(dead);
    for (Operation *producer : producers)
      if (!llvm::is_contained(worklist, producer) &&
          isOpTriviallyDead(producer))
        worklist.push_back(producer);
  }
}

/// FSDP's split of 1/N for f16: divide by `pre` before and `N/pre` after.
static int64_t predivideFactor(int64_t n) {
  int64_t factor = 1;
  while (n % factor == 0 && n / factor > factor)
    factor *= 2;
  return factor;
}

/// Whether `factor` is exactly 1/size once rounded to `type`.
static bool isInverseOf(double factor, int64_t size, FloatType type) {
  bool losesInfo;
  APFloat a(factor), b(1.0 / static_cast<double>(size));
  a.convert(type.getFloatSemantics(), APFloat::rmNearestTiesToEven, &losesInfo);
  b.convert(type.getFloatSemantics(), APFloat::rmNearestTiesToEven, &losesInfo);
  return a.bitwiseIsEqual(b);
}

/// A sum collective (all_reduce or reduce_scatter) next to a scaling by a
/// constant takes the scaling over: avg where the factor is 1/N, else
/// premul_sum. Matches sum reductions only, so it applies once per op.
template <typename OpTy>
struct FuseScalingIntoCollective : public OpRewritePattern<OpTy> {
  FuseScalingIntoCollective(MLIRContext *context, llvm::Statistic *fused)
      : OpRewritePattern<OpTy>(context), fused(fused) {}

  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    if (op.getReduction() != ReductionKind::Sum)
      return rewriter.notifyMatchFailure(op, "not a sum");
    auto elementType = dyn_cast<FloatType>(
        cast<RankedTensorType>(op.getInput().getType()).getElementType());
    ProcessGroupOp group = lookupProcessGroup(op, op.getGroupAttr());
    if (!elementType || !group)
      return rewriter.notifyMatchFailure(op, "not floats, or no group");
    int64_t size = group.getSize();

    // A scaling of the result (its only use), or else of the input.
    std::optional<Scaling> scaling;
    bool after = false;
    if (op->hasOneUse()) {
      scaling = matchScaling(*op->getUsers().begin(), op.getResult());
      after = scaling.has_value();
    }
    if (!scaling)
      if (Operation *def = op.getInput().getDefiningOp())
        for (Value operand : def->getOperands())
          if ((scaling = matchScaling(def, operand)))
            break;
    if (!scaling)
      return rewriter.notifyMatchFailure(op, "no scaling by a constant");

    ReductionKind kind = ReductionKind::PremulSum;
    double factor = scaling->factor;
    std::optional<int64_t> postDivisor;
    if (isInverseOf(factor, size, elementType)) {
      kind = ReductionKind::Avg;
      if (elementType.isF16()) {
        // Summing N f16 values can overflow where their mean would not.
        int64_t pre = predivideFactor(size);
        kind = ReductionKind::PremulSum;
        factor = 1.0 / static_cast<double>(pre);
        if (size / pre != 1)
          postDivisor = size / pre;
      }
    }
    if (kind == ReductionKind::PremulSum &&
        !isRepresentableScale(APFloat(factor), elementType))
      return rewriter.notifyMatchFailure(op, "scale not representable");

    // The collective takes the unscaled data and scales itself.
    rewriter.modifyOpInPlace(op, [&] {
      op.setReductionAttr(ReductionKindAttr::get(op.getContext(), kind));
      if (kind == ReductionKind::PremulSum)
        op.setScaleAttr(rewriter.getF64FloatAttr(factor));
      if (!after)
        op.getInputMutable().assign(scaling->data);
    });
    if (after) {
      rewriter.replaceAllUsesWith(scaling->op->getResult(0), op.getResult());
      eraseWithDeadProducers(rewriter, scaling->op);
    } else if (scaling->op->use_empty()) {
      eraseWithDeadProducers(rewriter, scaling->op);
    }
    // The second half of a split average, after the collective.
    if (postDivisor) {
      rewriter.setInsertionPointAfter(op);
      auto type = cast<RankedTensorType>(op.getResult().getType());
      auto divisor = arith::ConstantOp::create(
          rewriter, op.getLoc(),
          DenseElementsAttr::get(
              type, rewriter.getFloatAttr(elementType,
                                          static_cast<double>(*postDivisor))));
      auto divided =
          arith::DivFOp::create(rewriter, op.getLoc(), op.getResult(), divisor);
      rewriter.replaceAllUsesExcept(op.getResult(), divided, divided);
    }
    if (fused)
      ++*fused;
    return success();
  }

  llvm::Statistic *fused;
};

struct FuseDivIntoAllReducePass
    : public distopt::impl::FuseDivIntoAllReducePassBase<
          FuseDivIntoAllReducePass> {
  using FuseDivIntoAllReducePassBase::FuseDivIntoAllReducePassBase;

  void runOnOperation() override {
    if (backend == CollectiveBackend::SumOnly)
      return;
    RewritePatternSet patterns(&getContext());
    populateFuseDivIntoAllReducePatterns(patterns, &numFused);
    // Only the collectives are rewritten: no folding, and what else the
    // input holds (dead code included) stays as it is.
    SmallVector<Operation *> collectives;
    getOperation().walk([&](Operation *op) {
      if (isa<AllReduceOp, ReduceScatterOp>(op))
        collectives.push_back(op);
    });
    GreedyRewriteConfig config;
    config.setStrictness(GreedyRewriteStrictness::ExistingOps)
        .enableFolding(false)
        .enableConstantCSE(false);
    if (failed(
            applyOpPatternsGreedily(collectives, std::move(patterns), config)))
      signalPassFailure();
  }
};

} // namespace

void mlir::distopt::populateFuseDivIntoAllReducePatterns(
    RewritePatternSet &patterns, llvm::Statistic *fused) {
  patterns.add<FuseScalingIntoCollective<AllReduceOp>,
               FuseScalingIntoCollective<ReduceScatterOp>>(
      patterns.getContext(), fused);
}
