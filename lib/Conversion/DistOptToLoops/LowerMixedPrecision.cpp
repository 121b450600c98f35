//===- LowerMixedPrecision.cpp - loss scaling, finite checks, clipping -*- C++
//-*-===//
//
// --distopt-lower-local-ops, mixed precision: unscale, all_finite (voted
// across ranks), loss_scale_update (GradScaler's algorithm) and
// clip_grad_norm (the norm over every rank's shard where the op says so).
//
//===----------------------------------------------------------------------===//

#include "LocalOps.h"

#include "distopt/Conversion/DistOptToLoops/DistOptToLoops.h"

#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;

namespace mlir::distopt {

/// Reduces every element of `tensor` into one scalar of `accType`:
/// acc = combine(acc, element) from `init`.
Value reduceAll(
    OpBuilder &b, Location loc, Value tensor, Value init,
    function_ref<Value(OpBuilder &, Location, Value, Value)> combine) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto accType = RankedTensorType::get({}, init.getType());
  Value acc =
      tensor::EmptyOp::create(b, loc, accType.getShape(), init.getType());
  acc = linalg::FillOp::create(b, loc, init, acc).getResult(0);
  SmallVector<AffineMap> maps = {
      b.getMultiDimIdentityMap(type.getRank()),
      AffineMap::get(type.getRank(), 0, b.getContext())};
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::reduction);
  auto reduction = linalg::GenericOp::create(
      b, loc, TypeRange{accType}, ValueRange{tensor}, ValueRange{acc}, maps,
      iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        linalg::YieldOp::create(nb, nloc, combine(nb, nloc, args[0], args[1]));
      });
  return tensor::ExtractOp::create(b, loc, reduction.getResult(0),
                                   ValueRange{});
}

/// `scalar` reduced over `group` (a one-element all_reduce).
static Value allReduceScalar(OpBuilder &b, Location loc, Value scalar,
                             FlatSymbolRefAttr group, ReductionKind kind) {
  auto type = RankedTensorType::get({1}, scalar.getType());
  Value one = tensor::FromElementsOp::create(b, loc, type, scalar);
  Value reduced = AllReduceOp::create(
      b, loc, type, one, group, /*wire_type=*/nullptr,
      ReductionKindAttr::get(b.getContext(), kind), /*scale=*/nullptr);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  return tensor::ExtractOp::create(b, loc, reduced, zero);
}

/// `factor` (an f32 or wider scalar) in the type elements of type
/// `element` are scaled in: f32 for narrower types, as torch's kernels do.
static Value scalingFactor(OpBuilder &b, Location loc, Value factor,
                           Type element) {
  auto compute = cast<FloatType>(
      cast<FloatType>(element).getWidth() < 32 ? b.getF32Type() : element);
  if (factor.getType() == compute)
    return factor;
  if (cast<FloatType>(factor.getType()).getWidth() > compute.getWidth())
    return arith::TruncFOp::create(b, loc, compute, factor);
  return arith::ExtFOp::create(b, loc, compute, factor);
}

/// One element `x` times a `scalingFactor`, rounded back to x's type.
static Value scaledElement(OpBuilder &b, Location loc, Value x, Value factor) {
  Type element = x.getType();
  if (element != factor.getType())
    x = arith::ExtFOp::create(b, loc, factor.getType(), x);
  Value y = arith::MulFOp::create(b, loc, x, factor);
  if (y.getType() != element)
    y = arith::TruncFOp::create(b, loc, element, y);
  return y;
}

/// Every element of `tensor` times `factor` (an f32 or wider scalar),
/// computed in f32 for narrower types, as torch's kernels do.
static Value scaleAll(OpBuilder &b, Location loc, Value tensor, Value factor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  factor = scalingFactor(b, loc, factor, type.getElementType());
  // Written over the input where nothing reads it later (the unscaled or
  // clipped gradient replaces the one it came from); the body does not
  // read the output, so elsewhere bufferization allocates without a copy.
  Value init = tensor;
  AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, ValueRange{tensor}, ValueRange{init},
             SmallVector<AffineMap>{identity, identity}, iterators,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               linalg::YieldOp::create(
                   nb, nloc, scaledElement(nb, nloc, args[0], factor));
             })
      .getResult(0);
}

