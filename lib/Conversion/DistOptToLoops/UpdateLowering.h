//===- UpdateLowering.h - what the optimizer lowerings share ----*- C++ -*-===//
//
// Private to DistOptToLoops: the builder of an update's f64 prologue and
// fused loop, the loop body's arithmetic in torch's order, and the element
// helpers, for LowerOptimizers.cpp (the element-wise updates) and
// LowerOrthogonalized.cpp (Muon and Dion, which read whole matrices).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_UPDATELOWERING_H
#define DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_UPDATELOWERING_H

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt::updates {

/// Builds the scalar prologue (f64) and the loop body (compute type).
class UpdateBuilder {
public:
  UpdateBuilder(RewriterBase &builder, Location loc, OptimizerOpInterface op)
      : b(builder), loc(loc), op(op) {
    element = cast<FloatType>(
        cast<RankedTensorType>(op.getNewParam().getType()).getElementType());
    compute = element.getWidth() < 32 ? b.getF32Type() : element;
    lr = toF64(op.getLr());
    step = arith::SIToFPOp::create(b, loc, b.getF64Type(), op.getStep());
  }

  // Prologue (outside the loop), in f64.
  Value f64(double v) {
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
  }
  Value toF64(Value v) {
    if (v.getType().isF64())
      return v;
    return arith::ExtFOp::create(b, loc, b.getF64Type(), v);
  }
  /// Hyperparameter `key` in f64: its runtime operand, else the compiled
  /// value.
  Value hyper(StringRef key) {
    if (Value runtime = op.getRuntimeHyperparameter(key))
      return runtime;
    return f64(op.getCompiledHyperparameter(key));
  }
  /// Whether `key` is given at run time (the lowering then cannot leave out
  /// what its compiled value would make a no-op).
  bool isRuntime(StringRef key) {
    return bool(op.getRuntimeHyperparameter(key));
  }
  /// 1 - v, in f64.
  Value oneMinus(Value v) { return arith::SubFOp::create(b, loc, f64(1), v); }
  /// Whether the f64 `v` is not zero, for a body that skips a term at zero
  /// as torch does.
  Value isNonZero(Value v) {
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, v, f64(0));
  }
  /// Whether this is the first step (1-based), when torch creates the state.
  Value isFirstStep() {
    return arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq, op.getStep(),
        arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(1)));
  }
  /// A prologue scalar, in the compute type, for use in the body.
  Value scalar(Value v64) {
    if (compute.isF64())
      return v64;
    return arith::TruncFOp::create(b, loc, compute, v64);
  }
  Value scalar(double v) {
    return arith::ConstantOp::create(b, loc, FloatAttr::get(compute, v));
  }

  /// Emits the linalg.generic: `grad` in, parameter and state out; `body`
  /// gets (g, p, state...) in the compute type and returns (p', state'...).
  void
  emit(function_ref<SmallVector<Value>(OpBuilder &, Value, Value, ValueRange)>
           body) {
    Value grad = op.getGrad();
    // A gradient extended for the update (the bf16 gradient of an fp32 main
    // parameter) is read as it is and extended in the loop, as `load` does
    // anyway: no f32 copy of it is written and read back.
    auto extend = grad.getDefiningOp<arith::ExtFOp>();
    if (extend &&
        getElementTypeOrSelf(extend.getType()).getIntOrFloatBitWidth() <=
            compute.getIntOrFloatBitWidth())
      grad = extend.getIn();
    SmallVector<Value> outputs = {op.getParam()};
    llvm::append_range(outputs, op.getState());
    auto type = cast<RankedTensorType>(grad.getType());
    AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
    SmallVector<AffineMap> maps(1 + outputs.size(), identity);
    SmallVector<utils::IteratorType> iterators(type.getRank(),
                                               utils::IteratorType::parallel);
    auto generic = linalg::GenericOp::create(
        b, loc, op->getResultTypes(), ValueRange{grad}, outputs, maps,
        iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
          auto load = [&](Value v) -> Value {
            if (v.getType() == compute)
              return v;
            return arith::ExtFOp::create(nb, nloc, compute, v);
          };
          SmallVector<Value> state;
          for (Value v : args.drop_front(2).take_front(outputs.size() - 1))
            state.push_back(load(v));
          SmallVector<Value> results =
              body(nb, load(args[0]), load(args[1]), state);
          for (Value &v : results)
            if (v.getType() != element)
              v = arith::TruncFOp::create(nb, nloc, element, v);
          linalg::YieldOp::create(nb, nloc, results);
        });
    // (The extension, left without a use, is erased by the pass: a walk
    // pattern erases only what it matched.)
    b.replaceOp(op, generic.getResults());
  }

  RewriterBase &b;
  Location loc;
  OptimizerOpInterface op;
  FloatType element;
  Type compute;
  Value lr, step; // f64
};

