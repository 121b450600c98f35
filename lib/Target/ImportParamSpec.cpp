//===- ImportParamSpec.cpp - parameter spec (JSON) to a step ----*- C++ -*-===//
//
// Reads a parameter spec and builds the plain data-parallel step: for each
// parameter, in spec order, an all_reduce sum of its gradient, the division
// by the world size, and the optimizer update (on an fp32 main copy when the
// spec asks for main parameters). With loss scaling, the reduced gradients
// are checked for overflow (the step is skipped on every rank if any is
// not finite) and unscaled; with clipping, they are clipped by their global
// norm before the updates. Every unknown key and every malformed value is an
// error that names its JSON path; nothing is silently ignored.
//
//===----------------------------------------------------------------------===//

#include "distopt/Target/ParamSpec.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
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
namespace json = llvm::json;

namespace {

/// A number as a person writes it (0.1, 1e-05), for messages.
std::string num(double value) {
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
  SmallVector<Parameter> parameters;
};

} // namespace

LogicalResult SpecReader::checkKeys(const json::Object &object, StringRef path,
                                    ArrayRef<StringRef> allowed) {
  for (const auto &entry : object) {
    StringRef key = entry.first;
    if (!llvm::is_contained(allowed, key)) {
      std::string list;
      llvm::raw_string_ostream os(list);
      llvm::interleaveComma(allowed, os);
      return error(path) << "unknown key '" << key << "' (expected one of "
                         << list << ")";
    }
  }
  return success();
}

FailureOr<double> SpecReader::getNumber(const json::Object &object,
                                        StringRef key, StringRef path,
                                        std::optional<double> fallback) {
  const json::Value *value = object.get(key);
  if (!value) {
    if (fallback)
      return *fallback;
    return error(path) << "missing '" << key << "'";
  }
  std::optional<double> number = value->getAsNumber();
  if (!number || !std::isfinite(*number))
    return error(path + "." + key) << "expected a finite number";
  return *number;
}

FailureOr<bool> SpecReader::getBool(const json::Object &object, StringRef key,
                                    StringRef path) {
  const json::Value *value = object.get(key);
  if (!value)
    return false;
  std::optional<bool> flag = value->getAsBoolean();
  if (!flag)
    return error(path + "." + key) << "expected true or false";
  return *flag;
}

FailureOr<FloatType> SpecReader::parseDType(const json::Value *value,
                                            StringRef path) {
  std::optional<StringRef> name = value ? value->getAsString() : std::nullopt;
  if (!name)
    return error(path) << "expected a dtype string (f32, bf16 or f16)";
  if (*name == "f32" || *name == "float32")
    return cast<FloatType>(builder.getF32Type());
  if (*name == "bf16" || *name == "bfloat16")
    return cast<FloatType>(builder.getBF16Type());
  if (*name == "f16" || *name == "float16")
    return cast<FloatType>(builder.getF16Type());
  return error(path) << "unsupported dtype '" << *name
                     << "' (expected f32, bf16 or f16)";
}