Value widen(OpBuilder &b, Location loc, Value x, Type to) {
  return x.getType() == to ? x : Value(arith::ExtFOp::create(b, loc, to, x));
}

/// unscale: input * (1 / scale), the reciprocal taken once (GradScaler).
void lowerUnscale(RewriterBase &rewriter, UnscaleOp op) {
  OpBuilder &b = rewriter;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value one = arith::ConstantOp::create(
      b, loc, FloatAttr::get(op.getScale().getType(), 1.0));
  Value inverse = arith::DivFOp::create(b, loc, one, op.getScale());
  rewriter.replaceOp(op, scaleAll(b, loc, op.getInput(), inverse));
}

/// Whether every element of every input is finite, on this rank (i1).
static Value localAllFinite(OpBuilder &b, Location loc, ValueRange inputs) {
  Value ok = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  for (Value input : inputs) {
    Value finite = reduceAll(
        b, loc, input, ok, [](OpBuilder &nb, Location l, Value x, Value acc) {
          Value wide = widen(nb, l, x, nb.getF32Type());
          if (cast<FloatType>(x.getType()).getWidth() > 32)
            wide = x;
          Value isFinite = math::IsFiniteOp::create(nb, l, wide);
          return arith::AndIOp::create(nb, l, acc, isFinite).getResult();
        });
    ok = arith::AndIOp::create(b, loc, ok, finite);
  }
  return ok;
}

/// all_finite: an AND over every element of every input (and, with a group,
/// over the ranks: a min of 0/1 across them).
void lowerAllFinite(RewriterBase &rewriter, AllFiniteOp op) {
  OpBuilder &b = rewriter;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value ok = localAllFinite(b, loc, op.getInputs());
  if (FlatSymbolRefAttr group = op.getGroupAttr()) {
    Value asInt = arith::ExtUIOp::create(b, loc, b.getI32Type(), ok);
    Value agreed = allReduceScalar(b, loc, asInt, group, ReductionKind::Min);
    ok = arith::TruncIOp::create(b, loc, b.getI1Type(), agreed);
  }
  rewriter.replaceOp(op, ok);
}

/// loss_scale_update, as torch's _amp_update_scale_.
void lowerLossScaleUpdate(RewriterBase &rewriter, LossScaleUpdateOp op) {
  OpBuilder &b = rewriter;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  Type scaleType = op.getScale().getType();
  auto cst = [&](double v) {
    return arith::ConstantOp::create(b, loc, FloatAttr::get(scaleType, v));
  };
  auto i64 = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  };
  Value scale = op.getScale(), tracker = op.getGrowthTracker();
  Value successful = arith::AddIOp::create(b, loc, tracker, i64(1));
  Value grow = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                     successful, i64(op.getGrowthInterval()));
  Value grown = arith::MulFOp::create(
      b, loc, scale, cst(op.getGrowthFactor().convertToDouble()));
  Value growsFinite = arith::AndIOp::create(
      b, loc, grow, math::IsFiniteOp::create(b, loc, grown));
  Value finiteScale =
      arith::SelectOp::create(b, loc, growsFinite, grown, scale);
  Value finiteTracker =
      arith::SelectOp::create(b, loc, grow, i64(0), successful);
  Value backedOff = arith::MulFOp::create(
      b, loc, scale, cst(op.getBackoffFactor().convertToDouble()));
  Value newScale =
      arith::SelectOp::create(b, loc, op.getFinite(), finiteScale, backedOff);
  Value newTracker =
      arith::SelectOp::create(b, loc, op.getFinite(), finiteTracker, i64(0));
  rewriter.replaceOp(op, ValueRange{newScale, newTracker});
}

/// A scaling of `input` by the constant `factor` (a division or a
/// multiplication, as `op` is) that neither overflows a finite element nor
/// makes a non-finite one finite.
struct ShrinkingScaling {
  Value input;
  FloatAttr factor;
};

