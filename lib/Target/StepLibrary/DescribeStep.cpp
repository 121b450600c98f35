//===- DescribeStep.cpp - the interface a compiled step exports ---------===//
//
// What a step library (StepLibrary.cpp) exports as distopt_step_abi: each
// argument's and result's role, name, dtype, shape and layout, the process
// groups, and the fingerprint of the step's collectives, read from the step's
// attributes, with a located error for what the interface cannot say.
//
//===----------------------------------------------------------------------===//

#include "DescribeStep.h"

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
namespace abi = mlir::distopt::abi;
namespace si = ::distopt::step;

/// One argument or result of the step, as the driver needs it; a located
/// error for what an interface cannot say (an element type no driver knows,
/// an unknown role or init).
static FailureOr<si::Value> describeValue(Operation *step, StringRef what,
                                          Type type, DictionaryAttr attrs) {
  si::Value value;
  Type element = getElementTypeOrSelf(type);
  std::string name;
  llvm::raw_string_ostream os(name);
  element.print(os);
  value.dtype = si::lookupDType(name);
  if (!value.dtype || (!isa<RankedTensorType>(type) && !type.isIntOrFloat()))
    return step->emitError() << what << " has type " << type
                             << ", which no driver can pass: tensors and "
                                "scalars of f32, f64, bf16, f16, i32, i64 "
                                "and i1 can be";
  if (auto tensor = dyn_cast<RankedTensorType>(type))
    value.shape.emplace(tensor.getShape().begin(), tensor.getShape().end());
  if (!attrs)
    return value;
  if (auto role = attrs.getAs<StringAttr>(abi::kRole)) {
    std::optional<si::Role> parsed = si::parseRole(role.strref());
    if (!parsed)
      return step->emitError() << what << " has an unknown distopt.role "
                               << role << " (docs/step-abi.md)";
    value.role = *parsed;
  }
  if (auto name = attrs.getAs<StringAttr>(abi::kName))
    value.name = name.getValue().str();
  if (auto init = attrs.getAs<StringAttr>(abi::kInit)) {
    std::optional<si::Init> parsed = si::parseInit(init.strref());
    if (!parsed)
      return step->emitError() << what << " has an unknown distopt.init "
                               << init << " (zeros, randn, randn_each_step)";
    value.init = *parsed;
  }
  Attribute perRank = attrs.get(abi::kPerRank);
  value.perRank = bool(perRank);
  if (auto mean = dyn_cast_or_null<StringAttr>(perRank))
    value.rankMean = mean == abi::kPerRankMean;
  if (Attribute initial = attrs.get(abi::kValue)) {
    if (auto f = dyn_cast<FloatAttr>(initial))
      value.initialValue = f.getValueAsDouble();
    else if (auto i = dyn_cast<IntegerAttr>(initial))
      value.initialValue = static_cast<double>(i.getInt());
    else
      return step->emitError() << what << " has a distopt.value " << initial
                               << " that is not a number";
    if ((value.role != si::Role::State &&
         value.role != si::Role::Hyperparameter) ||
        value.isTensor())
      return step->emitError() << what
                               << " has a distopt.value, which only "
                                  "a scalar state or hyperparameter "
                                  "argument takes";
  }
  if (!value.isTensor() && value.init != si::Init::Zeros)
    return step->emitError() << what
                             << " is a scalar: it starts from its "
                                "distopt.value, not from a distopt.init";
  if (auto shardOf = attrs.getAs<IntegerAttr>(abi::kShardOf))
    value.shardOf = shardOf.getInt();
  if (auto layout = attrs.getAs<ArrayAttr>(abi::kLayout)) {
    for (Attribute entry : layout) {
      auto dict = dyn_cast<DictionaryAttr>(entry);
      auto entryName = dict ? dict.getAs<StringAttr>("name") : StringAttr();
      auto offset = dict ? dict.getAs<IntegerAttr>("offset") : IntegerAttr();
      auto shape =
          dict ? dict.getAs<DenseI64ArrayAttr>("shape") : DenseI64ArrayAttr();
      if (!entryName || !offset || !shape)
        return step->emitError()
               << what << " has a malformed distopt.layout entry " << entry
               << " (name, offset and shape are required)";
      si::LayoutEntry e{entryName.getValue().str(), offset.getInt(),
                        std::vector<int64_t>(shape.asArrayRef().begin(),
                                             shape.asArrayRef().end()),
                        std::nullopt};
      if (auto owner = dict.getAs<IntegerAttr>("owner"))
        e.owner = owner.getInt();
      value.layout.push_back(std::move(e));
    }
  }
  return value;
}

