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

#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
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
