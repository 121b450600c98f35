//===- InferStepRoles.cpp - roles of a hand-written step --------*- C++ -*-===//
//
// --distopt-infer-step-roles: a step written by hand rarely carries the
// distopt.role / distopt.name attributes a driver needs (docs/step-abi.md).
// Its optimizer updates say what most arguments are: an update's parameter
// operand is a parameter, its state operands are that parameter's state
// (named with torch's keys), its lr and step operands the learning rate and
// step number, its runtime hyperparameters hyperparameters, and the argument
// its gradient operand comes from (through reductions, bucket packing and
// unpacking, clipping, unscaling and casts) the parameter's gradient. Results
// that are updates of an argument get that argument's role and name, and the
// momentum of a Dion update synced by its factors is marked per rank, its
// copies standing for their mean. Existing attributes are kept; an argument
// two updates disagree about is an error naming it.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <string>

namespace mlir::distopt {
#define GEN_PASS_DEF_INFERSTEPROLESPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

struct Inference {
  Inference(func::FuncOp func, const StepStructure &structure)
      : func(func), structure(structure) {}

  func::FuncOp func;
  const StepStructure &structure;
  // argument -> (role, name), as inferred; kept apart from the attributes
  // so that a conflict can name both claims.
  llvm::DenseMap<unsigned, std::pair<StringRef, std::string>> args;
  // hyperparameter argument -> the compiled value it starts from (the
  // attribute of the first update that reads it).
  llvm::DenseMap<unsigned, double> startValues;

  /// The role and name argument `index` has, from its attributes or as
  /// inferred so far.
  std::pair<StringRef, std::string> known(unsigned index) {
    StringRef role = abi::getArgRole(func, index);
    if (!role.empty())
      return {role, abi::getArgName(func, index).str()};
    auto it = args.find(index);
    return it == args.end() ? std::pair<StringRef, std::string>() : it->second;
  }

  LogicalResult claim(Operation *user, BlockArgument arg, StringRef role,
                      const std::string &name) {
    // A runtime hyperparameter may be shared by the updates of a group: it
    // keeps the name of the first update that claims it.
    bool sharedByName = role == abi::kHyperparameter;
    if (arg.getOwner() != &func.getBody().front())
      return success();
    unsigned index = arg.getArgNumber();
    auto [haveRole, haveName] = known(index);
    if (haveRole.empty()) {
      args[index] = {role, name};
      return success();
    }
    // Names written out win (a ZeRO shard's state is named after its flat
    // buffer, not after the parameter it updates); roles must agree.
    bool written = !abi::getArgRole(func, index).empty();
    if (haveRole == role &&
        (written || sharedByName || name.empty() || haveName == name))
      return success();
    InFlightDiagnostic diag =
        user->emitOpError()
        << "uses argument #" << index << " as " << role
        << (name.empty() ? "" : " '" + name + "'") << ", but it is already "
        << haveRole << (haveName.empty() ? "" : " '" + haveName + "'")
        << "; give it distopt.role and distopt.name (docs/step-abi.md)";
    diag.attachNote(arg.getLoc()) << "argument #" << index;
    return failure();
  }

  LogicalResult visitUpdate(OptimizerOpInterface op) {
    Value param = op.getParam();
    auto paramArg = dyn_cast<BlockArgument>(param);
    if (!paramArg || paramArg.getOwner() != &func.getBody().front())
      return success(); // a ZeRO shard or a bucket view: nothing to infer
    unsigned index = paramArg.getArgNumber();
    auto [role, name] = known(index);
    if (role.empty())
      role = abi::kParam;
    else if (role != abi::kParam && role != abi::kMainParam)
      return claim(op, paramArg, abi::kParam, "");
    // Its gradient and state are named after it: it needs a name.
    if (name.empty()) {
      name = "arg" + std::to_string(index);
      args[index] = {role, name};
    }
    // The argument its gradient carries unchanged in meaning: reduced,
    // clipped, taken element by element (cast, unscaled), packed into a
    // bucket and unpacked from the same slot.
    using Kind = GradientLink::Kind;
    const GradientChain &chain = *structure.chainOf(op);
    if (chain.onlyThrough(
            {Kind::Clip, Kind::Elementwise, Kind::Reduction, Kind::Bucket},
            {CollectiveKind::AllReduce}))
      if (BlockArgument grad = chain.source())
        if (failed(claim(op, grad, abi::kGrad, name)))
          return failure();
    for (auto [state, key] : llvm::zip(op.getState(), op.getStateKeys()))
      if (auto arg = dyn_cast<BlockArgument>(state))
        if (failed(claim(op, arg, abi::kState, name + "." + key.str())))
          return failure();
    // (A group's own rate is one of its hyperparameters.)
    if (auto lr = dyn_cast<BlockArgument>(op.getLr()))
      if (known(lr.getArgNumber()).first != abi::kHyperparameter &&
          failed(claim(op, lr, abi::kLearningRate, "")))
        return failure();
    if (auto step = dyn_cast<BlockArgument>(op.getStep()))
      if (failed(claim(op, step, abi::kStep, "")))
        return failure();
    // A hyperparameter given at run time, named after the first parameter
    // whose update reads it: `w.beta1`.
    for (auto [value, key] : llvm::zip_equal(
             op.getRuntimeHyperparameters(),
             op.getRuntimeHyperparameterNames().getAsValueRange<StringAttr>()))
      if (auto arg = dyn_cast<BlockArgument>(value)) {
        if (failed(
                claim(op, arg, abi::kHyperparameter, name + "." + key.str())))
          return failure();
        startValues.try_emplace(arg.getArgNumber(),
                                op.getCompiledHyperparameter(key));
      }
    return success();
  }

