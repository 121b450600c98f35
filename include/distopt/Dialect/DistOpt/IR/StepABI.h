//===- StepABI.h - how a step function names its arguments ------*- C++ -*-===//
//
// A step function marks each argument and result with its role (parameter,
// gradient, optimizer state, ...) and the name of the parameter it belongs to.
// The importer writes these marks; the passes that change the signature (ZeRO
// sharding, PowerSGD) keep them up to date; the runtime builds its buffers
// from them. docs/step-abi.md describes the convention.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_STEPABI_H
#define DISTOPT_DIALECT_DISTOPT_IR_STEPABI_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace mlir::distopt::abi {

/// Argument and result attributes.
constexpr llvm::StringLiteral kRole = "distopt.role";
constexpr llvm::StringLiteral kName = "distopt.name";
/// On state that differs per rank: a unit attribute where each rank's copy
/// is its own (PowerSGD's error feedback: checkpoints keep every rank's),
/// or kPerRankMean where the copies stand for their mean (the momentum of
/// Dion's low-rank sync: checkpoints keep the mean, and every rank resumes
/// from it).
constexpr llvm::StringLiteral kPerRank = "distopt.per_rank";
constexpr llvm::StringLiteral kPerRankMean = "mean";
/// On a flat buffer holding several tensors (a ZeRO shard, a gradient
/// bucket): where each lies. docs/step-abi.md describes the entries.
constexpr llvm::StringLiteral kLayout = "distopt.layout";
/// Module attributes written by the importer.
constexpr llvm::StringLiteral kWorldSize = "distopt.world_size";
constexpr llvm::StringLiteral kModelName = "distopt.model";
constexpr llvm::StringLiteral kInitialLr = "distopt.lr";
/// The seed of the step's random draws (PowerSGD's Q), when one was chosen.
constexpr llvm::StringLiteral kSeed = "distopt.seed";
/// The number of model parameters (elements), before any sharding.
constexpr llvm::StringLiteral kNumParameters = "distopt.num_parameters";

/// On a step function ZeRO sharded with matrix-plan=auto and rates: the
/// cost model's prediction for each group of updates that read whole
/// matrices (--distopt-report prints it).
constexpr llvm::StringLiteral kMatrixPlans = "distopt.matrix_plans";

/// Roles. A parameter's gradient, main copy and state share its name; a
/// state tensor's name is the parameter's followed by `.` and torch's state
/// key (`exp_avg`, `momentum_buffer`, ...).
constexpr llvm::StringLiteral kParam = "param";
constexpr llvm::StringLiteral kGrad = "grad";
constexpr llvm::StringLiteral kMainParam = "main_param";
constexpr llvm::StringLiteral kState = "state";
constexpr llvm::StringLiteral kLearningRate = "lr";
constexpr llvm::StringLiteral kStep = "step";
/// A hyperparameter the step reads at run time (an f64 scalar, named
/// `<group>.<key>`: `group0.beta1`), starting from its `distopt.value`; the
/// driver keeps it from step to step and a program may change it between
/// steps (a scheduler's rate, momentum or betas).
constexpr llvm::StringLiteral kHyperparameter = "hyperparameter";
/// A gradient reduced to this rank's shard by a reduce entry of a split
/// step (--distopt-split-step), for its update entry to read.
constexpr llvm::StringLiteral kReducedGrad = "reduced_grad";
/// A ZeRO-3 flat parameter gathered whole by a gather entry of a split step
/// (--distopt-split-step=gather-params), for the forward and backward
/// passes to read: a buffer the driver binds while the unit runs.
constexpr llvm::StringLiteral kGatheredParam = "gathered_param";
/// On the entry functions of a split step: "reduce" (with distopt.reduces,
/// the gradient argument it reduces), "gather" (with distopt.gathers, the
/// parameter shard it gathers) or "update".
constexpr llvm::StringLiteral kEntry = "distopt.entry";
constexpr llvm::StringLiteral kReduces = "distopt.reduces";
constexpr llvm::StringLiteral kGathers = "distopt.gathers";
/// On a parameter's arguments (param, grad, main_param, grad_accum): the
/// unit it belongs to (FSDP's wrapped module): under ZeRO-3 the tensors of
/// different units never share a flat buffer.
constexpr llvm::StringLiteral kUnit = "distopt.unit";
/// On a scalar state or hyperparameter argument: the value it starts from.
constexpr llvm::StringLiteral kValue = "distopt.value";
/// On a state tensor: how the driver fills it before the first step
/// ("zeros", the default; "randn"; "randn_each_step").
constexpr llvm::StringLiteral kInit = "distopt.init";
/// On a ZeRO shard of a flat buffer: the padded length of the whole.
constexpr llvm::StringLiteral kShardOf = "distopt.shard_of";
/// Results only: a gradient norm the step reports, and whether it skipped
/// the update (an i1; the driver's step counter does not advance).
constexpr llvm::StringLiteral kLoss = "loss";
constexpr llvm::StringLiteral kSkipped = "skipped";
/// The gradient accumulated over a step's earlier micro-batches (in f32 for
/// bf16/f16 gradients): the driver adds each micro-batch's gradient into
/// it, the step reads it with the last one, the driver zeroes it after.
constexpr llvm::StringLiteral kGradAccum = "grad_accum";
/// Module: micro-batches per step (gradient accumulation).
constexpr llvm::StringLiteral kGradAccumulation = "distopt.grad_accumulation";

