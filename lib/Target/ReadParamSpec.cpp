//===- ReadParamSpec.cpp - a parameter spec (JSON), read and checked -----===//
//
// Every key of a spec (docs/param-spec.md), checked: an unknown key or a
// malformed value is an error that names its JSON path.
//
//===----------------------------------------------------------------------===//

#include "SpecReader.h"

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
using namespace mlir::distopt::spec;
using ::distopt::parseJSON;

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

static StringRef specTypeOf(RegisteredOperationName name) {
  return name.getInterface<OptimizerOpInterface>()->getSpecType();
}

/// The update ops (OptimizerOpInterface), sorted by their spec type
/// (`optimizer.type`). (The context's list is in no fixed order, and its
/// by-dialect filter found none of them here.)
static SmallVector<RegisteredOperationName> optimizerOps(MLIRContext *context) {
  context->getOrLoadDialect<DistOptDialect>();
  SmallVector<RegisteredOperationName> ops;
  for (RegisteredOperationName name : context->getRegisteredOperations())
    if (name.hasInterface<OptimizerOpInterface>())
      ops.push_back(name);
  llvm::sort(ops, [](RegisteredOperationName a, RegisteredOperationName b) {
    return specTypeOf(a) < specTypeOf(b);
  });
  return ops;
}

LogicalResult SpecReader::readOptimizer(const json::Object &object,
                                        Optimizer &optimizer, StringRef path,
                                        ArrayRef<StringRef> groupKeys) {
  SmallVector<RegisteredOperationName> ops = optimizerOps(builder.getContext());
  std::string types;
  for (auto [i, name] : llvm::enumerate(ops))
    types += (i == 0                ? ""
              : i + 1 == ops.size() ? " or "
                                    : ", ") +
             specTypeOf(name).str();
  std::optional<StringRef> type = object.getString("type");
  if (!type)
    return error(path + ".type") << "expected one of " << types;
  const auto *found = llvm::find_if(ops, [&](RegisteredOperationName name) {
    return specTypeOf(name) == *type;
  });
  if (found == ops.end())
    return error(path + ".type")
           << "unknown optimizer '" << *type << "' (expected " << types << ")";
  const OptimizerOpInterface::Concept *update =
      found->getInterface<OptimizerOpInterface>();

  FailureOr<double> lr = getNumber(object, "lr", path, 1e-3);
  if (succeeded(lr) && *lr < 0)
    return error(path + ".lr") << "must be non-negative (torch.optim's "
                                  "rule), got "
                               << *lr;
  if (failed(lr))
    return failure();
  optimizer.lr = *lr;

  // The keys it reads, as the op's attributes.
  ArrayRef<OptimizerSpecKey> specKeys = update->getSpecKeys();
  SmallVector<StringRef> allowed = {"type", "lr"};
  for (const OptimizerSpecKey &key : specKeys)
    allowed.push_back(key.key);
  llvm::append_range(allowed, groupKeys);
  if (failed(checkKeys(object, path, allowed)))
    return failure();
  NamedAttrList &attrs = optimizer.hyperparameters;
  for (const OptimizerSpecKey &key : specKeys) {
    const json::Value *value = object.get(key.key);
    if (!value)
      continue;
    switch (key.kind) {
    case OptimizerSpecKey::Number: {
      FailureOr<double> number = getNumber(object, key.key, path, 0);
      if (failed(number))
        return failure();
      attrs.set(key.key, builder.getF64FloatAttr(*number));
      break;
    }
    case OptimizerSpecKey::Flag: {
      FailureOr<bool> flag = getBool(object, key.key, path);
      if (failed(flag))
        return failure();
      if (*flag)
        attrs.set(key.key, builder.getUnitAttr());
      break;
    }
    case OptimizerSpecKey::Pair: {
      const json::Array *pair = value->getAsArray();
      if (!pair || pair->size() != 2 || !(*pair)[0].getAsNumber() ||
          !(*pair)[1].getAsNumber())
        return error(path + "." + key.key)
               << "expected [" << key.first << ", " << key.second << "]";
      attrs.set(key.first, builder.getF64FloatAttr(*(*pair)[0].getAsNumber()));
      attrs.set(key.second, builder.getF64FloatAttr(*(*pair)[1].getAsNumber()));
      break;
    }
    case OptimizerSpecKey::Bool: {
      FailureOr<bool> flag = getBool(object, key.key, path);
      if (failed(flag))
        return failure();
      attrs.set(key.key, builder.getBoolAttr(*flag));
      break;
    }
    case OptimizerSpecKey::Integer: {
      std::optional<int64_t> integer = value->getAsInteger();
      if (!integer)
        return error(path + "." + key.key) << "expected an integer";
      attrs.set(key.key, builder.getI64IntegerAttr(*integer));
      break;
    }
    case OptimizerSpecKey::Numbers: {
      const json::Array *list = value->getAsArray();
      SmallVector<double, 3> numbers;
      if (list)
        for (const json::Value &item : *list)
          if (std::optional<double> number = item.getAsNumber();
              number && std::isfinite(*number))
            numbers.push_back(*number);
      if (!list || list->size() != 3 || numbers.size() != 3)
        return error(path + "." + key.key)
               << "expected [" << key.first << ", " << key.second << ", "
               << key.third << "], three finite numbers";
      attrs.set(key.key, builder.getDenseF64ArrayAttr(numbers));
      break;
    }
    case OptimizerSpecKey::String: {
      std::optional<StringRef> text = value->getAsString();
      if (!text)
        return error(path + "." + key.key) << "expected a string";
      attrs.set(key.key, builder.getStringAttr(*text));
      break;
    }
    case OptimizerSpecKey::DType: {
      FailureOr<FloatType> type =
          parseDType(value, (path + "." + key.key).str());
      if (failed(type))
        return failure();
      attrs.set(key.key, TypeAttr::get(*type));
      break;
    }
    }
  }
  optimizer.opName = found->getStringRef();
  optimizer.runtimeKeys = update->getRuntimeHyperparameterKeys();
  optimizer.stateNames.clear();
  for (StringRef key :
       update->getStateKeysFor([&](StringRef name) { return attrs.get(name); }))
    optimizer.stateNames.push_back(key.str());
  return success();
}

