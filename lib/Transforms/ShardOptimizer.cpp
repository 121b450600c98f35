//===- ShardOptimizer.cpp - ZeRO stages 1, 2 and 3 --------------*- C++ -*-===//
//
// --distopt-shard-optimizer: each rank keeps and updates only its part of the
// optimizer state (stage 1), receives only its part of the reduced gradients
// (stage 2), and keeps only its part of the parameters (stage 3).
//
// flat (DeepSpeed, Megatron): the tensors of a group of like updates are laid
// out in one flat buffer padded to a multiple of N chunks; rank r owns chunk r:
// reduce(-scatter) -> update the chunk -> all_gather.
// greedy (ZeroRedundancyOptimizer, OSS): whole parameters are given to ranks,
// largest first, each to the least loaded rank; the owner updates them inside
// distopt.owned_by and broadcasts the result. Each rank's state lives in one
// buffer as large as the most loaded rank's.
//
// The step's signature changes: sharded arguments and results replace the
// per-parameter ones (appended at the end, with their layout as attributes).
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/STLExtras.h"

#include <numeric>

namespace mlir::distopt {
#define GEN_PASS_DEF_SHARDOPTIMIZERPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// One optimizer update and the values around it that sharding rewires.
struct Update {
  Operation *op;
  BlockArgument param;      // role param or main_param
  bool paramIsMain = false; // the update works on an fp32 main copy
  AllReduceOp reduction;    // reduces the gradient
  /// Optional: the reduced gradient converted to the update's precision
  /// (arith.extf to an fp32 main parameter, arith.truncf from a reduction
  /// widened by --distopt-widen-reductions).
  Operation *convert = nullptr;
  SmallVector<BlockArgument> state;
  SmallVector<arith::TruncFOp> downcasts; // new main param -> model param
  BlockArgument modelParam; // with main params: the model copy (stage 3)
  StringRef name;

  RankedTensorType paramType() const {
    return cast<RankedTensorType>(param.getType());
  }
  int64_t numel() const { return paramType().getNumElements(); }
};

int64_t elementBytes(Type type) {
  return llvm::divideCeil(type.getIntOrFloatBitWidth(), 8);
}

RankedTensorType flatType(int64_t size, Type element) {
  return RankedTensorType::get({size}, element);
}

/// `value` converted, as Update::convert does, to `type`'s element type.
Value convertGradient(OpBuilder &b, Location loc, Value value,
                      RankedTensorType type) {
  Type from = getElementTypeOrSelf(value.getType());
  auto target =
      cast<RankedTensorType>(value.getType()).clone(type.getElementType());
  if (from.getIntOrFloatBitWidth() < type.getElementTypeBitWidth())
    return arith::ExtFOp::create(b, loc, target, value);
  return arith::TruncFOp::create(b, loc, target, value);
}

struct ShardOptimizerPass
    : public distopt::impl::ShardOptimizerPassBase<ShardOptimizerPass> {
  using ShardOptimizerPassBase::ShardOptimizerPassBase;

  LogicalResult initialize(MLIRContext *context) override {
    Location loc = UnknownLoc::get(context);
    if (stage < 1 || stage > 3)
      return emitError(loc) << "--distopt-shard-optimizer: stage must be 1, 2 "
                               "or 3, got "
                            << stage.getValue();
    if (strategy != "flat" && strategy != "greedy")
      return emitError(loc)
             << "--distopt-shard-optimizer: unknown strategy '"
             << strategy.getValue() << "' (expected flat or greedy)";
    if (strategy == "greedy" && stage == 3)
      return emitError(loc) << "--distopt-shard-optimizer: strategy=greedy "
                               "shards stages 1 and 2; use strategy=flat for "
                               "stage 3";
    if (alignment < 1 || !llvm::isPowerOf2_64(alignment) || alignment % 4 != 0)
      return emitError(loc) << "--distopt-shard-optimizer: alignment must be "
                               "a power of two of at least 4 bytes, got "
                            << alignment.getValue();
    return success();
  }

  void runOnOperation() override;

private:
  FailureOr<Update> analyze(func::FuncOp func, Operation *op);
  LogicalResult shardFlat(func::FuncOp func, ArrayRef<Update *> group,
                          unsigned index);
  LogicalResult shardGreedy(func::FuncOp func, ArrayRef<Update *> group,
                            unsigned index);
  /// Adds a function argument and a matching result slot for `value`.
  BlockArgument addArgument(func::FuncOp func, Type type, StringRef role,
                            StringRef name, ArrayRef<NamedAttribute> extra);

  /// Results to append to the return: (value, role, name, extra attributes).
  struct NewResult {
    Value value;
    DictionaryAttr attrs;
  };
  SmallVector<NewResult> newResults;
  /// Replaced ops, each listed after its users.
  SmallVector<Operation *> toErase;
};

} // namespace

