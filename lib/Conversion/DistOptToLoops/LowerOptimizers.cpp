//===- LowerOptimizers.cpp - optimizer updates to fused loops ---*- C++ -*-===//
//
// --distopt-lower-optimizers: each optimizer update becomes one
// linalg.generic that reads the gradient and updates the parameter and the
// state in the same pass (they are its outputs, so bufferization can update
// them in place). The operations and their order follow torch.optim's
// single-tensor code (PyTorch 1.13); the scalars torch computes as Python
// floats (bias corrections, step sizes) are computed once, in f64, before
// the loop. bf16/f16 tensors are computed in f32 and rounded once.
// Hyperparameters given at run time (runtime_hyperparameters) enter that
// f64 prologue as the operands they are, where the others are constants: the
// same arithmetic, so the same bits.
// test/Integration/optimizers-vs-torch.test runs every optimizer against
// torch.optim.
//
//===----------------------------------------------------------------------===//

#include "LocalOps.h"

#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_LOWEROPTIMIZERSPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

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

double f(APFloat v) { return v.convertToDouble(); }

/// Weight decay as the updates that add it to the gradient take it.
OptionalTerm weightDecay(UpdateBuilder &u, APFloat compiled) {
  if (u.isRuntime("weight_decay")) {
    Value wd = u.hyper("weight_decay");
    return {u.scalar(wd), u.isNonZero(wd)};
  }
  if (compiled.isZero())
    return {};
  return {u.scalar(f(compiled)), Value()};
}

void lowerSGD(RewriterBase &builder, SGDUpdateOp op) {
  UpdateBuilder u(builder, op.getLoc(), op);
  Location loc = op.getLoc();
  // The momentum buffer exists when the compiled momentum is not zero.
  bool hasMomentum = !op.getMomentum().isZero();
  Value negLr = u.scalar(arith::NegFOp::create(builder, loc, u.lr));
  OptionalTerm wd = weightDecay(u, op.getWeightDecay());
  Value mu = u.scalar(u.hyper("momentum")),
        damp = u.scalar(u.oneMinus(u.hyper("dampening")));
  // The first step copies the gradient into the momentum buffer.
  Value first = u.isFirstStep();
  bool maximize = op.getMaximize(), nesterov = op.getNesterov();
  u.emit([&](OpBuilder &nb, Value g, Value p, ValueRange state) {
    Body m{nb, loc};
    g = m.adjustedGrad(g, p, maximize, wd);
    SmallVector<Value> results;
    Value buf;
    if (hasMomentum) {
      Value blended = m.axpy(m.mul(state[0], mu), damp, g);
      buf = m.select(first, g, blended);
      g = nesterov ? m.axpy(g, mu, buf) : buf;
    }
    results.push_back(m.axpy(p, negLr, g));
    if (buf)
      results.push_back(buf);
    return results;
  });
}

template <typename OpTy>
void lowerAdam(RewriterBase &builder, OpTy op, bool decoupled) {
  Location loc = op.getLoc();
  UpdateBuilder u(builder, loc, op);
  Value beta1 = u.hyper("beta1"), beta2 = u.hyper("beta2"),
        wd64 = u.hyper("weight_decay");
  auto pow = [&](Value base) {
    return math::PowFOp::create(builder, loc, base, u.step);
  };
  // bias_correction1 = 1 - beta1^t; step_size = lr / bias_correction1;
  // bias_correction2_sqrt = sqrt(1 - beta2^t).
  Value bc1 = u.oneMinus(pow(beta1));
  Value bc2 = u.oneMinus(pow(beta2));
  Value negStepSize = u.scalar(arith::NegFOp::create(
      builder, loc, arith::DivFOp::create(builder, loc, u.lr, bc1)));
  Value bc2Sqrt = u.scalar(math::SqrtOp::create(builder, loc, bc2));
  // AdamW: param *= 1 - lr * weight_decay (torch applies it whatever the
  // decay).
  Value decay =
      u.scalar(u.oneMinus(arith::MulFOp::create(builder, loc, u.lr, wd64)));
  OptionalTerm wd =
      decoupled ? OptionalTerm() : weightDecay(u, op.getWeightDecay());
  Value b1 = u.scalar(beta1), oneMinusB1 = u.scalar(u.oneMinus(beta1)),
        b2 = u.scalar(beta2), oneMinusB2 = u.scalar(u.oneMinus(beta2)),
        eps = u.scalar(u.hyper("eps"));
  bool maximize = op.getMaximize(), amsgrad = op.getAmsgrad();
  u.emit([&](OpBuilder &nb, Value g, Value p, ValueRange state) {
    Body m{nb, loc};
    g = m.adjustedGrad(g, p, maximize, wd);
    if (decoupled)
      p = m.mul(p, decay);
    Value avg = m.axpy(m.mul(state[0], b1), oneMinusB1, g);
    Value avgSq = m.addcmul(m.mul(state[1], b2), oneMinusB2, g, g);
    SmallVector<Value> results = {Value(), avg, avgSq};
    Value second = avgSq;
    if (amsgrad) {
      second = m.max(state[2], avgSq);
      results.push_back(second);
    }
    Value denom = m.add(m.div(m.sqrt(second), bc2Sqrt), eps);
    results[0] = m.addcdiv(p, negStepSize, avg, denom);
    return results;
  });
}