/// `op` as a ShrinkingScaling: a division by a splat of magnitude at least
/// 1 or a multiplication by one of magnitude at most 1 (gradient
/// accumulation's 1/K), if it is one.
static std::optional<ShrinkingScaling> shrinkingScaling(Operation *op) {
  if (!isa_and_present<arith::DivFOp, arith::MulFOp>(op))
    return std::nullopt;
  // Under nnan or ninf an inf or NaN result is poison, not kept.
  auto fastmath =
      cast<arith::ArithFastMathInterface>(op).getFastMathFlagsAttr();
  if (fastmath && arith::bitEnumContainsAny(fastmath.getValue(),
                                            arith::FastMathFlags::nnan |
                                                arith::FastMathFlags::ninf))
    return std::nullopt;
  SplatElementsAttr splat;
  if (!matchPattern(op->getOperand(1), m_Constant(&splat)))
    return std::nullopt;
  auto c = dyn_cast<FloatAttr>(splat.getSplatValue<Attribute>());
  if (!c)
    return std::nullopt;
  double magnitude = std::fabs(c.getValueAsDouble());
  if (!std::isfinite(magnitude) ||
      (isa<arith::DivFOp>(op) ? magnitude < 1.0 : magnitude > 1.0))
    return std::nullopt;
  return ShrinkingScaling{op->getOperand(0), c};
}

/// The value whose finiteness `v`'s decides: through shrinking scalings.
static Value finitenessSource(Value v) {
  while (std::optional<ShrinkingScaling> scaling =
             shrinkingScaling(v.getDefiningOp()))
    v = scaling->input;
  return v;
}

/// What the norm's partials read of each input: the tensor, and what they
/// recompute of each element on the way to the input: shrinking scalings
/// (innermost first; each op with its constant as a scalar), then the
/// unscale by the reciprocal of the loss scale (null without one), as a
/// scalingFactor.
struct NormSource {
  Value tensor;
  SmallVector<std::pair<Operation *, Value>> scalings;
  Value inverse;
};

/// Whether `check` reads exactly the tensors the norm's partials read, as
/// a multiset.
static bool checksWhatNormReads(AllFiniteOp check,
                                ArrayRef<NormSource> sources) {
  SmallVector<Value> read;
  for (const NormSource &source : sources)
    read.push_back(finitenessSource(source.tensor));
  SmallVector<Value> checked(check.getInputs().begin(),
                             check.getInputs().end());
  auto order = [](Value a, Value b) {
    return a.getAsOpaquePointer() < b.getAsOpaquePointer();
  };
  llvm::sort(read, order);
  llvm::sort(checked, order);
  return read == checked;
}

/// The overflow flag (1: a non-finite element on this rank) from the
/// norm's partials over the same tensors, sparing the check its own pass
/// over the gradients: an inf or NaN element makes its sum of squares (or
/// NaN-propagating maximum) non-finite, and a finite f32 element's square
/// is finite in f64, so is their sum (hence 32-bit elements at most). The
/// partials read each element unscaled, times 1/scale: with |1/scale| <= 1
/// a finite element stays finite; above 1 (a loss scale below 1) it could
/// overflow, so the check then reads the gradients in a pass of its own,
/// as without the norm.
static Value flagFromPartials(OpBuilder &b, Location loc, AllFiniteOp check,
                              ArrayRef<Value> partials,
                              ArrayRef<NormSource> sources) {
  Type f64 = b.getF64Type();
  Value zero = arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0.0));
  Value one = arith::ConstantOp::create(b, loc, b.getF64FloatAttr(1.0));
  Value finite = arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  for (Value partial : partials)
    finite = arith::AndIOp::create(b, loc, finite,
                                   math::IsFiniteOp::create(b, loc, partial));
  Value unscaledStaysFinite =
      arith::ConstantOp::create(b, loc, b.getBoolAttr(true));
  for (const NormSource &source : sources)
    if (Value inverse = source.inverse) {
      Value magnitude =
          math::AbsFOp::create(b, loc, widen(b, loc, inverse, f64));
      unscaledStaysFinite = arith::AndIOp::create(
          b, loc, unscaledStaysFinite,
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, magnitude,
                                one));
    }
  auto ifOp =
      scf::IfOp::create(b, loc, TypeRange{b.getI1Type()}, unscaledStaysFinite,
                        /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, loc, finite);
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, loc, localAllFinite(b, loc, check.getInputs()));
  }
  return arith::SelectOp::create(b, loc, ifOp.getResult(0), zero, one);
}

