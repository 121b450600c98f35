//===- ImportParamSpec.cpp - parameter spec (JSON) to a step ----*- C++ -*-===//
//
// Reads a parameter spec and builds the plain data-parallel step: for each
// parameter, in spec order, an all_reduce sum of its gradient, the division
// by the world size, and the optimizer update (on an fp32 main copy when the
// spec asks for main parameters). With loss scaling, the reduced gradients
// are checked for overflow (the step is skipped on every rank if any is
// not finite) and unscaled; with clipping, they are clipped by their global
// norm before the updates. The spec is read and checked in
// ReadParamSpec.cpp.
//
//===----------------------------------------------------------------------===//

#include "SpecReader.h"

#include "distopt/Target/ParamSpec.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Support/JSON.h"
#include "distopt/Support/Limits.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::distopt;
using ::distopt::parseJSON;

using namespace mlir::distopt::spec;

Value SpecReader::buildSchedule(Value epoch) {
  Type f64 = builder.getF64Type();
  auto c = [&](double v) {
    return arith::ConstantOp::create(builder, loc, builder.getF64FloatAttr(v))
        .getResult();
  };
  auto mul = [&](Value a, Value b) {
    return arith::MulFOp::create(builder, loc, a, b).getResult();
  };
  auto div = [&](Value a, Value b) {
    return arith::DivFOp::create(builder, loc, a, b).getResult();
  };
  auto add = [&](Value a, Value b) {
    return arith::AddFOp::create(builder, loc, a, b).getResult();
  };
  auto sub = [&](Value a, Value b) {
    return arith::SubFOp::create(builder, loc, a, b).getResult();
  };
  Value s = arith::SIToFPOp::create(builder, loc, f64, epoch);
  const Schedule &k = *schedule;
  switch (k.kind) {
  case Schedule::Constant:
    return c(1.0);
  case Schedule::Step:
    // gamma ** (s // step_size)
    return math::PowFOp::create(
        builder, loc, c(k.gamma),
        math::FloorOp::create(builder, loc,
                              div(s, c(static_cast<double>(k.stepSize)))));
  case Schedule::WarmupCosine:
  case Schedule::WarmupLinear:
    break;
  }
  // s < W: s / max(1, W). Then p = min(1, (s - W) / max(1, T - W)) and
  // r + (1 - r) * d, d = 0.5 * (1 + cos(pi * p)) or 1 - p.
  double w = static_cast<double>(k.warmupSteps);
  double span =
      static_cast<double>(std::max<int64_t>(1, k.totalSteps - k.warmupSteps));
  Value warm = div(s, c(std::max(1.0, w)));
  Value p = arith::MinimumFOp::create(builder, loc, c(1.0),
                                      div(sub(s, c(w)), c(span)));
  Value decay =
      k.kind == Schedule::WarmupCosine
          ? mul(c(0.5),
                add(c(1.0), math::CosOp::create(builder, loc, mul(c(M_PI), p))))
          : sub(c(1.0), p);
  Value after = add(c(k.minRatio), mul(c(1.0 - k.minRatio), decay));
  Value warming =
      arith::CmpFOp::create(builder, loc, arith::CmpFPredicate::OLT, s, c(w));
  return arith::SelectOp::create(builder, loc, warming, warm, after);
}

void SpecReader::annotate(ModuleOp module) {
  Operation *op = module.getOperation();
  op->setAttr(abi::kWorldSize, builder.getI64IntegerAttr(worldSize));
  op->setAttr(abi::kModelName, builder.getStringAttr(modelName));
  op->setAttr(abi::kInitialLr, builder.getF64FloatAttr(optimizer.lr));
  if (accumulation > 1)
    op->setAttr(abi::kGradAccumulation,
                builder.getI64IntegerAttr(accumulation));
  int64_t numParameters = 0;
  for (const Parameter &p : parameters)
    numParameters += ShapedType::getNumElements(p.shape);
  op->setAttr(abi::kNumParameters, builder.getI64IntegerAttr(numParameters));
}

static RankedTensorType tensorType(const Parameter &p, Type element) {
  return RankedTensorType::get(p.shape, element);
}