/// What every rank must agree on before it runs: the step's collectives in
/// program order (kind, attributes, operand and result types, group size),
/// hashed with FNV-1a, which is stable across processes and builds (unlike
/// llvm::hash_value).
static std::pair<uint64_t, int64_t> collectiveFingerprint(func::FuncOp step) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  int64_t count = 0;
  auto mix = [&](StringRef text) {
    for (unsigned char c : text) {
      hash ^= c;
      hash *= 0x100000001b3ULL;
    }
  };
  step.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (!mlir::distopt::communicates(op) || isa<mlir::distopt::WaitOp>(op))
      return;
    std::string text;
    llvm::raw_string_ostream os(text);
    os << op->getName() << " " << op->getAttrDictionary() << " (";
    llvm::interleaveComma(op->getOperandTypes(), os);
    os << ") -> (";
    llvm::interleaveComma(op->getResultTypes(), os);
    os << ")";
    for (StringRef key : {"group", "row_group"})
      if (auto name = op->getAttrOfType<FlatSymbolRefAttr>(key))
        if (mlir::distopt::ProcessGroupOp group =
                mlir::distopt::lookupProcessGroup(op, name))
          os << " size " << group.getSize();
    os << ";";
    mix(text);
    ++count;
  });
  return {hash, count};
}

/// A split step's entry points (--distopt-split-step): each takes @step's
/// arguments; their results, as @step's.
static LogicalResult describeEntries(ModuleOp module, func::FuncOp step,
                                     si::Interface &abiInfo) {
  for (auto func : module.getOps<func::FuncOp>()) {
    auto kind = func->getAttrOfType<StringAttr>(abi::kEntry);
    if (!kind)
      continue;
    StringRef symbol = func.getSymName();
    if (!symbol.consume_front("step_") || func.isExternal() ||
        !llvm::is_contained({"reduce", "gather", "update"}, kind.getValue()))
      return func.emitError() << "an entry point of a split step is a "
                                 "@step_<name> with distopt.entry \"reduce\", "
                                 "\"gather\" or \"update\"";
    if (func.getArgumentTypes() != step.getArgumentTypes() ||
        func.getAllArgAttrs() != step.getAllArgAttrs())
      return func.emitError() << "an entry point takes @step's arguments, "
                                 "with their attributes";
    si::Entry entry;
    entry.name = symbol.str();
    entry.kind = kind.getValue() == "reduce"   ? si::Entry::Kind::Reduce
                 : kind.getValue() == "gather" ? si::Entry::Kind::Gather
                                               : si::Entry::Kind::Update;
    if (entry.kind == si::Entry::Kind::Reduce) {
      auto reduces = func->getAttrOfType<DenseI64ArrayAttr>(abi::kReduces);
      if (!reduces || reduces.empty())
        return func.emitError() << "a reduce entry needs distopt.reduces, "
                                   "the gradient arguments it reduces";
      entry.reduces.assign(reduces.asArrayRef().begin(),
                           reduces.asArrayRef().end());
    }
    if (entry.kind == si::Entry::Kind::Gather) {
      auto gathers = func->getAttrOfType<DenseI64ArrayAttr>(abi::kGathers);
      if (!gathers || gathers.size() != 1)
        return func.emitError() << "a gather entry needs distopt.gathers, "
                                   "the parameter shard it gathers";
      entry.gathers.assign(gathers.asArrayRef().begin(),
                           gathers.asArrayRef().end());
    }
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      FailureOr<si::Value> value =
          describeValue(func, "result #" + std::to_string(i),
                        func.getResultTypes()[i], func.getResultAttrDict(i));
      if (failed(value))
        return failure();
      entry.results.push_back(std::move(*value));
    }
    abiInfo.entries.push_back(std::move(entry));
  }
  return success();
}