  /// The argument a returned value updates: an update's new parameter or
  /// state, or a select between such a value and the argument itself (a
  /// step skipped on overflow).
  std::optional<unsigned> updatedArgument(Value value) {
    auto result = dyn_cast<OpResult>(value);
    if (!result)
      return std::nullopt;
    Operation *op = result.getOwner();
    if (auto select = dyn_cast<arith::SelectOp>(op)) {
      if (auto arg = updatedArgument(select.getTrueValue()))
        return arg;
      return updatedArgument(select.getFalseValue());
    }
    auto update = dyn_cast<OptimizerOpInterface>(op);
    if (!update)
      return std::nullopt;
    // new_param <- param; new_state[i] <- state[i].
    Value source = result.getResultNumber() == 0
                       ? update.getParam()
                       : update.getState()[result.getResultNumber() - 1];
    auto arg = dyn_cast<BlockArgument>(source);
    if (!arg || arg.getOwner() != &func.getBody().front())
      return std::nullopt;
    return arg.getArgNumber();
  }

  LogicalResult run() {
    if (func.isExternal())
      return success();
    WalkResult walked = func.walk([&](OptimizerOpInterface op) {
      if (failed(visitUpdate(op)))
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return failure();
    MLIRContext *context = func.getContext();
    // A hyperparameter starts from its update's compiled value unless the
    // argument says otherwise.
    for (auto [index, value] : startValues)
      if (!func.getArgAttr(index, abi::kValue))
        func.setArgAttr(
            index, abi::kValue,
            FloatAttr::get(Float64Type::get(func.getContext()), value));
    for (auto &[index, roleName] : args) {
      func.setArgAttr(index, abi::kRole,
                      StringAttr::get(context, roleName.first));
      if (!roleName.second.empty())
        func.setArgAttr(index, abi::kName,
                        StringAttr::get(context, roleName.second));
    }
    // Every return (a function may have several blocks) must return the
    // update of the same argument for the result to take its role.
    SmallVector<func::ReturnOp> returns;
    for (Block &block : func.getBody())
      if (auto ret = dyn_cast_if_present<func::ReturnOp>(
              block.empty() ? nullptr : &block.back()))
        returns.push_back(ret);
    for (unsigned k = 0; k < func.getNumResults(); ++k) {
      if (!abi::getResultRole(func, k).empty() || returns.empty())
        continue;
      std::optional<unsigned> arg = updatedArgument(returns[0].getOperand(k));
      if (!arg || llvm::any_of(llvm::drop_begin(returns), [&](auto ret) {
            std::optional<unsigned> other = updatedArgument(ret.getOperand(k));
            return !other || *other != *arg;
          }))
        continue;
      auto [role, name] = known(*arg);
      if (role.empty())
        continue;
      func.setResultAttr(k, abi::kRole, StringAttr::get(context, role));
      if (!name.empty())
        func.setResultAttr(k, abi::kName, StringAttr::get(context, name));
    }
    // Dion's momentum under its low-rank sync is each rank's own, standing
    // for the ranks' mean: checkpoints must keep the mean.
    func.walk([&](DionUpdateOp dion) {
      auto momentum = dyn_cast<BlockArgument>(dion.getState()[0]);
      if (dion.getGroupAttr() && momentum &&
          momentum.getOwner() == &func.getBody().front() &&
          abi::getArgRole(func, momentum.getArgNumber()) == abi::kState)
        abi::markPerRankMean(func, momentum.getArgNumber());
    });
    return success();
  }
};

struct InferStepRolesPass
    : public distopt::impl::InferStepRolesPassBase<InferStepRolesPass> {
  void runOnOperation() override {
    Inference inference(getOperation(), getAnalysis<StepStructure>());
    if (failed(inference.run()))
      signalPassFailure();
  }
};

} // namespace