LogicalResult SpecReader::readOptimizer(const json::Object &object,
                                        Optimizer &optimizer, StringRef path,
                                        ArrayRef<StringRef> groupKeys) {
  // The keys a type allows, and those of a parameter group.
  auto keys = [&](std::initializer_list<StringRef> own) {
    SmallVector<StringRef> all(own);
    llvm::append_range(all, groupKeys);
    return all;
  };
  std::optional<StringRef> type = object.getString("type");
  if (!type)
    return error(path + ".type")
           << "expected one of sgd, adam, adamw, rmsprop, adagrad";
  NamedAttrList &attrs = optimizer.hyperparameters;
  auto setF64 = [&](StringRef attr, double value) {
    attrs.set(attr, builder.getF64FloatAttr(value));
  };
  auto number = [&](StringRef key, double fallback) {
    return getNumber(object, key, path, fallback);
  };
  // Reads `key` into attribute `attr` when present.
  auto optionalF64 = [&](StringRef key, StringRef attr) -> LogicalResult {
    if (!object.get(key))
      return success();
    FailureOr<double> value = number(key, 0);
    if (failed(value))
      return failure();
    setF64(attr, *value);
    return success();
  };
  auto flag = [&](StringRef key) -> FailureOr<bool> {
    FailureOr<bool> value = getBool(object, key, path);
    if (succeeded(value) && *value)
      attrs.set(key, builder.getUnitAttr());
    return value;
  };

  FailureOr<double> lr = number("lr", 1e-3);
  if (succeeded(lr) && *lr < 0)
    return error(path + ".lr") << "must be non-negative (torch.optim's "
                                  "rule), got "
                               << *lr;
  if (failed(lr) || failed(flag("maximize")) ||
      failed(optionalF64("weight_decay", "weight_decay")))
    return failure();
  optimizer.lr = *lr;

  if (*type == "sgd") {
    if (failed(checkKeys(object, path,
                         keys({"type", "lr", "momentum", "dampening",
                               "weight_decay", "nesterov", "maximize"}))) ||
        failed(optionalF64("momentum", "momentum")) ||
        failed(optionalF64("dampening", "dampening")) ||
        failed(flag("nesterov")))
      return failure();
    optimizer.opName = SGDUpdateOp::getOperationName();
    if (FailureOr<double> momentum = number("momentum", 0.0);
        succeeded(momentum) && *momentum != 0)
      optimizer.stateNames.push_back("momentum_buffer");
    return success();
  }
  if (*type == "adam" || *type == "adamw") {
    if (failed(checkKeys(object, path,
                         keys({"type", "lr", "betas", "eps", "weight_decay",
                               "amsgrad", "maximize"}))) ||
        failed(optionalF64("eps", "eps")))
      return failure();
    if (const json::Value *betas = object.get("betas")) {
      const json::Array *pair = betas->getAsArray();
      if (!pair || pair->size() != 2 || !(*pair)[0].getAsNumber() ||
          !(*pair)[1].getAsNumber())
        return error(path + ".betas") << "expected [beta1, beta2]";
      setF64("beta1", *(*pair)[0].getAsNumber());
      setF64("beta2", *(*pair)[1].getAsNumber());
    }
    FailureOr<bool> amsgrad = flag("amsgrad");
    if (failed(amsgrad))
      return failure();
    optimizer.opName = *type == "adam" ? AdamUpdateOp::getOperationName()
                                       : AdamWUpdateOp::getOperationName();
    optimizer.stateNames = {"exp_avg", "exp_avg_sq"};
    if (*amsgrad)
      optimizer.stateNames.push_back("max_exp_avg_sq");
    return success();
  }
  if (*type == "rmsprop") {
    if (failed(checkKeys(object, path,
                         keys({"type", "lr", "alpha", "eps", "weight_decay",
                               "momentum", "centered", "maximize"}))) ||
        failed(optionalF64("alpha", "alpha")) ||
        failed(optionalF64("eps", "eps")) ||
        failed(optionalF64("momentum", "momentum")))
      return failure();
    FailureOr<bool> centered = flag("centered");
    FailureOr<double> momentum = number("momentum", 0.0);
    if (failed(centered) || failed(momentum))
      return failure();
    optimizer.opName = RMSpropUpdateOp::getOperationName();
    optimizer.stateNames = {"square_avg"};
    if (*momentum > 0)
      optimizer.stateNames.push_back("momentum_buffer");
    if (*centered)
      optimizer.stateNames.push_back("grad_avg");
    return success();
  }
  if (*type == "adagrad") {
    if (failed(checkKeys(object, path,
                         keys({"type", "lr", "lr_decay", "eps", "weight_decay",
                               "initial_accumulator_value", "maximize"}))) ||
        failed(optionalF64("lr_decay", "lr_decay")) ||
        failed(optionalF64("eps", "eps")))
      return failure();
    if (failed(optionalF64("initial_accumulator_value",
                           "initial_accumulator_value")))
      return failure();
    optimizer.opName = AdagradUpdateOp::getOperationName();
    optimizer.stateNames = {"sum"};
    return success();
  }
  return error(path + ".type")
         << "unknown optimizer '" << *type
         << "' (expected sgd, adam, adamw, rmsprop or adagrad)";
}