void lowerRMSprop(RewriterBase &builder, RMSpropUpdateOp op) {
  Location loc = op.getLoc();
  UpdateBuilder u(builder, loc, op);
  // The momentum buffer exists when the compiled momentum is positive.
  bool hasMomentum = op.getMomentum().convertToDouble() > 0;
  Value alpha = u.hyper("alpha");
  Value negLr = u.scalar(arith::NegFOp::create(builder, loc, u.lr));
  OptionalTerm wd = weightDecay(u, op.getWeightDecay());
  Value a = u.scalar(alpha), oneMinusA = u.scalar(u.oneMinus(alpha)),
        eps = u.scalar(u.hyper("eps")), mu = u.scalar(u.hyper("momentum")),
        one = u.scalar(1.0), minusOne = u.scalar(-1);
  bool maximize = op.getMaximize(), centered = op.getCentered();
  u.emit([&](OpBuilder &nb, Value g, Value p, ValueRange state) {
    Body m{nb, loc};
    g = m.adjustedGrad(g, p, maximize, wd);
    Value sq = m.addcmul(m.mul(state[0], a), oneMinusA, g, g);
    SmallVector<Value> results = {Value(), sq};
    Value avg;
    Value gradAvg;
    if (centered) {
      gradAvg = m.axpy(m.mul(state.back(), a), oneMinusA, g);
      avg = m.sqrt(m.addcmul(sq, minusOne, gradAvg, gradAvg));
    } else {
      avg = m.sqrt(sq);
    }
    avg = m.add(avg, eps);
    if (hasMomentum) {
      Value buf = m.addcdiv(m.mul(state[1], mu), one, g, avg);
      results.push_back(buf);
      results[0] = m.axpy(p, negLr, buf);
    } else {
      results[0] = m.addcdiv(p, negLr, g, avg);
    }
    if (centered)
      results.push_back(gradAvg);
    return results;
  });
}

void lowerAdagrad(RewriterBase &builder, AdagradUpdateOp op) {
  Location loc = op.getLoc();
  UpdateBuilder u(builder, loc, op);
  // clr = lr / (1 + (step - 1) * lr_decay)
  Value stepsBefore = arith::SubFOp::create(builder, loc, u.step, u.f64(1));
  Value clr = arith::DivFOp::create(
      builder, loc, u.lr,
      arith::AddFOp::create(builder, loc, u.f64(1),
                            arith::MulFOp::create(builder, loc, stepsBefore,
                                                  u.hyper("lr_decay"))));
  Value negClr = u.scalar(arith::NegFOp::create(builder, loc, clr));
  OptionalTerm wd = weightDecay(u, op.getWeightDecay());
  Value eps = u.scalar(u.hyper("eps")), one = u.scalar(1.0),
        initial = u.scalar(u.hyper("initial_accumulator_value"));
  // torch fills the sum with initial_accumulator_value at the first step.
  Value first = u.isFirstStep();
  bool maximize = op.getMaximize();
  u.emit([&](OpBuilder &nb, Value g, Value p, ValueRange state) {
    Body m{nb, loc};
    g = m.adjustedGrad(g, p, maximize, wd);
    Value previous = m.select(first, initial, state[0]);
    Value sum = m.addcmul(previous, one, g, g);
    Value std = m.add(m.sqrt(sum), eps);
    return SmallVector<Value>{m.addcdiv(p, negClr, g, std), sum};
  });
}

/// An element-wise loop over tensors of one shape: `inputs` read, `init`
/// written (a new tensor, or one updated in place); `body` gets the inputs'
/// elements and the output's and returns the new output element.
Value mapElements(OpBuilder &b, Location loc, ValueRange inputs, Value init,
                  function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  auto type = cast<RankedTensorType>(init.getType());
  SmallVector<AffineMap> maps(inputs.size() + 1,
                              b.getMultiDimIdentityMap(type.getRank()));
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, inputs, ValueRange{init}, maps, iterators,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               linalg::YieldOp::create(nb, nloc, body(nb, nloc, args));
             })
      .getResult(0);
}

/// `x` converted to the float type `to`.
Value convertTo(OpBuilder &b, Location loc, Value x, Type to) {
  unsigned from = x.getType().getIntOrFloatBitWidth();
  if (x.getType() == to)
    return x;
  if (from < to.getIntOrFloatBitWidth())
    return arith::ExtFOp::create(b, loc, to, x);
  return arith::TruncFOp::create(b, loc, to, x);
}

/// torch's lerp(x, y, w): x + w (y - x) when |w| < 0.5, else
/// y - (y - x)(1 - w), each one fused multiply-add as in its vector kernel;
/// `small` (i1) says which, `oneMinusW` is 1 - w in the compute type.
Value lerp(Body &m, Value x, Value y, Value w, Value oneMinusW, Value small) {
  Value diff = m.sub(y, x);
  Value near = math::FmaOp::create(m.b, m.loc, w, diff, x);
  Value far = math::FmaOp::create(m.b, m.loc, m.neg(diff), oneMinusW, y);
  return m.select(small, near, far);
}

