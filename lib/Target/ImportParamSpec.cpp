//===- ImportParamSpec.cpp - parameter spec (JSON) to a step ----*- C++ -*-===//
//
// Reads a parameter spec and builds the plain data-parallel step: for each
// parameter, in spec order, an all_reduce sum of its gradient, the division
// by the world size, and the optimizer update (on an fp32 main copy when the
// spec asks for main parameters). Every unknown key and every malformed value
// is an error that names its JSON path; nothing is silently ignored.
//
//===----------------------------------------------------------------------===//

#include "distopt/Target/ParamSpec.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Support/JSON.h"
#include "distopt/Support/Limits.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;
using namespace mlir::distopt;
using ::distopt::parseJSON;
namespace json = llvm::json;

namespace {

struct Parameter {
  std::string name;
  SmallVector<int64_t> shape;
  FloatType elementType;
};

/// The optimizer: the update op, its hyperparameter attributes and the torch
/// names of its per-parameter state tensors.
struct Optimizer {
  StringRef opName;
  double lr = 1e-3;
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
  LogicalResult readOptimizer(const json::Object &object);
  LogicalResult readParameter(const json::Value &value, size_t index);
  OwningOpRef<ModuleOp> build();

  MLIRContext *context;
  Location loc;
  OpBuilder builder;

  std::string modelName;
  int64_t worldSize = 0;
  bool mainParams = false;
  Optimizer optimizer;
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

LogicalResult SpecReader::readOptimizer(const json::Object &object) {
  std::optional<StringRef> type = object.getString("type");
  if (!type)
    return error("optimizer.type")
           << "expected one of sgd, adam, adamw, rmsprop, adagrad";
  NamedAttrList &attrs = optimizer.hyperparameters;
  auto setF64 = [&](StringRef attr, double value) {
    attrs.set(attr, builder.getF64FloatAttr(value));
  };
  auto number = [&](StringRef key, double fallback) {
    return getNumber(object, key, "optimizer", fallback);
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
    FailureOr<bool> value = getBool(object, key, "optimizer");
    if (succeeded(value) && *value)
      attrs.set(key, builder.getUnitAttr());
    return value;
  };

  FailureOr<double> lr = number("lr", 1e-3);
  if (succeeded(lr) && *lr < 0)
    return error("optimizer.lr") << "must be non-negative (torch.optim's "
                                    "rule), got "
                                 << *lr;
  if (failed(lr) || failed(flag("maximize")) ||
      failed(optionalF64("weight_decay", "weight_decay")))
    return failure();
  optimizer.lr = *lr;

  if (*type == "sgd") {
    if (failed(checkKeys(object, "optimizer",
                         {"type", "lr", "momentum", "dampening", "weight_decay",
                          "nesterov", "maximize"})) ||
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
    if (failed(checkKeys(object, "optimizer",
                         {"type", "lr", "betas", "eps", "weight_decay",
                          "amsgrad", "maximize"})) ||
        failed(optionalF64("eps", "eps")))
      return failure();
    if (const json::Value *betas = object.get("betas")) {
      const json::Array *pair = betas->getAsArray();
      if (!pair || pair->size() != 2 || !(*pair)[0].getAsNumber() ||
          !(*pair)[1].getAsNumber())
        return error("optimizer.betas") << "expected [beta1, beta2]";
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
    if (failed(checkKeys(object, "optimizer",
                         {"type", "lr", "alpha", "eps", "weight_decay",
                          "momentum", "centered", "maximize"})) ||
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
    if (failed(checkKeys(object, "optimizer",
                         {"type", "lr", "lr_decay", "eps", "weight_decay",
                          "initial_accumulator_value", "maximize"})) ||
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
  return error("optimizer.type")
         << "unknown optimizer '" << *type
         << "' (expected sgd, adam, adamw, rmsprop or adagrad)";
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
  if (failed(checkKeys(
          *root, "spec",
          {"model", "world_size", "optimizer", "main_params", "parameters"})))
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
  if (failed(readOptimizer(*opt)))
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
  return build();
}

OwningOpRef<ModuleOp> SpecReader::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr(abi::kWorldSize,
                                  builder.getI64IntegerAttr(worldSize));
  module->getOperation()->setAttr(abi::kModelName,
                                  builder.getStringAttr(modelName));
  module->getOperation()->setAttr(abi::kInitialLr,
                                  builder.getF64FloatAttr(optimizer.lr));
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
  for (auto [i, p] : llvm::enumerate(parameters))
    if (hasMain(p))
      mainArg[i] = addArg(tensorType(p, f32), abi::kMainParam, p.name);
  for (auto [i, p] : llvm::enumerate(parameters)) {
    Type stateElement = hasMain(p) ? f32 : p.elementType;
    for (const std::string &state : optimizer.stateNames)
      stateArgs[i].push_back(addArg(tensorType(p, stateElement), abi::kState,
                                    p.name + "." + state));
  }
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
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  for (size_t arg : resultArgs) {
    resultTypes.push_back(argTypes[arg]);
    resultAttrs.push_back(argAttrs[arg]);
  }

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
    auto gradType = tensorType(p, p.elementType);
    Value sum = AllReduceOp::create(
        builder, paramLoc, gradType, body->getArgument(gradArg[i]), groupRef,
        /*wire_type=*/nullptr,
        ReductionKindAttr::get(context, ReductionKind::Sum), /*scale=*/nullptr);
    auto worldConst = arith::ConstantOp::create(
        builder, paramLoc,
        DenseElementsAttr::get(
            gradType, builder.getFloatAttr(p.elementType,
                                           static_cast<double>(worldSize))));
    reduced[i] = arith::DivFOp::create(builder, paramLoc, sum, worldConst);
  }

  Value lr = body->getArgument(lrArg), step = body->getArgument(stepArg);
  for (auto [i, p] : llvm::enumerate(parameters)) {
    Location paramLoc = paramLocs[i];
    size_t target = hasMain(p) ? mainArg[i] : paramArg[i];
    auto targetType = cast<RankedTensorType>(argTypes[target]);
    Value mean = reduced[i];
    if (hasMain(p))
      mean = arith::ExtFOp::create(builder, paramLoc, targetType, mean);

    SmallVector<Value> operands = {body->getArgument(target), mean};
    for (size_t s : stateArgs[i])
      operands.push_back(body->getArgument(s));
    operands.push_back(lr);
    operands.push_back(step);
    SmallVector<Type> updateTypes(1 + stateArgs[i].size(), targetType);
    OperationState state(paramLoc, optimizer.opName);
    state.addOperands(operands);
    state.addTypes(updateTypes);
    state.addAttributes(optimizer.hyperparameters);
    Operation *update = builder.create(state);

    updated[target] = update->getResult(0);
    for (auto [k, s] : llvm::enumerate(stateArgs[i]))
      updated[s] = update->getResult(1 + k);
    if (hasMain(p))
      updated[paramArg[i]] = arith::TruncFOp::create(
          builder, paramLoc, tensorType(p, p.elementType),
          update->getResult(0));
  }
  SmallVector<Value> results;
  for (size_t arg : resultArgs)
    results.push_back(updated[arg]);
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
  context->loadDialect<DistOptDialect, arith::ArithDialect, func::FuncDialect,
                       tensor::TensorDialect>();
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
        registry.insert<DistOptDialect, arith::ArithDialect, func::FuncDialect,
                        tensor::TensorDialect>();
      });
}