/// The same op as `scaling`, on one element.
static Value rescaled(OpBuilder &nb, Location l, Value x,
                      std::pair<Operation *, Value> scaling) {
  OperationState state(l, scaling.first->getName());
  state.addOperands({x, scaling.second});
  state.addTypes(x.getType());
  state.addAttributes(scaling.first->getAttrs());
  return nb.create(state)->getResult(0);
}

/// clip_grad_norm, as torch.nn.utils.clip_grad_norm_: the p-norm of each
/// tensor (accumulated in f64, like torch's CPU reductions of f32, then
/// rounded to f32 as torch stacks them), the p-norm of those norms, and
/// every gradient times min(1, max_norm / (norm + 1e-6)). With a group the
/// inputs are shards: the p-th powers (or maxima) are combined across ranks
/// before the root is taken, so each element counts once.
class ClipLowering {
public:
  ClipLowering(RewriterBase &rewriter, ClipGradNormOp op)
      : rewriter(rewriter), b(rewriter), op(op), loc(op.getLoc()),
        f64(b.getF64Type()), f32(b.getF32Type()),
        p(op.getNormType().convertToDouble()), isInf(std::isinf(p)) {}

  void run() {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op);
    zero = cst(0.0);
    pValue = cst(p);
    invP = cst(1.0 / p);
    outer = zero;
    if (ArrayAttr bounds = op.getTensorBoundsAttr()) {
      addShardedNorms(bounds);
    } else {
      for (Value input : op.getInputs()) {
        NormSource read = source(input);
        addTensor(partial(read.tensor, read));
      }
      if (FlatSymbolRefAttr group = op.getGroupAttr())
        outer = allReduceScalar(b, loc, outer, group, combine());
    }
    Value total =
        isInf ? outer : Value(math::PowFOp::create(b, loc, outer, invP));
    Value total32 = arith::TruncFOp::create(b, loc, f32, total);
    Value clamped = coefficient(total32);
    SmallVector<Value> results;
    for (Value input : op.getInputs())
      results.push_back(scaleAll(b, loc, input, clamped));
    results.push_back(normResult(total32));
    rewriter.replaceOp(op, results);
  }