/// The matrix `x` (rows x cols, ns dtype) orthogonalized by torch.optim.Muon's
/// Newton-Schulz iterations: normalized, then `steps` times A = X X^T, B =
/// b A + c A A, X = a X + B X; a tall matrix takes the same iterations
/// transposed (A = X^T X, X = a X + X B: the same products in the same
/// order, so no transposed copy is made). Products accumulate in f32 and
/// are rounded once with the term they are added to.
Value newtonSchulz(OpBuilder &b, Location loc, MuonUpdateOp op, Value x,
                   Value eps) {
  auto type = cast<RankedTensorType>(x.getType());
  Type ns = type.getElementType();
  Type acc = b.getF32Type();
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  bool tall = rows > cols;
  int64_t gram = std::min(rows, cols);
  // X / max(||X||, eps): the norm summed in f64, rounded to the dtype.
  Value sumSq = reduceAll(
      b, loc, x, arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0)),
      [&](OpBuilder &nb, Location l, Value e, Value sum) {
        Value w = widen(nb, l, e, nb.getF64Type());
        return math::FmaOp::create(nb, l, w, w, sum).getResult();
      });
  Value norm = convertTo(b, loc, math::SqrtOp::create(b, loc, sumSq), ns);
  norm = arith::MaximumFOp::create(b, loc, norm, convertTo(b, loc, eps, ns));
  Value normAcc = convertTo(b, loc, norm, acc);
  auto empty = [&](ArrayRef<int64_t> shape, Type t) -> Value {
    return tensor::EmptyOp::create(b, loc, shape, t);
  };
  x = mapElements(b, loc, {x}, empty({rows, cols}, ns),
                  [&](OpBuilder &nb, Location l, ValueRange args) {
                    Value q = arith::DivFOp::create(
                        nb, l, convertTo(nb, l, args[0], acc), normAcc);
                    return convertTo(nb, l, q, ns);
                  });
  ArrayRef<double> coefficients = op.getNsCoefficients();
  auto constant = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, FloatAttr::get(acc, v));
  };
  Value ca = constant(coefficients[0]), cb = constant(coefficients[1]),
        cc = constant(coefficients[2]);
  for (uint64_t i = 0; i < op.getNsSteps(); ++i) {
    // A = X X^T (loops i, j, k: dot products along rows), or X^T X for a
    // tall X (loops k, i, j: rows added into A's rows).
    Value gramMatrix =
        tall ? contract(b, loc, x, x, dims(b, 0, 1), dims(b, 0, 2),
                        dims(b, 1, 2), 0, {gram, gram})
             : contract(b, loc, x, x, dims(b, 0, 2), dims(b, 1, 2),
                        dims(b, 0, 1), 2, {gram, gram},
                        /*reassociate=*/true);
    // A A (loops i, k, j), kept in f32 until B is rounded.
    Value squared =
        contract(b, loc, gramMatrix, gramMatrix, dims(b, 0, 1), dims(b, 1, 2),
                 dims(b, 0, 2), 1, {gram, gram}, false, /*rounded=*/false);
    Value update =
        mapElements(b, loc, {gramMatrix, squared}, empty({gram, gram}, ns),
                    [&](OpBuilder &nb, Location l, ValueRange args) {
                      Value scaled = arith::MulFOp::create(nb, l, cc, args[1]);
                      Value sum = math::FmaOp::create(
                          nb, l, cb, convertTo(nb, l, args[0], acc), scaled);
                      return convertTo(nb, l, sum, ns);
                    });
    // B X, or X B for a tall X (loops i, k, j).
    Value product =
        tall ? contract(b, loc, x, update, dims(b, 0, 1), dims(b, 1, 2),
                        dims(b, 0, 2), 1, {rows, cols}, false, false)
             : contract(b, loc, update, x, dims(b, 0, 1), dims(b, 1, 2),
                        dims(b, 0, 2), 1, {rows, cols}, false, false);
    x = mapElements(b, loc, {x, product}, empty({rows, cols}, ns),
                    [&](OpBuilder &nb, Location l, ValueRange args) {
                      Value sum = math::FmaOp::create(
                          nb, l, ca, convertTo(nb, l, args[0], acc), args[1]);
                      return convertTo(nb, l, sum, ns);
                    });
  }
  return x;
}