LogicalResult SpecReader::readParamGroups(const json::Value &value,
                                          const json::Object &defaults) {
  const json::Array *list = value.getAsArray();
  if (!list)
    return error("param_groups") << "expected a list of groups";
  groupOf.assign(parameters.size(), -1);
  for (auto [g, entry] : llvm::enumerate(*list)) {
    std::string path = ("param_groups[" + Twine(g) + "]").str();
    const json::Object *group = entry.getAsObject();
    if (!group)
      return error(path) << "expected an object";
    if (group->get("lr"))
      return error(path + ".lr")
             << "a group scales the step's learning rate: use lr_scale";
    if (group->get("type"))
      return error(path + ".type")
             << "every group uses the optimizer's type; give only "
                "hyperparameters that differ";
    // The group's optimizer: the defaults with its overrides.
    json::Object merged = defaults;
    for (const auto &[key, v] : *group)
      merged[key] = v;
    Optimizer optimizerOfGroup;
    if (failed(readOptimizer(merged, optimizerOfGroup, path,
                             {"params", "lr_scale"})))
      return failure();
    FailureOr<double> scale = getNumber(*group, "lr_scale", path, 1.0);
    if (failed(scale))
      return failure();
    if (*scale < 0)
      return error(path + ".lr_scale")
             << "must be non-negative, got " << num(*scale);
    optimizerOfGroup.lrScale = *scale;
    groups.push_back(std::move(optimizerOfGroup));

    const json::Array *patterns = group->getArray("params");
    if (!patterns || patterns->empty())
      return error(path + ".params")
             << "expected a non-empty list of names or glob patterns";
    for (auto [k, patternValue] : llvm::enumerate(*patterns)) {
      std::string at = (path + ".params[" + Twine(k) + "]").str();
      std::optional<StringRef> text = patternValue.getAsString();
      if (!text)
        return error(at) << "expected a name or glob pattern";
      llvm::Expected<llvm::GlobPattern> pattern =
          llvm::GlobPattern::create(*text);
      if (!pattern)
        return error(at) << llvm::toString(pattern.takeError());
      bool matched = false;
      for (auto [i, p] : llvm::enumerate(parameters)) {
        if (!pattern->match(p.name))
          continue;
        matched = true;
        if (groupOf[i] >= 0 && groupOf[i] != static_cast<int64_t>(g))
          return error(at) << "parameter '" << p.name << "' is in param_groups["
                           << groupOf[i] << "] already";
        groupOf[i] = g;
      }
      if (!matched)
        return error(at) << "'" << *text << "' matches no parameter";
    }
  }
  return success();
}