private:
  Value cst(double v) {
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
  }
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  ReductionKind combine() const {
    return isInf ? ReductionKind::Max : ReductionKind::Sum;
  }

  /// A per-tensor norm's contribution to the outer sum: |n|^p (or n).
  Value power(OpBuilder &nb, Location l, Value x) {
    if (p == 2)
      return arith::MulFOp::create(nb, l, x, x);
    return math::PowFOp::create(nb, l, x, pValue);
  }

  /// An input that distopt.unscale computes is read at its source and
  /// unscaled in the norm's loop, element for element as the unscale
  /// computes it (the reciprocal once, in the scale's type; then times x in
  /// f32 for narrower types, rounded back); so is a shrinking scaling (the
  /// 1/K of gradient accumulation) before it, by the same op: the norm then
  /// reads the reduced gradient, and the unscaled one is computed only
  /// inside the update that reads it (--distopt-fuse-elementwise-producers),
  /// not in a pass of its own.
  NormSource source(Value input) {
    NormSource read{input, {}, Value()};
    if (auto unscale = input.getDefiningOp<UnscaleOp>()) {
      Type scaleType = unscale.getScale().getType();
      Value one =
          arith::ConstantOp::create(b, loc, FloatAttr::get(scaleType, 1.0));
      read.tensor = unscale.getInput();
      read.inverse = scalingFactor(
          b, loc, arith::DivFOp::create(b, loc, one, unscale.getScale()),
          getElementTypeOrSelf(read.tensor));
    }
    // Only a scaling nothing else reads: another reader would have it
    // written to memory anyway, and the norm would divide again for naught.
    while (std::optional<ShrinkingScaling> scaling =
               shrinkingScaling(read.tensor.getDefiningOp())) {
      if (!read.tensor.hasOneUse())
        break;
      read.scalings.insert(
          read.scalings.begin(),
          {read.tensor.getDefiningOp(),
           arith::ConstantOp::create(b, loc, scaling->factor)});
      read.tensor = scaling->input;
    }
    return read;
  }

  /// Sum of |x|^p (or max |x|) over a tensor, in f64.
  Value partial(Value tensor, const NormSource &read) {
    return reduceAll(
        b, loc, tensor, zero,
        [&](OpBuilder &nb, Location l, Value x, Value acc) {
          for (auto scaling : read.scalings)
            x = rescaled(nb, l, x, scaling);
          if (read.inverse)
            x = scaledElement(nb, l, x, read.inverse);
          Value a = math::AbsFOp::create(nb, l, widen(nb, l, x, f64));
          if (isInf)
            return arith::MaximumFOp::create(nb, l, acc, a).getResult();
          // In any order: the squares of f32 values are exact in f64 and
          // their sum keeps 29 bits beyond what the f32 norm rounds to, so
          // vector lanes (LLVM vectorizes only a reassociable sum) change
          // the norm only where a sum lies within 2^-29 of a rounding
          // boundary; a sequential sum made the norm the step's slowest
          // loop (B11).
          return arith::AddFOp::create(nb, l, acc, power(nb, l, a),
                                       arith::FastMathFlags::reassoc)
              .getResult();
        });
  }

  /// One tensor's contribution to the outer sum: its norm, rounded to f32
  /// as torch keeps each tensor's norm, to the p-th power (or the norm).
  void addTensor(Value inner) {
    Value norm =
        isInf ? inner : Value(math::PowFOp::create(b, loc, inner, invP));
    Value rounded = arith::TruncFOp::create(b, loc, f32, norm);
    norm = arith::ExtFOp::create(b, loc, f64, rounded);
    outer =
        isInf
            ? Value(arith::MaximumFOp::create(b, loc, outer, norm))
            : Value(arith::AddFOp::create(b, loc, outer, power(b, loc, norm)));
  }

  /// The inputs are shards of the tensors `bounds` delimits: each tensor's
  /// part in this rank's chunk [r * S, (r + 1) * S) gives its partial sums,
  /// combined over the group in one reduction, then each tensor's norm as
  /// without sharding. The overflow check of the same shards (ZeRO with
  /// loss scaling) rides in the same reduction: its flag (1: this rank saw
  /// a non-finite value) is one more element, summed or maximized with the
  /// partials, 0 only if no rank saw one. Only a check before the clip
  /// whose users all come after it: its value is known here, and needed no
  /// earlier.
  void addShardedNorms(ArrayAttr bounds) {
    SmallVector<NormSource> sources;
    for (Value clipped : op.getInputs())
      sources.push_back(source(clipped));
    AllFiniteOp check = getFusedFiniteCheck(op);
    bool narrow = llvm::all_of(sources, [](const NormSource &source) {
      return getElementTypeOrSelf(source.tensor).getIntOrFloatBitWidth() <= 32;
    });
    bool checkFromNorm = check && ((p == 2 && narrow) || isInf) &&
                         checksWhatNormReads(check, sources);
    Value flag;
    if (check && !checkFromNorm)
      flag = arith::SelectOp::create(b, loc,
                                     localAllFinite(b, loc, check.getInputs()),
                                     cst(0.0), cst(1.0));
    SmallVector<Value> partials = shardPartials(sources, bounds);
    size_t numPartials = partials.size();
    if (checkFromNorm)
      flag = flagFromPartials(b, loc, check, partials, sources);
    if (flag)
      partials.push_back(flag);
    auto type = RankedTensorType::get({(int64_t)partials.size()}, f64);
    Value all = tensor::FromElementsOp::create(b, loc, type, partials);
    Value reduced = AllReduceOp::create(
        b, loc, type, all, op.getGroupAttr(), /*wire_type=*/nullptr,
        ReductionKindAttr::get(b.getContext(), combine()), /*scale=*/nullptr);
    for (size_t k = 0; k < numPartials; ++k)
      addTensor(
          tensor::ExtractOp::create(b, loc, reduced, ValueRange{index(k)}));
    if (check) {
      Value flags = tensor::ExtractOp::create(b, loc, reduced,
                                              ValueRange{index(numPartials)});
      rewriter.replaceOp(check, arith::CmpFOp::create(b, loc,
                                                      arith::CmpFPredicate::OEQ,
                                                      flags, cst(0.0))
                                    .getResult());
    }
  }

  /// This rank's partial sums: one per tensor part in its chunk.
  SmallVector<Value> shardPartials(ArrayRef<NormSource> sources,
                                   ArrayAttr bounds) {
    Value rank = rankOf(b, loc, op, op.getGroupAttr());
    SmallVector<Value> partials;
    for (auto [read, attr] : llvm::zip_equal(sources, bounds)) {
      Value input = read.tensor;
      int64_t length = cast<RankedTensorType>(input.getType()).getDimSize(0);
      Value first = arith::MulIOp::create(b, loc, rank, index(length));
      auto local = [&](int64_t at) {
        Value offset = arith::SubIOp::create(b, loc, index(at), first);
        Value low = arith::MaxSIOp::create(b, loc, offset, index(0));
        return arith::MinSIOp::create(b, loc, low, index(length)).getResult();
      };
      ArrayRef<int64_t> pairs = cast<DenseI64ArrayAttr>(attr).asArrayRef();
      for (size_t k = 0; k + 1 < pairs.size(); k += 2) {
        Value begin = local(pairs[k]), end = local(pairs[k + 1]);
        Value size = arith::SubIOp::create(b, loc, end, begin);
        OpFoldResult offsets[] = {begin}, sizes[] = {size},
                     strides[] = {b.getIndexAttr(1)};
        Value part = tensor::ExtractSliceOp::create(b, loc, input, offsets,
                                                    sizes, strides);
        partials.push_back(partial(part, read));
      }
    }
    return partials;
  }

  /// clip_coef = max_norm / (total + 1e-6), clamped to 1, in f32.
  Value coefficient(Value total32) {
    Value coef = arith::DivFOp::create(
        b, loc,
        arith::ConstantOp::create(
            b, loc, b.getF32FloatAttr(op.getMaxNorm().convertToDouble())),
        arith::AddFOp::create(
            b, loc, total32,
            arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-6))));
    return arith::MinimumFOp::create(
        b, loc, coef,
        arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0)));
  }

  /// The total norm in the op's result type.
  Value normResult(Value total32) {
    Type normType = op.getTotalNorm().getType();
    if (normType == f32)
      return total32;
    if (cast<FloatType>(normType).getWidth() > 32)
      return arith::ExtFOp::create(b, loc, normType, total32);
    return arith::TruncFOp::create(b, loc, normType, total32);
  }

  RewriterBase &rewriter;
  OpBuilder &b;
  ClipGradNormOp op;
  Location loc;
  Type f64, f32;
  double p;
  bool isInf;
  Value zero, pValue, invP;
  /// The outer sum of the tensors' norms' p-th powers (or their maximum).
  Value outer;
};

void lowerClipGradNorm(RewriterBase &rewriter, ClipGradNormOp op) {
  ClipLowering(rewriter, op).run();
}

void populateLowerMixedPrecisionPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerWith<UnscaleOp, lowerUnscale>,
               LowerWith<AllFiniteOp, lowerAllFinite>,
               LowerWith<LossScaleUpdateOp, lowerLossScaleUpdate>,
               LowerWith<ClipGradNormOp, lowerClipGradNorm>>(
      patterns.getContext());
}

} // namespace mlir::distopt