LogicalResult SpecReader::addGroupsForVectors() {
  // (Groups added here come after the spec's, which they do not renumber.)
  size_t specGroups = groups.size();
  for (int64_t g = -1; g < static_cast<int64_t>(specGroups); ++g) {
    const Optimizer &matrices = g < 0 ? optimizer : groups[g];
    RegisteredOperationName update =
        *RegisteredOperationName::lookup(matrices.opName, context);
    int64_t minRank =
        update.getInterface<OptimizerOpInterface>()->getMinParamRank();
    SmallVector<size_t> vectors;
    for (auto [i, p] : llvm::enumerate(parameters))
      if (groupKey(i) == g && static_cast<int64_t>(p.shape.size()) < minRank)
        vectors.push_back(i);
    if (vectors.empty())
      continue;
    std::string path = g < 0 ? std::string("optimizer")
                             : ("param_groups[" + Twine(g) + "]").str();
    if (runtimeHyperparameters)
      return error(path) << specTypeOf(update) << " updates parameters of rank "
                         << minRank << " or more, and the others ('"
                         << parameters[vectors.front()].name
                         << "') would need a group of AdamW that "
                            "runtime_hyperparameters does not know: give "
                            "them a param group of type adamw";
    // torch's AdamW at the group's rate (Moonshot's pairing: with
    // adjust_lr_fn "match_rms_adamw", one rate fits both).
    json::Object adamw{{"type", "adamw"}, {"lr", matrices.lr}};
    Optimizer vectorsOptimizer;
    if (failed(readOptimizer(adamw, vectorsOptimizer, path)))
      return failure();
    vectorsOptimizer.lrScale = matrices.lrScale;
    if (groupOf.empty())
      groupOf.assign(parameters.size(), -1);
    for (size_t i : vectors)
      groupOf[i] = groups.size();
    groups.push_back(std::move(vectorsOptimizer));
  }
  return success();
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
    if (group->get("lr") && !runtimeHyperparameters)
      return error(path + ".lr")
             << "a group scales the step's learning rate: use lr_scale (or "
                "give the spec runtime_hyperparameters)";
    // The group's optimizer: the defaults with its overrides, or, where it
    // names a type of its own (Muon's matrices beside AdamW's vectors), that
    // optimizer with its own keys only.
    std::optional<StringRef> type = group->getString("type");
    json::Object merged;
    if (!type || type == defaults.getString("type"))
      merged = defaults;
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
  if (failed(checkKeys(*object, path, {"name", "shape", "dtype", "unit"})))
    return failure();
  Parameter param;
  std::optional<StringRef> name = object->getString("name");
  if (!name || name->empty())
    return error(path + ".name") << "expected a non-empty string";
  // Names reach the host library as C strings: "w\0a" would read "w".
  if (name->contains('\0'))
    return error(path + ".name") << "holds a NUL character";
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
  if (const json::Value *unit = object->get("unit")) {
    std::optional<int64_t> k = unit->getAsInteger();
    if (!k || *k < 0)
      return error(path + ".unit") << "expected a non-negative integer";
    param.unit = *k;
  }
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
                        "loss_scaling", "lr_schedule", "grad_accumulation",
                        "runtime_hyperparameters"})))
    return nullptr;
  FailureOr<bool> runtime = getBool(*root, "runtime_hyperparameters", "spec");
  if (failed(runtime))
    return nullptr;
  runtimeHyperparameters = *runtime;
  if (const json::Value *clip = root->get("clip_grad_norm"))
    if (failed(readClipping(*clip)))
      return nullptr;
  if (const json::Value *scaling = root->get("loss_scaling"))
    if (failed(readLossScaling(*scaling)))
      return nullptr;
  if (const json::Value *model = root->get("model")) {
    std::optional<StringRef> name = model->getAsString();
    if (!name || name->empty() || name->contains('\0')) {
      error("model") << "expected a non-empty string without NUL characters";
      return nullptr;
    }
  }
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
  if (failed(addGroupsForVectors()))
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
