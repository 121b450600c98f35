//===- SpecReader.h - a parameter spec, read and built ----------*- C++ -*-===//
//
// Private to lib/Target: what a spec says (read and checked by
// ReadParamSpec.cpp) and the step built from it (ImportParamSpec.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_TARGET_SPECREADER_H
#define DISTOPT_LIB_TARGET_SPECREADER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>

namespace mlir::distopt::spec {

namespace json = llvm::json;

/// A number as a person writes it (0.1, 1e-05), for messages.
inline std::string num(double value) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", value);
  return text;
}

struct Parameter {
  std::string name;
  SmallVector<int64_t> shape;
  FloatType elementType;
  /// The unit it belongs to (FSDP's wrapped module), if the spec says.
  std::optional<int64_t> unit;
};

/// torch.nn.utils.clip_grad_norm_ over all gradients.
struct Clipping {
  double maxNorm;
  double normType; // inf for the maximum norm
};

/// torch's GradScaler rule (dynamic) or a fixed scale (static).
struct LossScaling {
  bool dynamic;
  double initScale, growthFactor, backoffFactor;
  int64_t growthInterval;
};

/// A learning-rate schedule: the factor on the rate, as a LambdaLR lambda of
/// the scheduler's step count s (0 at the first step).
struct Schedule {
  enum Kind { Constant, WarmupCosine, WarmupLinear, Step } kind = Constant;
  int64_t warmupSteps = 0, totalSteps = 0, stepSize = 0;
  double minRatio = 0, gamma = 1;
};

/// The optimizer: the update op, its hyperparameter attributes and the torch
/// names of its per-parameter state tensors.
struct Optimizer {
  StringRef opName;
  /// The hyperparameters a step may take at run time (the op's
  /// getRuntimeHyperparameterKeys()).
  ArrayRef<StringRef> runtimeKeys;
  double lr = 1e-3;
  /// A parameter group's factor on the step's learning rate.
  double lrScale = 1.0;
  NamedAttrList hyperparameters;
  SmallVector<std::string> stateNames;
};

/// The step function's signature: which argument holds what, and the
/// arguments its results update.
struct StepSignature {
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  /// Per parameter: its parameter, gradient, f32 accumulator
  /// (grad_accumulation), fp32 main parameter (0 where none) and state.
  SmallVector<size_t> paramArg, gradArg, accumArg, mainArg;
  SmallVector<SmallVector<size_t>> stateArgs;
  std::optional<size_t> scaleArg, trackerArg, epochArg, lrArg;
  /// Per group (-1: the defaults): its rate, then its runtime keys.
  llvm::MapVector<int64_t, SmallVector<size_t>> hyperArgs;
  size_t stepArg = 0;
  /// The argument each fed-back result updates, then the reported ones.
  SmallVector<size_t> resultArgs;
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;

  size_t add(Type type, DictionaryAttr attrs) {
    argTypes.push_back(type);
    argAttrs.push_back(attrs);
    return argTypes.size() - 1;
  }
};

/// The values the step's body is built from, as it is being built.
struct StepValues {
  func::FuncOp func;
  Block *body = nullptr;
  /// What each argument becomes (the returned values come from here).
  SmallVector<Value> updated;
  SmallVector<Location> paramLocs;
  Value step, lambda;
  /// Each group's rate, computed once.
  llvm::DenseMap<int64_t, Value> rates;
  /// Whether every gradient was finite (loss scaling), the norm before
  /// clipping.
  Value finite, norm;

  Value arg(size_t i) const { return body->getArgument(i); }
};

class SpecReader {
public:
  SpecReader(MLIRContext *context, Location loc)
      : context(context), loc(loc), builder(context) {}

  OwningOpRef<ModuleOp> read(StringRef text);
  /// --describe-optimizer: the optimizer object `text` (`{"type": ...,
  /// <keys>}`) with every key the spec reads, given or defaulted, as
  /// `{"defaults": {"lr": .., <key>: ..}, "min_param_rank": N,
  /// "runtime_keys": [..], "state_keys": [..]}`: what a host library needs
  /// of an optimizer torch.optim has no class for (Muon in torch 1.13,
  /// Dion).
  LogicalResult describeOptimizer(StringRef text, raw_ostream &os);

private:
  /// Reports an error at the spec file, prefixed by the JSON path.
  InFlightDiagnostic error(const Twine &path) {
    return emitError(loc) << "param spec: " << path << ": ";
  }