/// A term torch adds only when a hyperparameter is not zero (weight decay):
/// left out when it is compiled in as zero, selected at run time when it is
/// a runtime operand, so that the result is torch's bit for bit either way
/// (fma(0, p, g) is not g for an infinite p, nor for g = -0).
struct OptionalTerm {
  Value value;   // the hyperparameter in the compute type; null: left out
  Value applies; // i1: whether it is not zero (runtime operands only)
};

/// Arithmetic in the loop body, in torch's order of operations.
struct Body {
  OpBuilder &b;
  Location loc;
  Value add(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value neg(Value x) { return arith::NegFOp::create(b, loc, x); }
  Value sqrt(Value x) { return math::SqrtOp::create(b, loc, x); }
  Value max(Value x, Value y) {
    return arith::MaximumFOp::create(b, loc, x, y);
  }
  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y);
  }
  /// torch's x.add(y, alpha=a): x + a * y, one rounding (torch's CPU kernel
  /// is a fused multiply-add; with it SGD matches torch bit for bit).
  Value axpy(Value x, Value a, Value y) {
    return math::FmaOp::create(b, loc, a, y, x);
  }
  /// x + a * y where torch adds it only for a non-zero `a`.
  Value axpyIf(Value x, OptionalTerm a, Value y) {
    if (!a.value)
      return x;
    Value sum = axpy(x, a.value, y);
    return a.applies ? select(a.applies, sum, x) : sum;
  }
  /// The gradient as torch's SGD, Adam, RMSprop and Adagrad first adjust
  /// it: negated with maximize, plus weight_decay * p.
  Value adjustedGrad(Value g, Value p, bool maximize,
                     OptionalTerm weightDecay) {
    if (maximize)
      g = neg(g);
    return axpyIf(g, weightDecay, p);
  }
  /// torch's x.addcmul(y, z, value=a): `a * y` rounded, then one fused
  /// multiply-add with z and x (GCC contracts torch's `x + a * y * z` so in
  /// the AVX2 kernels Debian's torch 1.13 runs; docs/lowering.md).
  Value addcmul(Value x, Value a, Value y, Value z) {
    return math::FmaOp::create(b, loc, mul(a, y), z, x);
  }
  /// torch's x.addcdiv(y, z, value=a): x + (a * y) / z, three roundings.
  Value addcdiv(Value x, Value a, Value y, Value z) {
    return add(x, div(mul(a, y), z));
  }
};

/// An element-wise loop over tensors of one shape: `inputs` read, `init`
/// written (a new tensor, or one updated in place); `body` gets the inputs'
/// elements and the output's and returns the new output element.
Value mapElements(OpBuilder &b, Location loc, ValueRange inputs, Value init,
                  function_ref<Value(OpBuilder &, Location, ValueRange)> body);

/// `x` converted to the float type `to`.
Value convertTo(OpBuilder &b, Location loc, Value x, Type to);

/// torch's lerp(x, y, w): x + w (y - x) when |w| < 0.5, else
/// y - (y - x)(1 - w), each one fused multiply-add as in its vector kernel;
/// `small` (i1) says which, `oneMinusW` is 1 - w in the compute type.
Value lerp(Body &m, Value x, Value y, Value w, Value oneMinusW, Value small);

/// Muon's and Dion's lowerings (LowerOrthogonalized.cpp).
void lowerMuon(RewriterBase &builder, MuonUpdateOp op);
/// A batch of Dion updates (one, or several synced by their factors with
/// one `batch` number): their factors all-reduced together, at the
/// builder's insertion point, which must follow every member's operands and
/// precede every use of their results. The members are left without uses,
/// for the caller to erase (another batch may be placed before one).
void lowerDion(RewriterBase &builder, ArrayRef<DionUpdateOp> batch);

} // namespace mlir::distopt::updates

#endif // DISTOPT_LIB_CONVERSION_DISTOPTTOLOOPS_UPDATELOWERING_H