/// Muon's momentum loop: b = lerp(b, g, 1 - mu) (the new state) and the
/// direction to orthogonalize, lerp(g, b, mu) with Nesterov, else b.
linalg::GenericOp muonMomentum(UpdateBuilder &u, MuonUpdateOp op) {
  RewriterBase &builder = u.b;
  Location loc = u.loc;
  auto paramType = cast<RankedTensorType>(op.getParam().getType());
  Type element = paramType.getElementType();
  Value mu64 = u.hyper("momentum");
  Value w64 = u.oneMinus(mu64);
  auto isSmall = [&](Value weight) -> Value {
    Value magnitude = math::AbsFOp::create(builder, loc, weight);
    return arith::CmpFOp::create(builder, loc, arith::CmpFPredicate::OLT,
                                 magnitude, u.f64(0.5));
  };
  Value w = u.scalar(w64), mu = u.scalar(mu64), one = u.scalar(1.0);
  Value oneMinusW = arith::SubFOp::create(builder, loc, one, w);
  Value oneMinusMu = arith::SubFOp::create(builder, loc, one, mu);
  Value wSmall = isSmall(w64), muSmall = isSmall(mu64);
  Value zero = u.scalar(0.0);
  Value first = u.isFirstStep();
  bool maximize = op.getMaximize(), nesterov = op.getNesterov();
  SmallVector<utils::IteratorType> parallel(paramType.getRank(),
                                            utils::IteratorType::parallel);
  SmallVector<AffineMap> maps(
      3, builder.getMultiDimIdentityMap(paramType.getRank()));
  return linalg::GenericOp::create(
      builder, loc, TypeRange{paramType, paramType}, ValueRange{op.getGrad()},
      ValueRange{
          op.getState()[0],
          tensor::EmptyOp::create(builder, loc, paramType.getShape(), element)},
      maps, parallel, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Body m{nb, nloc};
        auto load = [&](Value v) { return convertTo(nb, nloc, v, u.compute); };
        Value g = load(args[0]);
        if (maximize)
          g = m.neg(g);
        // torch creates the buffer as zeros.
        Value old = m.select(first, zero, load(args[1]));
        Value stored =
            convertTo(nb, nloc, lerp(m, old, g, w, oneMinusW, wSmall), element);
        Value direction = stored;
        if (nesterov)
          direction = convertTo(
              nb, nloc, lerp(m, g, load(stored), mu, oneMinusMu, muSmall),
              element);
        linalg::YieldOp::create(nb, nloc, ValueRange{stored, direction});
      });
}

/// A parameter of an update of matrices (Muon, Dion) as the matrix of its
/// first dimension's rows (a conv weight flattened), and back.
struct MatrixView {
  explicit MatrixView(Value param)
      : shape(cast<RankedTensorType>(param.getType()).getShape()),
        rows(shape.front()),
        // (Not the elements over the rows: a tensor with no rows has
        // columns.)
        cols(ShapedType::getNumElements(shape.drop_front())),
        rowsOf({{0}, llvm::to_vector(llvm::seq<int64_t>(1, shape.size()))}) {}

  /// `v` (of the parameter's shape, any element type) as rows x cols.
  Value collapse(OpBuilder &b, Location loc, Value v) const {
    if (shape.size() == 2)
      return v;
    return tensor::CollapseShapeOp::create(
        b, loc, RankedTensorType::get({rows, cols}, elementOf(v)), v, rowsOf);
  }
  /// `v` (rows x cols) in the parameter's shape.
  Value expand(OpBuilder &b, Location loc, Value v) const {
    if (shape.size() == 2)
      return v;
    return tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get(shape, elementOf(v)), v, rowsOf);
  }

  ArrayRef<int64_t> shape;
  int64_t rows, cols;
  SmallVector<ReassociationIndices> rowsOf;

private:
  static Type elementOf(Value v) {
    return cast<RankedTensorType>(v.getType()).getElementType();
  }
};

void lowerMuon(RewriterBase &builder, MuonUpdateOp op) {
  Location loc = op.getLoc();
  UpdateBuilder u(builder, loc, op);
  MatrixView matrix(op.getParam());
  int64_t rows = matrix.rows, cols = matrix.cols;
  Type element =
      cast<RankedTensorType>(op.getParam().getType()).getElementType();
  linalg::GenericOp momentum = muonMomentum(u, op);
  // Orthogonalized as a matrix of the first dimension's rows.
  Value direction = matrix.collapse(builder, loc, momentum.getResult(1));
  Type ns = op.getNsDtype() ? *op.getNsDtype() : builder.getF32Type();
  Value x = mapElements(
      builder, loc, {direction},
      tensor::EmptyOp::create(builder, loc, ArrayRef<int64_t>{rows, cols}, ns),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        return convertTo(nb, l, args[0], ns);
      });
  x = matrix.expand(builder, loc,
                    newtonSchulz(builder, loc, op, x, u.hyper("eps")));
  // p = p (1 - lr wd) - lr ratio X.
  double ratio =
      op.getAdjustLrFn() == "match_rms_adamw"
          ? 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)))
          : std::sqrt(std::max(1.0, static_cast<double>(rows) /
                                        static_cast<double>(cols)));
  Value negStep = u.scalar(arith::NegFOp::create(
      builder, loc, arith::MulFOp::create(builder, loc, u.lr, u.f64(ratio))));
  Value decay = u.scalar(u.oneMinus(
      arith::MulFOp::create(builder, loc, u.lr, u.hyper("weight_decay"))));
  Value param = mapElements(
      builder, loc, {x}, op.getParam(),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        Value p = m.mul(convertTo(nb, l, args[1], u.compute), decay);
        Value next = m.axpy(p, negStep, convertTo(nb, l, args[0], u.compute));
        return convertTo(nb, l, next, element);
      });
  builder.replaceOp(op, ValueRange{param, momentum.getResult(0)});
}

