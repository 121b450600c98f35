//===- SpecReader.h - a parameter spec, read and built ----------*- C++ -*-===//
//
// Private to lib/Target: what a spec says (read and checked by
// ReadParamSpec.cpp) and the step built from it (ImportParamSpec.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_LIB_TARGET_SPECREADER_H
#define DISTOPT_LIB_TARGET_SPECREADER_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
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

class SpecReader {
public:
  SpecReader(MLIRContext *context, Location loc)
      : context(context), loc(loc), builder(context) {}

  OwningOpRef<ModuleOp> read(StringRef text);

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
  LogicalResult readClipping(const json::Value &value);
  LogicalResult readSchedule(const json::Value &value);
  LogicalResult readLossScaling(const json::Value &value);
  LogicalResult readParameter(const json::Value &value, size_t index);
  OwningOpRef<ModuleOp> build();
  /// The schedule's factor (f64) at LambdaLR step `epoch` (i64).
  Value buildSchedule(Value epoch);

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
