//===- FuseDivIntoAllReduce.cpp - fold 1/N into the reduction ---*- C++ -*-===//
//
// --distopt-fuse-div-into-allreduce: a scaling by a constant next to a sum
// collective becomes part of the collective (avg or premul_sum), once, and
// only where the collective computes the same quotient: an exact division by
// the group size, or a factor that is exact in every type it is applied in.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
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

/// An elementwise scaling of `data` by a constant: `data / constant` or
/// `data * constant`, yielded by `op`.
struct Scaling {
  Operation *op;
  Value data;
  double constant;
  bool divides;
};

/// The value of a float splat, when a double holds it exactly: a splat
/// constant, or a linalg.fill of a scalar constant.
static std::optional<double> getSplatValue(Value value) {
  std::optional<APFloat> splat;
  DenseFPElementsAttr dense;
  FloatAttr scalar;
  if (matchPattern(value, m_Constant(&dense)) && dense.isSplat())
    splat = dense.getSplatValue<APFloat>();
  else if (auto fill = value.getDefiningOp<linalg::FillOp>();
           fill && matchPattern(fill.getInputs().front(), m_Constant(&scalar)))
    splat = scalar.getValue();
  if (!splat)
    return std::nullopt;
  bool losesInfo = false;
  splat->convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                 &losesInfo);
  if (losesInfo)
    return std::nullopt;
  return splat->convertToDouble();
}