static bool isUpdate(Operation *op) {
  return isa<SGDUpdateOp, AdamUpdateOp, AdamWUpdateOp, RMSpropUpdateOp,
             AdagradUpdateOp>(op);
}

/// Whether every use of `value` is the function's return.
static bool onlyReturned(Value value) {
  return llvm::all_of(value.getUsers(), [](Operation *user) {
    return isa<func::ReturnOp>(user);
  });
}

FailureOr<Update> ShardOptimizerPass::analyze(func::FuncOp func,
                                              Operation *op) {
  Update u;
  u.op = op;
  auto fail = [&](const Twine &why) {
    return op->emitError() << "cannot shard '" << op->getName() << "': " << why;
  };
  Block &entry = func.getBody().front();
  auto isEntryArg = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &entry;
  };

  Value param = op->getOperand(0);
  StringRef role =
      isEntryArg(param)
          ? abi::getArgRole(func, cast<BlockArgument>(param).getArgNumber())
          : StringRef();
  if (role != abi::kParam && role != abi::kMainParam)
    return fail("its parameter must be an argument of the step function "
                "with role param or main_param");
  u.param = cast<BlockArgument>(param);
  u.paramIsMain = role == abi::kMainParam;
  u.name = abi::getArgName(func, u.param.getArgNumber());
  // A main parameter is optimizer state; a model parameter may have other
  // uses (at stage 3 they are given the parameter gathered from its shards).
  if (u.paramIsMain && !u.param.hasOneUse())
    return fail("its main parameter has other uses than the update");

  Value grad = op->getOperand(1);
  if (isa_and_present<arith::ExtFOp, arith::TruncFOp>(grad.getDefiningOp())) {
    u.convert = grad.getDefiningOp();
    grad = u.convert->getOperand(0);
  }
  u.reduction = grad.getDefiningOp<AllReduceOp>();
  if (!u.reduction)
    return fail("its gradient must come straight from a distopt.all_reduce "
                "(possibly through arith.extf or arith.truncf): run "
                "--distopt-fuse-div-into-allreduce before this pass and "
                "--distopt-bucketize after it");
  if (!u.reduction->hasOneUse() || (u.convert && !u.convert->hasOneUse()))
    return fail("its reduced gradient has other uses than the update");

  unsigned numState = op->getNumOperands() - 4;
  for (unsigned k = 0; k < numState; ++k) {
    Value state = op->getOperand(2 + k);
    if (!isEntryArg(state) ||
        abi::getArgRole(func, cast<BlockArgument>(state).getArgNumber()) !=
            abi::kState ||
        !state.hasOneUse())
      return fail("state operand #" + Twine(k) +
                  " must be a step argument with role state used only by "
                  "this update");
    u.state.push_back(cast<BlockArgument>(state));
  }
  for (unsigned k = 1; k < op->getNumResults(); ++k)
    if (!onlyReturned(op->getResult(k)))
      return fail("its new state must only be returned");

  for (Operation *user : op->getResult(0).getUsers()) {
    if (isa<func::ReturnOp>(user))
      continue;
    auto trunc = dyn_cast<arith::TruncFOp>(user);
    if (!trunc || !onlyReturned(trunc.getResult()))
      return fail("its new parameter must only be returned, or rounded by "
                  "arith.truncf and returned");
    u.downcasts.push_back(trunc);
  }
  if (u.paramIsMain) {
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (abi::getArgRole(func, i) == abi::kParam &&
          abi::getArgName(func, i) == u.name)
        u.modelParam = func.getArgument(i);
    if (stage == 3 && !u.modelParam)
      return fail("stage 3 needs the model copy of main parameter '" + u.name +
                  "' (an argument with role param and that name)");
  }
  if (u.paramIsMain && !u.downcasts.empty() && !u.modelParam)
    return fail("the model copy of main parameter '" + u.name +
                "' (an argument with role param and that name) is missing");
  if (stage == 3 && !u.paramIsMain && u.downcasts.size())
    return fail("stage 3 with arith.truncf of a model parameter needs main "
                "parameters");
  return u;
}