  LogicalResult checkKeys(const json::Object &object, StringRef path,
                          ArrayRef<StringRef> allowed);
  FailureOr<double> getNumber(const json::Object &object, StringRef key,
                              StringRef path, std::optional<double> fallback);
  FailureOr<bool> getBool(const json::Object &object, StringRef key,
                          StringRef path);
  FailureOr<FloatType> parseDType(const json::Value *value, StringRef path);
  LogicalResult readOptimizer(const json::Object &object, Optimizer &optimizer,
                              StringRef path,
                              ArrayRef<StringRef> groupKeys = {});
  LogicalResult readParamGroups(const json::Value &value,
                                const json::Object &defaults);
  /// The parameters of each group whose update takes a higher rank
  /// (getMinParamRank: Muon's matrices) move to a group of AdamW of their
  /// own.
  LogicalResult addGroupsForVectors();
  LogicalResult readClipping(const json::Value &value);
  LogicalResult readSchedule(const json::Value &value);
  LogicalResult readLossScaling(const json::Value &value);
  LogicalResult readParameter(const json::Value &value, size_t index);
  OwningOpRef<ModuleOp> build();
  /// The schedule's factor (f64) at LambdaLR step `epoch` (i64).
  Value buildSchedule(Value epoch);

  // The stages of build(), in order.
  void annotate(ModuleOp module);
  StepSignature buildArguments();
  void addRuntimeHyperparameters(StepSignature &sig);
  void buildResults(StepSignature &sig);
  StepValues startBody(ModuleOp module, const StepSignature &sig);
  /// Group `g`'s rate (-1: the defaults').
  Value rateOf(StepValues &v, const StepSignature &sig, int64_t g);
  void checkRates(StepValues &v, const StepSignature &sig);
  SmallVector<Value> reduceGradients(StepValues &v, const StepSignature &sig,
                                     FlatSymbolRefAttr group);
  SmallVector<Value> prepareGradients(StepValues &v, const StepSignature &sig,
                                      ArrayRef<Value> reduced);
  void buildUpdate(StepValues &v, const StepSignature &sig, size_t i,
                   Value grad);
  void buildReturn(StepValues &v, const StepSignature &sig);

  bool hasMain(const Parameter &p) const {
    return mainParams && !p.elementType.isF32();
  }
  /// A parameter's group (-1: the defaults) and its optimizer.
  int64_t groupKey(size_t i) const { return groupOf.empty() ? -1 : groupOf[i]; }
  const Optimizer &optimizerOf(size_t i) const {
    return groupKey(i) < 0 ? optimizer : groups[groupKey(i)];
  }
  /// The argument a parameter's update reads and writes: its fp32 main
  /// parameter, or itself.
  size_t targetArg(const StepSignature &sig, size_t i) const {
    return hasMain(parameters[i]) ? sig.mainArg[i] : sig.paramArg[i];
  }

  MLIRContext *context;
  Location loc;
  OpBuilder builder;

  std::string modelName;
  int64_t worldSize = 0;
  bool mainParams = false;
  Optimizer optimizer;
  /// Parameter groups (param_groups): each parameter's group, or -1 for
  /// the defaults.
  SmallVector<Optimizer> groups;
  SmallVector<int64_t> groupOf;
  std::optional<Clipping> clipping;
  std::optional<LossScaling> lossScaling;
  std::optional<Schedule> schedule;
  /// Micro-batches per step (grad_accumulation).
  int64_t accumulation = 1;
  /// Every group's hyperparameters, its rate included, are step arguments
  /// of role hyperparameter (runtime_hyperparameters).
  bool runtimeHyperparameters = false;
  SmallVector<Parameter> parameters;
};

} // namespace mlir::distopt::spec

#endif // DISTOPT_LIB_TARGET_SPECREADER_H