/// Recognises `op` as a scaling of `data` by a finite, non-zero constant:
/// `arith.divf` / `arith.mulf` (either order) / `linalg.div` / `linalg.mul`
/// by a splat, or a division done in a wider type (ExactDivision.h).
static std::optional<Scaling> matchScaling(Operation *op, Value data) {
  if (!op || op->getNumResults() != 1)
    return std::nullopt;
  auto valid = [](std::optional<double> c) {
    return c && *c != 0 && std::isfinite(*c);
  };
  if (isa<arith::TruncFOp>(op)) {
    std::optional<ConstantDivision> division =
        matchConstantDivision(op->getResult(0));
    if (!division || division->dividend != data || !valid(division->divisor))
      return std::nullopt;
    return Scaling{op, data, division->divisor, true};
  }
  auto binary = [&](Value lhs, Value rhs, bool divides,
                    bool commutes) -> std::optional<Scaling> {
    Value other;
    if (lhs == data)
      other = rhs;
    else if (commutes && rhs == data)
      other = lhs;
    else
      return std::nullopt;
    std::optional<double> c = getSplatValue(other);
    if (!valid(c))
      return std::nullopt;
    return Scaling{op, data, *c, divides};
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

/// The scaling of a collective's result (its only use, or a division in a
/// wider type through the extension that is its only use).
static std::optional<Scaling> matchScalingOfResult(Value result) {
  if (!result.hasOneUse())
    return std::nullopt;
  if (std::optional<Scaling> scaling =
          matchScaling(*result.getUsers().begin(), result))
    return scaling;
  if (std::optional<ConstantDivision> division = matchDivisionOf(result))
    return matchScaling(division->ops.front(), result);
  return std::nullopt;
}

/// The scaling that yields a collective's input.
static std::optional<Scaling> matchScalingOfInput(Value input) {
  Operation *def = input.getDefiningOp();
  if (!def)
    return std::nullopt;
  if (isa<arith::TruncFOp>(def)) {
    std::optional<ConstantDivision> division = matchConstantDivision(input);
    return division ? matchScaling(def, division->dividend) : std::nullopt;
  }
  for (Value operand : def->getOperands())
    if (std::optional<Scaling> scaling = matchScaling(def, operand))
      return scaling;
  return std::nullopt;
}

/// Erases `op`, then whatever only it used (the divisor constant, a fill and
/// its empty tensor, the extension of a wide division), so that the pass
/// leaves no dead code behind.
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

/// `n` as a double, when it is exactly one.
static std::optional<double> exactDouble(int64_t n) {
  double d = static_cast<double>(n);
  if (std::fabs(d) >= 0x1p63 || static_cast<int64_t>(d) != n)
    return std::nullopt;
  return d;
}

/// Whether `x` is a power of two (so that 1/x is exact).
static bool isPowerOfTwo(double x) {
  int exponent;
  return std::fabs(std::frexp(x, &exponent)) == 0.5;
}

/// FSDP's split of 1/N for f16 (its gradient predivide factor): `a` is
/// doubled while `a < N / a`, here only while it still divides N, so that
/// N = a * b exactly. 1 for odd N (no split).
static int64_t predivideFactor(int64_t n) {
  int64_t factor = 1;
  while (n % (2 * factor) == 0 && factor < n / factor)
    factor *= 2;
  return factor;
}

/// How a sum collective takes a scaling over.
struct Fusion {
  ReductionKind kind;
  double scale = 1.0;       // premul_sum's factor
  double postDivisor = 1.0; // a division after the collective (f16 split)
};

/// The fusion that computes what `scaling` does after a sum over `size`
/// ranks of `type` data (travelling as `wire`), if there is one:
/// - a division by exactly `size` (or a multiplication by exactly 1/size)
///   is `avg`, which divides the sum by the group size in the runtime's
///   arithmetic type (f32 for 32-bit data and narrower, f64 for f64), so
///   the size must be exact there; for f16 it is FSDP's split instead;
/// - any other factor is `premul_sum(factor)`, where the factor (1/c for a
///   division by c) is exact in the element and wire types: a backend
///   multiplies in those types (NCCL rounds the factor to the data's type),
///   so an inexact one would give another product than the scaling's.
/// A division by 257 in f32 after a bf16 sum is avg; 1/3 is not a valid
/// premul_sum factor, and a division by 3 that is not by the group size
/// stays a division.
static FailureOr<Fusion> chooseFusion(const Scaling &scaling, int64_t size,
                                      FloatType type,
                                      std::optional<Type> wire) {
  std::optional<double> n = exactDouble(size);
  bool average =
      n && (scaling.divides ? scaling.constant == *n
                            : isPowerOfTwo(*n) && scaling.constant == 1.0 / *n);
  if (average && type.isF16()) {
    // Summing N f16 values can overflow where their mean would not: 1/a
    // before the sum, then / b.
    int64_t a = predivideFactor(size);
    if (a > 1 && isExactIn(1.0 / static_cast<double>(a), type))
      return Fusion{ReductionKind::PremulSum, 1.0 / static_cast<double>(a),
                    static_cast<double>(size / a)};
  }
  if (average) {
    FloatType arithmetic = type.getWidth() <= 32
                               ? FloatType(Float32Type::get(type.getContext()))
                               : FloatType(Float64Type::get(type.getContext()));
    if (isExactIn(*n, arithmetic))
      return Fusion{ReductionKind::Avg};
  }
  if (scaling.divides && !isPowerOfTwo(scaling.constant))
    return failure();
  double factor = scaling.divides ? 1.0 / scaling.constant : scaling.constant;
  if (!isExactIn(factor, type) ||
      (wire &&
       (!isa<FloatType>(*wire) || !isExactIn(factor, cast<FloatType>(*wire)))))
    return failure();
  return Fusion{ReductionKind::PremulSum, factor};
}

/// A sum collective (all_reduce or reduce_scatter) next to a scaling by a
/// constant takes the scaling over (chooseFusion). Matches sum reductions
/// only, so it applies once per op.
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

    // A scaling of the result (its only use), or else of the input.
    std::optional<Scaling> scaling = matchScalingOfResult(op.getResult());
    bool after = scaling.has_value();
    if (!scaling)
      scaling = matchScalingOfInput(op.getInput());
    if (!scaling)
      return rewriter.notifyMatchFailure(op, "no scaling by a constant");
    FailureOr<Fusion> fusion =
        chooseFusion(*scaling, group.getSize(), elementType, op.getWireType());
    if (failed(fusion))
      return rewriter.notifyMatchFailure(
          op, "not the group size, and not a factor exact in the element "
              "and wire types");

    // The collective takes the unscaled data and scales itself.
    rewriter.modifyOpInPlace(op, [&] {
      op.setReductionAttr(
          ReductionKindAttr::get(op.getContext(), fusion->kind));
      if (fusion->kind == ReductionKind::PremulSum)
        op.setScaleAttr(rewriter.getF64FloatAttr(fusion->scale));
      if (!after)
        op.getInputMutable().assign(scaling->data);
    });
    if (after) {
      rewriter.replaceAllUsesWith(scaling->op->getResult(0), op.getResult());
      eraseWithDeadProducers(rewriter, scaling->op);
    } else if (scaling->op->use_empty()) {
      eraseWithDeadProducers(rewriter, scaling->op);
    }
    // The second half of a split average, after the collective, exact.
    if (fusion->postDivisor != 1.0) {
      SmallVector<OpOperand *> uses =
          llvm::to_vector(llvm::make_pointer_range(op.getResult().getUses()));
      rewriter.setInsertionPointAfter(op);
      Value divided = createDivision(rewriter, op.getLoc(), op.getResult(),
                                     fusion->postDivisor);
      for (OpOperand *use : uses)
        rewriter.modifyOpInPlace(use->getOwner(), [&] { use->set(divided); });
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