BlockArgument ShardOptimizerPass::addArgument(func::FuncOp func, Type type,
                                              StringRef role, StringRef name,
                                              ArrayRef<NamedAttribute> extra) {
  Builder builder(func.getContext());
  NamedAttrList attrs;
  attrs.set(abi::kRole, builder.getStringAttr(role));
  attrs.set(abi::kName, builder.getStringAttr(name));
  for (NamedAttribute attr : extra)
    attrs.set(attr.getName(), attr.getValue());
  unsigned index = func.getNumArguments();
  (void)func.insertArgument(index, type, attrs.getDictionary(func.getContext()),
                            func.getLoc());
  return func.getArgument(index);
}

/// The attribute describing where each tensor of a group lives.
static ArrayAttr layoutAttr(Builder &builder, ArrayRef<Update *> group,
                            ArrayRef<int64_t> offsets,
                            ArrayRef<int64_t> owners = {}) {
  SmallVector<Attribute> entries;
  for (auto [i, u] : llvm::enumerate(group))
    entries.push_back(abi::layoutEntry(
        builder, u->name, offsets[i], u->paramType().getShape(),
        owners.empty() ? std::nullopt : std::optional<int64_t>(owners[i])));
  return builder.getArrayAttr(entries);
}

/// The torch state key of a state argument ("exp_avg" of "w.exp_avg").
static std::string stateKey(func::FuncOp func, const Update &u, unsigned k) {
  StringRef name = abi::getArgName(func, u.state[k].getArgNumber());
  if (name.consume_front(u.name) && name.consume_front("."))
    return name.str();
  return ("state" + Twine(k)).str();
}