/// What the lowering marks (docs/lowering.md): on an entry point, which
/// argument holds each result (--distopt-mark-in-place-results) and that
/// it returns its status last (--distopt-return-status); on the copy a
/// bufferized `*_start` makes of its input (--distopt-async-in-place).
constexpr llvm::StringLiteral kInPlaceResults = "distopt.in_place_results";
constexpr llvm::StringLiteral kReturnsStatus = "distopt.returns_status";
constexpr llvm::StringLiteral kRequestInput = "distopt.request_input";
/// On the scf.for that an `owned_by` becomes until bufferization: it runs
/// once on the owner and not at all elsewhere (--distopt-lower-local-ops),
/// and --distopt-owner-loops-to-branches makes it an scf.if again.
constexpr llvm::StringLiteral kOwnerLoop = "distopt.owner_loop";

/// The role of argument `index` of `func`, or "" when it has none.
inline llvm::StringRef getArgRole(FunctionOpInterface func, unsigned index) {
  if (auto role = func.getArgAttrOfType<StringAttr>(index, kRole))
    return role.getValue();
  return {};
}

/// The role of result `index` of `func`, or "" when it has none.
inline llvm::StringRef getResultRole(FunctionOpInterface func, unsigned index) {
  if (auto role = func.getResultAttrOfType<StringAttr>(index, kRole))
    return role.getValue();
  return {};
}

/// The parameter name of argument `index` of `func`, or "".
inline llvm::StringRef getArgName(FunctionOpInterface func, unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, kName))
    return name.getValue();
  return {};
}

/// The parameter name of result `index` of `func`, or "".
inline llvm::StringRef getResultName(FunctionOpInterface func, unsigned index) {
  if (auto name = func.getResultAttrOfType<StringAttr>(index, kName))
    return name.getValue();
  return {};
}

/// Whether result `result` of `func` is the update of argument `arg`: the
/// same role and name (or neither has them). The runtime feeds it back there.
inline bool updatesArgument(FunctionOpInterface func, unsigned result,
                            unsigned arg) {
  return getResultRole(func, result) == getArgRole(func, arg) &&
         func.getResultAttr(result, kName) == func.getArgAttr(arg, kName);
}

/// Marks argument `arg` of `func`, and the results that update it, as
/// per-rank copies that stand for their mean (kPerRankMean).
inline void markPerRankMean(FunctionOpInterface func, unsigned arg) {
  auto mean = StringAttr::get(func.getContext(), kPerRankMean);
  func.setArgAttr(arg, kPerRank, mean);
  for (unsigned k = 0, e = func.getNumResults(); k < e; ++k)
    if (!getResultRole(func, k).empty() && updatesArgument(func, k, arg))
      func.setResultAttr(k, kPerRank, mean);
}

/// Whether the step owns an argument of this role for the call and may
/// update it in place (docs/step-abi.md).
inline bool mayUpdateInPlace(llvm::StringRef role) {
  return role == kParam || role == kMainParam || role == kState ||
         role == kGrad;
}

/// One entry of a `distopt.layout`: tensor `name` of `shape` starts at
/// element `offset`; `owner` is the rank holding it (greedy sharding only).
inline DictionaryAttr layoutEntry(Builder &builder, llvm::StringRef name,
                                  int64_t offset, llvm::ArrayRef<int64_t> shape,
                                  std::optional<int64_t> owner = std::nullopt) {
  NamedAttrList entry;
  entry.set("name", builder.getStringAttr(name));
  entry.set("offset", builder.getI64IntegerAttr(offset));
  entry.set("shape", builder.getDenseI64ArrayAttr(shape));
  if (owner)
    entry.set("owner", builder.getI64IntegerAttr(*owner));
  return entry.getDictionary(builder.getContext());
}

} // namespace mlir::distopt::abi

#endif // DISTOPT_DIALECT_DISTOPT_IR_STEPABI_H