/// The rows of `t` (r x n) made orthonormal by modified Gram-Schmidt, top to
/// bottom: row i is divided by its norm (summed in f64) plus `eps`, and every
/// later row loses its projection on it. The rows are an scf.for (Dion's
/// rank may be hundreds: unrolled, the IR would grow with it), each
/// iteration on the rows after row i only (a slice of dynamic size: over
/// the whole matrix, masked, the loop took twice the time).
Value orthonormalizeRows(OpBuilder &b, Location loc, Value t, Value eps) {
  auto type = cast<RankedTensorType>(t.getType());
  auto element = cast<FloatType>(type.getElementType());
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  if (rows == 0) // (a row slice of nothing would not verify)
    return t;
  MLIRContext *ctx = b.getContext();
  AffineExpr d0 = getAffineDimExpr(0, ctx), d1 = getAffineDimExpr(1, ctx);
  AffineMap identity = b.getMultiDimIdentityMap(2);
  auto parallel = utils::IteratorType::parallel;
  auto index = [&](OpBuilder &nb, int64_t v) -> Value {
    return arith::ConstantIndexOp::create(nb, loc, v);
  };
  Value epsilon = convertTo(b, loc, eps, element);
  auto laterType = RankedTensorType::get({ShapedType::kDynamic, cols}, element);
  auto loop = scf::ForOp::create(
      b, loc, index(b, 0), index(b, rows), index(b, 1), ValueRange{t},
      [&](OpBuilder &lb, Location l, Value i, ValueRange carried) {
        Value matrix = carried[0];
        OpFoldResult zeroIndex = lb.getIndexAttr(0), one = lb.getIndexAttr(1),
                     width = lb.getIndexAttr(cols);
        Value row = tensor::ExtractSliceOp::create(
            lb, l, RankedTensorType::get({cols}, element), matrix,
            ArrayRef<OpFoldResult>{i, zeroIndex},
            ArrayRef<OpFoldResult>{one, width},
            ArrayRef<OpFoldResult>{one, one});
        Value sumSq = reduceAll(
            lb, l, row, arith::ConstantOp::create(lb, l, lb.getF64FloatAttr(0)),
            [&](OpBuilder &nb, Location nl, Value e, Value sum) {
              Value w = widen(nb, nl, e, nb.getF64Type());
              return math::FmaOp::create(nb, nl, w, w, sum).getResult();
            });
        Value norm = arith::AddFOp::create(
            lb, l,
            convertTo(lb, l, math::SqrtOp::create(lb, l, sumSq), element),
            epsilon);
        // (A zero row stays zero, also with epsilon 0: not 0 / 0.)
        Value isZero = arith::CmpFOp::create(
            lb, l, arith::CmpFPredicate::OEQ, norm,
            arith::ConstantOp::create(lb, l, lb.getZeroAttr(element)));
        Value unit = mapElements(
            lb, l, {row}, tensor::EmptyOp::create(lb, l, {cols}, element),
            [&](OpBuilder &nb, Location nl, ValueRange args) {
              return arith::SelectOp::create(
                         nb, nl, isZero, args[0],
                         arith::DivFOp::create(nb, nl, args[0], norm))
                  .getResult();
            });
        matrix = tensor::InsertSliceOp::create(
            lb, l, unit, matrix, ArrayRef<OpFoldResult>{i, zeroIndex},
            ArrayRef<OpFoldResult>{one, width},
            ArrayRef<OpFoldResult>{one, one});
        // The rows after row i: r - i - 1 of them.
        Value first = arith::AddIOp::create(lb, l, i, index(lb, 1));
        Value count = arith::SubIOp::create(lb, l, index(lb, rows), first);
        Value later = tensor::ExtractSliceOp::create(
            lb, l, laterType, matrix, ArrayRef<OpFoldResult>{first, zeroIndex},
            ArrayRef<OpFoldResult>{count, width},
            ArrayRef<OpFoldResult>{one, one});
        // dots(j) = later row j . unit (summed in any order: it vectorizes).
        Value zero = arith::ConstantOp::create(lb, l, lb.getZeroAttr(element));
        Value zeros = linalg::FillOp::create(
                          lb, l, zero,
                          Value(tensor::EmptyOp::create(
                              lb, l, ArrayRef<int64_t>{ShapedType::kDynamic},
                              element, ValueRange{count})))
                          .getResult(0);
        Value dots =
            linalg::GenericOp::create(
                lb, l, TypeRange{zeros.getType()}, ValueRange{later, unit},
                ValueRange{zeros},
                SmallVector<AffineMap>{identity, AffineMap::get(2, 0, d1),
                                       AffineMap::get(2, 0, d0)},
                SmallVector<utils::IteratorType>{
                    parallel, utils::IteratorType::reduction},
                [&](OpBuilder &nb, Location nl, ValueRange args) {
                  Value product =
                      arith::MulFOp::create(nb, nl, args[0], args[1]);
                  linalg::YieldOp::create(
                      nb, nl,
                      arith::AddFOp::create(nb, nl, args[2], product,
                                            arith::FastMathFlags::reassoc)
                          .getResult());
                })
                .getResult(0);
        // Later rows lose their projection on the unit row (in place: the
        // loop's matrix stays one buffer).
        Value projected =
            linalg::GenericOp::create(
                lb, l, TypeRange{laterType}, ValueRange{unit, dots},
                ValueRange{later},
                SmallVector<AffineMap>{AffineMap::get(2, 0, d1),
                                       AffineMap::get(2, 0, d0), identity},
                SmallVector<utils::IteratorType>{parallel, parallel},
                [&](OpBuilder &nb, Location nl, ValueRange args) {
                  Value u = args[0], dot = args[1], old = args[2];
                  linalg::YieldOp::create(
                      nb, nl,
                      arith::SubFOp::create(
                          nb, nl, old, arith::MulFOp::create(nb, nl, dot, u))
                          .getResult());
                })
                .getResult(0);
        matrix = tensor::InsertSliceOp::create(
            lb, l, projected, matrix, ArrayRef<OpFoldResult>{first, zeroIndex},
            ArrayRef<OpFoldResult>{count, width},
            ArrayRef<OpFoldResult>{one, one});
        scf::YieldOp::create(lb, l, matrix);
      });
  return loop.getResult(0);
}