LogicalResult ShardOptimizerPass::shardFlat(func::FuncOp func,
                                            ArrayRef<Update *> group,
                                            unsigned index) {
  Update &first = *group.front();
  OpBuilder builder(func.getBody().front().getTerminator());
  Location loc = first.op->getLoc();
  FlatSymbolRefAttr groupRef = first.reduction.getGroupAttr();
  int64_t size = lookupProcessGroup(func, groupRef).getSize();

  // One element layout for every buffer of the group, whatever its type.
  Type paramElement = first.paramType().getElementType();
  Type gradElement = first.reduction.getType().getElementType();
  int64_t alignElems = alignment / elementBytes(paramElement);
  auto bucketAlignment = [&](Type element) {
    return builder.getI64IntegerAttr(alignElems * elementBytes(element));
  };
  SmallVector<Type> paramTypes;
  for (Update *u : group)
    paramTypes.push_back(u->paramType());
  int64_t packed;
  SmallVector<int64_t> offsets = computeBucketOffsets(
      paramTypes, alignElems * elementBytes(paramElement), &packed);
  int64_t padded = llvm::alignTo(packed, size * alignElems);
  int64_t shard = padded / size;
  std::string prefix = ("flat" + Twine(index)).str();
  NamedAttribute layout(builder.getStringAttr(abi::kLayout),
                        layoutAttr(builder, group, offsets));
  NamedAttribute shardOf(builder.getStringAttr("distopt.shard_of"),
                         builder.getI64IntegerAttr(padded));

  // Gradients: this rank's chunk of the reduced flat gradient.
  SmallVector<Value> locals, reducedGrads;
  for (Update *u : group) {
    locals.push_back(u->reduction.getInput());
    reducedGrads.push_back(u->reduction.getResult());
  }
  Value gradShard;
  if (stage >= 2) {
    auto bucket =
        BucketPackOp::create(builder, loc, flatType(padded, gradElement),
                             locals, bucketAlignment(gradElement));
    gradShard = ReduceScatterOp::create(
        builder, loc, flatType(shard, gradElement), bucket, groupRef,
        first.reduction.getWireTypeAttr(), first.reduction.getReductionAttr(),
        first.reduction.getScaleAttr());
  } else {
    auto bucket =
        BucketPackOp::create(builder, loc, flatType(padded, gradElement),
                             reducedGrads, bucketAlignment(gradElement));
    gradShard = ShardSliceOp::create(builder, loc, flatType(shard, gradElement),
                                     bucket, groupRef);
  }
  if (first.convert)
    gradShard =
        convertGradient(builder, loc, gradShard, flatType(shard, paramElement));

  // Parameters: main parameters are state; plain ones are sharded at stage 3.
  Value paramShard;
  auto shardArgument = [&](Type element, StringRef role, StringRef name) {
    return addArgument(func, flatType(shard, element), role, name,
                       {layout, shardOf});
  };
  if (first.paramIsMain || stage == 3) {
    StringRef role = first.paramIsMain ? abi::kMainParam : abi::kParam;
    paramShard = shardArgument(paramElement, role, prefix + "." + role.str());
  } else {
    SmallVector<Value> params;
    for (Update *u : group)
      params.push_back(u->param);
    auto bucket =
        BucketPackOp::create(builder, loc, flatType(padded, paramElement),
                             params, bucketAlignment(paramElement));
    paramShard = ShardSliceOp::create(
        builder, loc, flatType(shard, paramElement), bucket, groupRef);
  }

  // The update, cloned onto the chunks.
  IRMapping mapping;
  mapping.map(first.op->getOperand(0), paramShard);
  mapping.map(first.op->getOperand(1), gradShard);
  SmallVector<BlockArgument> stateShards;
  for (unsigned k = 0; k < first.state.size(); ++k) {
    Type element =
        cast<RankedTensorType>(first.state[k].getType()).getElementType();
    stateShards.push_back(shardArgument(
        element, abi::kState, prefix + "." + stateKey(func, first, k)));
    mapping.map(first.op->getOperand(2 + k), stateShards.back());
  }
  Operation *update = builder.clone(*first.op, mapping);
  for (Value result : update->getResults())
    result.setType(flatType(
        shard, cast<RankedTensorType>(result.getType()).getElementType()));

  auto resultAttrs = [&](BlockArgument arg) {
    return func.getArgAttrDict(arg.getArgNumber());
  };
  for (auto [k, arg] : llvm::enumerate(stateShards))
    newResults.push_back({update->getResult(1 + k), resultAttrs(arg)});
  Value newParam = update->getResult(0);
  if (first.paramIsMain || stage == 3)
    newResults.push_back(
        {newParam, resultAttrs(cast<BlockArgument>(paramShard))});

  // The updated parameters every rank needs: gathered, then unpacked.
  auto gatherInto = [&](Value chunk, ArrayRef<Value> replaced) {
    auto element = cast<RankedTensorType>(chunk.getType()).getElementType();
    Value full = AllGatherOp::create(builder, loc, flatType(padded, element),
                                     chunk, groupRef, /*wire_type=*/nullptr);
    SmallVector<Type> types;
    for (Value v : replaced)
      types.push_back(v.getType());
    auto unpack = BucketUnpackOp::create(builder, loc, types, full,
                                         bucketAlignment(element));
    for (auto [old, now] : llvm::zip_equal(replaced, unpack.getResults()))
      Value(old).replaceAllUsesWith(now);
  };
  // Stage 3: where the step itself uses a parameter (a forward pass, say),
  // the parameter is gathered from the shards just before its first use.
  auto gatherAtUses = [&](Value chunk, ArrayRef<Value> fulls,
                          ArrayRef<Operation *> updates) {
    Block &entry = func.getBody().front();
    Operation *firstUse = nullptr;
    for (auto [full, update] : llvm::zip_equal(fulls, updates))
      for (Operation *user : full.getUsers())
        if (user != update)
          if (Operation *inEntry = entry.findAncestorOpInBlock(*user))
            if (!firstUse || inEntry->isBeforeInBlock(firstUse))
              firstUse = inEntry;
    if (!firstUse)
      return;
    OpBuilder at(firstUse);
    auto element = cast<RankedTensorType>(chunk.getType()).getElementType();
    Value all = AllGatherOp::create(at, loc, flatType(padded, element), chunk,
                                    groupRef, /*wire_type=*/nullptr);
    SmallVector<Type> types;
    for (Value full : fulls)
      types.push_back(full.getType());
    auto unpack =
        BucketUnpackOp::create(at, loc, types, all, bucketAlignment(element));
    for (auto [full, update, now] :
         llvm::zip_equal(fulls, updates, unpack.getResults())) {
      Operation *updateOp = update; // lambdas capture no structured bindings
      Value(full).replaceUsesWithIf(
          now, [&](OpOperand &use) { return use.getOwner() != updateOp; });
    }
  };
  if (stage == 3 && !first.paramIsMain) {
    SmallVector<Value> params;
    SmallVector<Operation *> updates;
    for (Update *u : group) {
      params.push_back(u->param);
      updates.push_back(u->op);
    }
    gatherAtUses(paramShard, params, updates);
  }

  if (first.paramIsMain) {
    // Model parameters: rounded from the updated main chunk.
    Type modelElement = gradElement;
    if (!group.front()->downcasts.empty())
      modelElement =
          cast<RankedTensorType>(group.front()->downcasts.front().getType())
              .getElementType();
    Value rounded = arith::TruncFOp::create(
        builder, loc, flatType(shard, modelElement), newParam);
    if (stage == 3) {
      BlockArgument modelShard =
          shardArgument(modelElement, abi::kParam, prefix + ".param");
      newResults.push_back({rounded, resultAttrs(modelShard)});
      SmallVector<Value> models;
      for (Update *u : group)
        models.push_back(u->modelParam);
      gatherAtUses(modelShard, models,
                   SmallVector<Operation *>(models.size(), nullptr));
    } else {
      SmallVector<Value> models;
      for (Update *u : group)
        for (arith::TruncFOp trunc : u->downcasts)
          models.push_back(trunc.getResult());
      if (!models.empty())
        gatherInto(rounded, models);
    }
  } else if (stage < 3) {
    SmallVector<Value> params;
    for (Update *u : group)
      params.push_back(u->op->getResult(0));
    gatherInto(newParam, params);
  }

  // Users before producers. At stage 1 the reductions feed the new bucket.
  for (Update *u : group) {
    for (arith::TruncFOp trunc : u->downcasts)
      toErase.push_back(trunc);
    toErase.push_back(u->op);
    if (u->convert)
      toErase.push_back(u->convert);
    if (stage >= 2)
      toErase.push_back(u->reduction);
  }
  return success();
}