LogicalResult SpecReader::readSchedule(const json::Value &value) {
  const json::Object *object = value.getAsObject();
  std::optional<StringRef> type =
      object ? object->getString("type") : std::nullopt;
  StringRef path = "lr_schedule";
  Schedule s;
  if (type == "constant")
    s.kind = Schedule::Constant;
  else if (type == "warmup_cosine")
    s.kind = Schedule::WarmupCosine;
  else if (type == "warmup_linear")
    s.kind = Schedule::WarmupLinear;
  else if (type == "step")
    s.kind = Schedule::Step;
  else
    return error(path + ".type") << "expected \"constant\", "
                                    "\"warmup_cosine\", \"warmup_linear\" "
                                    "or \"step\"";
  auto integer = [&](StringRef key, int64_t low,
                     int64_t &out) -> LogicalResult {
    const json::Value *v = object->get(key);
    std::optional<int64_t> n = v ? v->getAsInteger() : std::nullopt;
    if (!v)
      return error(path) << "missing '" << key << "'";
    if (!n || *n < low)
      return error(path + "." + key)
             << "expected an integer of at least " << low;
    out = *n;
    return success();
  };
  if (s.kind == Schedule::Constant)
    return failed(checkKeys(*object, path, {"type"}))
               ? failure()
               : (schedule = s, success());
  if (s.kind == Schedule::Step) {
    if (failed(checkKeys(*object, path, {"type", "step_size", "gamma"})) ||
        failed(integer("step_size", 1, s.stepSize)))
      return failure();
    FailureOr<double> gamma = getNumber(*object, "gamma", path, 0.1);
    if (failed(gamma))
      return failure();
    if (*gamma <= 0)
      return error(path + ".gamma") << "must be positive, got " << num(*gamma);
    s.gamma = *gamma;
    schedule = s;
    return success();
  }
  if (failed(checkKeys(*object, path,
                       {"type", "warmup_steps", "total_steps", "min_lr"})) ||
      failed(integer("warmup_steps", 0, s.warmupSteps)) ||
      failed(integer("total_steps", 1, s.totalSteps)))
    return failure();
  if (s.warmupSteps > s.totalSteps)
    return error(path + ".warmup_steps")
           << "the warmup (" << s.warmupSteps << " steps) is longer than the "
           << "schedule (" << s.totalSteps << ")";
  FailureOr<double> minLr = getNumber(*object, "min_lr", path, 0.0);
  if (failed(minLr))
    return failure();
  if (*minLr < 0 || *minLr > optimizer.lr)
    return error(path + ".min_lr")
           << "must be from 0 to optimizer.lr (" << num(optimizer.lr)
           << "), got " << num(*minLr);
  s.minRatio = optimizer.lr > 0 ? *minLr / optimizer.lr : 0;
  schedule = s;
  return success();
}

LogicalResult SpecReader::readClipping(const json::Value &value) {
  const json::Object *object = value.getAsObject();
  if (!object)
    return error("clip_grad_norm") << "expected an object";
  if (failed(checkKeys(*object, "clip_grad_norm", {"max_norm", "norm_type"})))
    return failure();
  FailureOr<double> maxNorm =
      getNumber(*object, "max_norm", "clip_grad_norm", std::nullopt);
  if (failed(maxNorm))
    return failure();
  if (*maxNorm <= 0)
    return error("clip_grad_norm.max_norm")
           << "must be positive, got " << num(*maxNorm);
  double normType = 2.0;
  if (const json::Value *type = object->get("norm_type")) {
    std::optional<double> number = type->getAsNumber();
    if (type->getAsString() == "inf")
      normType = std::numeric_limits<double>::infinity();
    else if (number && std::isfinite(*number) && *number > 0)
      normType = *number;
    else
      return error("clip_grad_norm.norm_type")
             << "expected a positive number or \"inf\"";
  }
  clipping = Clipping{*maxNorm, normType};
  return success();
}

LogicalResult SpecReader::readLossScaling(const json::Value &value) {
  const json::Object *object = value.getAsObject();
  std::optional<StringRef> type =
      object ? object->getString("type") : std::nullopt;
  if (!type || (*type != "dynamic" && *type != "static"))
    return error("loss_scaling.type") << "expected \"dynamic\" or \"static\"";
  StringRef path = "loss_scaling";
  LossScaling scaling{*type == "dynamic", 65536.0, 2.0, 0.5, 2000};
  auto positive = [&](StringRef key, double fallback,
                      double &out) -> LogicalResult {
    FailureOr<double> number = getNumber(*object, key, path, fallback);
    if (failed(number))
      return failure();
    // An f32 scale, and a normal one: its reciprocal must be finite.
    if (!(*number >= 1.17549435e-38 && *number <= 3.4e38))
      return error(path + "." + key)
             << "must be a positive, normal f32 number (from 1.2e-38 to "
                "3.4e38), got "
             << num(*number);
    out = *number;
    return success();
  };
  if (!scaling.dynamic) {
    if (failed(checkKeys(*object, path, {"type", "scale"})))
      return failure();
    if (!object->get("scale"))
      return error(path) << "missing 'scale'";
    if (failed(positive("scale", 1.0, scaling.initScale)))
      return failure();
    lossScaling = scaling;
    return success();
  }
  if (failed(checkKeys(*object, path,
                       {"type", "init_scale", "growth_factor", "backoff_factor",
                        "growth_interval"})) ||
      failed(positive("init_scale", 65536.0, scaling.initScale)) ||
      failed(positive("growth_factor", 2.0, scaling.growthFactor)) ||
      failed(positive("backoff_factor", 0.5, scaling.backoffFactor)))
    return failure();
  if (scaling.growthFactor <= 1)
    return error(path + ".growth_factor")
           << "must be greater than 1, got " << num(scaling.growthFactor);
  if (scaling.backoffFactor >= 1)
    return error(path + ".backoff_factor")
           << "must be less than 1, got " << num(scaling.backoffFactor);
  if (const json::Value *interval = object->get("growth_interval")) {
    std::optional<int64_t> steps = interval->getAsInteger();
    if (!steps || *steps < 1)
      return error(path + ".growth_interval") << "expected a positive integer";
    scaling.growthInterval = *steps;
  }
  lossScaling = scaling;
  return success();
}