/// Dion's starting right factor (transposed, r x n), the same on every rank:
/// element (i, j) is 2 u - 1, u the top 24 bits of a 32-bit hash of
/// i n + j + seed * 0x9E3779B9, over 2^24 (exact in f32).
Value dionStartingFactor(OpBuilder &b, Location loc, DionUpdateOp op,
                         RankedTensorType type) {
  int64_t cols = type.getDimSize(1);
  uint32_t seedMix = static_cast<uint32_t>(op.getSeed()) * 0x9E3779B9u;
  Type i32 = b.getI32Type();
  Value init =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, ValueRange{}, ValueRange{init},
             SmallVector<AffineMap>{b.getMultiDimIdentityMap(2)},
             SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
             [&](OpBuilder &nb, Location l, ValueRange) {
               auto i32Constant = [&](uint32_t v) -> Value {
                 return arith::ConstantOp::create(
                     nb, l, nb.getI32IntegerAttr(static_cast<int32_t>(v)));
               };
               Value flat = arith::AddIOp::create(
                   nb, l,
                   arith::MulIOp::create(
                       nb, l, linalg::IndexOp::create(nb, l, 0),
                       arith::ConstantIndexOp::create(nb, l, cols)),
                   linalg::IndexOp::create(nb, l, 1));
               // (index_cast truncates: the index modulo 2^32.)
               Value x = arith::AddIOp::create(
                   nb, l, arith::IndexCastOp::create(nb, l, i32, flat),
                   i32Constant(seedMix));
               auto xorShift = [&](Value v, uint32_t by) -> Value {
                 return arith::XOrIOp::create(
                     nb, l, v,
                     arith::ShRUIOp::create(nb, l, v, i32Constant(by)));
               };
               x = xorShift(x, 16);
               x = arith::MulIOp::create(nb, l, x, i32Constant(0x7feb352du));
               x = xorShift(x, 15);
               x = arith::MulIOp::create(nb, l, x, i32Constant(0x846ca68bu));
               x = xorShift(x, 16);
               Type element = type.getElementType();
               Value top = arith::UIToFPOp::create(
                   nb, l, element,
                   arith::ShRUIOp::create(nb, l, x, i32Constant(8)));
               Value u = arith::MulFOp::create(
                   nb, l, top,
                   arith::ConstantOp::create(nb, l,
                                             FloatAttr::get(element, 0x1p-24)));
               Value two = arith::ConstantOp::create(
                   nb, l, FloatAttr::get(element, 2.0));
               Value one = arith::ConstantOp::create(
                   nb, l, FloatAttr::get(element, 1.0));
               linalg::YieldOp::create(
                   nb, l,
                   arith::SubFOp::create(
                       nb, l, arith::MulFOp::create(nb, l, u, two), one)
                       .getResult());
             })
      .getResult(0);
}