FailureOr<si::Interface> describeStep(ModuleOp module, func::FuncOp step,
                                      StringRef device) {
  si::Interface abiInfo;
  // Where the step's buffers live: host memory (cpu) or device memory (cuda).
  abiInfo.device = device.str();
  if (auto world = module->getAttrOfType<IntegerAttr>(abi::kWorldSize))
    abiInfo.worldSize = world.getInt();
  else
    module.walk([&](mlir::distopt::ProcessGroupOp group) {
      abiInfo.worldSize = std::max(abiInfo.worldSize, group.getWorldSize());
    });
  if (auto lr = module->getAttrOfType<FloatAttr>(abi::kInitialLr))
    abiInfo.lr = lr.getValueAsDouble();
  if (auto k = module->getAttrOfType<IntegerAttr>(abi::kGradAccumulation))
    abiInfo.gradAccumulation = k.getInt();
  if (auto seed = module->getAttrOfType<IntegerAttr>(abi::kSeed))
    abiInfo.seed = seed.getValue().getZExtValue();
  if (auto model = module->getAttrOfType<StringAttr>(abi::kModelName))
    abiInfo.model = model.getValue().str();
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    FailureOr<si::Value> value =
        describeValue(step, "argument #" + std::to_string(i),
                      step.getArgumentTypes()[i], step.getArgAttrDict(i));
    if (failed(value))
      return failure();
    // A driver cannot know what to pass: say what would tell it.
    if (value->role == si::Role::None)
      return emitError(step.getArgument(i).getLoc())
             << "argument #" << i << " (" << step.getArgumentTypes()[i]
             << ") has no distopt.role, and no optimizer update says what "
                "it is: add {distopt.role = \"param\" | \"grad\" | "
                "\"main_param\" | \"state\" | \"lr\" | \"step\" | "
                "\"hyperparameter\", "
                "distopt.name = \"...\"} (docs/step-abi.md)";
    abiInfo.args.push_back(std::move(*value));
  }
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    FailureOr<si::Value> value =
        describeValue(step, "result #" + std::to_string(i),
                      step.getResultTypes()[i], step.getResultAttrDict(i));
    if (failed(value))
      return failure();
    // Not fed back, the next step would read a stale argument.
    if (value->role == si::Role::None && value->isTensor())
      return step.emitError()
             << "result #" << i << " (" << step.getResultTypes()[i]
             << ") has no distopt.role: give it the distopt.role and "
                "distopt.name of the argument it updates, or role \"loss\" "
                "(docs/step-abi.md)";
    abiInfo.results.push_back(std::move(*value));
  }
  size_t offender = 0;
  if (std::string error = si::checkStateArguments(abiInfo, &offender);
      !error.empty())
    return emitError(step.getArgument(offender).getLoc())
           << "argument #" << offender << ": " << error;
  if (std::string error = si::checkResults(abiInfo, &offender); !error.empty())
    return step.emitError() << "result #" << offender << ": " << error;
  std::tie(abiInfo.collectiveFingerprint, abiInfo.collectiveCount) =
      collectiveFingerprint(step);
  if (failed(describeEntries(module, step, abiInfo)))
    return failure();
  // The groups the step communicates on, other than the world: a session
  // splits them when it starts.
  for (auto group : module.getOps<mlir::distopt::ProcessGroupOp>()) {
    if (group.isWorld() ||
        SymbolTable::symbolKnownUseEmpty(group.getSymNameAttr(), module) ||
        group.getWorldSize() != abiInfo.worldSize)
      continue;
    mlir::distopt::ProcessGroupOp::Membership members = group.getMembership();
    abiInfo.groups.push_back(
        {group.getSymName().str(), group.getSize(),
         std::vector<int64_t>(members.color.begin(), members.color.end()),
         std::vector<int64_t>(members.key.begin(), members.key.end())});
  }
  return abiInfo;
}