/// The signature: parameters, gradients, accumulators, main parameters,
/// state (per parameter, in torch's state order), scalar state, the rates
/// and hyperparameters, the step number.
StepSignature SpecReader::buildArguments() {
  StepSignature sig;
  auto addArg = [&](Type type, StringRef role, StringRef name) {
    NamedAttrList attrs;
    attrs.set(abi::kRole, builder.getStringAttr(role));
    if (!name.empty())
      attrs.set(abi::kName, builder.getStringAttr(name));
    return sig.add(type, attrs.getDictionary(context));
  };
  // A parameter's own arguments carry its unit.
  auto addParamArg = [&](Type type, StringRef role, const Parameter &p) {
    NamedAttrList attrs;
    attrs.set(abi::kRole, builder.getStringAttr(role));
    attrs.set(abi::kName, builder.getStringAttr(p.name));
    if (p.unit)
      attrs.set(abi::kUnit, builder.getI64IntegerAttr(*p.unit));
    return sig.add(type, attrs.getDictionary(context));
  };
  Type f32 = builder.getF32Type();
  size_t n = parameters.size();
  sig.mainArg.assign(n, 0);
  sig.accumArg.assign(n, 0);
  sig.stateArgs.resize(n);
  for (const Parameter &p : parameters)
    sig.paramArg.push_back(
        addParamArg(tensorType(p, p.elementType), abi::kParam, p));
  for (const Parameter &p : parameters)
    sig.gradArg.push_back(
        addParamArg(tensorType(p, p.elementType), abi::kGrad, p));
  // Gradient accumulation: each gradient's sum over the step's earlier
  // micro-batches, in f32 (NeMo's fp32 gradient accumulation).
  if (accumulation > 1)
    for (auto [i, p] : llvm::enumerate(parameters))
      sig.accumArg[i] = addParamArg(tensorType(p, f32), abi::kGradAccum, p);
  for (auto [i, p] : llvm::enumerate(parameters))
    if (hasMain(p))
      sig.mainArg[i] = addParamArg(tensorType(p, f32), abi::kMainParam, p);
  for (auto [i, p] : llvm::enumerate(parameters)) {
    Type stateElement = hasMain(p) ? f32 : p.elementType;
    const Optimizer &update = optimizerOf(i);
    auto shapes = RegisteredOperationName::lookup(update.opName, context)
                      ->getInterface<OptimizerOpInterface>();
    for (const std::string &state : update.stateNames) {
      // The parameter's shape, or one the update keeps (Dion's factor).
      SmallVector<int64_t> shape =
          shapes->getStateShapeFor(state, p.shape, [&](StringRef key) {
            return update.hyperparameters.get(key);
          });
      sig.stateArgs[i].push_back(
          addArg(RankedTensorType::get(shape, stateElement), abi::kState,
                 p.name + "." + state));
    }
  }
  // The loss scale (f32, as torch's GradScaler keeps it) and its growth
  // tracker are scalar state, fed back and checkpointed.
  if (lossScaling && lossScaling->dynamic) {
    sig.scaleArg = addArg(f32, abi::kState, "loss_scale");
    sig.trackerArg =
        addArg(builder.getI64Type(), abi::kState, "loss_scale_growth_tracker");
    NamedAttrList withValue(sig.argAttrs[*sig.scaleArg]);
    withValue.set("distopt.value",
                  builder.getF64FloatAttr(lossScaling->initScale));
    sig.argAttrs[*sig.scaleArg] = withValue.getDictionary(context);
  }
  // The schedule's step count (LambdaLR's last_epoch): it advances on
  // every call, a skipped one too, as a scheduler stepped every iteration.
  if (schedule)
    sig.epochArg =
        addArg(builder.getI64Type(), abi::kState, "lr_schedule.last_epoch");
  // f64, as torch.optim keeps it (a Python float): a rate rounded to f32
  // would move every update away from torch's.
  if (!runtimeHyperparameters)
    sig.lrArg = addArg(builder.getF64Type(), abi::kLearningRate, "");
  else
    addRuntimeHyperparameters(sig);
  sig.stepArg = addArg(builder.getI64Type(), abi::kStep, "");
  return sig;
}