LogicalResult SpecReader::readParameter(const json::Value &value,
                                        size_t index) {
  std::string path = ("parameters[" + Twine(index) + "]").str();
  const json::Object *object = value.getAsObject();
  if (!object)
    return error(path) << "expected an object";
  if (failed(checkKeys(*object, path, {"name", "shape", "dtype"})))
    return failure();
  Parameter param;
  std::optional<StringRef> name = object->getString("name");
  if (!name || name->empty())
    return error(path + ".name") << "expected a non-empty string";
  param.name = name->str();
  const json::Array *shape = object->getArray("shape");
  if (!shape)
    return error(path + ".shape") << "expected a list of positive integers";
  for (const json::Value &dim : *shape) {
    std::optional<int64_t> size = dim.getAsInteger();
    if (!size || *size < 1)
      return error(path + ".shape") << "expected a list of positive integers";
    param.shape.push_back(*size);
  }
  if (::distopt::checkedNumElements(param.shape) < 0)
    return error(path + ".shape")
           << "more than 2^53 elements (the most a tensor may have)";
  FailureOr<FloatType> type = parseDType(object->get("dtype"), path + ".dtype");
  if (failed(type))
    return failure();
  param.elementType = *type;
  parameters.push_back(std::move(param));
  return success();
}

OwningOpRef<ModuleOp> SpecReader::read(StringRef text) {
  llvm::Expected<json::Value> parsed = parseJSON(text);
  if (!parsed) {
    error("JSON") << llvm::toString(parsed.takeError());
    return nullptr;
  }
  const json::Object *root = parsed->getAsObject();
  if (!root) {
    error("spec") << "expected a JSON object";
    return nullptr;
  }
  if (failed(checkKeys(*root, "spec",
                       {"model", "world_size", "optimizer", "main_params",
                        "parameters", "param_groups", "clip_grad_norm",
                        "loss_scaling", "lr_schedule", "grad_accumulation"})))
    return nullptr;
  if (const json::Value *clip = root->get("clip_grad_norm"))
    if (failed(readClipping(*clip)))
      return nullptr;
  if (const json::Value *scaling = root->get("loss_scaling"))
    if (failed(readLossScaling(*scaling)))
      return nullptr;
  modelName = root->getString("model").value_or("model").str();
  std::optional<int64_t> world = root->getInteger("world_size");
  if (!world || *world < 1 || *world > ::distopt::kMaxWorldSize) {
    error("world_size") << "expected an integer from 1 to "
                        << ::distopt::kMaxWorldSize;
    return nullptr;
  }
  worldSize = *world;
  FailureOr<bool> main = getBool(*root, "main_params", "spec");
  if (failed(main))
    return nullptr;
  mainParams = *main;
  const json::Object *opt = root->getObject("optimizer");
  if (!opt) {
    error("optimizer") << "expected an object";
    return nullptr;
  }
  if (failed(readOptimizer(*opt, optimizer, "optimizer")))
    return nullptr;
  const json::Array *params = root->getArray("parameters");
  if (!params || params->empty()) {
    error("parameters") << "expected a non-empty list";
    return nullptr;
  }
  llvm::StringSet<> names;
  int64_t total = 0;
  for (auto [index, value] : llvm::enumerate(*params)) {
    if (failed(readParameter(value, index)))
      return nullptr;
    total += ShapedType::getNumElements(parameters.back().shape);
    if (total > ::distopt::kMaxElements) {
      error("parameters[" + Twine(index) + "]")
          << "the parameters up to here have more than 2^53 elements (the "
             "most a model may have)";
      return nullptr;
    }
    if (!names.insert(parameters.back().name).second) {
      error("parameters[" + Twine(index) + "].name")
          << "duplicate parameter name '" << parameters.back().name << "'";
      return nullptr;
    }
  }
  if (const json::Value *groupList = root->get("param_groups"))
    if (failed(readParamGroups(*groupList, *opt)))
      return nullptr;
  if (const json::Value *k = root->get("grad_accumulation")) {
    std::optional<int64_t> micro = k->getAsInteger();
    if (!micro || *micro < 1 || *micro > (int64_t(1) << 30)) {
      error("grad_accumulation")
          << "expected a number of micro-batches from 1 to 2^30";
      return nullptr;
    }
    accumulation = *micro;
  }
  if (const json::Value *lrSchedule = root->get("lr_schedule"))
    if (failed(readSchedule(*lrSchedule)))
      return nullptr;
  return build();
}

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
  // would move every update away from torch's.
  size_t lrArg = addArg(builder.getF64Type(), abi::kLearningRate, "");
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

  // First every gradient is reduced (in a training step this happens during
  // the backward pass), then the optimizer updates every parameter.
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
    auto gradType = cast<RankedTensorType>(local.getType());
    auto splat = [&](double value) {
      return arith::ConstantOp::create(
          builder, paramLoc,
          DenseElementsAttr::get(
              gradType,
              builder.getFloatAttr(gradType.getElementType(), value)));
    };
    Value sum = AllReduceOp::create(
        builder, paramLoc, gradType, local, groupRef,
        /*wire_type=*/nullptr,
        ReductionKindAttr::get(context, ReductionKind::Sum), /*scale=*/nullptr);
    reduced[i] = arith::DivFOp::create(builder, paramLoc, sum,
                                       splat(static_cast<double>(worldSize)));
    // The mean over the micro-batches too.
    if (accumulation > 1)
      reduced[i] =
          arith::DivFOp::create(builder, paramLoc, reduced[i],
                                splat(static_cast<double>(accumulation)));
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

  Value lr = body->getArgument(lrArg), step = body->getArgument(stepArg);
  Value lambda =
      schedule ? buildSchedule(body->getArgument(*epochArg)) : Value();
  if (epochArg)
    updated[*epochArg] = arith::AddIOp::create(
        builder, loc, body->getArgument(*epochArg),
        arith::ConstantOp::create(builder, loc, builder.getI64IntegerAttr(1)));
  // A group's rate: the step's times its lr_scale, times the schedule's
  // factor (in that order, as LambdaLR multiplies a group's initial rate),
  // computed once.
  llvm::DenseMap<const Optimizer *, Value> rates;
  auto lrOf = [&](const Optimizer &opt) {
    Value &rate = rates[&opt];
    if (rate)
      return rate;
    rate = lr;
    if (opt.lrScale != 1.0)
      rate = arith::MulFOp::create(
          builder, loc, rate,
          arith::ConstantOp::create(builder, loc,
                                    builder.getF64FloatAttr(opt.lrScale)));
    if (lambda)
      rate = arith::MulFOp::create(builder, loc, rate, lambda);
    return rate;
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
    operands.push_back(lrOf(opt));
    operands.push_back(step);
    SmallVector<Type> updateTypes(1 + stateArgs[i].size(), targetType);
    OperationState state(paramLoc, opt.opName);
    state.addOperands(operands);
    state.addTypes(updateTypes);
    state.addAttributes(opt.hyperparameters);
    Operation *update = builder.create(state);

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
  if (schedule)
    results.push_back(lrOf(optimizer));
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
