//===- DescribeOptimizer.cpp - an optimizer's keys and defaults -*- C++ -*-===//
//
// --describe-optimizer: an optimizer object of the spec with every key the
// spec reads, given or defaulted, its state and runtime keys and the lowest
// rank it updates (JSON), read from the update op itself: what a host
// library needs of an optimizer torch.optim has no class for.
//
//===----------------------------------------------------------------------===//

#include "SpecReader.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/JSON.h"

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::spec;

LogicalResult SpecReader::describeOptimizer(StringRef text, raw_ostream &os) {
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return error("optimizer") << llvm::toString(parsed.takeError());
  const json::Object *object = parsed->getAsObject();
  if (!object)
    return error("optimizer") << "expected an object";
  Optimizer described;
  if (failed(readOptimizer(*object, described, "optimizer")))
    return failure();
  auto name = *RegisteredOperationName::lookup(described.opName, context);
  const OptimizerOpInterface::Concept *update =
      name.getInterface<OptimizerOpInterface>();

  // The update itself, on a 2x2 parameter, for its verifier (the values'
  // ranges) and the defaults of the keys not given.
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(loc);
  builder.setInsertionPointToEnd(scratch->getBody());
  auto paramType = RankedTensorType::get({2, 2}, builder.getF32Type());
  SmallVector<Type> argTypes = {paramType, paramType};
  for (StringRef key : update->getStateKeysFor(
           [&](StringRef key) { return described.hyperparameters.get(key); }))
    argTypes.push_back(RankedTensorType::get(
        update->getStateShapeFor(
            key, paramType.getShape(),
            [&](StringRef key) { return described.hyperparameters.get(key); }),
        builder.getF32Type()));
  int32_t numState = static_cast<int32_t>(argTypes.size()) - 2;
  argTypes.append({builder.getF64Type(), builder.getI64Type()});
  auto func = func::FuncOp::create(builder, loc, "describe",
                                   builder.getFunctionType(argTypes, {}));
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToStart(body);
  OperationState state(loc, name);
  state.addOperands(body->getArguments());
  state.addTypes(
      ArrayRef<Type>(argTypes).take_front(2 + numState).drop_front());
  state.addAttributes(described.hyperparameters);
  state.addAttribute("operandSegmentSizes",
                     builder.getDenseI32ArrayAttr({1, 1, numState, 1, 1, 0}));
  Operation *op = builder.create(state);
  func::ReturnOp::create(builder, loc);
  if (failed(verify(op)))
    return failure();

  json::Object defaults{{"lr", described.lr}};
  for (const OptimizerSpecKey &key : update->getSpecKeys()) {
    Attribute attr = op->getAttr(key.key);
    switch (key.kind) {
    case OptimizerSpecKey::Flag:
      defaults[key.key] = bool(attr);
      break;
    case OptimizerSpecKey::Number:
      defaults[key.key] = cast<FloatAttr>(attr).getValueAsDouble();
      break;
    case OptimizerSpecKey::Pair: // (Adam's betas: two attributes)
      defaults[key.key] = json::Array{
          cast<FloatAttr>(op->getAttr(key.first)).getValueAsDouble(),
          cast<FloatAttr>(op->getAttr(key.second)).getValueAsDouble()};
      break;
    case OptimizerSpecKey::Bool:
      defaults[key.key] = cast<BoolAttr>(attr).getValue();
      break;
    case OptimizerSpecKey::Integer: // (absent: null, as Dion's rank)
      defaults[key.key] = attr ? json::Value(cast<IntegerAttr>(attr).getInt())
                               : json::Value(nullptr);
      break;
    case OptimizerSpecKey::Numbers:
      defaults[key.key] =
          json::Array(cast<DenseF64ArrayAttr>(attr).asArrayRef());
      break;
    case OptimizerSpecKey::String:
      defaults[key.key] = cast<StringAttr>(attr).getValue();
      break;
    case OptimizerSpecKey::DType: { // (absent: null, as Muon's ns_dtype)
      std::string dtype;
      if (attr)
        llvm::raw_string_ostream(dtype) << cast<TypeAttr>(attr).getValue();
      defaults[key.key] = attr ? json::Value(dtype) : json::Value(nullptr);
      break;
    }
    }
  }
  json::Array runtimeKeys, stateKeys;
  for (StringRef key : update->getRuntimeHyperparameterKeys())
    runtimeKeys.push_back(key);
  for (StringRef key : cast<OptimizerOpInterface>(op).getStateKeys())
    stateKeys.push_back(key);
  os << json::Value(json::Object{{"defaults", std::move(defaults)},
                                 {"min_param_rank", update->getMinParamRank()},
                                 {"runtime_keys", std::move(runtimeKeys)},
                                 {"state_keys", std::move(stateKeys)}})
     << "\n";
  return success();
}