/// With runtime hyperparameters each group has its own rate (and the
/// others): `group<i>.lr`, `group<i>.beta1`, ... (`optimizer.<key>` for the
/// parameters in no group), in the order the groups first appear.
void SpecReader::addRuntimeHyperparameters(StepSignature &sig) {
  auto addArg = [&](StringRef name) {
    NamedAttrList attrs;
    attrs.set(abi::kRole, builder.getStringAttr(abi::kHyperparameter));
    attrs.set(abi::kName, builder.getStringAttr(name));
    return sig.add(builder.getF64Type(), attrs.getDictionary(context));
  };
  for (size_t i = 0; i < parameters.size(); ++i) {
    int64_t g = groupKey(i);
    if (sig.hyperArgs.count(g))
      continue;
    std::string prefix =
        g < 0 ? std::string("optimizer.") : "group" + std::to_string(g) + ".";
    SmallVector<size_t> &group = sig.hyperArgs[g];
    group.push_back(addArg(prefix + "lr"));
    for (StringRef key : optimizerOf(i).runtimeKeys)
      group.push_back(addArg(prefix + key.str()));
  }
}

/// Results mirror the updated arguments (parameters, main parameters,
/// state), then report what is not fed back: the scheduled rate, the
/// gradient norm before clipping, whether the step was skipped.
void SpecReader::buildResults(StepSignature &sig) {
  llvm::append_range(sig.resultArgs, sig.paramArg);
  for (auto [i, p] : llvm::enumerate(parameters))
    if (hasMain(p))
      sig.resultArgs.push_back(sig.mainArg[i]);
  for (auto &states : sig.stateArgs)
    llvm::append_range(sig.resultArgs, states);
  if (sig.scaleArg) {
    sig.resultArgs.push_back(*sig.scaleArg);
    sig.resultArgs.push_back(*sig.trackerArg);
  }
  if (sig.epochArg)
    sig.resultArgs.push_back(*sig.epochArg);
  for (size_t arg : sig.resultArgs) {
    sig.resultTypes.push_back(sig.argTypes[arg]);
    NamedAttrList attrs(sig.argAttrs[arg]);
    attrs.erase("distopt.value"); // an argument's starting value
    sig.resultAttrs.push_back(attrs.getDictionary(context));
  }
  auto addReport = [&](Type type, StringRef role, StringRef name) {
    sig.resultTypes.push_back(type);
    NamedAttrList attrs;
    if (!role.empty())
      attrs.set(abi::kRole, builder.getStringAttr(role));
    attrs.set(abi::kName, builder.getStringAttr(name));
    sig.resultAttrs.push_back(attrs.getDictionary(context));
  };
  if (schedule)
    addReport(builder.getF64Type(), "", "scheduled_lr");
  if (clipping)
    addReport(builder.getF32Type(), "", "grad_norm");
  if (lossScaling)
    addReport(builder.getI1Type(), abi::kSkipped, "skipped");
}

/// @step with its entry block, the schedule's factor and its advanced
/// epoch.
StepValues SpecReader::startBody(ModuleOp module, const StepSignature &sig) {
  builder.setInsertionPointToEnd(module.getBody());
  StepValues v;
  v.func = func::FuncOp::create(
      builder, loc, "step",
      builder.getFunctionType(sig.argTypes, sig.resultTypes));
  v.func.setAllArgAttrs(sig.argAttrs);
  v.func.setAllResultAttrs(sig.resultAttrs);
  v.body = v.func.addEntryBlock();
  builder.setInsertionPointToStart(v.body);
  llvm::append_range(v.updated, v.body->getArguments());
  for (const Parameter &p : parameters)
    v.paramLocs.push_back(NameLoc::get(builder.getStringAttr(p.name), loc));
  v.step = v.arg(sig.stepArg);
  if (schedule)
    v.lambda = buildSchedule(v.arg(*sig.epochArg));
  if (sig.epochArg)
    v.updated[*sig.epochArg] = arith::AddIOp::create(
        builder, loc, v.arg(*sig.epochArg),
        arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(1)));
  return v;
}

/// A group's rate: the step's times its lr_scale (or, with runtime
/// hyperparameters, its own), times the schedule's factor (in that order,
/// as LambdaLR multiplies a group's initial rate), computed once.
Value SpecReader::rateOf(StepValues &v, const StepSignature &sig, int64_t g) {
  Value &rate = v.rates[g];
  if (rate)
    return rate;
  const Optimizer &opt = g < 0 ? optimizer : groups[g];
  if (runtimeHyperparameters) {
    rate = v.arg(sig.hyperArgs.lookup(g).front());
  } else {
    rate = v.arg(*sig.lrArg);
    if (opt.lrScale != 1.0)
      rate = arith::MulFOp::create(
          builder, loc, rate,
          arith::ConstantOp::create(builder, loc,
                                    builder.getF64FloatAttr(opt.lrScale)));
  }
  if (v.lambda)
    rate = arith::MulFOp::create(builder, loc, rate, v.lambda);
  return rate;
}

