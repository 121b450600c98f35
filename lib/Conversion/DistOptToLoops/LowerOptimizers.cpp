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
#include "UpdateLowering.h"

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

namespace mlir::distopt::updates {

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

} // namespace mlir::distopt::updates

using namespace mlir::distopt::updates;

namespace {

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
        .Case([&](MuonUpdateOp muon) {
          lowerMuon(rewriter, muon);
          return success();
        })
        .Case([&](DionUpdateOp dion) {
          lowerDion(rewriter, ArrayRef<DionUpdateOp>(dion));
          rewriter.eraseOp(dion);
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
    // Dion updates synced by their factors in batches, each batch at once
    // (its factors all-reduced together), where every member's operands
    // are ready; a batch runs on every step, its results kept where the
    // step's selects say. Erased only now: a batch may be placed before
    // another's member.
    SmallVector<Block *> blocks;
    getOperation()->walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks) {
      SmallVector<OpBatch> batches = batchDionSync(*block);
      for (OpBatch &batch : batches) {
        IRRewriter rewriter(batch.insertBefore);
        lowerDion(rewriter, llvm::map_to_vector(batch.members, [](auto *op) {
                    return cast<DionUpdateOp>(op);
                  }));
      }
      for (OpBatch &batch : batches)
        for (Operation *op : batch.members)
          op->erase();
    }
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
