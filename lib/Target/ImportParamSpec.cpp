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

OwningOpRef<ModuleOp> SpecReader::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr(abi::kWorldSize,
                                  builder.getI64IntegerAttr(worldSize));
  module->getOperation()->setAttr(abi::kModelName,
                                  builder.getStringAttr(modelName));
  module->getOperation()->setAttr(abi::kInitialLr,
                                  builder.getF64FloatAttr(optimizer.lr));
  if (accumulation > 1)
    module->getOperation()->setAttr(abi::kGradAccumulation,
                                    builder.getI64IntegerAttr(accumulation));
  int64_t numParameters = 0;
  for (const Parameter &p : parameters)
    numParameters += ShapedType::getNumElements(p.shape);
  module->getOperation()->setAttr(abi::kNumParameters,
                                  builder.getI64IntegerAttr(numParameters));
  builder.setInsertionPointToEnd(module->getBody());
  StringRef groupName = "world";
  ProcessGroupOp::create(builder, loc, groupName, worldSize);
  auto groupRef = FlatSymbolRefAttr::get(context, groupName);

  // The signature: parameters, gradients, main parameters, state (per
  // parameter, in torch's state order), learning rate, step.
  Type f32 = builder.getF32Type();
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  auto addArg = [&](Type type, StringRef role, StringRef name) {
    argTypes.push_back(type);
    NamedAttrList attrs;
    attrs.set(abi::kRole, builder.getStringAttr(role));
    if (!name.empty())
      attrs.set(abi::kName, builder.getStringAttr(name));
    argAttrs.push_back(attrs.getDictionary(context));
    return argTypes.size() - 1;
  };
  auto tensorType = [](const Parameter &p, Type element) {
    return RankedTensorType::get(p.shape, element);
  };
  auto hasMain = [&](const Parameter &p) {
    return mainParams && !p.elementType.isF32();
  };
  size_t n = parameters.size();
  SmallVector<size_t> paramArg(n), gradArg(n), mainArg(n, 0);
  SmallVector<SmallVector<size_t>> stateArgs(n);
  for (auto [i, p] : llvm::enumerate(parameters))
    paramArg[i] = addArg(tensorType(p, p.elementType), abi::kParam, p.name);
  for (auto [i, p] : llvm::enumerate(parameters))
    gradArg[i] = addArg(tensorType(p, p.elementType), abi::kGrad, p.name);
  // Gradient accumulation: each gradient's sum over the step's earlier
  // micro-batches, in f32 (NeMo's fp32 gradient accumulation).
  SmallVector<size_t> accumArg(n, 0);
  if (accumulation > 1)
    for (auto [i, p] : llvm::enumerate(parameters))
      accumArg[i] = addArg(tensorType(p, f32), abi::kGradAccum, p.name);
  for (auto [i, p] : llvm::enumerate(parameters))
    if (hasMain(p))
      mainArg[i] = addArg(tensorType(p, f32), abi::kMainParam, p.name);
  // A parameter's optimizer: its group's, or the defaults.
  auto optimizerOf = [&](size_t i) -> const Optimizer & {
    return groupOf.empty() || groupOf[i] < 0 ? optimizer : groups[groupOf[i]];
  };
  for (auto [i, p] : llvm::enumerate(parameters)) {
    Type stateElement = hasMain(p) ? f32 : p.elementType;
    for (const std::string &state : optimizerOf(i).stateNames)
      stateArgs[i].push_back(addArg(tensorType(p, stateElement), abi::kState,
                                    p.name + "." + state));
  }
  // The loss scale (f32, as torch's GradScaler keeps it) and its growth
  // tracker are scalar state, fed back and checkpointed.
  std::optional<size_t> scaleArg, trackerArg;
  if (lossScaling && lossScaling->dynamic) {
    scaleArg = addArg(f32, abi::kState, "loss_scale");
    trackerArg =
        addArg(builder.getI64Type(), abi::kState, "loss_scale_growth_tracker");
    NamedAttrList withValue(argAttrs[*scaleArg]);
    withValue.set("distopt.value",
                  builder.getF64FloatAttr(lossScaling->initScale));
    argAttrs[*scaleArg] = withValue.getDictionary(context);
  }
  // The schedule's step count (LambdaLR's last_epoch): it advances on
  // every call, a skipped one too, as a scheduler stepped every iteration.
  std::optional<size_t> epochArg;
  if (schedule)
    epochArg =
        addArg(builder.getI64Type(), abi::kState, "lr_schedule.last_epoch");
  // f64, as torch.optim keeps it (a Python float): a rate rounded to f32
  // would move every update away from torch's. With runtime
  // hyperparameters each group has its own rate (and the others) instead:
  // `group<i>.lr`, `group<i>.beta1`, ... (`optimizer.<key>` for the
  // parameters in no group), in the order the groups first appear.
  std::optional<size_t> lrArg;
  if (!runtimeHyperparameters)
    lrArg = addArg(builder.getF64Type(), abi::kLearningRate, "");
  auto groupKey = [&](size_t i) { return groupOf.empty() ? -1 : groupOf[i]; };
  llvm::MapVector<int64_t, SmallVector<size_t>> hyperArgs;
  if (runtimeHyperparameters)
    for (size_t i = 0; i < n; ++i) {
      int64_t g = groupKey(i);
      if (hyperArgs.count(g))
        continue;
      std::string prefix =
          g < 0 ? std::string("optimizer.") : "group" + std::to_string(g) + ".";
      SmallVector<size_t> &group = hyperArgs[g];
      group.push_back(
          addArg(builder.getF64Type(), abi::kHyperparameter, prefix + "lr"));
      for (StringRef key : optimizerOf(i).runtimeKeys)
        group.push_back(addArg(builder.getF64Type(), abi::kHyperparameter,
                               prefix + key.str()));
    }
  size_t stepArg = addArg(builder.getI64Type(), abi::kStep, "");

  // Results mirror the updated arguments: parameters, main parameters, state.
  SmallVector<size_t> resultArgs;
  llvm::append_range(resultArgs, paramArg);
  for (auto [i, p] : llvm::enumerate(parameters))
    if (hasMain(p))
      resultArgs.push_back(mainArg[i]);
  for (auto &states : stateArgs)
    llvm::append_range(resultArgs, states);
  if (scaleArg) {
    resultArgs.push_back(*scaleArg);
    resultArgs.push_back(*trackerArg);
  }
  if (epochArg)
    resultArgs.push_back(*epochArg);
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  for (size_t arg : resultArgs) {
    resultTypes.push_back(argTypes[arg]);
    NamedAttrList attrs(argAttrs[arg]);
    attrs.erase("distopt.value"); // an argument's starting value
    resultAttrs.push_back(attrs.getDictionary(context));
  }
  // Reported, not fed back: the gradient norm before clipping, and whether
  // the step was skipped for an overflow.
  auto addReport = [&](Type type, StringRef role, StringRef name) {
    resultTypes.push_back(type);
    NamedAttrList attrs;
    if (!role.empty())
      attrs.set(abi::kRole, builder.getStringAttr(role));
    attrs.set(abi::kName, builder.getStringAttr(name));
    resultAttrs.push_back(attrs.getDictionary(context));
  };
  if (schedule)
    addReport(builder.getF64Type(), "", "scheduled_lr");
  if (clipping)
    addReport(f32, "", "grad_norm");
  if (lossScaling)
    addReport(builder.getI1Type(), abi::kSkipped, "skipped");

  auto func = func::FuncOp::create(
      builder, loc, "step", builder.getFunctionType(argTypes, resultTypes));
  func.setAllArgAttrs(argAttrs);
  func.setAllResultAttrs(resultAttrs);
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToStart(body);
  SmallVector<Value> updated(argTypes.size());
  for (auto [i, arg] : llvm::enumerate(body->getArguments()))
    updated[i] = arg;

  Value step = body->getArgument(stepArg);
  Value lambda =
      schedule ? buildSchedule(body->getArgument(*epochArg)) : Value();
  if (epochArg)
    updated[*epochArg] = arith::AddIOp::create(
        builder, loc, body->getArgument(*epochArg),
        arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(1)));
  // A group's rate: the step's times its lr_scale (or, with runtime
  // hyperparameters, its own), times the schedule's factor (in that order,
  // as LambdaLR multiplies a group's initial rate), computed once.
  llvm::DenseMap<int64_t, Value> rates;
  auto lrOf = [&](int64_t g) {
    Value &rate = rates[g];
    if (rate)
      return rate;
    const Optimizer &opt = g < 0 ? optimizer : groups[g];
    if (runtimeHyperparameters) {
      rate = body->getArgument(hyperArgs[g].front());
      if (lambda)
        rate = arith::MulFOp::create(builder, loc, rate, lambda);
      return rate;
    }
    rate = body->getArgument(*lrArg);
    if (opt.lrScale != 1.0)
      rate = arith::MulFOp::create(
          builder, loc, rate,
          arith::ConstantOp::create(builder, loc,
                                    builder.getF64FloatAttr(opt.lrScale)));
    if (lambda)
      rate = arith::MulFOp::create(builder, loc, rate, lambda);
    return rate;
  };
  // Each group's rate, checked before anything runs: one that reached
  // infinity or NaN (a rate times lr_scale, a growing schedule) fails the
  // step before any collective and any update.
  // Groups that share a rate (no lr_scale) share its check, which names the
  // first of them.
  {
    llvm::SmallSetVector<int64_t, 4> used;
    for (size_t i = 0; i < n; ++i)
      used.insert(groupKey(i));
    llvm::SmallPtrSet<Value, 4> checked;
    for (int64_t g : used)
      if (Value rate = lrOf(g); checked.insert(rate).second)
        CheckRateOp::create(builder, loc, rate, g);
  }

  // First every gradient is reduced (in a training step this happens during
  // the backward pass), then the optimizer updates every parameter. Each
  // stage for all gradients before the next (the sums with the accumulated
  // micro-batches, the reductions, the divisions), so that --distopt-bucketize
  // can gather the reductions: a bucket goes after its inputs' last
  // definition and before its results' first use.
  SmallVector<Value> reduced(n);
  SmallVector<Location> paramLocs;
  for (auto [i, p] : llvm::enumerate(parameters)) {
    Location paramLoc = NameLoc::get(builder.getStringAttr(p.name), loc);
    paramLocs.push_back(paramLoc);
    Value local = body->getArgument(gradArg[i]);
    if (accumulation > 1) {
      // The last micro-batch's gradient joins the sum of the others.
      Value wide = local;
      if (!p.elementType.isF32())
        wide =
            arith::ExtFOp::create(builder, paramLoc, tensorType(p, f32), local);
      local = arith::AddFOp::create(builder, paramLoc,
                                    body->getArgument(accumArg[i]), wide);
    }
    reduced[i] = local;
  }
  for (size_t i = 0; i < n; ++i)
    reduced[i] = AllReduceOp::create(
        builder, paramLocs[i], reduced[i].getType(), reduced[i], groupRef,
        /*wire_type=*/nullptr,
        ReductionKindAttr::get(context, ReductionKind::Sum), /*scale=*/nullptr);
  for (size_t i = 0; i < n; ++i) {
    // Divided by the world size in a type that holds it exactly (bf16
    // rounds 257 to 256: a bf16 gradient on more than 256 ranks is divided
    // in f32 and rounded once), then by the micro-batches (in f64 beyond
    // 2^24).
    reduced[i] = createDivision(builder, paramLocs[i], reduced[i],
                                static_cast<double>(worldSize));
    if (accumulation > 1)
      reduced[i] = createDivision(builder, paramLocs[i], reduced[i],
                                  static_cast<double>(accumulation));
  }

  // Loss scaling: an overflow in any rank's gradient reaches every rank
  // through the all-reduce (inf + x = inf), so a local check agrees. As
  // torch's scaler, the scaled gradients are checked, then unscaled.
  Value finite, scale;
  if (lossScaling) {
    finite = AllFiniteOp::create(builder, loc, reduced, /*group=*/nullptr);
    scale = scaleArg ? Value(body->getArgument(*scaleArg))
                     : Value(arith::ConstantOp::create(
                           builder, loc,
                           builder.getF32FloatAttr(lossScaling->initScale)));
  }
  SmallVector<Value> grads(n);
  for (auto [i, p] : llvm::enumerate(parameters)) {
    size_t target = hasMain(p) ? mainArg[i] : paramArg[i];
    auto targetType = cast<RankedTensorType>(argTypes[target]);
    grads[i] = reduced[i];
    // To the update's precision: up to an fp32 main parameter, or down from
    // an f32 accumulated sum to a bf16/f16 parameter.
    auto have = cast<RankedTensorType>(grads[i].getType());
    if (have.getElementType() != targetType.getElementType()) {
      if (have.getElementTypeBitWidth() < targetType.getElementTypeBitWidth())
        grads[i] =
            arith::ExtFOp::create(builder, paramLocs[i], targetType, grads[i]);
      else
        grads[i] = arith::TruncFOp::create(builder, paramLocs[i], targetType,
                                           grads[i]);
    }
    if (scale)
      grads[i] = UnscaleOp::create(builder, paramLocs[i], grads[i], scale);
  }
  Value norm;
  if (clipping) {
    SmallVector<Type> types;
    for (Value g : grads)
      types.push_back(g.getType());
    auto clip = ClipGradNormOp::create(
        builder, loc, types, f32, grads,
        builder.getF64FloatAttr(clipping->maxNorm),
        builder.getF64FloatAttr(clipping->normType), /*group=*/nullptr,
        /*tensor_bounds=*/nullptr);
    llvm::copy(clip.getClipped(), grads.begin());
    norm = clip.getTotalNorm();
  }
  // A skipped step leaves parameters and state as they were, bit for bit.
  auto keepIfSkipped = [&](Value updatedValue, Value old) -> Value {
    if (!finite)
      return updatedValue;
    return arith::SelectOp::create(builder, updatedValue.getLoc(), finite,
                                   updatedValue, old);
  };

  for (auto [i, p] : llvm::enumerate(parameters)) {
    Location paramLoc = paramLocs[i];
    const Optimizer &opt = optimizerOf(i);
    size_t target = hasMain(p) ? mainArg[i] : paramArg[i];
    auto targetType = cast<RankedTensorType>(argTypes[target]);
    Value mean = grads[i];

    SmallVector<Value> operands = {body->getArgument(target), mean};
    for (size_t s : stateArgs[i])
      operands.push_back(body->getArgument(s));
    operands.push_back(lrOf(groupKey(i)));
    operands.push_back(step);
    // Runtime hyperparameters: every key of the group's, after its rate.
    SmallVector<Attribute> runtimeNames;
    if (runtimeHyperparameters) {
      ArrayRef<size_t> args = hyperArgs[groupKey(i)];
      for (auto [key, arg] :
           llvm::zip_equal(opt.runtimeKeys, args.drop_front()))
        operands.push_back(body->getArgument(arg));
      for (StringRef key : opt.runtimeKeys)
        runtimeNames.push_back(builder.getStringAttr(key));
    }
    SmallVector<Type> updateTypes(1 + stateArgs[i].size(), targetType);
    OperationState state(paramLoc, opt.opName);
    state.addOperands(operands);
    state.addTypes(updateTypes);
    state.addAttributes(opt.hyperparameters);
    state.addAttribute("operandSegmentSizes",
                       builder.getDenseI32ArrayAttr(
                           {1, 1, static_cast<int32_t>(stateArgs[i].size()), 1,
                            1, static_cast<int32_t>(runtimeNames.size())}));
    if (!runtimeNames.empty())
      state.addAttribute("runtime_hyperparameter_names",
                         builder.getArrayAttr(runtimeNames));
    Operation *update = builder.create(state);
    // A runtime hyperparameter starts from the value the spec gives (the
    // update's attribute or its default); the rate from the group's.
    if (runtimeHyperparameters &&
        !func.getArgAttr(hyperArgs[groupKey(i)][0], abi::kValue)) {
      ArrayRef<size_t> args = hyperArgs[groupKey(i)];
      auto setValue = [&](size_t arg, double value) {
        func.setArgAttr(arg, abi::kValue, builder.getF64FloatAttr(value));
      };
      setValue(args[0], opt.lr * opt.lrScale);
      auto optimizerOp = cast<OptimizerOpInterface>(update);
      for (auto [key, arg] :
           llvm::zip_equal(opt.runtimeKeys, args.drop_front()))
        setValue(arg, optimizerOp.getCompiledHyperparameter(key));
    }

    updated[target] =
        keepIfSkipped(update->getResult(0), body->getArgument(target));
    for (auto [k, s] : llvm::enumerate(stateArgs[i]))
      updated[s] =
          keepIfSkipped(update->getResult(1 + k), body->getArgument(s));
    if (hasMain(p))
      updated[paramArg[i]] = arith::TruncFOp::create(
          builder, paramLoc, tensorType(p, p.elementType), updated[target]);
  }
  if (scaleArg) {
    auto next = LossScaleUpdateOp::create(
        builder, loc, f32, builder.getI64Type(), body->getArgument(*scaleArg),
        body->getArgument(*trackerArg), finite,
        builder.getF64FloatAttr(lossScaling->growthFactor),
        builder.getF64FloatAttr(lossScaling->backoffFactor),
        builder.getI64IntegerAttr(lossScaling->growthInterval));
    updated[*scaleArg] = next.getNewScale();
    updated[*trackerArg] = next.getNewGrowthTracker();
  }
  SmallVector<Value> results;
  for (size_t arg : resultArgs)
    results.push_back(updated[arg]);
  // The rate reported: the defaults' (the first group's when every group
  // has a rate of its own).
  if (schedule)
    results.push_back(lrOf(runtimeHyperparameters ? groupKey(0) : -1));
  if (norm)
    results.push_back(norm);
  if (finite) {
    Value yes =
        arith::ConstantOp::create(builder, loc, builder.getBoolAttr(true));
    results.push_back(arith::XOrIOp::create(builder, loc, finite, yes));
  }
  func::ReturnOp::create(builder, loc, results);

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
}