/// Each group's rate, checked before anything runs: one that reached
/// infinity or NaN (a rate times lr_scale, a growing schedule) fails the
/// step before any collective and any update. Groups that share a rate (no
/// lr_scale) share its check, which names the first of them.
void SpecReader::checkRates(StepValues &v, const StepSignature &sig) {
  llvm::SmallSetVector<int64_t, 4> used;
  for (size_t i = 0; i < parameters.size(); ++i)
    used.insert(groupKey(i));
  llvm::SmallPtrSet<Value, 4> checked;
  for (int64_t g : used)
    if (Value rate = rateOf(v, sig, g); checked.insert(rate).second)
      CheckRateOp::create(builder, loc, rate, g);
}

/// Every gradient reduced (in a training step this happens during the
/// backward pass) before the optimizer updates any parameter. Each stage
/// for all gradients before the next (the sums with the accumulated
/// micro-batches, the reductions, the divisions), so that
/// --distopt-bucketize can gather the reductions: a bucket goes after its
/// inputs' last definition and before its results' first use.
SmallVector<Value> SpecReader::reduceGradients(StepValues &v,
                                               const StepSignature &sig,
                                               FlatSymbolRefAttr group) {
  size_t n = parameters.size();
  SmallVector<Value> reduced(n);
  for (auto [i, p] : llvm::enumerate(parameters)) {
    reduced[i] = v.arg(sig.gradArg[i]);
    if (accumulation > 1) {
      // The last micro-batch's gradient joins the sum of the others.
      Value wide = reduced[i];
      if (!p.elementType.isF32())
        wide = arith::ExtFOp::create(builder, v.paramLocs[i],
                                     tensorType(p, builder.getF32Type()),
                                     reduced[i]);
      reduced[i] = arith::AddFOp::create(builder, v.paramLocs[i],
                                         v.arg(sig.accumArg[i]), wide);
    }
  }
  for (size_t i = 0; i < n; ++i)
    reduced[i] = AllReduceOp::create(
        builder, v.paramLocs[i], reduced[i].getType(), reduced[i], group,
        /*wire_type=*/nullptr,
        ReductionKindAttr::get(context, ReductionKind::Sum), /*scale=*/nullptr);
  for (size_t i = 0; i < n; ++i) {
    // Divided by the world size in a type that holds it exactly (bf16
    // rounds 257 to 256: a bf16 gradient on more than 256 ranks is divided
    // in f32 and rounded once), then by the micro-batches (in f64 beyond
    // 2^24).
    reduced[i] = createDivision(builder, v.paramLocs[i], reduced[i],
                                static_cast<double>(worldSize));
    if (accumulation > 1)
      reduced[i] = createDivision(builder, v.paramLocs[i], reduced[i],
                                  static_cast<double>(accumulation));
  }
  return reduced;
}

/// The reduced gradients as the updates take them: checked for overflow
/// (loss scaling: an overflow on any rank reaches every rank through the
/// all-reduce, inf + x = inf, so a local check agrees), converted to the
/// update's precision, unscaled (checked first, as torch's scaler), and
/// clipped by their global norm.
SmallVector<Value> SpecReader::prepareGradients(StepValues &v,
                                                const StepSignature &sig,
                                                ArrayRef<Value> reduced) {
  Value scale;
  if (lossScaling) {
    v.finite = AllFiniteOp::create(builder, loc, reduced, /*group=*/nullptr);
    scale = sig.scaleArg
                ? v.arg(*sig.scaleArg)
                : Value(arith::ConstantOp::create(
                      builder, loc,
                      builder.getF32FloatAttr(lossScaling->initScale)));
  }
  SmallVector<Value> grads(reduced);
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto targetType = cast<RankedTensorType>(sig.argTypes[targetArg(sig, i)]);
    // To the update's precision: up to an fp32 main parameter, or down from
    // an f32 accumulated sum to a bf16/f16 parameter.
    auto have = cast<RankedTensorType>(grads[i].getType());
    if (have.getElementType() != targetType.getElementType()) {
      if (have.getElementTypeBitWidth() < targetType.getElementTypeBitWidth())
        grads[i] = arith::ExtFOp::create(builder, v.paramLocs[i], targetType,
                                         grads[i]);
      else
        grads[i] = arith::TruncFOp::create(builder, v.paramLocs[i], targetType,
                                           grads[i]);
    }
    if (scale)
      grads[i] = UnscaleOp::create(builder, v.paramLocs[i], grads[i], scale);
  }
  if (clipping) {
    SmallVector<Type> types;
    for (Value g : grads)
      types.push_back(g.getType());
    auto clip = ClipGradNormOp::create(
        builder, loc, types, builder.getF32Type(), grads,
        builder.getF64FloatAttr(clipping->maxNorm),
        builder.getF64FloatAttr(clipping->normType), /*group=*/nullptr,
        /*tensor_bounds=*/nullptr);
    llvm::copy(clip.getClipped(), grads.begin());
    v.norm = clip.getTotalNorm();
  }
  return grads;
}