/// Dion (see the op's description) on the parameter as a matrix, in the
/// compute type: the four products through `contract` (a matmul each, which
/// --distopt-contractions-to-runtime may give to BLAS), P kept transposed
/// (r x m) so that the orthonormalization walks contiguous rows.
void lowerDion(RewriterBase &builder, DionUpdateOp op) {
  Location loc = op.getLoc();
  UpdateBuilder u(builder, loc, op);
  auto paramType = cast<RankedTensorType>(op.getParam().getType());
  MatrixView matrix(op.getParam());
  int64_t rows = matrix.rows, cols = matrix.cols;
  auto factorType = cast<RankedTensorType>(op.getState()[1].getType());
  int64_t rank = factorType.getDimSize(0);
  Type ct = u.compute;
  Type stateElement = factorType.getElementType();
  auto asMatrix = [&](Value v) { return matrix.collapse(builder, loc, v); };
  auto asParamShape = [&](Value v) { return matrix.expand(builder, loc, v); };
  auto empty = [&](ArrayRef<int64_t> shape, Type t) -> Value {
    return tensor::EmptyOp::create(builder, loc, shape, t);
  };
  Value first = u.isFirstStep();
  Value zero = u.scalar(0.0);
  bool maximize = op.getMaximize();
  // B = M + G (M is zero at step 1).
  Value b = mapElements(
      builder, loc, {asMatrix(op.getGrad()), asMatrix(op.getState()[0])},
      empty({rows, cols}, ct), [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        Value g = convertTo(nb, l, args[0], ct);
        Value old = m.select(first, zero, convertTo(nb, l, args[1], ct));
        return maximize ? m.sub(old, g) : m.add(old, g);
      });
  // Q^T: the starting factor at step 1 (drawn then only), else the state.
  auto factorCompute = RankedTensorType::get({rank, cols}, ct);
  auto drawn = scf::IfOp::create(builder, loc, TypeRange{factorCompute}, first,
                                 /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&drawn.getThenRegion().front());
    scf::YieldOp::create(builder, loc,
                         dionStartingFactor(builder, loc, op, factorCompute));
    builder.setInsertionPointToStart(&drawn.getElseRegion().front());
    scf::YieldOp::create(
        builder, loc,
        mapElements(builder, loc, {op.getState()[1]}, empty({rank, cols}, ct),
                    [&](OpBuilder &nb, Location l, ValueRange args) {
                      return convertTo(nb, l, args[0], ct);
                    }));
  }
  Value oldFactor = drawn.getResult(0);
  Value eps = u.hyper("epsilon");
  // P^T = Q^T B^T (dot products along rows), orthonormalized.
  Value p = contract(builder, loc, oldFactor, b, dims(builder, 0, 2),
                     dims(builder, 1, 2), dims(builder, 0, 1), 2, {rank, rows},
                     /*reassociate=*/true);
  // Twice: one pass of modified Gram-Schmidt leaves P^T P off the identity
  // by about eps times P's condition number (1e-3 at 1e5 in f32), and
  // Dion's update assumes orthonormal columns (Householder QR's, to
  // rounding); a second pass restores that.
  p = orthonormalizeRows(builder, loc, p, eps);
  p = orthonormalizeRows(builder, loc, p, eps);
  // R^T = P^T B (loops j, i, k).
  Value r = contract(builder, loc, p, b, dims(builder, 0, 1),
                     dims(builder, 1, 2), dims(builder, 0, 2), 1, {rank, cols});
  // P R^T = (P^T)^T R^T (loops i, j, k).
  auto lowRank = [&](Value factor) {
    return contract(builder, loc, p, factor, dims(builder, 1, 0),
                    dims(builder, 1, 2), dims(builder, 0, 2), 1, {rows, cols});
  };
  // M = B - (1 - mu) P R^T.
  Value negKept =
      u.scalar(arith::NegFOp::create(builder, loc, u.oneMinus(u.hyper("mu"))));
  Value momentum = mapElements(
      builder, loc, {b, lowRank(r)}, empty({rows, cols}, stateElement),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        return convertTo(nb, l, m.axpy(args[0], negKept, args[1]),
                         stateElement);
      });
  // Q^T = each row of R^T over its norm (summed in f64) plus epsilon; a zero
  // row keeps the old factor's.
  Value normZeros = linalg::FillOp::create(builder, loc, u.f64(0),
                                           empty({rank}, builder.getF64Type()))
                        .getResult(0);
  MLIRContext *ctx = builder.getContext();
  AffineExpr d0 = getAffineDimExpr(0, ctx);
  AffineMap identity = builder.getMultiDimIdentityMap(2);
  Value sumSq =
      linalg::GenericOp::create(
          builder, loc, TypeRange{normZeros.getType()}, ValueRange{r},
          ValueRange{normZeros},
          SmallVector<AffineMap>{identity, AffineMap::get(2, 0, d0)},
          SmallVector<utils::IteratorType>{utils::IteratorType::parallel,
                                           utils::IteratorType::reduction},
          [&](OpBuilder &nb, Location l, ValueRange args) {
            Value w = widen(nb, l, args[0], nb.getF64Type());
            linalg::YieldOp::create(
                nb, l, math::FmaOp::create(nb, l, w, w, args[1]).getResult());
          })
          .getResult(0);
  Value epsilon = u.scalar(eps);
  Value newFactor =
      linalg::GenericOp::create(
          builder, loc, TypeRange{RankedTensorType::get({rank, cols}, ct)},
          ValueRange{r, sumSq, oldFactor}, ValueRange{empty({rank, cols}, ct)},
          SmallVector<AffineMap>{identity, AffineMap::get(2, 0, d0), identity,
                                 identity},
          SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
          [&](OpBuilder &nb, Location l, ValueRange args) {
            Body m{nb, l};
            Value isZero = arith::CmpFOp::create(
                nb, l, arith::CmpFPredicate::OEQ, args[1],
                arith::ConstantOp::create(nb, l, nb.getF64FloatAttr(0)));
            Value norm = m.add(convertTo(nb, l, m.sqrt(args[1]), ct), epsilon);
            linalg::YieldOp::create(
                nb, l, m.select(isZero, args[2], m.div(args[0], norm)));
          })
          .getResult(0);
  // X = X (1 - lr wd) - lr sqrt(m / n) P Q^T.
  double scale =
      cols == 0
          ? 0.0
          : std::sqrt(static_cast<double>(rows) / static_cast<double>(cols));
  Value negStep = u.scalar(arith::NegFOp::create(
      builder, loc, arith::MulFOp::create(builder, loc, u.lr, u.f64(scale))));
  Value decay = u.scalar(u.oneMinus(
      arith::MulFOp::create(builder, loc, u.lr, u.hyper("weight_decay"))));
  Type element = paramType.getElementType();
  Value param = mapElements(
      builder, loc, {lowRank(newFactor)}, asMatrix(op.getParam()),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        Value x = m.mul(convertTo(nb, l, args[1], ct), decay);
        return convertTo(nb, l, m.axpy(x, negStep, args[0]), element);
      });
  Value storedFactor =
      mapElements(builder, loc, {newFactor}, op.getState()[1],
                  [&](OpBuilder &nb, Location l, ValueRange args) {
                    return convertTo(nb, l, args[0], stateElement);
                  });
  builder.replaceOp(op, ValueRange{asParamShape(param), asParamShape(momentum),
                                   storedFactor});
}