LogicalResult ShardOptimizerPass::shardGreedy(func::FuncOp func,
                                              ArrayRef<Update *> group,
                                              unsigned index) {
  Update &first = *group.front();
  OpBuilder builder(func.getBody().front().getTerminator());
  FlatSymbolRefAttr groupRef = first.reduction.getGroupAttr();
  int64_t size = lookupProcessGroup(func, groupRef).getSize();

  // Sorted-greedy: largest first, each to the least loaded rank (ties: the
  // lower rank, then program order), as ZeroRedundancyOptimizer does.
  SmallVector<unsigned> order(group.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    return group[a]->numel() > group[b]->numel();
  });
  SmallVector<int64_t> load(size, 0), owner(group.size()), offset(group.size());
  for (unsigned i : order) {
    int64_t rank = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = rank;
    offset[i] = load[rank];
    load[rank] += group[i]->numel();
  }
  int64_t capacity = *std::max_element(load.begin(), load.end());

  Type paramElement = first.paramType().getElementType();
  std::string prefix = ("owned" + Twine(index)).str();
  NamedAttribute layout(builder.getStringAttr(abi::kLayout),
                        layoutAttr(builder, group, offset, owner));
  auto ownedArgument = [&](Type element, StringRef role, StringRef name) {
    return addArgument(func, flatType(capacity, element), role, name, {layout});
  };
  // This rank's buffers: main parameters (if any), then each state tensor.
  SmallVector<Value> buffers;
  SmallVector<BlockArgument> bufferArgs;
  if (first.paramIsMain) {
    bufferArgs.push_back(
        ownedArgument(paramElement, abi::kMainParam, prefix + ".main_param"));
  }
  for (unsigned k = 0; k < first.state.size(); ++k)
    bufferArgs.push_back(ownedArgument(
        cast<RankedTensorType>(first.state[k].getType()).getElementType(),
        abi::kState, prefix + "." + stateKey(func, first, k)));
  for (BlockArgument arg : bufferArgs)
    buffers.push_back(arg);

  for (size_t i = 0; i < group.size(); ++i) {
    auto *u = group[i];
    // Stage 2: the gradient is reduced to its owner only.
    Value grad = u->reduction.getResult();
    if (stage == 2) {
      OpBuilder at(u->reduction);
      grad = ReduceOp::create(
          at, u->reduction.getLoc(), u->reduction.getType(),
          u->reduction.getInput(), groupRef, u->reduction.getWireTypeAttr(),
          u->reduction.getReductionAttr(), u->reduction.getScaleAttr(),
          at.getI64IntegerAttr(owner[i]));
    }
    // What the owner produces and the others keep: the buffers, and the
    // parameter every rank needs (the model copy with main parameters).
    Value visible = u->paramIsMain
                        ? (u->downcasts.empty() ? Value() : u->modelParam)
                        : Value(u->param);
    SmallVector<Value> otherwise(buffers);
    if (visible)
      otherwise.push_back(visible);
    auto owned = OwnedByOp::create(
        builder, u->op->getLoc(), ValueRange(otherwise).getTypes(), groupRef,
        builder.getI64IntegerAttr(owner[i]), otherwise);
    Block *body = new Block();
    owned.getBody().push_back(body);
    OpBuilder inner = OpBuilder::atBlockEnd(body);
    Location ploc = u->op->getLoc();
    auto paramType = u->paramType();
    int64_t numel = u->numel();
    auto flat1d = [&](Type element) { return flatType(numel, element); };
    SmallVector<ReassociationIndices> all = {
        llvm::to_vector(llvm::seq<int64_t>(0, paramType.getRank()))};
    // A view of this parameter's slot in a rank buffer, in its own shape.
    auto slot = [&](Value buffer) -> Value {
      Type element = cast<RankedTensorType>(buffer.getType()).getElementType();
      Value flat = tensor::ExtractSliceOp::create(
          inner, ploc, flat1d(element), buffer,
          ArrayRef<OpFoldResult>{inner.getIndexAttr(offset[i])},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(numel)},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(1)});
      if (paramType.getRank() == 1)
        return flat;
      return tensor::ExpandShapeOp::create(
          inner, ploc, RankedTensorType::get(paramType.getShape(), element),
          flat, all);
    };
    auto store = [&](Value value, Value buffer) -> Value {
      if (paramType.getRank() != 1)
        value = tensor::CollapseShapeOp::create(inner, ploc, value, all);
      return tensor::InsertSliceOp::create(
          inner, ploc, value, buffer,
          ArrayRef<OpFoldResult>{inner.getIndexAttr(offset[i])},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(numel)},
          ArrayRef<OpFoldResult>{inner.getIndexAttr(1)});
    };
    IRMapping mapping;
    unsigned b = 0;
    if (u->paramIsMain)
      mapping.map(u->op->getOperand(0), slot(buffers[b++]));
    Value g = grad;
    if (u->convert)
      g = convertGradient(inner, ploc, g, u->paramType());
    mapping.map(u->op->getOperand(1), g);
    for (unsigned k = 0; k < u->state.size(); ++k)
      mapping.map(u->op->getOperand(2 + k), slot(buffers[b + k]));
    Operation *update = inner.clone(*u->op, mapping);
    SmallVector<Value> yielded;
    b = 0;
    if (u->paramIsMain) {
      yielded.push_back(store(update->getResult(0), buffers[b]));
      ++b;
    }
    for (unsigned k = 0; k < u->state.size(); ++k)
      yielded.push_back(store(update->getResult(1 + k), buffers[b + k]));
    if (visible) {
      Value newVisible = update->getResult(0);
      if (u->paramIsMain)
        newVisible = arith::TruncFOp::create(
            inner, ploc, u->downcasts.front().getType(), newVisible);
      yielded.push_back(newVisible);
    }
    YieldOp::create(inner, ploc, yielded);

    for (unsigned k = 0; k < buffers.size(); ++k)
      buffers[k] = owned.getResult(k);
    if (visible) {
      Value shared = BroadcastOp::create(
          builder, ploc, owned.getResults().back(), groupRef,
          /*wire_type=*/nullptr, builder.getI64IntegerAttr(owner[i]));
      if (u->paramIsMain) {
        for (arith::TruncFOp trunc : u->downcasts)
          trunc.getResult().replaceAllUsesWith(shared);
      } else {
        u->op->getResult(0).replaceAllUsesWith(shared);
      }
    }
    for (arith::TruncFOp trunc : u->downcasts)
      toErase.push_back(trunc);
    toErase.push_back(u->op);
    if (u->convert)
      toErase.push_back(u->convert);
    if (stage == 2)
      toErase.push_back(u->reduction);
  }
  for (auto [k, arg] : llvm::enumerate(bufferArgs))
    newResults.push_back({buffers[k], func.getArgAttrDict(arg.getArgNumber())});
  return success();
}

void ShardOptimizerPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (isUpdate(op))
      ops.push_back(op);
  });
  if (ops.empty())
    return;
  // One rank holds everything: nothing to shard (and the reductions have
  // folded away). Say so rather than do nothing silently.
  auto module = func->getParentOfType<ModuleOp>();
  auto world = module ? module->getAttrOfType<IntegerAttr>(abi::kWorldSize)
                      : IntegerAttr();
  if (world && world.getInt() == 1) {
    func.emitWarning() << "--distopt-shard-optimizer: the step is compiled "
                          "for one rank; nothing to shard";
    return;
  }

  SmallVector<Update> updates;
  bool ok = true;
  for (Operation *op : ops) {
    if (op->getParentOp() != func) {
      op->emitError() << "cannot shard '" << op->getName()
                      << "': it is nested in '" << op->getParentOp()->getName()
                      << "'";
      ok = false;
      continue;
    }
    FailureOr<Update> update = analyze(func, op);
    if (failed(update))
      ok = false;
    else
      updates.push_back(*update);
  }
  if (!ok)
    return signalPassFailure();

  // Group like updates: same optimizer and hyperparameters, learning rate
  // and step, element types and reduction.
  auto sameGroup = [](Update a, Update b) {
    Operation *x = a.op, *y = b.op;
    return x->getName() == y->getName() &&
           x->getAttrDictionary() == y->getAttrDictionary() &&
           x->getPropertiesAsAttribute() == y->getPropertiesAsAttribute() &&
           x->getOperand(x->getNumOperands() - 2) ==
               y->getOperand(y->getNumOperands() - 2) &&
           x->getOperand(x->getNumOperands() - 1) ==
               y->getOperand(y->getNumOperands() - 1) &&
           a.paramType().getElementType() == b.paramType().getElementType() &&
           a.reduction.getType().getElementType() ==
               b.reduction.getType().getElementType() &&
           a.paramIsMain == b.paramIsMain &&
           bool(a.convert) == bool(b.convert) &&
           a.downcasts.size() == b.downcasts.size() &&
           a.reduction.getGroupAttr() == b.reduction.getGroupAttr() &&
           a.reduction.getReductionAttr() == b.reduction.getReductionAttr() &&
           a.reduction.getScaleAttr() == b.reduction.getScaleAttr() &&
           a.reduction.getWireTypeAttr() == b.reduction.getWireTypeAttr();
  };
  SmallVector<SmallVector<Update *>> groups;
  for (Update &u : updates) {
    auto it = llvm::find_if(groups, [&](const SmallVector<Update *> &g) {
      return sameGroup(*g.front(), u);
    });
    if (it == groups.end())
      groups.push_back({&u});
    else
      it->push_back(&u);
  }

  unsigned firstNewArg = func.getNumArguments();
  for (auto [index, group] : llvm::enumerate(groups)) {
    LogicalResult result = strategy == "flat" ? shardFlat(func, group, index)
                                              : shardGreedy(func, group, index);
    if (failed(result))
      return signalPassFailure();
  }

  // The old per-parameter results, and arguments that nothing uses anymore.
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  llvm::BitVector deadResults(ret.getNumOperands());
  for (Update &u : updates) {
    for (Value v : u.op->getResults())
      for (OpOperand &use : v.getUses())
        if (use.getOwner() == ret)
          deadResults.set(use.getOperandNumber());
    for (arith::TruncFOp trunc : u.downcasts)
      for (OpOperand &use : trunc.getResult().getUses())
        if (use.getOwner() == ret && stage == 3)
          deadResults.set(use.getOperandNumber());
  }
  SmallVector<Value> operands;
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (!deadResults.test(i))
      operands.push_back(v);
  for (NewResult &r : newResults)
    operands.push_back(r.value);
  OpBuilder builder(ret);
  func::ReturnOp::create(builder, ret.getLoc(), operands);
  ret.erase();
  for (Operation *op : toErase)
    op->erase();
  (void)func.eraseResults(deadResults);
  for (NewResult &r : newResults)
    (void)func.insertResult(func.getNumResults(), r.value.getType(), r.attrs);

  llvm::BitVector deadArgs(func.getNumArguments());
  for (Update &u : updates) {
    for (BlockArgument arg : u.state)
      deadArgs.set(arg.getArgNumber());
    if (u.paramIsMain || stage == 3)
      deadArgs.set(u.param.getArgNumber());
    if (stage == 3 && u.modelParam)
      deadArgs.set(u.modelParam.getArgNumber());
  }
  for (unsigned i = firstNewArg; i < func.getNumArguments(); ++i)
    deadArgs.reset(i);
  for (unsigned i : deadArgs.set_bits())
    if (!func.getArgument(i).use_empty()) {
      func.emitError() << "cannot shard: argument #" << i
                       << " is still used after sharding";
      return signalPassFailure();
    }
  (void)func.eraseArguments(deadArgs);
  newResults.clear();
  toErase.clear();
}