/// Parameter `i`'s update from `grad`; on a skipped step (an overflow)
/// parameter and state stay as they were, bit for bit.
void SpecReader::buildUpdate(StepValues &v, const StepSignature &sig, size_t i,
                             Value grad) {
  const Parameter &p = parameters[i];
  const Optimizer &opt = optimizerOf(i);
  size_t target = targetArg(sig, i);
  ArrayRef<size_t> states = sig.stateArgs[i];
  SmallVector<Value> operands = {v.arg(target), grad};
  for (size_t s : states)
    operands.push_back(v.arg(s));
  operands.push_back(rateOf(v, sig, groupKey(i)));
  operands.push_back(v.step);
  // Runtime hyperparameters: every key of the group's, after its rate.
  SmallVector<Attribute> runtimeNames;
  ArrayRef<size_t> hyper;
  if (runtimeHyperparameters) {
    hyper = sig.hyperArgs.find(groupKey(i))->second;
    for (size_t arg : hyper.drop_front())
      operands.push_back(v.arg(arg));
    for (StringRef key : opt.runtimeKeys)
      runtimeNames.push_back(builder.getStringAttr(key));
  }
  OperationState state(v.paramLocs[i], opt.opName);
  state.addOperands(operands);
  state.addTypes(sig.argTypes[target]);
  for (size_t s : states)
    state.addTypes(sig.argTypes[s]);
  state.addAttributes(opt.hyperparameters);
  state.addAttribute("operandSegmentSizes",
                     builder.getDenseI32ArrayAttr(
                         {1, 1, static_cast<int32_t>(states.size()), 1, 1,
                          static_cast<int32_t>(runtimeNames.size())}));
  if (!runtimeNames.empty())
    state.addAttribute("runtime_hyperparameter_names",
                       builder.getArrayAttr(runtimeNames));
  Operation *update = builder.create(state);
  // A runtime hyperparameter starts from the value the spec gives (the
  // update's attribute or its default); the rate from the group's.
  if (!hyper.empty() && !v.func.getArgAttr(hyper[0], abi::kValue)) {
    auto setValue = [&](size_t arg, double value) {
      v.func.setArgAttr(arg, abi::kValue, builder.getF64FloatAttr(value));
    };
    setValue(hyper[0], opt.lr * opt.lrScale);
    auto optimizerOp = cast<OptimizerOpInterface>(update);
    for (auto [key, arg] : llvm::zip_equal(opt.runtimeKeys, hyper.drop_front()))
      setValue(arg, optimizerOp.getCompiledHyperparameter(key));
  }
  auto keepIfSkipped = [&](Value updatedValue, Value old) -> Value {
    if (!v.finite)
      return updatedValue;
    return arith::SelectOp::create(builder, updatedValue.getLoc(), v.finite,
                                   updatedValue, old);
  };
  v.updated[target] = keepIfSkipped(update->getResult(0), v.arg(target));
  for (auto [k, s] : llvm::enumerate(states))
    v.updated[s] = keepIfSkipped(update->getResult(1 + k), v.arg(s));
  if (hasMain(p))
    v.updated[sig.paramArg[i]] = arith::TruncFOp::create(
        builder, v.paramLocs[i], tensorType(p, p.elementType),
        v.updated[target]);
}