/// An update whose every result is kept only under one condition (selected
/// against the operand it updates) moves under scf.if on it.
void runUnderCondition(const GradientChain &chain) {
  Operation *update = chain.update;
  Value condition = chain.keep();
  if (!condition)
    return;
  SmallVector<arith::SelectOp> selects(chain.selects);
  // The condition must be known where the update is.
  if (Operation *def = condition.getDefiningOp())
    if (def->getBlock() != update->getBlock() || !def->isBeforeInBlock(update))
      return;
  if (auto arg = dyn_cast<BlockArgument>(condition))
    if (arg.getOwner() != update->getBlock())
      return;
  OpBuilder builder(update);
  Location loc = update->getLoc();
  auto branch = scf::IfOp::create(builder, loc, update->getResultTypes(),
                                  condition, /*withElseRegion=*/true);
  Block *then = &branch.getThenRegion().front();
  update->moveBefore(then, then->end());
  OpBuilder thenBuilder = OpBuilder::atBlockEnd(then);
  scf::YieldOp::create(thenBuilder, loc, update->getResults());
  SmallVector<Value> olds;
  for (arith::SelectOp select : selects)
    olds.push_back(select.getFalseValue());
  Block *otherwise = &branch.getElseRegion().front();
  OpBuilder elseBuilder = OpBuilder::atBlockEnd(otherwise);
  scf::YieldOp::create(elseBuilder, loc, olds);
  for (auto [select, kept] : llvm::zip_equal(selects, branch.getResults())) {
    select.getResult().replaceAllUsesWith(kept);
    select.erase();
  }
}

/// Each update as its fused loop. A new optimizer adds its case here.
struct LowerUpdate : OpInterfaceRewritePattern<OptimizerOpInterface> {
  using OpInterfaceRewritePattern::OpInterfaceRewritePattern;
  LogicalResult matchAndRewrite(OptimizerOpInterface op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    return TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](SGDUpdateOp sgd) {
          lowerSGD(rewriter, sgd);
          return success();
        })
        .Case([&](AdamUpdateOp adam) {
          lowerAdam(rewriter, adam, /*decoupled=*/false);
          return success();
        })
        .Case([&](AdamWUpdateOp adamw) {
          lowerAdam(rewriter, adamw, /*decoupled=*/true);
          return success();
        })
        .Case([&](RMSpropUpdateOp rmsprop) {
          lowerRMSprop(rewriter, rmsprop);
          return success();
        })
        .Case([&](AdagradUpdateOp adagrad) {
          lowerAdagrad(rewriter, adagrad);
          return success();
        })
        .Case([&](MuonUpdateOp muon) {
          lowerMuon(rewriter, muon);
          return success();
        })
        .Case([&](DionUpdateOp dion) {
          lowerDion(rewriter, dion);
          return success();
        })
        .Default([&](Operation *) {
          return rewriter.notifyMatchFailure(op, "no lowering to loops");
        });
  }
};

struct LowerOptimizersPass
    : public distopt::impl::LowerOptimizersPassBase<LowerOptimizersPass> {
  void runOnOperation() override {
    // Updates kept under a condition move under it first (this rewrites
    // their users, so it is no local rewrite).
    StepStructure structure(getOperation());
    SetVector<Operation *> extensions; // of gradients, read in the loops
    for (const GradientChain &chain : structure.chains()) {
      OptimizerOpInterface update = chain.update;
      if (auto extend = update.getGrad().getDefiningOp<arith::ExtFOp>())
        extensions.insert(extend);
      runUnderCondition(chain);
    }
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerUpdate>(&getContext());
    walkAndApplyPatterns(getOperation(), std::move(patterns));
    for (Operation *extend : extensions)
      if (extend->use_empty())
        extend->erase();
    WalkResult left = getOperation()->walk([](OptimizerOpInterface op) {
      op->emitOpError("has no lowering to loops");
      return WalkResult::interrupt();
    });
    if (left.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