/// The loss scale's next value, and the return: the updated arguments,
/// then the reports.
void SpecReader::buildReturn(StepValues &v, const StepSignature &sig) {
  if (sig.scaleArg) {
    auto next = LossScaleUpdateOp::create(
        builder, loc, builder.getF32Type(), builder.getI64Type(),
        v.arg(*sig.scaleArg), v.arg(*sig.trackerArg), v.finite,
        builder.getF64FloatAttr(lossScaling->growthFactor),
        builder.getF64FloatAttr(lossScaling->backoffFactor),
        builder.getI64IntegerAttr(lossScaling->growthInterval));
    v.updated[*sig.scaleArg] = next.getNewScale();
    v.updated[*sig.trackerArg] = next.getNewGrowthTracker();
  }
  SmallVector<Value> results;
  for (size_t arg : sig.resultArgs)
    results.push_back(v.updated[arg]);
  // The rate reported: the defaults' (the first group's when every group
  // has a rate of its own).
  if (schedule)
    results.push_back(
        rateOf(v, sig, runtimeHyperparameters ? groupKey(0) : -1));
  if (v.norm)
    results.push_back(v.norm);
  if (v.finite) {
    Value yes =
        arith::ConstantOp::create(builder, loc, builder.getBoolAttr(true));
    results.push_back(arith::XOrIOp::create(builder, loc, v.finite, yes));
  }
  func::ReturnOp::create(builder, loc, results);
}

OwningOpRef<ModuleOp> SpecReader::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  annotate(*module);
  builder.setInsertionPointToEnd(module->getBody());
  StringRef groupName = "world";
  ProcessGroupOp::create(builder, loc, groupName, worldSize);

  StepSignature sig = buildArguments();
  buildResults(sig);
  StepValues v = startBody(*module, sig);
  checkRates(v, sig);
  SmallVector<Value> reduced =
      reduceGradients(v, sig, FlatSymbolRefAttr::get(context, groupName));
  SmallVector<Value> grads = prepareGradients(v, sig, reduced);
  for (size_t i = 0; i < parameters.size(); ++i)
    buildUpdate(v, sig, i, grads[i]);
  buildReturn(v, sig);

  // Verifier errors (a hyperparameter out of range, say) are located at the
  // spec file; say which parameter's update they come from.
  ScopedDiagnosticHandler nameParameter(context, [](Diagnostic &diag) {
    if (auto name = dyn_cast<NameLoc>(diag.getLocation()))
      diag.attachNote() << "in the update of parameter '"
                        << name.getName().getValue() << "'";
    return failure(); // let the next handler report it
  });
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

OwningOpRef<ModuleOp> mlir::distopt::importParamSpec(llvm::SourceMgr &sourceMgr,
                                                     MLIRContext *context) {
  context->loadDialect<DistOptDialect, arith::ArithDialect, math::MathDialect,
                       func::FuncDialect, tensor::TensorDialect>();
  const llvm::MemoryBuffer *buffer =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  Location loc =
      FileLineColLoc::get(context, buffer->getBufferIdentifier(), 1, 1);
  return SpecReader(context, loc).read(buffer->getBuffer());
}

LogicalResult mlir::distopt::describeOptimizer(llvm::SourceMgr &sourceMgr,
                                               raw_ostream &os,
                                               MLIRContext *context) {
  context->loadDialect<DistOptDialect, func::FuncDialect>();
  const llvm::MemoryBuffer *buffer =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  Location loc =
      FileLineColLoc::get(context, buffer->getBufferIdentifier(), 1, 1);
  return SpecReader(context, loc).describeOptimizer(buffer->getBuffer(), os);
}

void mlir::distopt::registerImportParamSpec() {
  TranslateToMLIRRegistration registration(
      "import-param-spec",
      "import a parameter spec (JSON) as a data-parallel step function",
      [](llvm::SourceMgr &sourceMgr, MLIRContext *context) {
        return OwningOpRef<Operation *>(
            importParamSpec(sourceMgr, context).release());
      },
      [](DialectRegistry &registry) {
        registry.insert<DistOptDialect, arith::ArithDialect, math::MathDialect,
                        func::FuncDialect, tensor::TensorDialect>();
      });
  TranslateRegistration describe(
      "describe-optimizer",
      "describe an optimizer of the spec (JSON {\"type\": ..., <keys>}): "
      "every key with its default, its state and runtime keys (JSON)",
      [](const std::shared_ptr<llvm::SourceMgr> &sourceMgr, raw_ostream &os,
         MLIRContext *context) {
        return describeOptimizer(*sourceMgr, os, context);
      });
}
